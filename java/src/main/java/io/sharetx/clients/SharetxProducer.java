package io.sharetx.clients;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.Serializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A {@link KafkaProducer} that binds share-group acknowledgements to its transactions through the
 * sharetx sidecar: KIP-1289's {@link #sendShareAcknowledgementsToTransaction}, on the stock
 * kafka-clients. Build it with the constructors of {@code KafkaProducer}, with
 * {@code bootstrap.servers} naming the sidecar and a {@code transactional.id}; run transactions as
 * with any transactional producer.
 *
 * <pre>{@code
 * producer.initTransactions();
 * ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(consumer);
 * while (running) {
 *     ConsumerRecords<String, String> records = consumer.poll(Duration.ofSeconds(1));
 *     if (records.isEmpty()) continue;
 *     producer.beginTransaction();
 *     try {
 *         for (ConsumerRecord<String, String> r : records)
 *             producer.send(new ProducerRecord<>("out", r.key(), transform(r.value())));
 *         producer.sendShareAcknowledgementsToTransaction(
 *             ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), md);
 *         producer.commitTransaction();
 *         ShareTransactions.acknowledgeHandedOver(consumer, records);   // absorbed by the sidecar
 *     } catch (ProducerFencedException | UnsupportedVersionException e) {
 *         throw e;                                                         // fatal: close the producer
 *     } catch (KafkaException e) {
 *         producer.abortTransaction();
 *         ShareTransactions.releaseForRedelivery(consumer, records);       // see ShareTransactions
 *     }
 * }
 * }</pre>
 *
 * <p>Errors are raised as the reference client raises them: {@code ProducerFencedException}
 * (a newer producer took over), {@code CommitFailedException} (the member is unknown or its epoch
 * is stale), {@code InvalidRecordStateException} (an offset is not acquired by the member, its
 * lock expired, or it is staged already), {@code UnsupportedVersionException} (no sidecar answers
 * the API key), {@code TimeoutException} ({@code max.block.ms} passed). After an abortable error
 * (the member errors, INVALID_RECORD_STATE, TRANSACTION_ABORTABLE, INVALID_REQUEST,
 * GROUP_AUTHORIZATION_FAILED) {@link #commitTransaction} refuses until the transaction is aborted;
 * after a fatal one (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
 * UNSUPPORTED_VERSION, any other code) every transactional call but {@link #abortTransaction} and
 * {@link #close} throws it again.
 *
 * <p>Settings besides KafkaProducer's (removed from the configuration before the producer sees
 * it): {@value #API_KEY_CONFIG} (TxnShareAcknowledge's API key, default 95: the sidecar's
 * {@code kip1289.api_key}) and {@value #SHADOW_TOPIC_CONFIG} (default {@code __sharetx_shadow}:
 * its {@code kip1289.shadow_topic}).
 */
public class SharetxProducer<K, V> extends KafkaProducer<K, V> {
    private static final Logger log = LoggerFactory.getLogger(SharetxProducer.class);

    /** TxnShareAcknowledge's API key; must match the sidecar's {@code kip1289.api_key}. */
    public static final String API_KEY_CONFIG = "sharetx.api.key";
    /** The sidecar's shadow topic ({@code kip1289.shadow_topic}), where the touch record goes. */
    public static final String SHADOW_TOPIC_CONFIG = "sharetx.shadow.topic";
    public static final String DEFAULT_SHADOW_TOPIC = "__sharetx_shadow";

    private static final long SHADOW_PARTITIONS_TTL_MS = 60_000;

    private final Settings settings;
    private final ReentrantLock lock = new ReentrantLock();
    private SidecarClient sidecar;
    private final Map<String, Protocol.TopicMeta> topics = new HashMap<>();
    private Map<Integer, String> brokers = new HashMap<>();
    private int shadowPartitions;
    private long shadowPartitionsAt;

    // The transaction as this class sees it (guarded by lock for writes; read by the overrides).
    private volatile boolean inTransaction;
    // The transaction's first call made its checks: the touch record, or the producer's own id and
    // epoch read when outputs of the transaction were sent first (see ids).
    private volatile boolean touched;
    // Records were handed to send() in this transaction (outputs, or the touch record).
    private volatile boolean sent;
    // The producer id and epoch the calls of this transaction name; null: -1/-1 (the sidecar takes
    // the ones it knows), after a touch record.
    private volatile long[] ids;
    // The offset of this transaction's touch record, when it made one: a call with producer id -1
    // names it (TouchOffset), so the sidecar checks the call against the ids the touch was written
    // with and fences a zombie whose touch came before a newer instance initialised.
    private volatile Long touchOffset;
    private volatile KafkaException abortableError;
    private volatile KafkaException fatalError;
    private volatile boolean unresolvedCall;

    public SharetxProducer(Map<String, Object> configs) {
        this(Settings.of(configs, null, null));
    }

    public SharetxProducer(Map<String, Object> configs, Serializer<K> keySerializer, Serializer<V> valueSerializer) {
        this(Settings.of(configs, keySerializer, valueSerializer));
    }

    public SharetxProducer(Properties properties) {
        this(Settings.of(toMap(properties), null, null));
    }

    public SharetxProducer(Properties properties, Serializer<K> keySerializer, Serializer<V> valueSerializer) {
        this(Settings.of(toMap(properties), keySerializer, valueSerializer));
    }

    @SuppressWarnings("unchecked")
    private SharetxProducer(Settings s) {
        super(s.producerConfig, (Serializer<K>) s.keySerializer, (Serializer<V>) s.valueSerializer);
        this.settings = s;
    }

    /**
     * Binds {@code acknowledgements} to the producer's open transaction: the sidecar stages them
     * (TX_PENDING) and applies them to the share group if and only if the transaction commits.
     * Blocks until the sidecar answered, at most {@code max.block.ms}.
     *
     * <p>{@code groupMetadata} names the share group of the consumer that polled the records; its
     * member id may be "" (epoch -1) to let the sidecar resolve the member that acquired them
     * ({@link ShareTransactions#shareGroupMetadata}). The first call of a transaction produces the
     * transaction's touch record first (see the package documentation), so a producer that is
     * fenced fails here before anything is staged. Each call is all or nothing per request; on any
     * exception abort the transaction. Empty acknowledgements do nothing.
     *
     * @throws IllegalStateException if the producer is not transactional or not in a transaction
     * @throws IllegalArgumentException if an acknowledge type is neither ACCEPT, REJECT nor a gap
     */
    public void sendShareAcknowledgementsToTransaction(ShareAcknowledgements acknowledgements,
                                                       ShareGroupMetadata groupMetadata) {
        Objects.requireNonNull(acknowledgements, "acknowledgements cannot be null");
        Objects.requireNonNull(groupMetadata, "groupMetadata cannot be null");
        lock.lock();
        try {
            throwIfFatal();
            if (settings.transactionalId == null) {
                throw new IllegalStateException("sendShareAcknowledgementsToTransaction needs a transactional producer (transactional.id)");
            }
            if (!inTransaction) {
                throw new IllegalStateException("sendShareAcknowledgementsToTransaction needs an open transaction: call beginTransaction first");
            }
            if (acknowledgements.isEmpty()) {
                return;
            }
            for (List<ShareAcknowledgementBatch> bs : acknowledgements.acknowledgements().values()) {
                for (ShareAcknowledgementBatch b : bs) {
                    for (byte t : b.acknowledgeTypes()) {
                        if (t != 0 && t != 1 && t != 3) {
                            throw new IllegalArgumentException("acknowledge type " + t
                                + " cannot be bound to a transaction (only ACCEPT 1, REJECT 3 and gaps 0)");
                        }
                    }
                }
            }
            if (abortableError != null) {
                // As the reference client in its abortable state: nothing more in this transaction.
                throw new KafkaException("Cannot send share acknowledgements: an earlier call of this transaction failed ("
                    + abortableError.getMessage() + "); abort the transaction", abortableError);
            }
            long deadline = System.currentTimeMillis() + settings.maxBlockMs;
            try {
                if (!touched) {
                    // Is a sidecar there? (ApiVersions on the library's connection, once per
                    // connection.) Before the touch, so that a producer connected straight to the
                    // cluster writes nothing.
                    probeSidecar(deadline);
                    // With outputs sent, the transaction ends with EndTxn without a touch record,
                    // and the producer's own id and epoch fence a zombie: the sidecar refuses an
                    // older epoch (PRODUCER_FENCED), and a shadow write with an epoch the
                    // coordinator bumped since fails at the broker, before anything is staged. The
                    // touch record stays for transactions without outputs (EndTxn) and for a
                    // kafka-clients whose ids cannot be read (design.md §9.3).
                    ids = sent ? NetworkCompat.producerIdAndEpoch(this) : null;
                    if (ids == null) {
                        touchOffset = touch(deadline);
                    }
                    touched = true;
                }
                stage(acknowledgements, groupMetadata, deadline);
                unresolvedCall = false;
            } catch (TimeoutException e) {
                unresolvedCall = true;
                throw e;
            } catch (UnsupportedVersionException | AuthenticationException e) {
                // No sidecar serves the key, or the library cannot authenticate: nothing will.
                fatalError = e;
                throw e;
            }
        } finally {
            lock.unlock();
        }
    }

    // ---------------------------------------------------------------- the transaction's life

    @Override
    public void beginTransaction() {
        throwIfFatal();
        super.beginTransaction();
        inTransaction = true;
        touched = false;
        touchOffset = null;
        sent = false;
        ids = null;
        abortableError = null;
        unresolvedCall = false;
    }

    @Override
    public Future<RecordMetadata> send(ProducerRecord<K, V> record, Callback callback) {
        Future<RecordMetadata> f = super.send(record, callback);
        if (inTransaction) {
            sent = true;
        }
        return f;
    }

    @Override
    public void commitTransaction() {
        throwIfFatal();
        KafkaException ab = abortableError;
        if (ab != null) {
            throw new KafkaException("Cannot commit: sending share acknowledgements to this transaction failed ("
                + ab.getMessage() + "); abort the transaction", ab);
        }
        if (unresolvedCall) {
            throw new KafkaException("Cannot commit: a sendShareAcknowledgementsToTransaction of this transaction timed out"
                + " and was not retried successfully; retry it or abort the transaction");
        }
        super.commitTransaction();
        inTransaction = false;
    }

    @Override
    public void abortTransaction() {
        super.abortTransaction();
        inTransaction = false;
        abortableError = null;
        unresolvedCall = false;
    }

    @Override
    public void close() {
        close(Duration.ofMillis(Long.MAX_VALUE));
    }

    @Override
    public void close(Duration timeout) {
        lock.lock();
        try {
            if (sidecar != null) {
                sidecar.close();
            }
        } finally {
            lock.unlock();
        }
        super.close(timeout);
    }

    /** The transactional id, or null for a producer that is not transactional. */
    public String transactionalId() {
        return settings.transactionalId;
    }

    private void throwIfFatal() {
        KafkaException f = fatalError;
        if (f != null) {
            throw f;
        }
    }

    // ---------------------------------------------------------------- the touch record

    @SuppressWarnings("unchecked")
    private Long touch(long deadline) {
        int n = shadowPartitionCount();
        if (n < 2) {
            throw new KafkaException("sharetx-clients: shadow topic " + settings.shadowTopic + " has " + n
                + " partition(s); it needs at least 2 so the touch record never shares a partition with the sidecar's shadow records");
        }
        int part = Touch.touchPartition(settings.transactionalId, n);
        ProducerRecord<K, V> r = new ProducerRecord<>(settings.shadowTopic, part, null, (K) Touch.MARKER, (V) Touch.MARKER,
            Touch.HEADERS);
        try {
            RecordMetadata md = super.send(r).get(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            return md.hasOffset() ? md.offset() : null;
        } catch (java.util.concurrent.TimeoutException e) {
            throw new TimeoutException("sharetx-clients: the transaction's touch record to " + settings.shadowTopic + "[" + part
                + "] was not acknowledged within max.block.ms");
        } catch (InterruptedException e) {
            throw new InterruptException(e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof KafkaException) {
                if (isFatalProducerError(c)) {
                    fatalError = (KafkaException) c;
                }
                throw (KafkaException) c;
            }
            throw new KafkaException("sharetx-clients: producing the transaction's touch record failed", c);
        }
    }

    private static boolean isFatalProducerError(Throwable c) {
        return c instanceof org.apache.kafka.common.errors.ProducerFencedException
            || c instanceof org.apache.kafka.common.errors.InvalidProducerEpochException
            || c instanceof org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
    }

    private int shadowPartitionCount() {
        long now = System.currentTimeMillis();
        if (shadowPartitions > 0 && now - shadowPartitionsAt < SHADOW_PARTITIONS_TTL_MS) {
            return shadowPartitions;
        }
        List<PartitionInfo> ps = partitionsFor(settings.shadowTopic);
        shadowPartitions = ps.size();
        shadowPartitionsAt = now;
        return shadowPartitions;
    }

    // ---------------------------------------------------------------- staging

    private SidecarClient sidecar() {
        if (sidecar == null) {
            sidecar = new SidecarClient(settings.bootstrap, settings.clientId, settings.apiKey, settings.networkConfig,
                settings.securityProtocol, settings.requestTimeoutMs);
        }
        return sidecar;
    }

    private void probeSidecar(long deadline) {
        KafkaException last = null;
        while (System.currentTimeMillis() < deadline) {
            String addr = sidecar().anyBootstrap();
            try {
                sidecar().probe(addr, deadline);
                return;
            } catch (IOException e) {
                last = new KafkaException("sharetx-clients: connecting to " + addr + ": " + e, e);
                log.debug("[sharetx transactionalId={}] sidecar {} not reached, retrying: {}", settings.transactionalId, addr, e.toString());
                sleep(Math.min(settings.retryBackoffMs, Math.max(1, deadline - System.currentTimeMillis())));
            }
        }
        TimeoutException te = new TimeoutException("sharetx-clients: no sidecar reached within max.block.ms"
            + (last != null ? ": " + last.getMessage() : ""));
        if (last != null) {
            te.initCause(last);
        }
        throw te;
    }

    private void stage(ShareAcknowledgements acks, ShareGroupMetadata md, long deadline) {
        Map<TopicIdPartition, List<ShareAcknowledgementBatch>> left = new LinkedHashMap<>(acks.acknowledgements());
        boolean refresh = false;
        KafkaException last = null;
        int attempt = 0;
        int retouches = 0;
        while (true) {
            if (attempt++ > 0) {
                long wait = Math.min(settings.retryBackoffMs, deadline - System.currentTimeMillis());
                if (wait <= 0) {
                    TimeoutException te = new TimeoutException("sharetx-clients: TxnShareAcknowledge did not succeed within max.block.ms ("
                        + settings.maxBlockMs + " ms)" + (last != null ? ": " + last.getMessage() : ""));
                    if (last != null) {
                        te.initCause(last);
                    }
                    log.warn("[sharetx transactionalId={}] TxnShareAcknowledge gave up after {} attempts within max.block.ms ({} ms): {}",
                        settings.transactionalId, attempt - 1, settings.maxBlockMs, last != null ? last.getMessage() : "no answer");
                    throw te;
                }
                log.debug("[sharetx transactionalId={}] TxnShareAcknowledge attempt {} failed, retrying in {} ms: {}",
                    settings.transactionalId, attempt - 1, wait, last != null ? last.getMessage() : "");
                sleep(wait);
            }
            Map<String, List<Protocol.AckPartition>> byLeader;
            try {
                byLeader = route(left, refresh, deadline);
            } catch (IOException e) {
                last = new KafkaException("sharetx-clients: metadata from the sidecar: " + e, e);
                refresh = true;
                continue;
            } catch (RetriableException e) {
                last = e;
                refresh = true;
                continue;
            }
            refresh = false;
            long[] pe = ids;
            for (Map.Entry<String, List<Protocol.AckPartition>> e : byLeader.entrySet()) {
                // Outputs of the transaction not yet acknowledged: the sidecar may append the shadow
                // record to their Produce, or writes it after the one in flight (design.md §4.4).
                // Once the call is written the outputs are flushed, so that their Produce leaves at
                // once instead of after linger.ms, and the call's answer (their Produce's) with it.
                boolean ride = pe != null && NetworkCompat.hasIncomplete(this);
                byte[] body = Protocol.txnShareAcknowledge(settings.transactionalId, md.groupId(),
                    pe != null ? pe[0] : -1L, pe != null ? (short) pe[1] : (short) -1,
                    md.memberId(), md.memberEpoch(), e.getValue(), ride, pe != null ? null : touchOffset);
                Protocol.AckResponse resp;
                try {
                    ByteBuffer b = sidecar().request(e.getKey(), settings.apiKey, (short) 0, true, body, deadline, ride ? this::flush : null);
                    resp = Protocol.parseTxnShareAcknowledge(b);
                } catch (IOException ex) {
                    // A lost answer is safe to retry: the sidecar answers a repeated call of the
                    // same transaction with the same success, staging nothing twice.
                    last = new KafkaException("sharetx-clients: TxnShareAcknowledge to " + e.getKey() + ": " + ex, ex);
                    refresh = true;
                    continue;
                } catch (Wire.Malformed ex) {
                    throw fatal(new KafkaException("sharetx-clients: malformed TxnShareAcknowledge response from " + e.getKey()
                        + ": " + ex.getMessage()));
                }
                short code = resp.effectiveCode();
                if (code == 0) {
                    for (Protocol.AckPartition p : e.getValue()) {
                        left.keySet().removeIf(tip -> idOf(tip).equals(p.topicId) && tip.partition() == p.partition);
                    }
                    continue;
                }
                String msg = resp.message();
                KafkaException ex = exceptionFor(code, msg);
                if (ex instanceof RetriableException) {
                    last = ex;
                    if (code == Errors.COORDINATOR_LOAD_IN_PROGRESS.code() && retouches < MAX_RETOUCHES) {
                        // This sidecar has not seen the transaction's producer (it restarted after
                        // the touch, or the touch went through another one), and the stock producer
                        // sends it nothing while this call waits: the touch record again, through
                        // it, tells it the producer id and epoch.
                        retouches++;
                        touchOffset = touch(deadline);
                    }
                    if (code == Errors.UNKNOWN_TOPIC_ID.code() || code == Errors.NOT_LEADER_OR_FOLLOWER.code()) {
                        for (Protocol.AckPartition p : e.getValue()) {
                            forgetTopicId(p.topicId);
                        }
                        refresh = true;
                    }
                    continue;
                }
                if (isAbortable(code)) {
                    abortableError = ex;
                    throw ex;
                }
                throw fatal(ex);
            }
            if (left.isEmpty()) {
                return;
            }
        }
    }

    /** Touch records a TxnShareAcknowledge call sends again at most, for sidecars that do not know the producer yet. */
    private static final int MAX_RETOUCHES = 3;

    private KafkaException fatal(KafkaException e) {
        fatalError = e;
        return e;
    }

    private Uuid idOf(TopicIdPartition tip) {
        if (!Uuid.ZERO_UUID.equals(tip.topicId())) {
            return tip.topicId();
        }
        Protocol.TopicMeta tm = topics.get(tip.topic());
        return tm == null ? Uuid.ZERO_UUID : tm.topicId;
    }

    private void forgetTopicId(Uuid id) {
        topics.values().removeIf(tm -> tm.topicId.equals(id));
    }

    /** Groups the partitions by their leader's address (the sidecar's listener for it), looking topic ids and leaders up as needed. */
    private Map<String, List<Protocol.AckPartition>> route(Map<TopicIdPartition, List<ShareAcknowledgementBatch>> acks,
                                                          boolean refresh, long deadline) throws IOException {
        Set<String> need = new TreeSet<>();
        for (TopicIdPartition tip : acks.keySet()) {
            if (tip.topic() != null && (refresh || !topics.containsKey(tip.topic()))) {
                need.add(tip.topic());
            }
            if (tip.topic() == null && Uuid.ZERO_UUID.equals(tip.topicId())) {
                throw new IllegalArgumentException("a TopicIdPartition needs a topic id or a topic name: " + tip);
            }
        }
        if (!need.isEmpty()) {
            String addr = sidecar().anyBootstrap();
            ByteBuffer b = sidecar().request(addr, Protocol.METADATA, (short) 12, true,
                Protocol.metadataV12(new ArrayList<>(need)), deadline);
            Protocol.Metadata md = Protocol.parseMetadataV12(b);
            if (!md.brokers.isEmpty()) {
                brokers = md.brokers;
            }
            List<String> problems = new ArrayList<>();
            for (String t : need) {
                Protocol.TopicMeta tm = md.topics.get(t);
                if (tm == null || tm.errorCode != 0 || Uuid.ZERO_UUID.equals(tm.topicId)) {
                    topics.remove(t);
                    problems.add(t + ": " + (tm == null ? "not in the metadata response"
                        : tm.errorCode != 0 ? Errors.forCode(tm.errorCode).name() : "no topic id"));
                } else {
                    topics.put(t, tm);
                }
            }
            if (!problems.isEmpty()) {
                throw new org.apache.kafka.common.errors.UnknownTopicOrPartitionException(
                    "sharetx-clients: looking up topic ids: " + String.join("; ", problems));
            }
        }
        Map<String, List<Protocol.AckPartition>> out = new LinkedHashMap<>();
        for (Map.Entry<TopicIdPartition, List<ShareAcknowledgementBatch>> e : acks.entrySet()) {
            TopicIdPartition tip = e.getKey();
            Protocol.TopicMeta tm = tip.topic() == null ? null : topics.get(tip.topic());
            Uuid id = Uuid.ZERO_UUID.equals(tip.topicId()) ? tm.topicId : tip.topicId();
            String addr = null;
            if (tm != null) {
                Integer leader = tm.leaders.get(tip.partition());
                if (leader != null) {
                    addr = brokers.get(leader);
                }
            }
            if (addr == null) {
                addr = sidecar().anyBootstrap(); // every sidecar listener serves the key
            }
            out.computeIfAbsent(addr, k -> new ArrayList<>()).add(new Protocol.AckPartition(id, tip.partition(), e.getValue()));
        }
        return out;
    }

    /** The exception the reference client raises for {@code code}. */
    static KafkaException exceptionFor(short code, String message) {
        String msg = message != null ? message : Errors.forCode(code).message();
        if (code == Errors.UNKNOWN_MEMBER_ID.code() || code == Errors.GROUP_ID_NOT_FOUND.code()
            || code == Errors.STALE_MEMBER_EPOCH.code()) {
            // As the reference client: the member's acknowledgements cannot be committed.
            return new CommitFailedException(Errors.forCode(code).name() + ": " + msg);
        }
        ApiException e = Errors.forCode(code).exception(msg);
        return e != null ? e : new KafkaException("error code " + code + ": " + msg);
    }

    /** The codes after which the reference client makes the transaction abortable (not fatal). */
    static boolean isAbortable(short code) {
        return code == Errors.GROUP_AUTHORIZATION_FAILED.code() || code == Errors.TRANSACTION_ABORTABLE.code()
            || code == Errors.INVALID_RECORD_STATE.code() || code == Errors.INVALID_REQUEST.code()
            || code == Errors.UNKNOWN_MEMBER_ID.code() || code == Errors.GROUP_ID_NOT_FOUND.code()
            || code == Errors.STALE_MEMBER_EPOCH.code();
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new InterruptException(e);
        }
    }

    private static Map<String, Object> toMap(Properties p) {
        Map<String, Object> m = new HashMap<>();
        for (String k : p.stringPropertyNames()) {
            m.put(k, p.getProperty(k));
        }
        for (Map.Entry<Object, Object> e : p.entrySet()) {
            m.put(String.valueOf(e.getKey()), e.getValue());
        }
        return m;
    }

    /** What the constructors derive from the configuration before KafkaProducer sees it. */
    private static final class Settings {
        Map<String, Object> producerConfig;
        // the producer's configuration as ProducerConfig parsed it: the library's own connections
        // take their security settings (security.protocol, ssl.*, sasl.*) from it
        ProducerConfig networkConfig;
        Serializer<?> keySerializer;
        Serializer<?> valueSerializer;
        String transactionalId;
        String shadowTopic;
        short apiKey;
        List<String> bootstrap;
        String clientId;
        String securityProtocol;
        int requestTimeoutMs;
        long maxBlockMs;
        long retryBackoffMs;

        static Settings of(Map<String, Object> configs, Serializer<?> key, Serializer<?> value) {
            Objects.requireNonNull(configs, "configs cannot be null");
            Settings s = new Settings();
            Map<String, Object> m = new HashMap<>(configs);
            Object apiKey = m.remove(API_KEY_CONFIG);
            Object shadow = m.remove(SHADOW_TOPIC_CONFIG);
            s.apiKey = apiKey == null ? Protocol.DEFAULT_TXN_SHARE_ACKNOWLEDGE_KEY : Short.parseShort(String.valueOf(apiKey).trim());
            s.shadowTopic = shadow == null || String.valueOf(shadow).isBlank() ? DEFAULT_SHADOW_TOPIC : String.valueOf(shadow).trim();
            // ProducerConfig gives the defaults and validates like the producer will.
            Map<String, Object> forConfig = new HashMap<>(m);
            if (key != null) {
                forConfig.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, key.getClass());
            }
            if (value != null) {
                forConfig.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, value.getClass());
            }
            ProducerConfig pc = new ProducerConfig(forConfig);
            s.networkConfig = pc;
            s.transactionalId = pc.getString(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
            s.bootstrap = pc.getList(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG);
            s.clientId = pc.getString(CommonClientConfigs.CLIENT_ID_CONFIG);
            if (s.clientId == null || s.clientId.isEmpty()) {
                s.clientId = "sharetx-clients" + (s.transactionalId != null ? "-" + s.transactionalId : "");
            }
            s.securityProtocol = pc.getString(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG);
            s.requestTimeoutMs = pc.getInt(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG);
            s.maxBlockMs = pc.getLong(ProducerConfig.MAX_BLOCK_MS_CONFIG);
            s.retryBackoffMs = pc.getLong(CommonClientConfigs.RETRY_BACKOFF_MS_CONFIG);
            if (key == null) {
                key = pc.getConfiguredInstance(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, Serializer.class);
                key.configure(pc.originals(), true);
            }
            if (value == null) {
                value = pc.getConfiguredInstance(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, Serializer.class);
                value.configure(pc.originals(), false);
            }
            s.keySerializer = wrap(key, true);
            s.valueSerializer = wrap(value, false);
            s.producerConfig = m;
            return s;
        }

        @SuppressWarnings({"unchecked", "rawtypes"})
        private static Serializer<?> wrap(Serializer<?> s, boolean isKey) {
            return new Touch.Serializing(s, isKey);
        }
    }

    static List<String> splitList(String s) {
        return Arrays.asList(s.split("\\s*,\\s*"));
    }
}
