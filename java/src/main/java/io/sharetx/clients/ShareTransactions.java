package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.serialization.Deserializer;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.WeakHashMap;

/**
 * What the stock {@link KafkaShareConsumer} cannot give a KIP-1289 application, and what the
 * application does with the records it handed to a transaction.
 *
 * <h2>The consumer</h2>
 * A stock {@code KafkaShareConsumer} connected to the sidecar, in <b>explicit acknowledgement
 * mode</b> ({@code share.acknowledgement.mode=explicit}; {@link #newShareConsumer} sets it). In that
 * mode the consumer refuses to poll again until every record of the last poll is acknowledged.
 * The sidecar holds back the consumer's own acknowledgement of every record whose acknowledgement
 * is bound to a transaction (staged, committed, or aborted and released by the sidecar):
 * none of them reaches the broker for that delivery (docs/design.md §7, §3.3).
 *
 * <h2>The records handed to a transaction</h2>
 * <ul>
 *   <li><b>Once {@code sendShareAcknowledgementsToTransaction} succeeded</b> (before or after the
 *       commit): acknowledge them with {@link #acknowledgeHandedOver} (ACCEPT). The sidecar answers
 *       that acknowledgement itself; the transaction alone decides: after a commit the
 *       transaction's types are applied, after an abort the sidecar has already released the
 *       records for redelivery (possibly to another member).</li>
 *   <li><b>When it failed, or the transaction aborted</b>: {@link #releaseForRedelivery} (RELEASE).
 *       For records that were never staged the RELEASE reaches the broker and they are
 *       redelivered; for records staged in the aborted transaction it is absorbed (the sidecar
 *       released them at the abort). So RELEASE is right in both cases, and calling it after every
 *       failure is safe. Before the next poll, it may replace an earlier
 *       {@code acknowledgeHandedOver} of the same records.</li>
 *   <li>Never acknowledge with ACCEPT or REJECT records whose staging failed: that acknowledgement
 *       does reach the broker, and the record counts as processed although no transaction
 *       processed it.</li>
 * </ul>
 * Then poll again. Several polls may feed one transaction: stage each poll's records, acknowledge
 * them with {@code acknowledgeHandedOver}, poll; commit when done.
 */
public final class ShareTransactions {

    private static final Map<ShareConsumer<?, ?>, String> GROUPS = Collections.synchronizedMap(new WeakHashMap<>());

    private ShareTransactions() {
    }

    /**
     * The consumer's {@link ShareGroupMetadata}: its group id (registered by
     * {@link #newShareConsumer} or {@link #register}), member id "" and epoch -1. The stock consumer
     * does not expose its member id and epoch; the sidecar's extension resolves "" to the member
     * that acquired the offsets through it (and does not check the epoch).
     *
     * @throws IllegalArgumentException if the consumer's group is not known: use
     *     {@link #shareGroupMetadata(ShareConsumer, String)}
     */
    public static ShareGroupMetadata shareGroupMetadata(ShareConsumer<?, ?> consumer) {
        Objects.requireNonNull(consumer, "consumer cannot be null");
        String group = GROUPS.get(consumer);
        if (group == null) {
            throw new IllegalArgumentException("the share consumer's group id is not known to sharetx-clients: build it with "
                + "ShareTransactions.newShareConsumer, call ShareTransactions.register(consumer, groupId), or use "
                + "shareGroupMetadata(consumer, groupId)");
        }
        return ShareGroupMetadata.forGroup(group);
    }

    /** The metadata of {@code consumer}, a member of {@code groupId}: member id "", epoch -1 (see above). */
    public static ShareGroupMetadata shareGroupMetadata(ShareConsumer<?, ?> consumer, String groupId) {
        Objects.requireNonNull(consumer, "consumer cannot be null");
        return ShareGroupMetadata.forGroup(groupId);
    }

    /** Remembers that {@code consumer} is a member of {@code groupId}, for {@link #shareGroupMetadata(ShareConsumer)}. */
    public static void register(ShareConsumer<?, ?> consumer, String groupId) {
        GROUPS.put(Objects.requireNonNull(consumer, "consumer cannot be null"), Objects.requireNonNull(groupId, "groupId cannot be null"));
    }

    /**
     * A stock {@code KafkaShareConsumer} of {@code configs} in explicit acknowledgement mode,
     * registered with its {@code group.id}.
     *
     * @throws IllegalArgumentException if the configuration asks for implicit mode, or has no group.id
     */
    public static <K, V> KafkaShareConsumer<K, V> newShareConsumer(Map<String, Object> configs, Deserializer<K> keyDeserializer,
                                                                   Deserializer<V> valueDeserializer) {
        Map<String, Object> m = explicitMode(configs);
        KafkaShareConsumer<K, V> c = keyDeserializer == null && valueDeserializer == null
            ? new KafkaShareConsumer<>(m) : new KafkaShareConsumer<>(m, keyDeserializer, valueDeserializer);
        register(c, String.valueOf(m.get(ConsumerConfig.GROUP_ID_CONFIG)));
        return c;
    }

    /** {@link #newShareConsumer(Map, Deserializer, Deserializer)} with the deserializers of the configuration. */
    public static <K, V> KafkaShareConsumer<K, V> newShareConsumer(Properties properties) {
        Map<String, Object> m = new HashMap<>();
        for (String k : properties.stringPropertyNames()) {
            m.put(k, properties.getProperty(k));
        }
        properties.forEach((k, v) -> m.put(String.valueOf(k), v));
        return newShareConsumer(m, null, null);
    }

    /** The share consumer configuration key and value of explicit acknowledgement mode. */
    public static final String ACKNOWLEDGEMENT_MODE_CONFIG = "share.acknowledgement.mode";

    static Map<String, Object> explicitMode(Map<String, Object> configs) {
        Map<String, Object> m = new HashMap<>(configs);
        Object mode = m.get(ACKNOWLEDGEMENT_MODE_CONFIG);
        if (mode != null && !"explicit".equalsIgnoreCase(String.valueOf(mode).trim())) {
            throw new IllegalArgumentException(ACKNOWLEDGEMENT_MODE_CONFIG + "=" + mode
                + ": transactional acknowledgements need explicit mode (the application must not let the consumer acknowledge implicitly)");
        }
        m.put(ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        Object group = m.get(ConsumerConfig.GROUP_ID_CONFIG);
        if (group == null || String.valueOf(group).isBlank()) {
            throw new IllegalArgumentException("a share consumer needs group.id");
        }
        return m;
    }

    /**
     * Acknowledges, on the consumer, records whose acknowledgements were staged in a transaction
     * ({@code sendShareAcknowledgementsToTransaction} succeeded), so that the consumer may poll
     * again: ACCEPT, which the sidecar absorbs whatever the transaction's outcome. Call it before
     * the next poll (the consumer only takes acknowledgements of its latest poll).
     */
    public static <K, V> void acknowledgeHandedOver(ShareConsumer<K, V> consumer, Iterable<ConsumerRecord<K, V>> records) {
        for (ConsumerRecord<K, V> r : records) {
            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
        }
    }

    /**
     * Acknowledges {@code records} with RELEASE, after a failed {@code sendShareAcknowledgementsToTransaction}
     * or an aborted transaction: never-staged records are redelivered by the broker; staged ones
     * were already released by the sidecar at the abort, and this acknowledgement is absorbed.
     * Call it before the next poll.
     */
    public static <K, V> void releaseForRedelivery(ShareConsumer<K, V> consumer, Iterable<ConsumerRecord<K, V>> records) {
        for (ConsumerRecord<K, V> r : records) {
            consumer.acknowledge(r, AcknowledgeType.RELEASE);
        }
    }
}
