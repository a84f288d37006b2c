package io.sharetx.clients;

import org.apache.kafka.common.Uuid;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The messages the library sends on its own connections, encoded by hand so that the library
 * depends on no kafka-clients internals: ApiVersions v0, SaslHandshake v1, SaslAuthenticate v1,
 * Metadata v12, and TxnShareAcknowledge v0 in the layout of KIP-1289's reference implementation
 * (the same bytes as the Go codec, kip1289/kip1289.go; docs/protocol.md).
 */
final class Protocol {
    private Protocol() {
    }

    static final short API_VERSIONS = 18;
    static final short METADATA = 3;
    /** TxnShareAcknowledge's key in the reference's latest revision, and sharetx's default. */
    static final short DEFAULT_TXN_SHARE_ACKNOWLEDGE_KEY = 95;

    /** A request frame (without the size prefix): header v1 (classic) or v2 (flexible), then the body. */
    static byte[] frame(short key, short version, int correlationId, String clientId, boolean flexible, byte[] body) {
        Wire.Writer w = new Wire.Writer().int16(key).int16(version).int32(correlationId).string(clientId);
        if (flexible) {
            w.noTags();
        }
        return w.raw(body).toByteArray();
    }

    // ---------------------------------------------------------------- TxnShareAcknowledge

    /** One partition of a TxnShareAcknowledge request. */
    static final class AckPartition {
        final Uuid topicId;
        final int partition;
        final List<ShareAcknowledgementBatch> batches;

        AckPartition(Uuid topicId, int partition, List<ShareAcknowledgementBatch> batches) {
            this.topicId = topicId;
            this.partition = partition;
            this.batches = batches;
        }
    }

    /**
     * TxnShareAcknowledgeRequest v0, fields in the reference's wire order: TransactionalId,
     * GroupId, ProducerId, ProducerEpoch, MemberId, MemberEpoch, Topics[TopicId,
     * Partitions[PartitionIndex, AcknowledgementBatches[FirstOffset, LastOffset,
     * AcknowledgeTypes[int8]]]]. Partitions of one topic id are grouped, in the order given.
     */
    static byte[] txnShareAcknowledge(String transactionalId, String groupId, long producerId, short producerEpoch,
                                      String memberId, int memberEpoch, List<AckPartition> partitions) {
        return txnShareAcknowledge(transactionalId, groupId, producerId, producerEpoch, memberId, memberEpoch, partitions, false, null);
    }

    /** The top-level tagged field of sharetx's RideProduce extension (docs/protocol.md). */
    static final int RIDE_PRODUCE_TAG = 10000;
    /**
     * The top-level tagged field of sharetx's TouchOffset extension (an int64, docs/protocol.md):
     * the offset of the transaction's touch record, so that a call with producer id -1 is checked
     * against the ids that touch was written with.
     */
    static final int TOUCH_OFFSET_TAG = 10001;

    /**
     * TxnShareAcknowledgeRequest v0; with {@code rideProduce} it carries sharetx's RideProduce
     * extension (tagged field {@value #RIDE_PRODUCE_TAG}, one byte 1): records of the transaction
     * are being produced, so the sidecar may append the shadow record to their Produce; with a
     * {@code touchOffset}, sharetx's TouchOffset extension (tagged field {@value #TOUCH_OFFSET_TAG}).
     */
    static byte[] txnShareAcknowledge(String transactionalId, String groupId, long producerId, short producerEpoch,
                                      String memberId, int memberEpoch, List<AckPartition> partitions, boolean rideProduce,
                                      Long touchOffset) {
        Map<Uuid, List<AckPartition>> byTopic = new LinkedHashMap<>();
        for (AckPartition p : partitions) {
            byTopic.computeIfAbsent(p.topicId, k -> new ArrayList<>()).add(p);
        }
        Wire.Writer w = new Wire.Writer()
            .compactString(transactionalId)
            .compactString(groupId)
            .int64(producerId)
            .int16(producerEpoch)
            .compactString(memberId)
            .int32(memberEpoch)
            .compactArrayLen(byTopic.size());
        for (Map.Entry<Uuid, List<AckPartition>> t : byTopic.entrySet()) {
            w.uuid(t.getKey()).compactArrayLen(t.getValue().size());
            for (AckPartition p : t.getValue()) {
                w.int32(p.partition).compactArrayLen(p.batches.size());
                for (ShareAcknowledgementBatch b : p.batches) {
                    w.int64(b.firstOffset()).int64(b.lastOffset()).compactArrayLen(b.acknowledgeTypes().size());
                    for (byte ty : b.acknowledgeTypes()) {
                        w.int8(ty);
                    }
                    w.noTags();
                }
                w.noTags();
            }
            w.noTags();
        }
        w.uvarint((rideProduce ? 1 : 0) + (touchOffset != null ? 1 : 0)); // tagged fields, in increasing tag order
        if (rideProduce) {
            w.uvarint(RIDE_PRODUCE_TAG).uvarint(1).int8(1);
        }
        if (touchOffset != null) {
            w.uvarint(TOUCH_OFFSET_TAG).uvarint(8).int64(touchOffset);
        }
        return w.toByteArray();
    }

    /** A decoded TxnShareAcknowledgeResponse v0. */
    static final class AckResponse {
        short errorCode;
        /** Partition results in response order. */
        final List<PartitionResult> partitions = new ArrayList<>();

        /** What the reference client reads: the top-level code wins, else the first partition code. */
        short effectiveCode() {
            if (errorCode != 0) {
                return errorCode;
            }
            for (PartitionResult p : partitions) {
                if (p.errorCode != 0) {
                    return p.errorCode;
                }
            }
            return 0;
        }

        /** The first message beside the effective code (sharetx puts the top-level code's message on the partitions). */
        String message() {
            short code = effectiveCode();
            for (PartitionResult p : partitions) {
                if (p.errorCode == code && p.errorMessage != null) {
                    return p.errorMessage;
                }
            }
            for (PartitionResult p : partitions) {
                if (p.errorMessage != null) {
                    return p.errorMessage;
                }
            }
            return null;
        }
    }

    static final class PartitionResult {
        final Uuid topicId;
        final int partition;
        final short errorCode;
        final String errorMessage;

        PartitionResult(Uuid topicId, int partition, short errorCode, String errorMessage) {
            this.topicId = topicId;
            this.partition = partition;
            this.errorCode = errorCode;
            this.errorMessage = errorMessage;
        }
    }

    /** TxnShareAcknowledgeResponse v0 (after the response header v1): ThrottleTimeMs, ErrorCode, Responses[...]; no top-level message. */
    static AckResponse parseTxnShareAcknowledge(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        AckResponse out = new AckResponse();
        r.int32(); // throttle
        out.errorCode = r.int16();
        int nt = r.compactArrayLen();
        for (int i = 0; i < nt; i++) {
            Uuid id = r.uuid();
            int np = r.compactArrayLen();
            for (int j = 0; j < np; j++) {
                int part = r.int32();
                short code = r.int16();
                String msg = r.compactString();
                r.skipTags();
                out.partitions.add(new PartitionResult(id, part, code, msg));
            }
            r.skipTags();
        }
        r.skipTags();
        if (r.remaining() != 0) {
            throw new Wire.Malformed("trailing bytes after TxnShareAcknowledgeResponse");
        }
        return out;
    }

    // ---------------------------------------------------------------- ApiVersions v0

    /** ApiVersions v0 response: error code and key → [min, max]. */
    static Map<Short, short[]> parseApiVersionsV0(ByteBuffer body, short[] errorOut) {
        Wire.Reader r = new Wire.Reader(body);
        errorOut[0] = r.int16();
        int n = r.int32();
        if (n < 0 || n > body.remaining() / 6 + 1) {
            throw new Wire.Malformed("bad ApiVersions array length " + n);
        }
        Map<Short, short[]> keys = new HashMap<>();
        for (int i = 0; i < n; i++) {
            short key = r.int16();
            keys.put(key, new short[] {r.int16(), r.int16()});
        }
        return keys;
    }

    // ---------------------------------------------------------------- Metadata v12

    static byte[] metadataV12(List<String> topics) {
        Wire.Writer w = new Wire.Writer().compactArrayLen(topics.size());
        for (String t : topics) {
            w.uuid(Uuid.ZERO_UUID).compactString(t).noTags();
        }
        return w.bool(false) // allow_auto_topic_creation
            .bool(false)     // include_topic_authorized_operations
            .noTags().toByteArray();
    }

    /** What the library needs of a Metadata response. */
    static final class Metadata {
        /** node id → "host:port" (the sidecar's listeners: it rewrites every broker address). */
        final Map<Integer, String> brokers = new HashMap<>();
        final Map<String, TopicMeta> topics = new HashMap<>();
    }

    static final class TopicMeta {
        final short errorCode;
        final Uuid topicId;
        /** partition → leader node id */
        final Map<Integer, Integer> leaders = new HashMap<>();

        TopicMeta(short errorCode, Uuid topicId) {
            this.errorCode = errorCode;
            this.topicId = topicId;
        }
    }

    static Metadata parseMetadataV12(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        Metadata md = new Metadata();
        r.int32(); // throttle
        int nb = r.compactArrayLen();
        for (int i = 0; i < nb; i++) {
            int node = r.int32();
            String host = r.compactString();
            int port = r.int32();
            r.compactString(); // rack
            r.skipTags();
            md.brokers.put(node, hostPort(host, port));
        }
        r.compactString(); // cluster id
        r.int32();         // controller id
        int nt = r.compactArrayLen();
        for (int i = 0; i < nt; i++) {
            short code = r.int16();
            String name = r.compactString();
            Uuid id = r.uuid();
            r.bool(); // internal
            TopicMeta tm = new TopicMeta(code, id);
            int np = r.compactArrayLen();
            for (int j = 0; j < np; j++) {
                r.int16(); // partition error
                int part = r.int32();
                int leader = r.int32();
                r.int32(); // leader epoch
                for (int k = 0; k < 3; k++) { // replicas, isr, offline
                    int n = r.compactArrayLen();
                    for (int x = 0; x < n; x++) {
                        r.int32();
                    }
                }
                r.skipTags();
                tm.leaders.put(part, leader);
            }
            r.int32(); // topic authorized operations
            r.skipTags();
            if (name != null) {
                md.topics.put(name, tm);
            }
        }
        r.skipTags();
        return md;
    }

    static String hostPort(String host, int port) {
        return (host.indexOf(':') >= 0 && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + port;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
