package io.sharetx.clients;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.network.ChannelBuilder;
import org.apache.kafka.common.network.Selector;
import org.apache.kafka.common.utils.Time;

import java.lang.reflect.InvocationTargetException;

/**
 * The kafka-clients internals the library reaches through reflection. {@link SidecarClient} builds
 * its connections with some whose signatures differ between the supported versions:
 * {@code LogContext} moved from {@code org.apache.kafka.common.utils} (4.2, 4.3) to
 * {@code org.apache.kafka.common.utils.internals} (4.4), and {@code ClientUtils.createChannelBuilder}
 * and {@code Selector}'s constructor take it. Everything else the library uses of the network
 * layer has one signature in 4.2 to 4.4. {@link SharetxProducer} reads its producer id and epoch,
 * which {@code KafkaProducer} keeps to itself ({@link #producerIdAndEpoch}).
 */
final class NetworkCompat {
    private NetworkCompat() {
    }

    private static final Class<?> LOG_CONTEXT = logContextClass();

    private static Class<?> logContextClass() {
        for (String name : new String[] {"org.apache.kafka.common.utils.internals.LogContext", "org.apache.kafka.common.utils.LogContext"}) {
            try {
                return Class.forName(name, false, NetworkCompat.class.getClassLoader());
            } catch (ClassNotFoundException ignored) {
                // the other one
            }
        }
        throw new KafkaException("sharetx-clients: this kafka-clients has no LogContext class (4.2 to 4.4 are supported)");
    }

    /** A LogContext with {@code prefix}. */
    static Object logContext(String prefix) {
        try {
            return LOG_CONTEXT.getConstructor(String.class).newInstance(prefix);
        } catch (ReflectiveOperationException e) {
            throw unsupported("LogContext(String)", e);
        }
    }

    /** {@code ClientUtils.createChannelBuilder(config, time, logContext)}: the producer's security settings. */
    static ChannelBuilder channelBuilder(AbstractConfig config, Time time, Object logContext) {
        try {
            return (ChannelBuilder) Class.forName("org.apache.kafka.clients.ClientUtils")
                .getMethod("createChannelBuilder", AbstractConfig.class, Time.class, LOG_CONTEXT)
                .invoke(null, config, time, logContext);
        } catch (InvocationTargetException e) {
            throw rethrow(e);
        } catch (ReflectiveOperationException e) {
            throw unsupported("ClientUtils.createChannelBuilder", e);
        }
    }

    /** {@code new Selector(connectionMaxIdleMs, metrics, time, metricGroupPrefix, channelBuilder, logContext)}. */
    static Selector selector(long connectionMaxIdleMs, Metrics metrics, Time time, String metricGroupPrefix,
                             ChannelBuilder channelBuilder, Object logContext) {
        try {
            return Selector.class.getConstructor(long.class, Metrics.class, Time.class, String.class, ChannelBuilder.class, LOG_CONTEXT)
                .newInstance(connectionMaxIdleMs, metrics, time, metricGroupPrefix, channelBuilder, logContext);
        } catch (InvocationTargetException e) {
            throw rethrow(e);
        } catch (ReflectiveOperationException e) {
            throw unsupported("Selector's constructor", e);
        }
    }

    // KafkaProducer.transactionManager.producerIdAndEpoch.{producerId, epoch} and
    // KafkaProducer.accumulator.hasIncomplete(), resolved once; null where this kafka-clients lacks
    // them (the callers then fall back to what needs none of them).
    private static final java.lang.reflect.Field TRANSACTION_MANAGER = declared(KafkaProducer.class, "transactionManager");
    private static final java.lang.reflect.Field PRODUCER_ID_AND_EPOCH =
        TRANSACTION_MANAGER == null ? null : declared(TRANSACTION_MANAGER.getType(), "producerIdAndEpoch");
    private static final java.lang.reflect.Field PRODUCER_ID =
        PRODUCER_ID_AND_EPOCH == null ? null : declared(PRODUCER_ID_AND_EPOCH.getType(), "producerId");
    private static final java.lang.reflect.Field EPOCH =
        PRODUCER_ID_AND_EPOCH == null ? null : declared(PRODUCER_ID_AND_EPOCH.getType(), "epoch");
    private static final java.lang.reflect.Field ACCUMULATOR = declared(KafkaProducer.class, "accumulator");
    private static final java.lang.reflect.Method HAS_INCOMPLETE = ACCUMULATOR == null ? null : method(ACCUMULATOR.getType(), "hasIncomplete");

    private static java.lang.reflect.Field declared(Class<?> c, String name) {
        try {
            java.lang.reflect.Field f = c.getDeclaredField(name);
            f.setAccessible(true);
            return f;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    private static java.lang.reflect.Method method(Class<?> c, String name) {
        try {
            return c.getMethod(name);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /**
     * The producer id and epoch {@code producer}'s transaction manager holds now
     * ({@code KafkaProducer.transactionManager.producerIdAndEpoch}, a field of that name with
     * {@code producerId} and {@code epoch} in 4.2 to 4.4), or null when they cannot be read or
     * are not valid yet: the caller then learns nothing and keeps to what needs none of them.
     */
    static long[] producerIdAndEpoch(KafkaProducer<?, ?> producer) {
        if (PRODUCER_ID == null || EPOCH == null) {
            return null;
        }
        try {
            Object tm = TRANSACTION_MANAGER.get(producer);
            Object pe = tm == null ? null : PRODUCER_ID_AND_EPOCH.get(tm);
            if (pe == null) {
                return null;
            }
            long id = PRODUCER_ID.getLong(pe);
            short epoch = EPOCH.getShort(pe);
            return id >= 0 && epoch >= 0 ? new long[] {id, epoch} : null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /**
     * Whether {@code producer} has records not yet acknowledged, buffered or in flight
     * ({@code KafkaProducer.accumulator.hasIncomplete()}); true when that cannot be read.
     */
    static boolean hasIncomplete(KafkaProducer<?, ?> producer) {
        if (HAS_INCOMPLETE == null) {
            return true;
        }
        try {
            Object acc = ACCUMULATOR.get(producer);
            return acc == null || (Boolean) HAS_INCOMPLETE.invoke(acc);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return true;
        }
    }

    private static RuntimeException rethrow(InvocationTargetException e) {
        Throwable c = e.getCause();
        if (c instanceof RuntimeException) {
            return (RuntimeException) c; // a KafkaException for a bad security setting, as the producer would throw
        }
        return new KafkaException("sharetx-clients: " + c, c);
    }

    private static KafkaException unsupported(String what, ReflectiveOperationException e) {
        return new KafkaException("sharetx-clients: this kafka-clients has no " + what + " as 4.2 to 4.4 have: " + e, e);
    }
}
