package io.sharetx.examples;

import io.sharetx.clients.ShareAcknowledgements;
import io.sharetx.clients.ShareTransactions;
import io.sharetx.clients.TransactionalShareAcknowledger;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A share-group pipeline whose effects are not Kafka records: it writes what it consumes to a
 * local file (the "sink") and, at each checkpoint, once the sink has made the records durable,
 * commits their acknowledgements in a transaction of their own with
 * {@link TransactionalShareAcknowledger}. A failed checkpoint commits nothing: the records are
 * delivered again, and the sink, which skips the records it already holds, writes each once.
 *
 * <pre>
 * java -cp "$(java/apps.sh)" io.sharetx.examples.CheckpointAcknowledger \
 *     --bootstrap 127.0.0.1:9092 --group sink-example --input events --txn-id sink-example-1 \
 *     --sink /tmp/sink.txt --seed 1000 --max-records 1000
 * </pre>
 *
 * Options (each also a system property, {@code -Dsink=...}): bootstrap (the sidecar, default
 * 127.0.0.1:9092), group, input, txn-id, sink (the file, default sink.txt; one line per record:
 * {@code topic/partition/offset<TAB>value}), max-records (stop once that many records are
 * acknowledged; 0: no limit), max-seconds (0: no limit), max-poll (records per poll, and so per
 * checkpoint; default 500), seed (create the topic and produce that many records first),
 * fail-every (fail every n-th checkpoint after the sink wrote, before the commit, to watch the
 * records come back). Ctrl-C stops it after the current checkpoint.
 */
public final class CheckpointAcknowledger {

    public static void main(String[] args) throws Exception {
        String bootstrap = ExampleSetup.opt(args, "bootstrap", "127.0.0.1:9092");
        String group = ExampleSetup.opt(args, "group", "sink-example");
        String input = ExampleSetup.opt(args, "input", "events");
        String txnId = ExampleSetup.opt(args, "txn-id", "sink-example-1");
        Path sinkPath = Path.of(ExampleSetup.opt(args, "sink", "sink.txt"));
        long maxRecords = Long.parseLong(ExampleSetup.opt(args, "max-records", "0"));
        long maxSeconds = Long.parseLong(ExampleSetup.opt(args, "max-seconds", "0"));
        int seed = Integer.parseInt(ExampleSetup.opt(args, "seed", "0"));
        int failEvery = Integer.parseInt(ExampleSetup.opt(args, "fail-every", "0"));

        if (seed > 0) {
            ExampleSetup.seed(bootstrap, group, input, "event", seed);
        }
        Map<String, Object> cc = new HashMap<>();
        cc.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, ExampleSetup.opt(args, "max-poll", "500")); // records per poll, and so per transaction
        Map<String, Object> ac = new HashMap<>();
        ac.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ac.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);

        KafkaShareConsumer<String, String> consumer = ShareTransactions.newShareConsumer(cc, new StringDeserializer(), new StringDeserializer());
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> { // Ctrl-C
            if (done.getCount() == 0) {
                return;
            }
            stopping = true;
            consumer.wakeup();
            try {
                done.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
        }));

        long in = 0, written = 0, acked = 0, checkpoints = 0, failed = 0;
        long start = System.currentTimeMillis(), lastReport = start, reportedIn = 0;
        int status = 0;
        TransactionalShareAcknowledger acker = null;
        try (FileSink sink = new FileSink(sinkPath)) {
            consumer.subscribe(List.of(input));
            acker = newAcknowledger(ac);
            System.out.printf("consuming %s as share group %s into %s (%d records already there), acknowledging in transactions of %s%n",
                input, group, sinkPath, sink.size(), txnId);
            while (!stopping && (maxRecords == 0 || acked < maxRecords)
                && (maxSeconds == 0 || System.currentTimeMillis() - start < maxSeconds * 1000)) {
                if (in > reportedIn && System.currentTimeMillis() - lastReport >= 2000) {
                    System.out.printf("progress: in=%d written=%d acked=%d checkpoints=%d failed=%d%n", in, written, acked, checkpoints, failed);
                    lastReport = System.currentTimeMillis();
                    reportedIn = in;
                }
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofSeconds(1));
                } catch (WakeupException e) {
                    break; // Ctrl-C
                }
                if (records.isEmpty()) {
                    continue;
                }
                in += records.count();
                // A checkpoint per poll: in explicit mode the consumer polls again only once every
                // record of the last poll is acknowledged.
                try {
                    written += sink.write(records); // 1. the effects, durable
                    if (failEvery > 0 && (checkpoints + failed + 1) % failEvery == 0) {
                        throw new KafkaException("failing this checkpoint on purpose (--fail-every " + failEvery + ")");
                    }
                    // 2. then their acknowledgements: begin, stage through the sidecar, commit.
                    ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT);
                    for (int attempt = 1; ; attempt++) {
                        try {
                            acker.commitAcknowledgements(acks, group);
                            break;
                        } catch (TimeoutException e) {
                            // The commit's outcome is unknown and KafkaProducer allows nothing
                            // but the commit again: the acknowledger keeps it pending, and the
                            // same call retries it.
                            if (attempt == 3) {
                                throw e;
                            }
                            System.out.printf("checkpoint of %d records timed out, retrying its commit: %s%n", records.count(), e.getMessage());
                        }
                    }
                    ShareTransactions.acknowledgeHandedOver(consumer, records); // absorbed by the sidecar
                    checkpoints++;
                    acked += records.count();
                } catch (ProducerFencedException | UnsupportedVersionException | AuthorizationException | AuthenticationException e) {
                    throw e; // fatal: another instance took over, or no sidecar
                } catch (TimeoutException e) {
                    // Still timing out: a new acknowledger's initTransactions settles the pending
                    // transaction, and the sidecar applies or releases the acknowledgements accordingly.
                    closeQuietly(acker);
                    acker = newAcknowledger(ac);
                    ShareTransactions.releaseForRedelivery(consumer, records); // absorbed if they were staged
                    failed++;
                    System.out.printf("checkpoint of %d records timed out: %s%n", records.count(), e.getMessage());
                } catch (KafkaException | IOException e) {
                    // The sink failed, or commitAcknowledgements failed and aborted: nothing was
                    // acknowledged, the records come back.
                    ShareTransactions.releaseForRedelivery(consumer, records);
                    failed++;
                    System.out.printf("checkpoint of %d records failed: %s%n", records.count(), e.getMessage());
                }
            }
            System.out.printf("summary: in=%d written=%d acked=%d checkpoints=%d failed=%d sink=%d (%.1f s)%n",
                in, written, acked, checkpoints, failed, sink.size(), (System.currentTimeMillis() - start) / 1000.0);
        } catch (KafkaException e) {
            System.out.println("stopping: " + e);
            status = 1;
        } finally {
            closeQuietly(acker); // aborts a transaction left open
            consumer.close(Duration.ofSeconds(10));
            System.out.flush();
            done.countDown();
        }
        if (!stopping) {
            System.exit(status);
        }
    }

    private static volatile boolean stopping;

    /** An acknowledger with a producer of its own (bootstrap = the sidecar, transactional.id). */
    static TransactionalShareAcknowledger newAcknowledger(Map<String, Object> configs) {
        TransactionalShareAcknowledger acker = new TransactionalShareAcknowledger(configs);
        acker.initTransactions(); // fences an earlier instance with the same transactional id
        return acker;
    }

    static void closeQuietly(TransactionalShareAcknowledger acker) {
        if (acker == null) {
            return;
        }
        try {
            acker.close(Duration.ofSeconds(10));
        } catch (RuntimeException ignored) {
            // it closed its producer all the same; the coordinator ends what was open
        }
    }

    /**
     * The sink: appends one line per record and syncs the file; idempotent, because a record may
     * come back after a checkpoint that failed once the sink had written it (or after a crash in
     * between): it skips the records (topic/partition/offset) it holds already.
     */
    static final class FileSink implements AutoCloseable {
        private final FileChannel file;
        private final Set<String> held = new HashSet<>();

        FileSink(Path path) throws IOException {
            if (Files.exists(path)) {
                for (String line : Files.readAllLines(path, StandardCharsets.UTF_8)) {
                    held.add(line.split("\t", 2)[0]);
                }
            }
            file = FileChannel.open(path, StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
        }

        /** Writes the records it does not hold yet and syncs; returns how many it wrote. */
        int write(ConsumerRecords<String, String> records) throws IOException {
            StringBuilder sb = new StringBuilder();
            int n = 0;
            for (ConsumerRecord<String, String> r : records) {
                String id = r.topic() + "/" + r.partition() + "/" + r.offset();
                if (held.add(id)) {
                    sb.append(id).append('\t').append(r.value()).append('\n');
                    n++;
                }
            }
            file.write(ByteBuffer.wrap(sb.toString().getBytes(StandardCharsets.UTF_8)));
            file.force(false);
            return n;
        }

        int size() {
            return held.size();
        }

        @Override
        public void close() throws IOException {
            file.close();
        }
    }
}
