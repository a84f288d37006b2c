package io.sharetx.clients;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Assumptions;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/** The sidecar (and the cluster behind it) the scenario tests run against, from SHARETX_BOOTSTRAP. */
final class Sidecar {
    private Sidecar() {
    }

    static final String BOOTSTRAP_ENV = "SHARETX_BOOTSTRAP";
    /** Optional: the cluster itself, for the test that no sidecar means UnsupportedVersionException. */
    static final String KAFKA_ENV = "SHARETX_KAFKA_BOOTSTRAP";
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);

    /** The proxy's bootstrap; the test is skipped, saying why, when the variable is unset. */
    static String bootstrap() {
        String bs = System.getenv(BOOTSTRAP_ENV);
        Assumptions.assumeTrue(bs != null && !bs.isBlank(), BOOTSTRAP_ENV + " is not set: these scenarios need a sharetx proxy "
            + "in front of a real Kafka cluster (make test-java starts one and sets it)");
        return bs.trim();
    }

    static String unique(String prefix) {
        return prefix + "-" + RUN + "-" + SEQ.incrementAndGet();
    }

    /** Optional: a second proxy in front of the cluster's SASL_PLAINTEXT listener (test-with-proxy.sh sets it). */
    static final String SASL_BOOTSTRAP_ENV = "SHARETX_SASL_BOOTSTRAP";

    /** A client configuration: the sidecar's address and the security settings to reach it with. */
    static Map<String, Object> plain() {
        Map<String, Object> m = new HashMap<>();
        m.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        return m;
    }

    /** SASL_PLAINTEXT as {@code user} with {@code mechanism}, through the SASL proxy; skipped without it. */
    static Map<String, Object> sasl(String mechanism, String user, String password) {
        bootstrap();
        String bs = System.getenv(SASL_BOOTSTRAP_ENV);
        Assumptions.assumeTrue(bs != null && !bs.isBlank(), SASL_BOOTSTRAP_ENV + " is not set: no proxy in front of a SASL listener");
        String module = mechanism.equals("PLAIN") ? "org.apache.kafka.common.security.plain.PlainLoginModule"
            : "org.apache.kafka.common.security.scram.ScramLoginModule";
        Map<String, Object> m = new HashMap<>();
        m.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bs.trim());
        m.put("security.protocol", "SASL_PLAINTEXT");
        m.put("sasl.mechanism", mechanism);
        m.put("sasl.jaas.config", module + " required username=\"" + user + "\" password=\"" + password + "\";");
        return m;
    }

    /** Optional: proxies whose listeners speak TLS (test-with-proxy.sh sets them and the CA file). */
    static final String TLS_BOOTSTRAP_ENV = "SHARETX_TLS_BOOTSTRAP";
    static final String SASL_TLS_BOOTSTRAP_ENV = "SHARETX_SASL_TLS_BOOTSTRAP";
    static final String TLS_CA_ENV = "SHARETX_TLS_CA";

    /**
     * SSL (no SASL) through the TLS proxy in front of the plain listener, or SASL_SSL as
     * {@code user} with {@code mechanism} through the TLS proxy in front of the SASL listener
     * ({@code mechanism} null: SSL); skipped without them.
     */
    static Map<String, Object> tls(String mechanism, String user, String password) {
        bootstrap();
        String env = mechanism == null ? TLS_BOOTSTRAP_ENV : SASL_TLS_BOOTSTRAP_ENV;
        String bs = System.getenv(env);
        String ca = System.getenv(TLS_CA_ENV);
        Assumptions.assumeTrue(bs != null && !bs.isBlank() && ca != null, env + " or " + TLS_CA_ENV + " is not set: no TLS proxy");
        Map<String, Object> m = mechanism == null ? new HashMap<>() : sasl(mechanism, user, password);
        m.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bs.trim());
        m.put("security.protocol", mechanism == null ? "SSL" : "SASL_SSL");
        m.put("ssl.truststore.type", "PEM");
        m.put("ssl.truststore.location", ca);
        return m;
    }

    /**
     * SASL_PLAINTEXT with OAUTHBEARER through the SASL proxy: an unsecured JWS (alg none) whose
     * subject is {@code sub}, as Kafka's default login handler makes it and the cluster's default
     * validator accepts it (kafka.sh enables the mechanism); skipped without the SASL proxy.
     */
    static Map<String, Object> oauth(String sub) {
        Map<String, Object> m = sasl("PLAIN", "-", "-");
        m.put("sasl.mechanism", "OAUTHBEARER");
        m.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"" + sub + "\";");
        return m;
    }

    static Admin admin(Map<String, Object> conf) {
        return Admin.create(new HashMap<>(conf));
    }

    /** A topic with {@code partitions} partitions and {@code records} records value-0.., and a share group reading it from the start. */
    static final class Setup implements AutoCloseable {
        final Map<String, Object> conf;
        final Admin admin;
        final String in = unique("jin");
        final String out = unique("jout");
        final String group = unique("jgroup");
        final List<AutoCloseable> closeables = new ArrayList<>();

        Setup(int partitions, int records) throws Exception {
            this(partitions, records, plain());
        }

        /** As above, every client configured with {@code conf} (bootstrap and security). */
        Setup(int partitions, int records, Map<String, Object> conf) throws Exception {
            this.conf = conf;
            this.admin = admin(conf);
            try {
                init(partitions, records);
            } catch (Exception | Error e) {
                admin.close(Duration.ofSeconds(5)); // a leaked admin thread would keep the test JVM alive
                throw e;
            }
        }

        private void init(int partitions, int records) throws Exception {
            admin.createTopics(List.of(new NewTopic(in, partitions, (short) -1), new NewTopic(out, 1, (short) -1))).all().get();
            ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(g, List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                AlterConfigOp.OpType.SET)))).all().get();
            produce(records, 0);
        }

        void produce(int n, int from) throws Exception {
            if (n == 0) {
                return;
            }
            Map<String, Object> pc = new HashMap<>(conf);
            pc.put(ProducerConfig.LINGER_MS_CONFIG, 0);
            // One request in flight per connection: right after CreateTopics the broker may answer
            // for a partition before it hosts its log (NOT_LEADER_OR_FOLLOWER); with several batches
            // in flight a later one can land first, and an idempotent producer then retries the
            // earlier one against OUT_OF_ORDER_SEQUENCE until its delivery timeout (seen on Kafka
            // 4.2.2: the records were missing and the test waited for them). Each send is checked.
            pc.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pc, new StringSerializer(), new StringSerializer())) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = from; i < from + n; i++) {
                    sent.add(p.send(new ProducerRecord<>(in, null, "key-" + i, "value-" + i)));
                }
                p.flush();
                for (int i = 0; i < sent.size(); i++) {
                    try {
                        sent.get(i).get();
                    } catch (ExecutionException e) {
                        throw new AssertionError("producing the input record value-" + (from + i) + " to " + in + " failed", e.getCause());
                    }
                }
            }
        }

        KafkaShareConsumer<String, String> consumer(String clientId, Map<String, Object> extra) {
            Map<String, Object> c = new HashMap<>(conf);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            c.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
            c.putAll(extra);
            KafkaShareConsumer<String, String> sc = ShareTransactions.newShareConsumer(c, new StringDeserializer(), new StringDeserializer());
            sc.subscribe(List.of(in));
            closeables.add(sc);
            return sc;
        }

        KafkaShareConsumer<String, String> consumer() {
            return consumer(unique("jmember"), Map.of());
        }

        SharetxProducer<String, String> producer(String txnId, Map<String, Object> extra) {
            Map<String, Object> c = new HashMap<>(conf);
            c.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            c.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 60_000);
            c.putAll(extra);
            SharetxProducer<String, String> p = new SharetxProducer<>(c, new StringSerializer(), new StringSerializer());
            closeables.add(() -> p.close(Duration.ofSeconds(10)));
            return p;
        }

        SharetxProducer<String, String> producer() {
            return producer(unique("jtxn"), Map.of());
        }

        /** The next non-empty poll, within {@code within}. */
        static <K, V> ConsumerRecords<K, V> pollSome(KafkaShareConsumer<K, V> c, Duration within) {
            long end = System.currentTimeMillis() + within.toMillis();
            while (System.currentTimeMillis() < end) {
                ConsumerRecords<K, V> rs = c.poll(Duration.ofMillis(500));
                if (!rs.isEmpty()) {
                    return rs;
                }
            }
            throw new AssertionError("no records polled within " + within);
        }

        /** The member as the group coordinator has it (what ShareConsumer.shareGroupMetadata() would give). */
        ShareGroupMetadata memberOf(String clientId) throws Exception {
            long end = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < end) {
                ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                for (ShareMemberDescription m : d.members()) {
                    if (m.clientId().equals(clientId)) {
                        return new ShareGroupMetadata(group, m.consumerId(), m.memberEpoch());
                    }
                }
                Thread.sleep(200);
            }
            throw new AssertionError("member " + clientId + " not in group " + group);
        }

        /**
         * What a new member of the group is handed until the group has been quiet for {@code quiet}
         * (it joins first: a real broker assigns a new member after a heartbeat or two). Records
         * the broker acknowledged are never delivered again.
         */
        List<ConsumerRecord<String, String>> leftForFreshMember(Duration quiet) {
            Map<String, Object> c = new HashMap<>(conf);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            c.put(ConsumerConfig.CLIENT_ID_CONFIG, unique("jfresh"));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            try (KafkaShareConsumer<String, String> sc = new KafkaShareConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                sc.subscribe(List.of(in));
                long start = System.currentTimeMillis();
                long last = start;
                long join = 6_000;
                while (System.currentTimeMillis() - last < quiet.toMillis() || System.currentTimeMillis() - start < quiet.toMillis() + join) {
                    ConsumerRecords<String, String> rs = sc.poll(Duration.ofMillis(500));
                    if (!rs.isEmpty()) {
                        rs.forEach(got::add);
                        last = System.currentTimeMillis();
                    }
                }
            }
            return got;
        }

        /** The committed values of the output topic (read_committed), read for {@code quiet}. */
        List<String> committedOutputs(Duration quiet) {
            Map<String, Object> c = new HashMap<>(conf);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, unique("jread"));
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            List<String> got = new ArrayList<>();
            try (KafkaConsumer<String, String> kc = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                kc.subscribe(Set.of(out));
                long end = System.currentTimeMillis() + quiet.toMillis();
                while (System.currentTimeMillis() < end) {
                    kc.poll(Duration.ofMillis(500)).forEach(r -> got.add(r.value()));
                }
            }
            return got;
        }

        /** Closes the consumers and producers made here (a closed consumer releases what it did not acknowledge). */
        void closeClients() throws Exception {
            for (int i = closeables.size() - 1; i >= 0; i--) {
                closeables.get(i).close();
            }
            closeables.clear();
        }

        /** Closes the clients, deletes the topics, closes the admin client; a client's close failure is rethrown unchecked. */
        @Override
        public void close() {
            try {
                closeClients();
            } catch (Exception e) {
                throw new IllegalStateException("closing a test client: " + e, e);
            } finally {
                try {
                    admin.deleteTopics(List.of(in, out)).all().get();
                } catch (Exception ignored) {
                    // best effort
                }
                admin.close(Duration.ofSeconds(10));
            }
        }
    }

    static List<ConsumerRecord<String, String>> list(ConsumerRecords<String, String> rs) {
        List<ConsumerRecord<String, String>> l = new ArrayList<>();
        rs.forEach(l::add);
        return l;
    }

    static Set<Long> offsets(Collection<ConsumerRecord<String, String>> rs) {
        Set<Long> s = new java.util.TreeSet<>();
        rs.forEach(r -> s.add(((long) r.partition() << 40) | r.offset()));
        return s;
    }
}
