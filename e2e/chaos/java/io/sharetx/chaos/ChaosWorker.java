package io.sharetx.chaos;

import io.sharetx.clients.ShareAcknowledgements;
import io.sharetx.clients.ShareGroupMetadata;
import io.sharetx.clients.ShareTransactions;
import io.sharetx.clients.SharetxProducer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.StringJoiner;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

/**
 * The chaos test's consume-transform-produce worker in Java: the stock {@link KafkaShareConsumer}
 * (explicit acknowledgement mode) and sharetx-clients' {@link SharetxProducer}, through a sharetx
 * sidecar. It behaves as the Go worker (e2e/chaos/worker.go) and speaks the same lines with the
 * orchestrator ({@link Orchestrator}); {@code go run ./e2e/chaos --worker-lang java} starts it as
 *
 * <pre>
 * java -cp "$(java/apps.sh)" io.sharetx.chaos.ChaosWorker --name w1 --bootstrap 127.0.0.1:9092 \
 *     --group g --in in --out out --txn-id t1 [--max-poll 50 --abort-rate 0.15 --seed 1 --txn-timeout 20s]
 * </pre>
 *
 * <p>One transaction per poll:
 * <ol>
 *   <li>an output record per input (key and value: the input's value);</li>
 *   <li>the poll's ACCEPT acknowledgements bound to the transaction
 *       ({@code sendShareAcknowledgementsToTransaction});</li>
 *   <li>the records acknowledged on the consumer with {@code acknowledgeHandedOver} (the sidecar
 *       absorbs that acknowledgement: the transaction decides);</li>
 *   <li>commit; or, on purpose ({@code --abort-rate}) or on any error, abort and
 *       {@code releaseForRedelivery} (RELEASE replaces the ACCEPT of step 3; for records the
 *       sidecar released at the abort it is absorbed, the others the broker redelivers).</li>
 * </ol>
 * A producer that cannot go on (fenced, its abort failed, or three transactions failed in a row)
 * is replaced: {@code initTransactions} of a new one with the same transactional id bumps the
 * epoch and aborts whatever the old one left open.
 */
public final class ChaosWorker {

    private final WorkerConfig cfg;
    private final Orchestrator orch = new Orchestrator();
    private final Random rng;

    private KafkaShareConsumer<byte[], byte[]> consumer;
    private SharetxProducer<byte[], byte[]> producer;
    private ShareGroupMetadata groupMetadata;

    private int commits;
    private int aborts;
    private int failedInARow;
    private long polledAt; // System.nanoTime() when the last poll returned
    private long lastEnd;  // when the previous transaction ended (0: none yet)

    private ChaosWorker(WorkerConfig cfg) {
        this.cfg = cfg;
        this.rng = new Random(cfg.seed);
    }

    public static void main(String[] args) {
        WorkerConfig cfg;
        try {
            cfg = WorkerConfig.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("chaos worker: " + e.getMessage());
            System.exit(2);
            return;
        }
        ChaosWorker w = new ChaosWorker(cfg);
        int status;
        try {
            status = w.run();
        } catch (RuntimeException e) {
            w.orch.say("ERR %s", Orchestrator.oneLine(e.toString()));
            status = 1;
        }
        w.orch.finished();
        // (If a SIGTERM's shutdown is under way, this waits for it: the JVM ends all the same.)
        System.exit(status);
    }

    private Map<String, Object> consumerConfig() {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cfg.bootstrap); // the sidecar
        c.put(ConsumerConfig.GROUP_ID_CONFIG, cfg.group);
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, "chaos-" + cfg.name);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, cfg.maxPoll);
        c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 500);
        return c; // newShareConsumer adds share.acknowledgement.mode=explicit
    }

    private Map<String, Object> producerConfig() {
        Map<String, Object> c = new HashMap<>();
        c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cfg.bootstrap); // the sidecar
        c.put(ProducerConfig.CLIENT_ID_CONFIG, "chaos-" + cfg.name);
        c.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, cfg.txnId);
        c.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, (int) cfg.txnTimeout.toMillis());
        c.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        return c;
    }

    private int run() {
        orch.listen();
        try {
            consumer = ShareTransactions.newShareConsumer(consumerConfig(), new ByteArrayDeserializer(), new ByteArrayDeserializer());
            consumer.subscribe(List.of(cfg.in));
            // The consumer's own acknowledgements: the sidecar absorbs those of handed-over
            // records; a failure (say, after a stall, of records whose lock expired) is logged.
            consumer.setAcknowledgementCommitCallback((offsets, e) -> {
                if (e != null) {
                    System.err.println("acknowledgement commit failed for " + offsets + ": " + e);
                }
            });
            groupMetadata = ShareTransactions.shareGroupMetadata(consumer);
        } catch (KafkaException e) {
            orch.say("ERR consumer: %s", describe(e));
            return 1;
        }
        try {
            producer = newProducer();
        } catch (KafkaException e) {
            orch.say("ERR producer: %s", describe(e));
            return 1;
        }
        orch.say("READY");

        while (!orch.stopping()) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = consumer.poll(Duration.ofSeconds(2));
            } catch (WakeupException e) {
                continue;
            } catch (RuntimeException e) {
                orch.say("ERR poll: %s", describe(e));
                sleep(500);
                continue;
            }
            if (records.isEmpty()) {
                continue;
            }
            polledAt = System.nanoTime();
            orch.hold("polled");
            transact(records);
        }

        // Every record of the last poll is acknowledged (handed over or released): close sends
        // those acknowledgements; the sidecar absorbs the ones of committed offsets.
        closeQuietly("consumer", () -> consumer.close(Duration.ofSeconds(20)));
        closeQuietly("producer", () -> producer.close(Duration.ofSeconds(20)));
        orch.say("EXIT commits=%d aborts=%d", commits, aborts);
        return 0;
    }

    /**
     * A new transactional producer, initialized at once: {@code initTransactions} fences a
     * previous incarnation of the transactional id and aborts the transaction it left open (its
     * staged acknowledgements are dropped, its records redelivered). Five tries (fewer if told to stop).
     */
    private SharetxProducer<byte[], byte[]> newProducer() {
        SharetxProducer<byte[], byte[]> p = new SharetxProducer<>(producerConfig(), new ByteArraySerializer(), new ByteArraySerializer());
        for (int attempt = 1; ; attempt++) {
            try {
                p.initTransactions();
                // The stock producer does not expose its producer id and epoch; the sidecar
                // resolves them from the transactional id (the library sends -1/-1).
                orch.say("INIT producer_id=-1 epoch=-1 txn_id=%s", cfg.txnId);
                return p;
            } catch (KafkaException e) {
                orch.say("ERR InitProducerId (attempt %d): %s", attempt, describe(e));
                if (attempt == 5 || orch.stopping()) {
                    p.close(Duration.ofSeconds(5));
                    throw e;
                }
                if (!(e instanceof TimeoutException)) {
                    // Only a timed-out initTransactions may be retried on the same producer.
                    p.close(Duration.ofSeconds(5));
                    p = new SharetxProducer<>(producerConfig(), new ByteArraySerializer(), new ByteArraySerializer());
                }
                sleep(1000);
            }
        }
    }

    /** Replaces a producer that cannot go on; exits the worker if no new one can be made. */
    private void recreateProducer(String why) {
        orch.say("ERR recreating the producer: %s", Orchestrator.oneLine(why));
        closeQuietly("the old producer", () -> producer.close(Duration.ofSeconds(10)));
        try {
            producer = newProducer();
        } catch (KafkaException e) {
            orch.say("ERR new producer: %s", describe(e));
            orch.finished();
            System.exit(1);
        }
        failedInARow = 0;
    }

    /** One poll in one transaction (see the class documentation). */
    private void transact(ConsumerRecords<byte[], byte[]> records) {
        // Timings, ms: waiting for the poll since the previous transaction, produce,
        // TxnShareAcknowledge, commit/abort.
        long[] ms = new long[4];
        ms[0] = lastEnd == 0 ? 0 : (polledAt - lastEnd) / 1_000_000;
        try {
            transact(records, ms);
        } finally {
            lastEnd = System.nanoTime();
        }
    }

    private void transact(ConsumerRecords<byte[], byte[]> records, long[] ms) {
        int n = records.count();
        try {
            producer.beginTransaction();
        } catch (RuntimeException e) {
            // Not in a transaction: nothing to abort. A producer that cannot begin is broken
            // (fenced, or a failed transaction was not ended).
            recreateProducer("begin: " + describe(e));
            try {
                producer.beginTransaction();
            } catch (RuntimeException e2) {
                orch.say("ERR begin after recreate: %s", describe(e2));
                ShareTransactions.releaseForRedelivery(consumer, records);
                aborts++;
                orch.say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, commits, aborts, "begin: " + describe(e2));
                return;
            }
        }

        String error = null;
        long t = System.nanoTime();
        try {
            produce(records);
        } catch (Exception e) {
            error = "produce: " + describe(e);
        }
        ms[1] = lap(t);
        t = System.nanoTime();
        if (error == null) {
            try {
                producer.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), groupMetadata);
                // Staged: the consumer may let go of the records (absorbed by the sidecar).
                ShareTransactions.acknowledgeHandedOver(consumer, records);
            } catch (RuntimeException e) {
                error = "TxnShareAcknowledge: " + describe(e);
            }
            ms[2] = lap(t);
        }
        boolean held = error == null && orch.hold("staged");
        // A transaction held on purpose always tries to commit: the fault is about what that
        // commit does.
        boolean random = error == null && !held && rng.nextDouble() < cfg.abortRate;
        if (error == null && !random) {
            t = System.nanoTime();
            try {
                producer.commitTransaction();
                ms[3] = lap(t);
                commits++;
                failedInARow = 0;
                orch.say("TXN commit n=%d commits=%d aborts=%d ms=%s recs=%s", n, commits, aborts, timings(ms), recList(records));
                orch.hold("committed");
                return;
            } catch (RuntimeException e) {
                ms[3] = lap(t);
                error = "commit: " + describe(e);
            }
        }

        String reason = "random";
        if (error != null) {
            reason = error;
            failedInARow++;
        }
        t = System.nanoTime();
        try {
            producer.abortTransaction();
            ms[3] = lap(t);
            if (failedInARow >= 3) {
                recreateProducer(failedInARow + " transactions failed in a row");
            }
        } catch (RuntimeException e) {
            // Fenced, a fatal error, or a commit that timed out (its outcome unknown): a new
            // producer's initTransactions settles the transaction either way.
            ms[3] = lap(t);
            recreateProducer("abort: " + describe(e));
        }
        // Staged records the sidecar released at the abort (this RELEASE is absorbed); the
        // others (staging failed or never happened) go back to the broker for redelivery. Never
        // ACCEPT them: that would count them as processed.
        ShareTransactions.releaseForRedelivery(consumer, records);
        aborts++;
        orch.say("TXN abort n=%d commits=%d aborts=%d ms=%s recs=%s reason=%s", n, commits, aborts, timings(ms), recList(records),
            Orchestrator.oneLine(reason));
    }

    /** The outputs: one per input, key and value the input's value (its id); waits until all are written. */
    private void produce(ConsumerRecords<byte[], byte[]> records) throws InterruptedException, ExecutionException {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
            sent.add(producer.send(new ProducerRecord<>(cfg.out, r.value(), r.value())));
        }
        producer.flush();
        for (Future<RecordMetadata> f : sent) {
            f.get();
        }
    }

    /** partition:offset:deliveryCount of every record, for the orchestrator's duplicate diagnosis. */
    private static String recList(ConsumerRecords<byte[], byte[]> records) {
        StringJoiner j = new StringJoiner(",");
        for (ConsumerRecord<byte[], byte[]> r : records) {
            j.add(r.partition() + ":" + r.offset() + ":" + r.deliveryCount().map(Short::intValue).orElse(0));
        }
        return j.toString();
    }

    private static String timings(long[] ms) {
        return ms[0] + "/" + ms[1] + "/" + ms[2] + "/" + ms[3];
    }

    private static long lap(long since) {
        return (System.nanoTime() - since) / 1_000_000;
    }

    /** An exception on one line: its class and message, the cause's for an ExecutionException. */
    private static String describe(Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) {
            e = e.getCause();
        }
        String s = e.getClass().getSimpleName() + ": " + e.getMessage();
        if (e.getCause() != null && e.getCause() != e && !String.valueOf(e.getMessage()).contains(String.valueOf(e.getCause().getMessage()))) {
            s += " (" + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage() + ")";
        }
        return Orchestrator.oneLine(s);
    }

    private void closeQuietly(String what, Runnable close) {
        try {
            close.run();
        } catch (RuntimeException e) {
            orch.say("ERR closing %s: %s", what, describe(e));
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
