package io.sharetx.bench;

import io.sharetx.clients.ShareAcknowledgements;
import io.sharetx.clients.ShareGroupMetadata;
import io.sharetx.clients.ShareTransactions;
import io.sharetx.clients.SharetxProducer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Function;

/**
 * The bench's Java consume-transform-produce (e2e/bench, section java-eos): one poll of up to
 * --batch records is one transaction that holds one output per input (the input's value, keyed
 * "partition:offset", the id the bench's exactly-once check counts).
 *
 * <ul>
 *   <li>--mode share: a stock KafkaShareConsumer in explicit mode and a SharetxProducer through the
 *       sharetx sidecar, the inputs' ACCEPTs bound to the transaction
 *       (sendShareAcknowledgementsToTransaction), the pattern of java/README.md;</li>
 *   <li>--mode group: Java's own consumer-group exactly-once, direct: a KafkaConsumer
 *       (read_committed, no auto-commit) and a transactional KafkaProducer with
 *       sendOffsetsToTransaction(offsets, groupMetadata()).</li>
 *   <li>--mode share-txn: the same stock KafkaShareConsumer and a transactional KafkaProducer,
 *       direct, the ACCEPTs sent after the commit (with the next poll): Kafka transactions alone,
 *       at-least-once, what the share consumer and the broker do with no sharetx in the path (the
 *       twin of the Go bench's kafka-txn direct).</li>
 * </ul>
 *
 * Flags: --mode share|group|share-txn --bootstrap --in --out --group --transactional-id --batch (1000)
 * --target (stop once that many inputs are committed) --max-seconds (or that long after the first
 * record). Prints one line on stdout at the end:
 * {@code RESULT mode=.. records=.. transactions=.. aborts=.. seconds=.. records_per_s=.. cpu_s=.. commit_p50_ms=.. commit_p99_ms=..}
 * ({@code cpu_s}: the JVM's CPU, every thread, from the first record to the last commit: the measured
 * loop without the JVM's start-up and the clients' connecting),
 * or {@code ERROR <message>} and exits 1. Progress goes to stderr.
 */
public final class EosBench {
    private EosBench() {
    }

    public static void main(String[] args) {
        Map<String, String> o = parse(args);
        String mode = o.getOrDefault("mode", "share");
        try {
            Result r = switch (mode) {
                case "share" -> share(o);
                case "group" -> group(o);
                case "share-txn" -> shareTxn(o);
                default -> throw new IllegalArgumentException("--mode: share, group or share-txn, not " + mode);
            };
            System.out.println(r.line(mode));
            System.out.flush();
            System.exit(0);
        } catch (Exception e) {
            System.out.println("ERROR " + e.toString().replace('\n', ' '));
            e.printStackTrace(System.err);
            System.out.flush();
            System.exit(1);
        }
    }

    /** What a run counts; the clock runs from the first record to the last commit. */
    static final class Result {
        long records, transactions, aborts, first, last;
        // The process's CPU (ns) at the first record and at the last commit: -1 where the JVM
        // cannot tell it.
        long cpuFirst = -1, cpuLast = -1;
        final List<Double> commitMs = new ArrayList<>();
        // The per-transaction budget: the poll that returned the records, the sends of the
        // outputs (handing them to the producer), staging (sendShareAcknowledgementsToTransaction
        // or sendOffsetsToTransaction), commitTransaction (commitMs).
        final List<Double> pollMs = new ArrayList<>(), sendMs = new ArrayList<>(), stageMs = new ArrayList<>();

        String line(String mode) {
            double secs = Math.max(last - first, 1) / 1e9;
            StringBuilder b = new StringBuilder(String.format(Locale.ROOT, "RESULT mode=%s records=%d transactions=%d aborts=%d seconds=%.3f records_per_s=%.1f",
                mode, records, transactions, aborts, secs, records / secs));
            if (cpuFirst >= 0 && cpuLast >= cpuFirst) {
                b.append(String.format(Locale.ROOT, " cpu_s=%.3f", (cpuLast - cpuFirst) / 1e9));
            }
            for (Map.Entry<String, List<Double>> e : Map.of("commit", commitMs, "poll", pollMs, "send", sendMs, "stage", stageMs).entrySet()) {
                if (e.getValue().isEmpty()) {
                    continue; // a phase the mode has not (share-txn stages nothing)
                }
                List<Double> c = new ArrayList<>(e.getValue());
                Collections.sort(c);
                b.append(String.format(Locale.ROOT, " %s_p50_ms=%.3f %s_p99_ms=%.3f", e.getKey(), quantile(c, 0.5), e.getKey(), quantile(c, 0.99)));
            }
            return b.toString();
        }

        /** Times one step of a transaction into to. */
        static void timed(List<Double> to, Runnable step) {
            long t = System.nanoTime();
            step.run();
            to.add((System.nanoTime() - t) / 1e6);
        }

        /** The JVM's CPU time so far, every thread (ns), or -1 where it cannot tell. */
        static long processCpuNanos() {
            if (ManagementFactory.getOperatingSystemMXBean() instanceof com.sun.management.OperatingSystemMXBean os) {
                return os.getProcessCpuTime();
            }
            return -1;
        }

        boolean done(long target, long maxNanos) {
            return records >= target || (first != 0 && System.nanoTime() - first > maxNanos);
        }
    }

    static double quantile(List<Double> sorted, double q) {
        if (sorted.isEmpty()) {
            return 0;
        }
        int i = (int) Math.ceil(q * sorted.size()) - 1; // nearest rank
        return sorted.get(Math.max(0, Math.min(sorted.size() - 1, i)));
    }

    static byte[] id(ConsumerRecord<byte[], byte[]> r) {
        return (r.partition() + ":" + r.offset()).getBytes(StandardCharsets.UTF_8);
    }

    static Map<String, Object> producerConfig(Map<String, String> o) {
        Map<String, Object> pc = new HashMap<>();
        pc.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("bootstrap"));
        pc.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, o.get("transactional-id"));
        pc.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none"); // as the Go pipelines: the bytes produced are the bytes sent
        pc.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pc.put(ProducerConfig.BATCH_SIZE_CONFIG, "1048576");
        return pc;
    }

    /** One mode's transaction: commit it with the records' outputs, or abort it. */
    interface Transaction {
        /** Produces the outputs and commits; a KafkaException means the transaction failed. */
        void commit(ConsumerRecords<byte[], byte[]> records, Result r);

        /** Aborts it and makes the records come again. */
        void abort(ConsumerRecords<byte[], byte[]> records);
    }

    /** The flags both modes read. */
    record Settings(int batch, long target, long maxNanos, String out, Map<String, Object> consumer) {
        static Settings of(Map<String, String> o) {
            int batch = Integer.parseInt(o.getOrDefault("batch", "1000"));
            Map<String, Object> cc = new HashMap<>();
            cc.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("bootstrap"));
            cc.put(ConsumerConfig.GROUP_ID_CONFIG, o.get("group"));
            cc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(batch));
            return new Settings(batch, Long.parseLong(o.getOrDefault("target", "100000")),
                (long) (Double.parseDouble(o.getOrDefault("max-seconds", "10")) * 1e9), o.get("out"), cc);
        }
    }

    /** Polls and runs one transaction per poll until the target or the time is reached. */
    static void loop(Settings s, Result r, Function<Duration, ConsumerRecords<byte[], byte[]>> poll, Transaction txn) {
        long deadline = System.nanoTime() + s.maxNanos() + 60_000_000_000L; // the join may take a while
        int failedInARow = 0;
        while (!r.done(s.target(), s.maxNanos())) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(r.records + " records before the deadline");
            }
            long tp = System.nanoTime();
            ConsumerRecords<byte[], byte[]> records = poll.apply(Duration.ofSeconds(1));
            if (records.isEmpty()) {
                continue;
            }
            r.pollMs.add((System.nanoTime() - tp) / 1e6);
            if (r.first == 0) {
                r.first = System.nanoTime();
                r.cpuFirst = Result.processCpuNanos();
            }
            try {
                txn.commit(records, r);
                r.records += records.count();
                r.transactions++;
                r.last = System.nanoTime();
                r.cpuLast = Result.processCpuNanos();
                failedInARow = 0;
            } catch (ProducerFencedException | UnsupportedVersionException | AuthorizationException | AuthenticationException e) {
                throw e;
            } catch (KafkaException e) {
                txn.abort(records);
                r.aborts++;
                System.err.println("aborted a transaction of " + records.count() + " records: " + e);
                if (++failedInARow >= 5) {
                    throw new IllegalStateException("5 transactions in a row failed, the last: " + e, e);
                }
            }
        }
    }

    /** Times commitTransaction. */
    static void commitTimed(KafkaProducer<byte[], byte[]> producer, Result r) {
        long t = System.nanoTime();
        producer.commitTransaction();
        r.commitMs.add((System.nanoTime() - t) / 1e6);
    }

    /** Share-group exactly-once through sharetx. */
    static Result share(Map<String, String> o) {
        Settings s = Settings.of(o);
        // A hard limit, like max.poll.records of the KafkaConsumer it is compared with: the default
        // (batch_optimized) returns whole acquired batches, several times --batch records at 100.
        s.consumer().put("share.acquire.mode", "record_limit");
        Result r = new Result();
        KafkaShareConsumer<byte[], byte[]> consumer = ShareTransactions.newShareConsumer(s.consumer(), new ByteArrayDeserializer(), new ByteArrayDeserializer());
        SharetxProducer<byte[], byte[]> producer = new SharetxProducer<>(producerConfig(o), new ByteArraySerializer(), new ByteArraySerializer());
        try {
            consumer.subscribe(List.of(o.get("in")));
            producer.initTransactions();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(consumer);
            loop(s, r, consumer::poll, new Transaction() {
                public void commit(ConsumerRecords<byte[], byte[]> records, Result r) {
                    producer.beginTransaction();
                    Result.timed(r.sendMs, () -> {
                        for (ConsumerRecord<byte[], byte[]> in : records) {
                            producer.send(new ProducerRecord<>(s.out(), id(in), in.value()));
                        }
                    });
                    Result.timed(r.stageMs, () -> producer.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), md));
                    commitTimed(producer, r);
                    ShareTransactions.acknowledgeHandedOver(consumer, records);
                }

                public void abort(ConsumerRecords<byte[], byte[]> records) {
                    producer.abortTransaction();
                    ShareTransactions.releaseForRedelivery(consumer, records);
                }
            });
        } finally {
            consumer.close(Duration.ofSeconds(10));
            producer.close(Duration.ofSeconds(10));
        }
        return r;
    }

    /**
     * Kafka transactions alone with the stock share consumer, direct: the outputs in a transaction,
     * the inputs ACCEPTed after it committed (at-least-once: a crash between the two redelivers).
     */
    static Result shareTxn(Map<String, String> o) {
        Settings s = Settings.of(o);
        s.consumer().put("share.acquire.mode", "record_limit"); // as in share(): at most --batch per poll
        Result r = new Result();
        KafkaShareConsumer<byte[], byte[]> consumer = ShareTransactions.newShareConsumer(s.consumer(), new ByteArrayDeserializer(), new ByteArrayDeserializer());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(o), new ByteArraySerializer(), new ByteArraySerializer());
        try {
            consumer.subscribe(List.of(o.get("in")));
            producer.initTransactions();
            loop(s, r, consumer::poll, new Transaction() {
                public void commit(ConsumerRecords<byte[], byte[]> records, Result r) {
                    producer.beginTransaction();
                    Result.timed(r.sendMs, () -> {
                        for (ConsumerRecord<byte[], byte[]> in : records) {
                            producer.send(new ProducerRecord<>(s.out(), id(in), in.value()));
                        }
                    });
                    commitTimed(producer, r);
                    ShareTransactions.acknowledgeHandedOver(consumer, records);
                }

                public void abort(ConsumerRecords<byte[], byte[]> records) {
                    producer.abortTransaction();
                    ShareTransactions.releaseForRedelivery(consumer, records);
                }
            });
        } finally {
            consumer.close(Duration.ofSeconds(10));
            producer.close(Duration.ofSeconds(10));
        }
        return r;
    }

    /** Consumer-group exactly-once, direct: sendOffsetsToTransaction. */
    static Result group(Map<String, String> o) {
        Settings s = Settings.of(o);
        s.consumer().put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        s.consumer().put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        s.consumer().put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Result r = new Result();
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(s.consumer(), new ByteArrayDeserializer(), new ByteArrayDeserializer());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(o), new ByteArraySerializer(), new ByteArraySerializer());
        try {
            consumer.subscribe(List.of(o.get("in")));
            producer.initTransactions();
            loop(s, r, consumer::poll, new Transaction() {
                public void commit(ConsumerRecords<byte[], byte[]> records, Result r) {
                    Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                    for (ConsumerRecord<byte[], byte[]> in : records) {
                        next.put(new TopicPartition(in.topic(), in.partition()), new OffsetAndMetadata(in.offset() + 1));
                    }
                    producer.beginTransaction();
                    Result.timed(r.sendMs, () -> {
                        for (ConsumerRecord<byte[], byte[]> in : records) {
                            producer.send(new ProducerRecord<>(s.out(), id(in), in.value()));
                        }
                    });
                    Result.timed(r.stageMs, () -> producer.sendOffsetsToTransaction(next, consumer.groupMetadata()));
                    commitTimed(producer, r);
                }

                public void abort(ConsumerRecords<byte[], byte[]> records) {
                    producer.abortTransaction();
                    for (TopicPartition tp : records.partitions()) { // process them again
                        consumer.seek(tp, records.records(tp).get(0).offset());
                    }
                }
            });
        } finally {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
            producer.close(Duration.ofSeconds(10));
        }
        return r;
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + args[i]);
            }
            String a = args[i].substring(2);
            int eq = a.indexOf('=');
            if (eq >= 0) {
                o.put(a.substring(0, eq), a.substring(eq + 1));
            } else if (i + 1 < args.length) {
                o.put(a, args[++i]);
            } else {
                throw new IllegalArgumentException("--" + a + " needs a value");
            }
        }
        for (String need : List.of("bootstrap", "in", "out", "group", "transactional-id")) {
            if (!o.containsKey(need)) {
                throw new IllegalArgumentException("--" + need + " is required");
            }
        }
        return o;
    }
}
