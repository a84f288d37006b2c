package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.CoordinatorLoadInProgressException;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.junit.jupiter.api.Test;

import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The library's bytes and values against the Go side's (kip1289/kip1289.go, kip1289/partition.go); no Kafka needed. */
class WireFormatTest {

    // The Go codec's encoding of the same request and response (kip1289.TxnShareAcknowledgeRequest.AppendTo,
    // kip1289.Batches), generated from the Go package.
    static final String GO_REQUEST = "0674786e2d310867726f75702d61ffffffffffffffffffff01ffffffff030102030405060708090a0b0c0d0e0f10"
        + "0300000000030000000000000005000000000000000702010000000000000000090000000000000009020300000000000302000000000000000a"
        + "000000000000000c04010300000000abababababababababababababababab02000000010200000000000f424000000000000f4240020300000000";
    static final String GO_RESPONSE = "000000000071020102030405060708090a0b0c0d0e0f10030000000000713a736861726574783a20746865206d656d"
        + "6265722065706f6368206973206e6f7420746865206d656d62657227732063757272656e74206f6e650000000003007100000000";

    static Uuid id1() {
        byte[] b = new byte[16];
        for (int i = 0; i < 16; i++) {
            b[i] = (byte) (i + 1);
        }
        ByteBuffer bb = ByteBuffer.wrap(b);
        return new Uuid(bb.getLong(), bb.getLong());
    }

    static Uuid id2() {
        return new Uuid(0xababababababababL, 0xababababababababL);
    }

    /** Offsets → batches, as kip1289.Batches does in the Go library (the library's builder). */
    static List<ShareAcknowledgementBatch> batches(TreeMap<Long, Byte> m) {
        ShareAcknowledgements.Offsets o = new ShareAcknowledgements.Offsets();
        for (Map.Entry<Long, Byte> e : m.entrySet()) {
            o.add(e.getKey(), e.getValue());
        }
        return o.batches();
    }

    @Test
    void requestBytesAreTheGoCodecs() {
        TreeMap<Long, Byte> p0 = new TreeMap<>(Map.of(5L, (byte) 1, 6L, (byte) 1, 7L, (byte) 1, 9L, (byte) 3));
        TreeMap<Long, Byte> p3 = new TreeMap<>(Map.of(10L, (byte) 1, 11L, (byte) 3, 12L, (byte) 0));
        TreeMap<Long, Byte> q1 = new TreeMap<>(Map.of(1000000L, (byte) 3));
        List<Protocol.AckPartition> parts = List.of(
            new Protocol.AckPartition(id1(), 0, batches(p0)),
            new Protocol.AckPartition(id1(), 3, batches(p3)),
            new Protocol.AckPartition(id2(), 1, batches(q1)));
        byte[] got = Protocol.txnShareAcknowledge("txn-1", "group-a", -1L, (short) -1, "", -1, parts);
        assertEquals(GO_REQUEST, HexFormat.of().formatHex(got));
        // RideProduce: the request's one top-level tagged field instead of none — count 1, tag
        // 10000 (uvarint 90 4e), length 1, value 1 — as kip1289's TestRideProduceTag lays it out.
        byte[] ride = Protocol.txnShareAcknowledge("txn-1", "group-a", -1L, (short) -1, "", -1, parts, true, null);
        assertEquals(GO_REQUEST.substring(0, GO_REQUEST.length() - 2) + "01904e0101", HexFormat.of().formatHex(ride));
        // TouchOffset: tag 10001 (uvarint 91 4e), length 8, the offset; after RideProduce when both
        // are sent (kip1289's TestTouchOffsetTag).
        byte[] touch = Protocol.txnShareAcknowledge("txn-1", "group-a", -1L, (short) -1, "", -1, parts, false, 42L);
        assertEquals(GO_REQUEST.substring(0, GO_REQUEST.length() - 2) + "01914e08000000000000002a", HexFormat.of().formatHex(touch));
        byte[] both = Protocol.txnShareAcknowledge("txn-1", "group-a", -1L, (short) -1, "", -1, parts, true, 42L);
        assertEquals(GO_REQUEST.substring(0, GO_REQUEST.length() - 2) + "02904e0101914e08000000000000002a", HexFormat.of().formatHex(both));
    }

    @Test
    void responseDecodesAsTheReferenceClientReadsIt() {
        Protocol.AckResponse r = Protocol.parseTxnShareAcknowledge(ByteBuffer.wrap(HexFormat.of().parseHex(GO_RESPONSE)));
        assertEquals(113, r.effectiveCode());
        assertEquals(2, r.partitions.size());
        assertEquals("sharetx: the member epoch is not the member's current one", r.message());
        assertThrows(Wire.Malformed.class, () -> Protocol.parseTxnShareAcknowledge(
            ByteBuffer.wrap(HexFormat.of().parseHex(GO_RESPONSE.substring(0, GO_RESPONSE.length() - 4)))));
    }

    @Test
    void requestHeaderV2() {
        byte[] f = Protocol.frame((short) 95, (short) 0, 7, "c", true, new byte[] {42});
        assertEquals("005f0000000000070001630" + "02a", HexFormat.of().formatHex(f));
    }

    @Test
    void shadowAndTouchPartitionsAreTheGoOnes() {
        Object[][] cases = {{"", 3, 1, 2}, {"orders-worker-1", 8, 7, 0}, {"txn-a", 2, 1, 0}, {"txn-a", 5, 3, 4}, {"é-ü", 7, 3, 4},
            {"txn-a", 1, 0, 0}, {"txn-a", 0, 0, 0}};
        for (Object[] c : cases) {
            assertEquals(c[2], Touch.shadowPartition((String) c[0], (Integer) c[1]), "shadow " + c[0] + "/" + c[1]);
            assertEquals(c[3], Touch.touchPartition((String) c[0], (Integer) c[1]), "touch " + c[0] + "/" + c[1]);
        }
        assertEquals((int) (0xe40c292cL % 1000), Touch.shadowPartition("a", 1000));
    }

    @Test
    void batchValidationAsTheReference() {
        assertThrows(IllegalArgumentException.class, () -> new ShareAcknowledgementBatch(2L, 1L, List.of(AcknowledgeType.ACCEPT.id)));
        assertThrows(IllegalArgumentException.class, () -> new ShareAcknowledgementBatch(1L, 2L, List.of()));
        assertThrows(IllegalArgumentException.class,
            () -> new ShareAcknowledgementBatch(1L, 3L, List.of(AcknowledgeType.ACCEPT.id, AcknowledgeType.REJECT.id)));
    }

    @Test
    void acknowledgementsAreDefensiveCopies() {
        TopicIdPartition tip = new TopicIdPartition(Uuid.randomUuid(), new TopicPartition("topic", 0));
        List<ShareAcknowledgementBatch> batches = new ArrayList<>();
        batches.add(new ShareAcknowledgementBatch(1L, 2L, List.of(AcknowledgeType.ACCEPT.id)));
        Map<TopicIdPartition, List<ShareAcknowledgementBatch>> m = new LinkedHashMap<>();
        m.put(tip, batches);
        ShareAcknowledgements acks = new ShareAcknowledgements(m);
        batches.add(new ShareAcknowledgementBatch(3L, 3L, List.of(AcknowledgeType.REJECT.id)));
        m.clear();
        assertEquals(List.of(new ShareAcknowledgementBatch(1L, 2L, List.of(AcknowledgeType.ACCEPT.id))), acks.acknowledgements().get(tip));
        assertThrows(UnsupportedOperationException.class, () -> acks.acknowledgements().put(tip, List.of()));
        assertTrue(ShareAcknowledgements.empty().isEmpty());
        assertFalse(acks.isEmpty());
    }

    @Test
    void fromRecordsCoalescesContiguousOffsets() {
        List<ConsumerRecord<String, String>> recs = new ArrayList<>();
        for (long o : new long[] {4, 5, 6, 9}) {
            recs.add(new ConsumerRecord<>("in", 2, o, null, "v"));
        }
        recs.add(new ConsumerRecord<>("in", 0, 1, null, "v"));
        ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(recs, AcknowledgeType.REJECT);
        TopicIdPartition p2 = new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition("in", 2));
        assertEquals(List.of(new ShareAcknowledgementBatch(4, 6, List.of((byte) 3)), new ShareAcknowledgementBatch(9, 9, List.of((byte) 3))),
            acks.acknowledgements().get(p2));
        assertEquals(5, acks.offsetCount());
        assertThrows(IllegalArgumentException.class, () -> ShareAcknowledgements.fromRecords(recs, AcknowledgeType.RELEASE));
        ShareAcknowledgements mixed = ShareAcknowledgements.builder().add(recs.get(0), AcknowledgeType.ACCEPT)
            .add(recs.get(1), AcknowledgeType.REJECT).addGap(p2, 6).build();
        assertEquals(List.of(new ShareAcknowledgementBatch(4, 6, List.of((byte) 1, (byte) 3, (byte) 0))), mixed.acknowledgements().get(p2));
    }

    /** Code that finds the method by reflection, as Flink's FLIP-573 draft does, with the parameter classes it built. */
    @Test
    void referenceSignatureFoundByReflection() throws Exception {
        Method m = SharetxProducer.class.getMethod("sendShareAcknowledgementsToTransaction", ShareAcknowledgements.class,
            ShareGroupMetadata.class);
        assertEquals(void.class, m.getReturnType());
        assertNotNull(ShareGroupMetadata.class.getConstructor(String.class, String.class, Integer.TYPE));
        assertNotNull(ShareAcknowledgementBatch.class.getConstructor(Long.TYPE, Long.TYPE, List.class));
        assertNotNull(ShareAcknowledgements.class.getConstructor(Map.class));
    }

    @Test
    void errorsAsTheReferenceClientRaisesThem() {
        assertInstanceOf(CommitFailedException.class, SharetxProducer.exceptionFor((short) 113, "m"));
        assertInstanceOf(CommitFailedException.class, SharetxProducer.exceptionFor((short) 25, "m"));
        assertInstanceOf(CommitFailedException.class, SharetxProducer.exceptionFor((short) 69, "m"));
        assertInstanceOf(InvalidRecordStateException.class, SharetxProducer.exceptionFor((short) 121, "m"));
        assertInstanceOf(ProducerFencedException.class, SharetxProducer.exceptionFor((short) 90, "m"));
        assertInstanceOf(UnsupportedVersionException.class, SharetxProducer.exceptionFor((short) 35, "m"));
        assertInstanceOf(CoordinatorLoadInProgressException.class, SharetxProducer.exceptionFor((short) 14, "m"));
        assertInstanceOf(RetriableException.class, SharetxProducer.exceptionFor((short) 15, "m"));
        for (short c : new short[] {30, 120, 121, 42, 25, 69, 113}) {
            assertTrue(SharetxProducer.isAbortable(c), "abortable " + c);
        }
        for (short c : new short[] {90, 47, 53, 35, 49, 55, -1}) {
            assertFalse(SharetxProducer.isAbortable(c), "fatal " + c);
            assertFalse(SharetxProducer.exceptionFor(c, "m") instanceof RetriableException, "fatal " + c);
        }
    }
}
