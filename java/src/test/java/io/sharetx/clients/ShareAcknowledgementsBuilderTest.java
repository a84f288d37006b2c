package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The builder's batches against the plain definition: per partition, offsets sorted, the last type added wins. */
class ShareAcknowledgementsBuilderTest {

    /** The definition, slowly: contiguous offsets of one partition in one batch, one type when all share it. */
    static List<ShareAcknowledgementBatch> reference(TreeMap<Long, Byte> m) {
        List<ShareAcknowledgementBatch> out = new ArrayList<>();
        List<Map.Entry<Long, Byte>> run = new ArrayList<>();
        for (Map.Entry<Long, Byte> e : m.entrySet()) {
            if (!run.isEmpty() && e.getKey() != run.get(run.size() - 1).getKey() + 1) {
                out.add(batch(run));
                run.clear();
            }
            run.add(e);
        }
        if (!run.isEmpty()) {
            out.add(batch(run));
        }
        return out;
    }

    static ShareAcknowledgementBatch batch(List<Map.Entry<Long, Byte>> run) {
        List<Byte> types = new ArrayList<>();
        for (Map.Entry<Long, Byte> e : run) {
            types.add(e.getValue());
        }
        boolean same = types.stream().allMatch(t -> t.equals(types.get(0)));
        return new ShareAcknowledgementBatch(run.get(0).getKey(), run.get(run.size() - 1).getKey(), same ? List.of(types.get(0)) : types);
    }

    @Test
    void randomAdditionsMatchTheDefinition() {
        Random rnd = new Random(1289);
        TopicIdPartition[] parts = {new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition("a", 0)),
            new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition("a", 1)), new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition("b", 0))};
        for (int round = 0; round < 500; round++) {
            ShareAcknowledgements.Builder b = ShareAcknowledgements.builder();
            Map<TopicIdPartition, TreeMap<Long, Byte>> want = new LinkedHashMap<>();
            int n = rnd.nextInt(60);
            boolean inOrder = rnd.nextBoolean(); // a poll's records, or any order with repeats
            long next = rnd.nextInt(5);
            for (int i = 0; i < n; i++) {
                TopicIdPartition p = parts[rnd.nextInt(parts.length)];
                long off = inOrder ? next : rnd.nextInt(40);
                next += 1 + (rnd.nextInt(6) == 0 ? rnd.nextInt(3) : 0);
                int kind = rnd.nextInt(8);
                byte type;
                if (kind == 0) {
                    b.addGap(p, off);
                    type = ShareAcknowledgementBatch.GAP;
                } else {
                    AcknowledgeType t = kind == 1 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    b.add(p, off, t);
                    type = t.id;
                }
                want.computeIfAbsent(p, k -> new TreeMap<>()).put(off, type);
            }
            ShareAcknowledgements got = b.build();
            assertEquals(want.keySet(), got.acknowledgements().keySet(), "round " + round);
            for (Map.Entry<TopicIdPartition, TreeMap<Long, Byte>> e : want.entrySet()) {
                assertEquals(reference(e.getValue()), got.acknowledgements().get(e.getKey()), "round " + round + " " + e.getKey());
            }
        }
    }

    @Test
    void fromConsumerRecordsGroupsByPartition() {
        Map<TopicPartition, List<ConsumerRecord<String, String>>> m = new LinkedHashMap<>();
        TopicPartition in2 = new TopicPartition("in", 2), in0 = new TopicPartition("in", 0);
        m.put(in2, List.of(new ConsumerRecord<>("in", 2, 4, null, "v"), new ConsumerRecord<>("in", 2, 5, null, "v"),
            new ConsumerRecord<>("in", 2, 9, null, "v")));
        m.put(in0, List.of(new ConsumerRecord<>("in", 0, 1, null, "v")));
        ConsumerRecords<String, String> recs = new ConsumerRecords<>(m, Map.of());
        ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(recs, AcknowledgeType.ACCEPT);
        assertEquals(List.of(new TopicIdPartition(Uuid.ZERO_UUID, in2), new TopicIdPartition(Uuid.ZERO_UUID, in0)),
            new ArrayList<>(acks.acknowledgements().keySet()));
        assertEquals(List.of(new ShareAcknowledgementBatch(4, 5, List.of((byte) 1)), new ShareAcknowledgementBatch(9, 9, List.of((byte) 1))),
            acks.acknowledgements().get(new TopicIdPartition(Uuid.ZERO_UUID, in2)));
        // The same as record by record.
        assertEquals(ShareAcknowledgements.fromRecords((Iterable<ConsumerRecord<String, String>>) recs, AcknowledgeType.ACCEPT), acks);
        assertThrows(IllegalArgumentException.class, () -> ShareAcknowledgements.fromRecords(recs, AcknowledgeType.RELEASE));
        assertThrows(IllegalArgumentException.class, () -> ShareAcknowledgements.builder().add(new TopicIdPartition(Uuid.ZERO_UUID, in0), -1, AcknowledgeType.ACCEPT));
    }
}
