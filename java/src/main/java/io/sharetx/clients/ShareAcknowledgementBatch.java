package io.sharetx.clients;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * One acknowledgement batch of KIP-1289: the inclusive offset range {@code firstOffset..lastOffset}
 * with one acknowledge type for the whole range, or one per offset.
 *
 * <p>Types are the ids of {@link org.apache.kafka.clients.consumer.AcknowledgeType}: 1 (ACCEPT),
 * 3 (REJECT), and 0 for a <em>gap</em> (an acquired offset that holds no record, such as a
 * transaction marker). RELEASE and RENEW cannot be transactional; the sidecar refuses them
 * (INVALID_RECORD_STATE). The constructor has the reference client's shape
 * {@code (long, long, List<Byte>)}.
 */
public final class ShareAcknowledgementBatch {

    /** The type id of a gap: an acquired offset without a record. */
    public static final byte GAP = 0;

    private final long firstOffset;
    private final long lastOffset;
    private final List<Byte> acknowledgeTypes;

    /**
     * @throws IllegalArgumentException if {@code firstOffset > lastOffset}, an offset is negative,
     *     {@code acknowledgeTypes} is empty or holds a null, or it holds neither one type nor one per
     *     offset
     */
    public ShareAcknowledgementBatch(long firstOffset, long lastOffset, List<Byte> acknowledgeTypes) {
        Objects.requireNonNull(acknowledgeTypes, "acknowledgeTypes cannot be null");
        if (firstOffset < 0 || firstOffset > lastOffset) {
            throw new IllegalArgumentException("invalid offset range " + firstOffset + ".." + lastOffset);
        }
        if (acknowledgeTypes.isEmpty()) {
            throw new IllegalArgumentException("acknowledgeTypes cannot be empty");
        }
        long span = lastOffset - firstOffset + 1;
        if (acknowledgeTypes.size() != 1 && acknowledgeTypes.size() != span) {
            throw new IllegalArgumentException("acknowledgeTypes must hold one type, or one per offset (" + span
                + "), not " + acknowledgeTypes.size());
        }
        for (Byte t : acknowledgeTypes) {
            if (t == null) {
                throw new IllegalArgumentException("acknowledgeTypes cannot hold null");
            }
        }
        this.firstOffset = firstOffset;
        this.lastOffset = lastOffset;
        this.acknowledgeTypes = Collections.unmodifiableList(new ArrayList<>(acknowledgeTypes));
    }

    public long firstOffset() {
        return firstOffset;
    }

    public long lastOffset() {
        return lastOffset;
    }

    /** One type for the range, or one per offset (unmodifiable). */
    public List<Byte> acknowledgeTypes() {
        return acknowledgeTypes;
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (!(o instanceof ShareAcknowledgementBatch)) {
            return false;
        }
        ShareAcknowledgementBatch b = (ShareAcknowledgementBatch) o;
        return firstOffset == b.firstOffset && lastOffset == b.lastOffset && acknowledgeTypes.equals(b.acknowledgeTypes);
    }

    @Override
    public int hashCode() {
        return Objects.hash(firstOffset, lastOffset, acknowledgeTypes);
    }

    @Override
    public String toString() {
        return "ShareAcknowledgementBatch(firstOffset=" + firstOffset + ", lastOffset=" + lastOffset
            + ", acknowledgeTypes=" + acknowledgeTypes + ")";
    }
}
