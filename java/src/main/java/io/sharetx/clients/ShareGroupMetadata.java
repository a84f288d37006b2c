package io.sharetx.clients;

import java.util.Objects;

/**
 * The share-group member whose acquired records a transaction acknowledges: KIP-1289's
 * {@code ShareGroupMetadata(groupId, memberId, memberEpoch)}.
 *
 * <p>The stock {@code KafkaShareConsumer} does not expose its member id and epoch, so
 * {@link ShareTransactions#shareGroupMetadata} gives member id {@code ""} and epoch {@code -1}: a
 * sharetx extension that means "the member that acquired these offsets through this sidecar" (the
 * epoch is then not checked). With a real member id the epoch must be the member's current one,
 * else the call fails with {@link org.apache.kafka.clients.consumer.CommitFailedException}
 * (STALE_MEMBER_EPOCH).
 */
public final class ShareGroupMetadata {

    private final String groupId;
    private final String memberId;
    private final int memberEpoch;

    public ShareGroupMetadata(String groupId, String memberId, int memberEpoch) {
        this.groupId = Objects.requireNonNull(groupId, "groupId cannot be null");
        this.memberId = Objects.requireNonNull(memberId, "memberId cannot be null");
        this.memberEpoch = memberEpoch;
    }

    /** Metadata of {@code groupId} with the member left to the sidecar (member id "", epoch -1). */
    public static ShareGroupMetadata forGroup(String groupId) {
        return new ShareGroupMetadata(groupId, "", -1);
    }

    public String groupId() {
        return groupId;
    }

    public String memberId() {
        return memberId;
    }

    public int memberEpoch() {
        return memberEpoch;
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (!(o instanceof ShareGroupMetadata)) {
            return false;
        }
        ShareGroupMetadata m = (ShareGroupMetadata) o;
        return memberEpoch == m.memberEpoch && groupId.equals(m.groupId) && memberId.equals(m.memberId);
    }

    @Override
    public int hashCode() {
        return Objects.hash(groupId, memberId, memberEpoch);
    }

    @Override
    public String toString() {
        return "ShareGroupMetadata(groupId=" + groupId + ", memberId=" + memberId + ", memberEpoch=" + memberEpoch + ")";
    }
}
