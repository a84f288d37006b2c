package io.sharetx.examples;

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
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Exactly-once consume-transform-produce with a share group, through the sharetx sidecar: each
 * poll is one transaction that holds the outputs (one per input, its value upper-cased) and the
 * inputs' ACCEPT acknowledgements. Commit: both take effect. Abort: neither does, and the inputs
 * are delivered again (to this member or another one).
 *
 * <pre>
 * java -cp "$(java/apps.sh)" io.sharetx.examples.ConsumeTransformProduce \
 *     --bootstrap 127.0.0.1:9092 --group ctp-example --input orders --output orders-upper \
 *     --txn-id ctp-example-1 --seed 1000 --max-records 1000
 * </pre>
 *
 * Options (each also a system property, {@code -Dbootstrap=...}): bootstrap (the sidecar, default
 * 127.0.0.1:9092: {@code go run ./cmd/sharetx}), group, input, output, txn-id, max-records (stop
 * once that many inputs are committed; 0: no limit), max-seconds (0: no limit), max-poll (records
 * per poll, and so per transaction; default 500), seed (create the topics and produce that many
 * inputs first), abort-every (abort every n-th transaction on purpose, to watch the inputs come
 * back). Ctrl-C stops it after the current transaction.
 */
public final class ConsumeTransformProduce {

    public static void main(String[] args) throws Exception {
        String bootstrap = ExampleSetup.opt(args, "bootstrap", "127.0.0.1:9092");
        String group = ExampleSetup.opt(args, "group", "ctp-example");
        String input = ExampleSetup.opt(args, "input", "orders");
        String output = ExampleSetup.opt(args, "output", "orders-upper");
        String txnId = ExampleSetup.opt(args, "txn-id", "ctp-example-1");
        long maxRecords = Long.parseLong(ExampleSetup.opt(args, "max-records", "0"));
        long maxSeconds = Long.parseLong(ExampleSetup.opt(args, "max-seconds", "0"));
        int seed = Integer.parseInt(ExampleSetup.opt(args, "seed", "0"));
        int abortEvery = Integer.parseInt(ExampleSetup.opt(args, "abort-every", "0"));

        if (seed > 0) {
            ExampleSetup.seed(bootstrap, group, input, "order", seed, output);
        }

        // Every client names the sidecar in bootstrap.servers.
        Map<String, Object> cc = new HashMap<>();
        cc.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, ExampleSetup.opt(args, "max-poll", "500")); // records per poll, and so per transaction
        Map<String, Object> pc = new HashMap<>();
        pc.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pc.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);

        // The stock KafkaShareConsumer in explicit acknowledgement mode (newShareConsumer sets it
        // and remembers the group for shareGroupMetadata).
        KafkaShareConsumer<String, String> consumer = ShareTransactions.newShareConsumer(cc, new StringDeserializer(), new StringDeserializer());
        SharetxProducer<String, String> producer = new SharetxProducer<>(pc, new StringSerializer(), new StringSerializer());

        // Ctrl-C: finish the current transaction, close the clients, print the summary.
        Thread main = Thread.currentThread();
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (done.getCount() == 0) {
                return; // the run ended by itself
            }
            stopping = true;
            consumer.wakeup();
            try {
                done.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                main.interrupt();
            }
        }));

        long in = 0, out = 0, commits = 0, aborts = 0;
        long start = System.currentTimeMillis(), lastReport = start, reportedIn = 0;
        int status = 0;
        try {
            consumer.subscribe(List.of(input));
            producer.initTransactions(); // fences an earlier instance with the same transactional id
            ShareGroupMetadata groupMetadata = ShareTransactions.shareGroupMetadata(consumer);
            System.out.printf("consuming %s as share group %s, producing to %s in transactions of %s, through %s%n",
                input, group, output, txnId, bootstrap);
            while (!stopping && (maxRecords == 0 || out < maxRecords)
                && (maxSeconds == 0 || System.currentTimeMillis() - start < maxSeconds * 1000)) {
                if (in > reportedIn && System.currentTimeMillis() - lastReport >= 2000) {
                    System.out.printf("progress: in=%d out=%d commits=%d aborts=%d%n", in, out, commits, aborts);
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

                producer.beginTransaction();
                try {
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(output, r.key(), transform(r.value())));
                    }
                    // The inputs' ACCEPT, bound to this transaction: applied if and only if it commits.
                    producer.sendShareAcknowledgementsToTransaction(
                        ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), groupMetadata);
                    if (abortEvery > 0 && (commits + aborts + 1) % abortEvery == 0) {
                        throw new KafkaException("aborting on purpose (--abort-every " + abortEvery + ")");
                    }
                    producer.commitTransaction(); // flushes the outputs first
                    // Lets the consumer poll again; the sidecar absorbs this acknowledgement.
                    ShareTransactions.acknowledgeHandedOver(consumer, records);
                    commits++;
                    out += records.count();
                } catch (ProducerFencedException | UnsupportedVersionException | AuthorizationException | AuthenticationException e) {
                    throw e; // fatal: another instance took over, or no sidecar; the consumer's close releases the records
                } catch (KafkaException e) {
                    // Neither the outputs nor the acknowledgements take effect. (After a commit
                    // that timed out, KafkaProducer refuses the abort, IllegalStateException, and
                    // takes only the commit again: we stop, and the next start's initTransactions
                    // completes or aborts the transaction.)
                    producer.abortTransaction();
                    // Needed when staging failed; absorbed (the sidecar released them) when it succeeded.
                    ShareTransactions.releaseForRedelivery(consumer, records);
                    aborts++;
                    System.out.printf("aborted a transaction of %d records: %s%n", records.count(), e.getMessage());
                }
            }
        } catch (KafkaException | IllegalStateException e) {
            System.out.println("stopping: " + e);
            status = 1;
        } finally {
            consumer.close(Duration.ofSeconds(10)); // sends the last acknowledgements, releases anything else
            producer.close(Duration.ofSeconds(10));
            System.out.printf("summary: in=%d out=%d commits=%d aborts=%d (%.1f s)%n",
                in, out, commits, aborts, (System.currentTimeMillis() - start) / 1000.0);
            System.out.flush();
            done.countDown();
        }
        if (!stopping) {
            System.exit(status); // not from a shutdown hook: that would deadlock
        }
    }

    private static volatile boolean stopping;

    /** The "transformation". */
    static String transform(String value) {
        return value == null ? null : value.toUpperCase(Locale.ROOT);
    }
}
