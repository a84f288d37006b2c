package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

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
        byte t = transactionalType(type);
        Builder b = builder();
        for (TopicPartition tp : records.partitions()) { // one key per partition, offsets in order
            Offsets offs = b.partition(new TopicIdPartition(Uuid.ZERO_UUID, tp));
            for (ConsumerRecord<?, ?> r : records.records(tp)) {
                offs.add(checkedOffset(r.offset()), t);
            }
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
        private final Map<TopicIdPartition, Offsets> offsets = new LinkedHashMap<>();
        private TopicIdPartition lastKey; // the key of the last record added, reused for its partition's next

        private Builder() {
        }

        /** Acknowledges {@code record} with {@code type} (ACCEPT or REJECT). */
        public Builder add(ConsumerRecord<?, ?> record, AcknowledgeType type) {
            Objects.requireNonNull(record, "record cannot be null");
            TopicIdPartition k = lastKey;
            if (k == null || k.partition() != record.partition() || !k.topic().equals(record.topic())) {
                k = new TopicIdPartition(Uuid.ZERO_UUID, new TopicPartition(record.topic(), record.partition()));
                lastKey = k;
            }
            return add(k, record.offset(), type);
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
            partition(partition).add(checkedOffset(offset), type);
            return this;
        }

        private Offsets partition(TopicIdPartition partition) {
            return offsets.computeIfAbsent(partition, k -> new Offsets());
        }

        public ShareAcknowledgements build() {
            Map<TopicIdPartition, List<ShareAcknowledgementBatch>> out = new LinkedHashMap<>();
            for (Map.Entry<TopicIdPartition, Offsets> e : offsets.entrySet()) {
                out.put(e.getKey(), e.getValue().batches());
            }
            return new ShareAcknowledgements(out);
        }
    }

    private static long checkedOffset(long offset) {
        if (offset < 0) {
            throw new IllegalArgumentException("negative offset " + offset);
        }
        return offset;
    }

    /**
     * One partition's acknowledged offsets in the order they were added, in primitive arrays: a
     * poll's records come in offset order, so building its batches is one pass. Offsets added out of
     * order, or again, are sorted on {@link #batches} (an offset added again keeps its last type).
     */
    static final class Offsets {
        private long[] offs = new long[16];
        private byte[] types = new byte[16];
        private int n;
        private boolean ordered = true; // strictly increasing so far

        void add(long offset, byte type) {
            if (n > 0 && offset <= offs[n - 1]) {
                ordered = false;
            }
            if (n == offs.length) {
                offs = Arrays.copyOf(offs, n * 2);
                types = Arrays.copyOf(types, n * 2);
            }
            offs[n] = offset;
            types[n] = type;
            n++;
        }

        /** Contiguous offsets in one batch, one type for the batch when they share it. */
        List<ShareAcknowledgementBatch> batches() {
            if (!ordered) {
                sortKeepingLast();
            }
            List<ShareAcknowledgementBatch> out = new ArrayList<>();
            int start = 0;
            for (int i = 1; i <= n; i++) {
                if (i == n || offs[i] != offs[i - 1] + 1) {
                    out.add(batchOf(start, i));
                    start = i;
                }
            }
            return out;
        }

        private ShareAcknowledgementBatch batchOf(int from, int to) {
            boolean same = true;
            for (int i = from + 1; i < to && same; i++) {
                same = types[i] == types[from];
            }
            List<Byte> ts;
            if (same) {
                ts = List.of(types[from]);
            } else {
                ts = new ArrayList<>(to - from);
                for (int i = from; i < to; i++) {
                    ts.add(types[i]);
                }
            }
            return new ShareAcknowledgementBatch(offs[from], offs[to - 1], ts);
        }

        /** Sorts by offset; of an offset added more than once, the last addition stays. */
        private void sortKeepingLast() {
            Integer[] idx = new Integer[n];
            for (int i = 0; i < n; i++) {
                idx[i] = i;
            }
            Arrays.sort(idx, (a, b) -> offs[a] != offs[b] ? Long.compare(offs[a], offs[b]) : Integer.compare(a, b));
            long[] o = new long[n];
            byte[] t = new byte[n];
            int m = 0;
            for (int k = 0; k < n; k++) {
                int i = idx[k];
                if (m > 0 && o[m - 1] == offs[i]) {
                    t[m - 1] = types[i]; // added later: replaces the type
                    continue;
                }
                o[m] = offs[i];
                t[m] = types[i];
                m++;
            }
            offs = o;
            types = t;
            n = m;
            ordered = true;
        }
    }
}
