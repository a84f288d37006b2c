package io.sharetx.clients;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.network.ByteBufferSend;
import org.apache.kafka.common.network.ChannelState;
import org.apache.kafka.common.network.NetworkReceive;
import org.apache.kafka.common.network.NetworkSend;
import org.apache.kafka.common.network.Selector;
import org.apache.kafka.common.utils.Time;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.Closeable;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The library's own connections to the sidecar's listeners, one request at a time each. The stock
 * producer's network client cannot send an API key it does not know, so TxnShareAcknowledge (and
 * the ApiVersions and Metadata requests around it) go here.
 *
 * <p>The connections are kafka-clients' own: its {@code Selector} with the channel builder the
 * producer's configuration makes ({@code ClientUtils.createChannelBuilder}), so every
 * {@code security.protocol} (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), every {@code ssl.*} setting
 * and every SASL mechanism with its {@code sasl.*} settings (PLAIN, SCRAM, OAUTHBEARER, GSSAPI)
 * apply exactly as they do to the producer's own connections. Those classes are kafka-clients
 * internals; the few whose signatures changed between 4.2 and 4.4 are reached through
 * {@link NetworkCompat}. Not thread safe: the producer serializes its calls.
 */
final class SidecarClient implements Closeable {
    private static final Logger log = LoggerFactory.getLogger(SidecarClient.class);

    private final List<String> bootstrap;
    private final String clientId;
    private final short apiKey;
    private final AbstractConfig config;
    private final String securityProtocol;
    private final int requestTimeoutMs;
    private final Set<String> open = new HashSet<>();
    private Selector selector;
    private Metrics metrics;
    private int correlation = 1;
    private int nextBootstrap;

    SidecarClient(List<String> bootstrap, String clientId, short apiKey, AbstractConfig config, String securityProtocol,
                  int requestTimeoutMs) {
        this.bootstrap = bootstrap;
        this.clientId = clientId;
        this.apiKey = apiKey;
        this.config = config;
        this.securityProtocol = securityProtocol;
        this.requestTimeoutMs = requestTimeoutMs;
    }

    /** A bootstrap address to ask for metadata, round robin. */
    String anyBootstrap() {
        return bootstrap.get(Math.floorMod(nextBootstrap++, bootstrap.size()));
    }

    /** Sends one request to {@code address} and returns the response body (after its header). */
    ByteBuffer request(String address, short key, short version, boolean flexible, byte[] body, long deadlineMs)
        throws IOException {
        return request(address, key, version, flexible, body, deadlineMs, null);
    }

    /**
     * {@link #request}, running {@code written} once the request has left for the socket and before
     * its answer is read (a call that rides the outputs' Produce starts their flush there:
     * docs/design.md §4.4).
     */
    ByteBuffer request(String address, short key, short version, boolean flexible, byte[] body, long deadlineMs, Runnable written)
        throws IOException {
        conn(address, deadlineMs);
        try {
            return roundTrip(address, key, version, flexible, body, deadlineMs, written);
        } catch (IOException | RuntimeException e) {
            log.debug("[sharetx clientId={}] closing the connection to {} after a failed request: {}", clientId, address, e.toString());
            close(address);
            throw e;
        }
    }

    /** Opens (or reuses) the connection to {@code address}: ApiVersions says whether it serves the key. */
    void probe(String address, long deadlineMs) throws IOException {
        conn(address, deadlineMs);
    }

    private Selector selector() {
        if (selector == null) {
            Object logContext = NetworkCompat.logContext("[sharetx clientId=" + clientId + "] ");
            metrics = new Metrics();
            selector = NetworkCompat.selector(config.getLong("connections.max.idle.ms"), metrics, Time.SYSTEM, "sharetx-sidecar",
                NetworkCompat.channelBuilder(config, Time.SYSTEM, logContext), logContext);
        }
        return selector;
    }

    private void conn(String address, long deadlineMs) throws IOException {
        if (open.contains(address)) {
            return;
        }
        int colon = address.lastIndexOf(':');
        String host = address.substring(0, colon).replace("[", "").replace("]", "");
        int port = Integer.parseInt(address.substring(colon + 1));
        Selector s = selector();
        s.connect(address, new InetSocketAddress(host, port), Selector.USE_DEFAULT_BUFFER_SIZE, Selector.USE_DEFAULT_BUFFER_SIZE);
        try {
            // TLS and SASL run inside the channel (as on the producer's own connections) until it
            // is ready.
            long until = Math.min(deadlineMs, System.currentTimeMillis() + requestTimeoutMs);
            while (!s.isChannelReady(address)) {
                s.poll(pollFor(until));
                failIfDisconnected(address, "connecting to");
            }
            open.add(address);
            // ApiVersions first, as the Java clients do: it tells whether a sidecar serves the key.
            ByteBuffer b = roundTrip(address, Protocol.API_VERSIONS, (short) 0, false, new byte[0], deadlineMs, null);
            short[] err = new short[1];
            Map<Short, short[]> keys = Protocol.parseApiVersionsV0(b, err);
            if (err[0] != 0) {
                throw new KafkaException("sharetx-clients: ApiVersions from " + address + " failed with error code " + err[0]);
            }
            short[] range = keys.get(apiKey);
            if (range == null || range[0] > 0 || range[1] < 0) {
                throw new UnsupportedVersionException("sharetx-clients: " + address + " does not serve TxnShareAcknowledge (API key "
                    + apiKey + " version 0): the producer must connect through the sharetx sidecar, with the same kip1289.api_key");
            }
        } catch (IOException | RuntimeException e) {
            close(address);
            throw e;
        }
        log.info("[sharetx clientId={}] connected to the sharetx sidecar at {} ({}, TxnShareAcknowledge on API key {})",
            clientId, address, securityProtocol, apiKey);
    }

    private ByteBuffer roundTrip(String address, short key, short version, boolean flexible, byte[] body, long deadlineMs,
                                 Runnable written) throws IOException {
        int corr = correlation++;
        byte[] frame = Protocol.frame(key, version, corr, clientId, flexible, body);
        Selector s = selector();
        s.send(new NetworkSend(address, ByteBufferSend.sizePrefixed(ByteBuffer.wrap(frame))));
        long until = Math.min(deadlineMs, System.currentTimeMillis() + requestTimeoutMs);
        boolean sent = written == null;
        while (true) {
            s.poll(pollFor(until));
            if (!sent) {
                for (NetworkSend ns : s.completedSends()) {
                    sent |= ns.destinationId().equals(address);
                }
                if (sent) {
                    written.run(); // the receives this poll completed are read below, after it
                }
            }
            for (NetworkReceive r : s.completedReceives()) {
                if (!r.source().equals(address)) {
                    continue; // one request at a time: nothing else is outstanding
                }
                ByteBuffer b = r.payload();
                int got = b.getInt();
                if (got != corr) {
                    throw new IOException("correlation id " + got + " from " + address + ", want " + corr);
                }
                // Response header v1 (flexible) has a tag section; ApiVersions' response header is always v0.
                if (flexible && key != Protocol.API_VERSIONS) {
                    new Wire.Reader(b).skipTags();
                }
                return b;
            }
            failIfDisconnected(address, "request to");
        }
    }

    /** How long the next poll may wait: until {@code until}, which must not have passed. */
    private static long pollFor(long until) throws SocketTimeoutException {
        long left = until - System.currentTimeMillis();
        if (left <= 0) {
            throw new SocketTimeoutException("deadline passed (request.timeout.ms or max.block.ms)");
        }
        return Math.min(left, 100);
    }

    /** Throws what ended the connection to {@code address}, if it ended. */
    private void failIfDisconnected(String address, String what) throws IOException {
        ChannelState st = selector.disconnected().get(address);
        if (st == null) {
            return;
        }
        open.remove(address);
        if (st.exception() != null) {
            throw st.exception(); // TLS handshake or SASL authentication failed: an AuthenticationException
        }
        throw new IOException(what + " " + address + " failed (" + st.state() + ")");
    }

    void close(String address) {
        open.remove(address);
        if (selector != null) {
            selector.close(address);
        }
    }

    @Override
    public void close() {
        open.clear();
        if (selector != null) {
            selector.close();
            selector = null;
        }
        if (metrics != null) {
            metrics.close();
            metrics = null;
        }
    }
}
