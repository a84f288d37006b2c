package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * Acknowledgements to bind to a transaction (KIP-1289): per {@link TopicIdPartition}, a list of
 * {@link ShareAcknowledgementBatch}es. Immutable.
 *
 * <p>The stock {@code ConsumerRecord} carries no topic id, so {@link #fromRecords} and
 * {@link Builder#add(ConsumerRecord, AcknowledgeType)} key the partitions by a
 * {@code TopicIdPartition} with {@link Uuid#ZERO_UUID} and the topic name;
 * {@link SharetxProducer#sendShareAcknowledgementsToTransaction} looks the ids up by name (through
 * the sidecar) before sending. A {@code TopicIdPartition} with a real id is sent as it is.
 */
public final class ShareAcknowledgements {

    private static final ShareAcknowledgements EMPTY = new ShareAcknowledgements(Map.of());

    private final Map<TopicIdPartition, List<ShareAcknowledgementBatch>> acknowledgements;

    /** The reference client's constructor: the map and its lists are copied. */
    public ShareAcknowledgements(Map<TopicIdPartition, List<ShareAcknowledgementBatch>> acknowledgements) {
        Objects.requireNonNull(acknowledgements, "acknowledgements cannot be null");
        Map<TopicIdPartition, List<ShareAcknowledgementBatch>> copy = new LinkedHashMap<>();
        for (Map.Entry<TopicIdPartition, List<ShareAcknowledgementBatch>> e : acknowledgements.entrySet()) {
            Objects.requireNonNull(e.getKey(), "partition cannot be null");
            Objects.requireNonNull(e.getValue(), "batches cannot be null");
            List<ShareAcknowledgementBatch> batches = new ArrayList<>(e.getValue());
            for (ShareAcknowledgementBatch b : batches) {
                Objects.requireNonNull(b, "batch cannot be null");
            }
            if (!batches.isEmpty()) {
                copy.put(e.getKey(), Collections.unmodifiableList(batches));
            }
        }
        this.acknowledgements = Collections.unmodifiableMap(copy);
    }

    /** No acknowledgements; sending it does nothing. */
    public static ShareAcknowledgements empty() {
        return EMPTY;
    }

    /**
     * Every record of {@code records} acknowledged with {@code type} (ACCEPT or REJECT), contiguous
     * offsets of a partition in one batch.
     *
     * @throws IllegalArgumentException if {@code type} is RELEASE or RENEW (not transactional)
     */
    public static ShareAcknowledgements fromRecords(ConsumerRecords<?, ?> records, AcknowledgeType type) {
        Builder b = builder();
        for (ConsumerRecord<?, ?> r : records) {
            b.add(r, type);
        }
        return b.build();
    }

    /** Every record of {@code records} acknowledged with {@code type}, as {@link #fromRecords(ConsumerRecords, AcknowledgeType)}. */
    public static ShareAcknowledgements fromRecords(Iterable<? extends ConsumerRecord<?, ?>> records, AcknowledgeType type) {
        Builder b = builder();
        for (ConsumerRecord<?, ?> r : records) {
            b.add(r, type);
        }
        return b.build();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The acknowledgements per partition (unmodifiable). */
    public Map<TopicIdPartition, List<ShareAcknowledgementBatch>> acknowledgements() {
        return acknowledgements;
    }

    public boolean isEmpty() {
        return acknowledgements.isEmpty();
    }

    /** The number of offsets acknowledged (gaps included). */
    public long offsetCount() {
        long n = 0;
        for (List<ShareAcknowledgementBatch> bs : acknowledgements.values()) {
            for (ShareAcknowledgementBatch b : bs) {
                n += b.lastOffset() - b.firstOffset() + 1;
            }
        }
        return n;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ShareAcknowledgements && acknowledgements.equals(((ShareAcknowledgements) o).acknowledgements);
    }

    @Override
    public int hashCode() {
        return acknowledgements.hashCode();
    }

    @Override
    public String toString() {
        return "ShareAcknowledgements(" + acknowledgements + ")";
    }

    /** Checks a type may be bound to a transaction (ACCEPT or REJECT). */
    static byte transactionalType(AcknowledgeType type) {
        Objects.requireNonNull(type, "type cannot be null");
        if (type != AcknowledgeType.ACCEPT && type != AcknowledgeType.REJECT) {
            throw new IllegalArgumentException("acknowledge type " + type
                + " cannot be bound to a transaction: only ACCEPT and REJECT (KIP-1289)");
        }
        return type.id;
    }

    /**
     * Collects acknowledgements one offset at a time; {@link #build} turns each partition's offsets
     * into batches (contiguous offsets in one batch, one type for the batch when they share it).
     * Adding an offset again replaces its type. Not thread safe.
     */
    public static final class Builder {
        private final Map<TopicIdPartition, TreeMap<Long, Byte>> offsets = new LinkedHashMap<>();

        private Builder() {
        }

        /** Acknowledges {@code record} with {@code type} (ACCEPT or REJECT). */
        public Builder add(ConsumerRecord<?, ?> record, AcknowledgeType type) {
            Objects.requireNonNull(record, "record cannot be null");
            return add(new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition(record.topic(), record.partition())),
                record.offset(), type);
        }

        /** Acknowledges {@code offset} of {@code partition} with {@code type} (ACCEPT or REJECT). */
        public Builder add(TopicIdPartition partition, long offset, AcknowledgeType type) {
            return addType(partition, offset, transactionalType(type));
        }

        /** Marks {@code offset} of {@code partition} as a gap (an acquired offset without a record). */
        public Builder addGap(TopicIdPartition partition, long offset) {
            return addType(partition, offset, ShareAcknowledgementBatch.GAP);
        }

        private Builder addType(TopicIdPartition partition, long offset, byte type) {
            Objects.requireNonNull(partition, "partition cannot be null");
            if (offset < 0) {
                throw new IllegalArgumentException("negative offset " + offset);
            }
            offsets.computeIfAbsent(partition, k -> new TreeMap<>()).put(offset, type);
            return this;
        }

        public ShareAcknowledgements build() {
            Map<TopicIdPartition, List<ShareAcknowledgementBatch>> out = new LinkedHashMap<>();
            for (Map.Entry<TopicIdPartition, TreeMap<Long, Byte>> e : offsets.entrySet()) {
                out.put(e.getKey(), batches(e.getValue()));
            }
            return new ShareAcknowledgements(out);
        }
    }

    /** Offsets → batches, as kip1289.Batches does in the Go library. */
    static List<ShareAcknowledgementBatch> batches(TreeMap<Long, Byte> m) {
        List<ShareAcknowledgementBatch> out = new ArrayList<>();
        List<Map.Entry<Long, Byte>> run = new ArrayList<>();
        for (Map.Entry<Long, Byte> e : m.entrySet()) {
            if (!run.isEmpty() && e.getKey() != run.get(run.size() - 1).getKey() + 1) {
                out.add(batchOf(run));
                run.clear();
            }
            run.add(e);
        }
        if (!run.isEmpty()) {
            out.add(batchOf(run));
        }
        return out;
    }

    private static ShareAcknowledgementBatch batchOf(List<Map.Entry<Long, Byte>> run) {
        List<Byte> types = new ArrayList<>(run.size());
        boolean same = true;
        for (Map.Entry<Long, Byte> e : run) {
            types.add(e.getValue());
            same &= e.getValue().equals(types.get(0));
        }
        return new ShareAcknowledgementBatch(run.get(0).getKey(), run.get(run.size() - 1).getKey(),
            same ? List.of(types.get(0)) : types);
    }
}
