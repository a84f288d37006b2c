package io.sharetx.clients;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.network.ChannelBuilder;
import org.apache.kafka.common.network.Selector;
import org.apache.kafka.common.utils.Time;

import java.lang.reflect.InvocationTargetException;

/**
 * The kafka-clients internals {@link SidecarClient} builds its connections with, reached through
 * reflection where their signatures differ between the supported versions: {@code LogContext}
 * moved from {@code org.apache.kafka.common.utils} (4.2, 4.3) to
 * {@code org.apache.kafka.common.utils.internals} (4.4), and {@code ClientUtils.createChannelBuilder}
 * and {@code Selector}'s constructor take it. Everything else the library uses of the network
 * layer has one signature in 4.2 to 4.4.
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
