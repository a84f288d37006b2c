package io.sharetx.clients;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Serializer;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/**
 * The touch record: the stock KafkaProducer completes a transaction in which it produced nothing
 * locally, without EndTxn, so a transaction that holds only acknowledgements would never commit
 * (the sidecar's shadow record would wait for a marker that never comes, and the coordinator's
 * timeout would abort it). The library therefore produces one small record per transaction to
 * the shadow topic, as the Go library does (client/touch.go): value {@code sharetx-touch}, header
 * {@code sharetx: touch}, null key, partition {@code (fnv32a(transactional id) mod n + 1) mod n},
 * never the shadow partition itself (kip1289/partition.go). The sidecar ignores such records and
 * relays them with its own credentials, so the application needs no WRITE on the shadow topic.
 */
final class Touch {
    private Touch() {
    }

    static final String VALUE = "sharetx-touch";
    static final String HEADER = "sharetx";
    static final byte[] VALUE_BYTES = VALUE.getBytes(StandardCharsets.UTF_8);
    static final List<Header> HEADERS = List.of(new Header() {
        private final byte[] v = "touch".getBytes(StandardCharsets.UTF_8);

        @Override
        public String key() {
            return HEADER;
        }

        @Override
        public byte[] value() {
            return v.clone();
        }
    });

    /**
     * The object a touch record carries as key and value: the producer's serializers are wrapped
     * ({@link Serializing}) so that it serializes to a null key and {@link #VALUE}, whatever the
     * producer's key and value types.
     */
    static final Object MARKER = new Object() {
        @Override
        public String toString() {
            return "sharetx-touch";
        }
    };

    /** FNV-1a, 32 bit, of the id's UTF-8 bytes, mod partitions: where the sidecar stages the id's acknowledgements. */
    static int shadowPartition(String transactionalId, int partitions) {
        if (partitions <= 0) {
            return 0;
        }
        int h = 0x811c9dc5;
        for (byte b : transactionalId.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xFF;
            h *= 0x01000193;
        }
        return Integer.remainderUnsigned(h, partitions);
    }

    /** {@code (shadowPartition + 1) mod partitions}: where the touch record goes. */
    static int touchPartition(String transactionalId, int partitions) {
        if (partitions <= 0) {
            return 0;
        }
        return (shadowPartition(transactionalId, partitions) + 1) % partitions;
    }

    /** A serializer that turns {@link #MARKER} into the touch record's key (null) or value, and delegates the rest. */
    static final class Serializing<T> implements Serializer<T> {
        private final Serializer<T> delegate;
        private final boolean isKey;

        Serializing(Serializer<T> delegate, boolean isKey) {
            this.delegate = delegate;
            this.isKey = isKey;
        }

        @Override
        public void configure(Map<String, ?> configs, boolean isKey) {
            delegate.configure(configs, isKey);
        }

        @Override
        public byte[] serialize(String topic, T data) {
            if (data == MARKER) {
                return isKey ? null : VALUE_BYTES.clone();
            }
            return delegate.serialize(topic, data);
        }

        @Override
        public byte[] serialize(String topic, Headers headers, T data) {
            if (data == MARKER) {
                return isKey ? null : VALUE_BYTES.clone();
            }
            return delegate.serialize(topic, headers, data);
        }

        @Override
        public void close() {
            delegate.close();
        }
    }
}
