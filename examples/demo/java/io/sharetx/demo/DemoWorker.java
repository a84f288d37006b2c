package io.sharetx.demo;

import io.sharetx.clients.ShareAcknowledgements;
import io.sharetx.clients.ShareGroupMetadata;
import io.sharetx.clients.ShareTransactions;
import io.sharetx.clients.SharetxProducer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The demo's worker (examples/demo/worker.go) in Java: the same flags and the same line protocol,
 * on the stock kafka-clients and sharetx-clients. `go run ./examples/demo --worker-lang java`
 * starts it as {@code java -cp "$(java/apps.sh)" io.sharetx.demo.DemoWorker <flags>}.
 *
 * <p>Mode exactly-once: a stock share consumer in explicit mode and a {@link SharetxProducer}, both
 * through sharetx. Per poll one transaction: an output per input, the inputs' ACCEPT bound to it
 * ({@code sendShareAcknowledgementsToTransaction}), commit and {@code acknowledgeHandedOver} — or,
 * now and then on purpose, abort and {@code releaseForRedelivery}.
 *
 * <p>Mode at-least-once: the same application without transactions: a plain KafkaProducer; per
 * poll, produce the outputs, then ACCEPT the inputs explicitly ({@code acknowledge} and
 * {@code commitSync}).
 *
 * <pre>
 * stdout  READY | TXN begin | PRODUCED n= | TXN commit n= commits= aborts= | TXN abort n= commits= aborts= reason=
 *         | ACK n= batches= | AT point | ERR what | EXIT
 * stdin   crash-at produced|committed | stop (EOF, SIGTERM, SIGINT: the same)
 * </pre>
 */
public final class DemoWorker {

    static final String EOS = "exactly-once";
    static final String ALO = "at-least-once";

    // flags (worker.go and e2e/sim.WorkerConfig)
    String mode = EOS, bootstrap = "", group = "", in = "", out = "", txnId = "";
    int maxPoll = 20;
    double abortRate = 0.1;
    long seed = 1;
    long recordTimeNanos = 30_000_000L;

    Random rng;
    volatile boolean stop;
    private String crashAt; // guarded by this
    int commits, aborts, batches;

    KafkaShareConsumer<String, String> consumer;
    SharetxProducer<String, String> txn; // exactly-once
    KafkaProducer<String, String> plain; // at-least-once
    ShareGroupMetadata md;
    final CountDownLatch done = new CountDownLatch(1); // the loop has ended and the clients are closed

    public static void main(String[] args) {
        DemoWorker w = new DemoWorker();
        if (!w.parse(args)) {
            System.err.println("demo worker: --mode exactly-once|at-least-once, --bootstrap, --group, --in, --out (and --txn-id) are required");
            System.exit(2);
        }
        int status;
        try {
            status = w.run();
        } finally {
            w.done.countDown();
        }
        System.exit(status);
    }

    boolean parse(String[] args) {
        int i = 0;
        if (args.length > 0 && args[0].equals("worker")) {
            i = 1; // as the Go worker is started: `demo worker --mode ...`
        }
        try {
            for (; i < args.length; i++) {
                String a = args[i];
                if (!a.startsWith("-")) {
                    return false;
                }
                String name = a.replaceFirst("^--?", "");
                String value;
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else if (i + 1 < args.length) {
                    value = args[++i];
                } else {
                    return false;
                }
                switch (name) {
                    case "mode": mode = value; break;
                    case "bootstrap": bootstrap = value; break;
                    case "group": group = value; break;
                    case "in": in = value; break;
                    case "out": out = value; break;
                    case "txn-id": txnId = value; break;
                    case "max-poll": maxPoll = Integer.parseInt(value); break;
                    case "abort-rate": abortRate = Double.parseDouble(value); break;
                    case "seed": seed = Long.parseLong(value); break;
                    case "record-time": recordTimeNanos = goDuration(value); break;
                    default:
                        System.err.println("demo worker: unknown flag " + a);
                        return false;
                }
            }
        } catch (IllegalArgumentException e) {
            System.err.println("demo worker: " + e.getMessage());
            return false;
        }
        return (mode.equals(EOS) || mode.equals(ALO)) && !bootstrap.isEmpty() && !group.isEmpty() && !in.isEmpty()
            && !out.isEmpty() && (mode.equals(ALO) || !txnId.isEmpty()) && maxPoll >= 1;
    }

    private static final Pattern DURATION_PART = Pattern.compile("(\\d+(?:\\.\\d*)?|\\.\\d+)(ns|us|µs|ms|s|m|h)");

    /** A Go duration ("30ms", "1.5s", "1m0s") in nanoseconds. */
    static long goDuration(String s) {
        if (s.equals("0")) {
            return 0;
        }
        Matcher m = DURATION_PART.matcher(s);
        long nanos = 0;
        int at = 0;
        while (m.find() && m.start() == at) {
            double v = Double.parseDouble(m.group(1));
            long unit;
            switch (m.group(2)) {
                case "ns": unit = 1L; break;
                case "us": case "µs": unit = 1_000L; break;
                case "ms": unit = 1_000_000L; break;
                case "s": unit = 1_000_000_000L; break;
                case "m": unit = 60_000_000_000L; break;
                default: unit = 3_600_000_000_000L; break;
            }
            nanos += (long) (v * unit);
            at = m.end();
        }
        if (at != s.length() || at == 0) {
            throw new IllegalArgumentException("bad duration " + s);
        }
        return nanos;
    }

    // ------------------------------------------------------------ the protocol

    void say(String format, Object... args) {
        synchronized (System.out) {
            System.out.println(String.format(format, args));
            System.out.flush();
        }
    }

    /** stdin: "stop", "crash-at <point>"; its end (the demo is gone) stops the worker too. */
    void listen() {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    String[] f = line.trim().split("\\s+");
                    if (f.length == 1 && f[0].equals("stop")) {
                        stop = true;
                    } else if (f.length == 2 && f[0].equals("crash-at")) {
                        synchronized (this) {
                            crashAt = f[1];
                        }
                    } else if (!line.isBlank()) {
                        say("ERR unknown command \"%s\"", line);
                    }
                }
            } catch (IOException ignored) {
                // as the end of stdin
            }
            stop = true;
        }, "stdin");
        t.setDaemon(true);
        t.start();
    }

    /** If the demo asked to crash here, say so and wait for the kill -9. */
    void point(String name) {
        boolean hit;
        synchronized (this) {
            hit = name.equals(crashAt);
            if (hit) {
                crashAt = null;
            }
        }
        if (hit) {
            say("AT %s", name);
            sleepNanos(30_000_000_000L); // killed long before
        }
    }

    static void sleepNanos(long nanos) {
        try {
            TimeUnit.NANOSECONDS.sleep(nanos);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static String oneLine(Object o) {
        return String.valueOf(o).replace('\n', ' ');
    }

    // ------------------------------------------------------------ the loop

    Map<String, Object> common() {
        Map<String, Object> m = new HashMap<>();
        m.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        m.put(ConsumerConfig.CLIENT_ID_CONFIG, "demo-worker");
        return m;
    }

    int run() {
        rng = new Random(seed);
        md = ShareGroupMetadata.forGroup(group);
        listen();
        // SIGTERM/SIGINT: the same as "stop"; the JVM waits here until the loop has finished.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop = true;
            if (consumer != null) {
                try {
                    consumer.wakeup();
                } catch (RuntimeException ignored) {
                    // closed already
                }
            }
            try {
                done.await(25, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
        }));
        try {
            Map<String, Object> cc = common();
            cc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            cc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
            cc.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 500);
            // Explicit mode in both modes: exactly-once needs it; at-least-once ACCEPTs explicitly.
            consumer = ShareTransactions.newShareConsumer(cc, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(in));
            if (mode.equals(EOS)) {
                txn = newTxnProducer();
            } else {
                Map<String, Object> pc = common();
                pc.put(ProducerConfig.LINGER_MS_CONFIG, 0);
                plain = new KafkaProducer<>(pc, new StringSerializer(), new StringSerializer());
            }
        } catch (KafkaException e) {
            say("ERR clients: %s", oneLine(e));
            return 1;
        }
        say("READY");

        while (!stop) {
            ConsumerRecords<String, String> records;
            try {
                records = consumer.poll(Duration.ofSeconds(1));
            } catch (WakeupException e) {
                break;
            } catch (KafkaException e) {
                say("ERR poll: %s", oneLine(e));
                continue;
            }
            if (records.isEmpty()) {
                continue;
            }
            // The "transformation": simulated work, so that the run lasts long enough for the
            // crashes to land in it.
            sleepNanos(records.count() * recordTimeNanos);
            if (mode.equals(EOS)) {
                transact(records);
            } else {
                produceThenAck(records);
            }
        }

        closeClients(Duration.ofSeconds(20));
        say("EXIT");
        return 0;
    }

    void closeClients(Duration d) {
        long t0 = System.nanoTime();
        try {
            consumer.close(d); // sends the last acknowledgements, releases what was not acknowledged
        } catch (KafkaException e) {
            say("ERR closing the consumer: %s", oneLine(e));
        }
        Producer<String, String> p = txn != null ? txn : plain;
        if (p != null) {
            p.close(d);
        }
        if (System.nanoTime() - t0 > d.toNanos()) {
            say("ERR closing the clients takes more than %ds", d.toSeconds());
        }
    }

    // ------------------------------------------------------------ exactly-once

    /**
     * This incarnation's transactional producer, initialized at once: initTransactions fences the
     * previous incarnation of the same transactional id and aborts the transaction it left open,
     * so its staged acknowledgements are dropped and its records redelivered.
     */
    SharetxProducer<String, String> newTxnProducer() {
        Map<String, Object> pc = common();
        pc.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pc.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 20_000);
        pc.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20_000);
        pc.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        for (int attempt = 1; ; attempt++) {
            SharetxProducer<String, String> p = new SharetxProducer<>(pc, new StringSerializer(), new StringSerializer());
            try {
                p.initTransactions();
                return p;
            } catch (KafkaException e) {
                say("ERR initTransactions (attempt %d): %s", attempt, oneLine(e));
                p.close(Duration.ofSeconds(5));
                if (attempt == 5) {
                    throw e;
                }
                sleepNanos(1_000_000_000L);
            }
        }
    }

    void recreateProducer(String why) {
        say("ERR recreating the producer: %s", oneLine(why));
        txn.close(Duration.ofSeconds(5));
        try {
            txn = newTxnProducer();
        } catch (KafkaException e) {
            say("ERR new producer: %s", oneLine(e));
            System.exit(1);
        }
    }

    /** One poll, one transaction. */
    void transact(ConsumerRecords<String, String> records) {
        int n = records.count();
        try {
            txn.beginTransaction();
        } catch (KafkaException e) {
            recreateProducer("begin: " + e);
            try {
                txn.beginTransaction();
            } catch (KafkaException e2) {
                ShareTransactions.releaseForRedelivery(consumer, records);
                aborts++;
                say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, commits, aborts, oneLine("begin: " + e2));
                return;
            }
        }
        say("TXN begin");
        String err = null;
        try {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (ConsumerRecord<String, String> r : records) {
                sent.add(txn.send(new ProducerRecord<>(out, r.value(), r.value())));
            }
            txn.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get();
            }
            say("PRODUCED n=%d", n);
            // The inputs' ACCEPT, bound to the transaction: applied if and only if it commits.
            try {
                txn.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), md);
            } catch (KafkaException e) {
                err = "TxnShareAcknowledge: " + e;
            }
        } catch (ExecutionException e) {
            err = "produce: " + e.getCause();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            err = "produce: interrupted";
        } catch (KafkaException e) {
            err = "produce: " + e;
        }
        if (err == null) {
            point("produced");
        }
        if (err == null && rng.nextDouble() >= abortRate) {
            try {
                txn.commitTransaction();
                commits++;
                ShareTransactions.acknowledgeHandedOver(consumer, records); // absorbed by sharetx
                say("TXN commit n=%d commits=%d aborts=%d", n, commits, aborts);
                point("committed");
                return;
            } catch (KafkaException e) {
                err = "commit: " + e;
            }
        }
        String reason = err == null ? "random abort" : err;
        try {
            txn.abortTransaction();
        } catch (KafkaException | IllegalStateException e) {
            // Fenced, or a commit that timed out (KafkaProducer then takes only the commit again):
            // a new producer's initTransactions completes or aborts the transaction.
            recreateProducer("abort: " + e);
        }
        // Aborted: the records must be redelivered (absorbed if they were staged: sharetx released them).
        ShareTransactions.releaseForRedelivery(consumer, records);
        aborts++;
        say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, commits, aborts, oneLine(reason));
    }

    // ------------------------------------------------------------ at-least-once

    /** Produce the outputs, then acknowledge the inputs: a crash in between means duplicates. */
    void produceThenAck(ConsumerRecords<String, String> records) {
        int n = records.count();
        try {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (ConsumerRecord<String, String> r : records) {
                sent.add(plain.send(new ProducerRecord<>(out, r.value(), r.value())));
            }
            plain.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get();
            }
        } catch (ExecutionException | InterruptedException | KafkaException e) {
            say("ERR produce: %s", oneLine(e instanceof ExecutionException ? e.getCause() : e));
            for (ConsumerRecord<String, String> r : records) {
                consumer.acknowledge(r, AcknowledgeType.RELEASE); // redeliver
            }
            return;
        }
        say("PRODUCED n=%d", n);
        point("produced");
        for (ConsumerRecord<String, String> r : records) {
            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
        }
        try {
            Map<TopicIdPartition, Optional<KafkaException>> res = consumer.commitSync(Duration.ofSeconds(30));
            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
                if (e.getValue().isPresent()) {
                    say("ERR commit acks %s: %s", e.getKey(), oneLine(e.getValue().get()));
                }
            }
        } catch (KafkaException e) {
            say("ERR commit acks: %s", oneLine(e));
        }
        batches++;
        say("ACK n=%d batches=%d", n, batches);
        point("committed");
    }
}
