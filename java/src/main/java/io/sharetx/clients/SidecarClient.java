package io.sharetx.clients;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * The library's own connections to the sidecar's listeners: blocking sockets, one request at a
 * time each, authenticated as the producer's configuration says. The stock producer's network
 * client cannot send an API key it does not know, so TxnShareAcknowledge (and the ApiVersions and
 * Metadata requests around it) go here.
 *
 * <p>Supported {@code security.protocol}: PLAINTEXT and SASL_PLAINTEXT with {@code sasl.mechanism}
 * PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (credentials from {@code sasl.jaas.config}'s
 * {@code username} and {@code password}). SSL, SASL_SSL, GSSAPI and OAUTHBEARER are refused with a
 * {@link KafkaException} when the library first connects. Not thread safe: the producer serializes
 * its calls.
 */
final class SidecarClient implements Closeable {
    private static final Logger log = LoggerFactory.getLogger(SidecarClient.class);

    private final List<String> bootstrap;
    private final String clientId;
    private final short apiKey;
    private final String securityProtocol;
    private final String saslMechanism;
    private final String username;
    private final String password;
    private final int requestTimeoutMs;
    private final Map<String, Conn> conns = new HashMap<>();
    private int correlation = 1;
    private int nextBootstrap;

    SidecarClient(List<String> bootstrap, String clientId, short apiKey, String securityProtocol,
                  String saslMechanism, String jaasConfig, int requestTimeoutMs) {
        this.bootstrap = bootstrap;
        this.clientId = clientId;
        this.apiKey = apiKey;
        this.securityProtocol = securityProtocol == null ? "PLAINTEXT" : securityProtocol.trim().toUpperCase();
        this.saslMechanism = saslMechanism == null ? "GSSAPI" : saslMechanism.trim().toUpperCase();
        this.username = jaasOption(jaasConfig, "username");
        this.password = jaasOption(jaasConfig, "password");
        this.requestTimeoutMs = requestTimeoutMs;
    }

    static String jaasOption(String jaas, String name) {
        if (jaas == null) {
            return null;
        }
        Matcher m = Pattern.compile("\\b" + name + "\\s*=\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(jaas);
        return m.find() ? m.group(1).replaceAll("\\\\(.)", "$1") : null;
    }

    /** A bootstrap address to ask for metadata, round robin. */
    String anyBootstrap() {
        return bootstrap.get(Math.floorMod(nextBootstrap++, bootstrap.size()));
    }

    /** Sends one request to {@code address} and returns the response body (after its header). */
    ByteBuffer request(String address, short key, short version, boolean flexible, byte[] body, long deadlineMs)
        throws IOException {
        Conn c = conn(address, deadlineMs);
        try {
            return c.roundTrip(key, version, flexible, body, deadlineMs);
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

    private Conn conn(String address, long deadlineMs) throws IOException {
        Conn c = conns.get(address);
        if (c != null) {
            return c;
        }
        c = new Conn(address);
        try {
            c.open(deadlineMs);
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
        conns.put(address, c);
        log.info("[sharetx clientId={}] connected to the sharetx sidecar at {} ({}, TxnShareAcknowledge on API key {})",
            clientId, address, securityProtocol, apiKey);
        return c;
    }

    void close(String address) {
        Conn c = conns.remove(address);
        if (c != null) {
            c.close();
        }
    }

    @Override
    public void close() {
        for (Conn c : conns.values()) {
            c.close();
        }
        conns.clear();
    }

    private static int remaining(long deadlineMs) throws SocketTimeoutException {
        long left = deadlineMs - System.currentTimeMillis();
        if (left <= 0) {
            throw new SocketTimeoutException("deadline passed");
        }
        return (int) Math.min(Integer.MAX_VALUE, left);
    }

    private final class Conn {
        final String address;
        Socket socket;
        DataInputStream in;
        DataOutputStream out;

        Conn(String address) {
            this.address = address;
        }

        void open(long deadlineMs) throws IOException {
            switch (securityProtocol) {
                case "PLAINTEXT":
                case "SASL_PLAINTEXT":
                    break;
                default:
                    throw new KafkaException("sharetx-clients: security.protocol " + securityProtocol
                        + " is not supported on the library's connection to the sidecar (PLAINTEXT and SASL_PLAINTEXT are)");
            }
            int colon = address.lastIndexOf(':');
            String host = address.substring(0, colon).replace("[", "").replace("]", "");
            int port = Integer.parseInt(address.substring(colon + 1));
            socket = new Socket();
            socket.setTcpNoDelay(true);
            socket.connect(new InetSocketAddress(host, port), Math.min(remaining(deadlineMs), requestTimeoutMs));
            in = new DataInputStream(socket.getInputStream());
            out = new DataOutputStream(socket.getOutputStream());

            // ApiVersions first, as the Java clients do: it tells whether a sidecar serves the key.
            ByteBuffer b = roundTrip(Protocol.API_VERSIONS, (short) 0, false, new byte[0], deadlineMs);
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
            if (securityProtocol.equals("SASL_PLAINTEXT")) {
                authenticate(deadlineMs);
            }
        }

        void authenticate(long deadlineMs) throws IOException {
            if (username == null || password == null) {
                throw new KafkaException("sharetx-clients: SASL " + saslMechanism + " needs username and password in sasl.jaas.config");
            }
            ByteBuffer hs = roundTrip(Protocol.SASL_HANDSHAKE, (short) 1, false, Protocol.saslHandshakeV1(saslMechanism), deadlineMs);
            List<String> mechs = new ArrayList<>();
            short code = Protocol.parseSaslHandshake(hs, mechs);
            if (code != 0) {
                throw new SaslAuthenticationException("sharetx-clients: SASL mechanism " + saslMechanism
                    + " refused by " + address + " (error code " + code + "; enabled: " + mechs + ")");
            }
            switch (saslMechanism) {
                case "PLAIN":
                    saslStep(("\0" + username + "\0" + password).getBytes(StandardCharsets.UTF_8), deadlineMs);
                    break;
                case "SCRAM-SHA-256":
                    scram("SHA-256", "HmacSHA256", 256, deadlineMs);
                    break;
                case "SCRAM-SHA-512":
                    scram("SHA-512", "HmacSHA512", 512, deadlineMs);
                    break;
                default:
                    throw new KafkaException("sharetx-clients: sasl.mechanism " + saslMechanism
                        + " is not supported on the library's connection to the sidecar (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 are)");
            }
        }

        byte[] saslStep(byte[] token, long deadlineMs) throws IOException {
            ByteBuffer b = roundTrip(Protocol.SASL_AUTHENTICATE, (short) 1, false, Protocol.saslAuthenticateV1(token), deadlineMs);
            Object[] r = Protocol.parseSaslAuthenticate(b);
            if ((Short) r[0] != 0) {
                throw new SaslAuthenticationException("sharetx-clients: SASL authentication to " + address + " failed: " + r[1]);
            }
            return (byte[]) r[2];
        }

        /** RFC 5802 client, as Kafka's SCRAM (no extensions). */
        void scram(String digest, String hmac, int keyBits, long deadlineMs) throws IOException {
            try {
                byte[] rnd = new byte[24];
                new SecureRandom().nextBytes(rnd);
                String nonce = Base64.getEncoder().withoutPadding().encodeToString(rnd).replace('/', '_').replace('+', '-');
                String user = username.replace("=", "=3D").replace(",", "=2C");
                String clientFirstBare = "n=" + user + ",r=" + nonce;
                String serverFirst = new String(saslStep(("n,," + clientFirstBare).getBytes(StandardCharsets.UTF_8), deadlineMs),
                    StandardCharsets.UTF_8);
                Map<String, String> sf = scramAttrs(serverFirst);
                String rNonce = sf.get("r");
                if (rNonce == null || !rNonce.startsWith(nonce) || sf.get("s") == null || sf.get("i") == null) {
                    throw new SaslAuthenticationException("sharetx-clients: bad SCRAM server-first message");
                }
                byte[] salt = Base64.getDecoder().decode(sf.get("s"));
                int iterations = Integer.parseInt(sf.get("i"));
                SecretKeyFactory f = SecretKeyFactory.getInstance("PBKDF2With" + hmac);
                byte[] salted = f.generateSecret(new PBEKeySpec(password.toCharArray(), salt, iterations, keyBits)).getEncoded();
                byte[] clientKey = mac(hmac, salted, "Client Key");
                byte[] storedKey = MessageDigest.getInstance(digest).digest(clientKey);
                String withoutProof = "c=biws,r=" + rNonce;
                String authMessage = clientFirstBare + "," + serverFirst + "," + withoutProof;
                byte[] sig = mac(hmac, storedKey, authMessage);
                byte[] proof = new byte[clientKey.length];
                for (int i = 0; i < proof.length; i++) {
                    proof[i] = (byte) (clientKey[i] ^ sig[i]);
                }
                String clientFinal = withoutProof + ",p=" + Base64.getEncoder().encodeToString(proof);
                String serverFinal = new String(saslStep(clientFinal.getBytes(StandardCharsets.UTF_8), deadlineMs), StandardCharsets.UTF_8);
                Map<String, String> fin = scramAttrs(serverFinal);
                byte[] serverKey = mac(hmac, salted, "Server Key");
                byte[] want = mac(hmac, serverKey, authMessage);
                if (fin.get("v") == null || !MessageDigest.isEqual(want, Base64.getDecoder().decode(fin.get("v")))) {
                    throw new SaslAuthenticationException("sharetx-clients: the SCRAM server signature does not verify" +
                        (fin.get("e") != null ? " (" + fin.get("e") + ")" : ""));
                }
            } catch (GeneralSecurityException e) {
                throw new KafkaException("sharetx-clients: SCRAM: " + e, e);
            }
        }

        ByteBuffer roundTrip(short key, short version, boolean flexible, byte[] body, long deadlineMs) throws IOException {
            int corr = correlation++;
            byte[] frame = Protocol.frame(key, version, corr, clientId, flexible, body);
            socket.setSoTimeout(Math.min(remaining(deadlineMs), requestTimeoutMs));
            out.writeInt(frame.length);
            out.write(frame);
            out.flush();
            int size = in.readInt();
            if (size < 4 || size > 64 << 20) {
                throw new IOException("bad response size " + size + " from " + address);
            }
            byte[] resp = new byte[size];
            in.readFully(resp);
            ByteBuffer b = ByteBuffer.wrap(resp);
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

        void close() {
            try {
                if (socket != null) {
                    socket.close();
                }
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    private static byte[] mac(String alg, byte[] key, String msg) throws GeneralSecurityException {
        Mac m = Mac.getInstance(alg);
        m.init(new SecretKeySpec(key, alg));
        return m.doFinal(msg.getBytes(StandardCharsets.UTF_8));
    }

    private static Map<String, String> scramAttrs(String s) {
        Map<String, String> m = new HashMap<>();
        for (String kv : s.split(",")) {
            int eq = kv.indexOf('=');
            if (eq > 0) {
                m.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        return m;
    }

    static boolean isEof(IOException e) {
        return e instanceof EOFException;
    }
}
