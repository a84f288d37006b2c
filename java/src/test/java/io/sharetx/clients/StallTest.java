package io.sharetx.clients;

import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.errors.TimeoutException;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static io.sharetx.clients.Sidecar.Setup.pollSome;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sidecar that does not answer: sendShareAcknowledgementsToTransaction gives up after
 * max.block.ms with TimeoutException, as the reference client does; the application aborts,
 * releases, and the records are processed again once the sidecar answers. The sidecar is a proxy
 * of this test's own (test-with-proxy.sh starts it and names it in SHARETX_STALL_BOOTSTRAP and
 * SHARETX_STALL_PID), stopped with SIGSTOP and resumed with SIGCONT.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class StallTest {

    static final long MAX_BLOCK_MS = 4_000;

    @Test
    void stalledSidecarIsTimeout() throws Exception {
        String pid = stallPid();
        try (Sidecar.Setup s = new Sidecar.Setup(1, 2, stallConf())) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer(Sidecar.unique("jstall"), Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) MAX_BLOCK_MS));
            p.initTransactions();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            ConsumerRecords<String, String> rs = pollSome(c, ScenariosTest.POLL);
            p.beginTransaction();
            long t0 = System.nanoTime();
            signal("STOP", pid);
            try {
                assertThrows(TimeoutException.class, () -> p.sendShareAcknowledgementsToTransaction(
                    ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), md), "a sidecar stopped with SIGSTOP");
                long ms = (System.nanoTime() - t0) / 1_000_000;
                System.out.printf("stalled sidecar -> TimeoutException after %d ms (max.block.ms %d)%n", ms, MAX_BLOCK_MS);
                assertTrue(ms >= MAX_BLOCK_MS - 100, "gave up after " + ms + " ms, before max.block.ms");
            } finally {
                signal("CONT", pid);
            }
            // The application's answer to any failure: abort, release, poll again. Whether the
            // stopped request was staged when the sidecar resumed or not, the abort decides.
            p.abortTransaction();
            ShareTransactions.releaseForRedelivery(c, rs);
            ScenariosTest.drain(p, c, md, 0, 2);
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(ScenariosTest.QUIET), "records left after the time-out, the abort and the retry");
        }
    }

    /**
     * The acknowledger's commit times out (the sidecar, which also forwards the producer's EndTxn,
     * is stopped): abortAcknowledgements is refused (a commit in flight cannot be aborted), and
     * commitAcknowledgements with the same acknowledgements retries the commit and succeeds.
     */
    @Test
    void acknowledgerRetriesATimedOutCommit() throws Exception {
        String pid = stallPid();
        try (Sidecar.Setup s = new Sidecar.Setup(1, 2, stallConf())) {
            KafkaShareConsumer<String, String> c = s.consumer();
            Map<String, Object> pc = new java.util.HashMap<>(s.conf);
            pc.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Sidecar.unique("jstallack"));
            pc.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) MAX_BLOCK_MS);
            StallingProducer p = new StallingProducer(pc, pid);
            try (TransactionalShareAcknowledger acker = new TransactionalShareAcknowledger(p)) {
                acker.initTransactions();
                ConsumerRecords<String, String> rs = pollSome(c, ScenariosTest.POLL);
                ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT);
                p.stallNextCommit = true;
                assertThrows(TimeoutException.class, () -> acker.commitAcknowledgements(acks, s.group), "a commit through a stopped sidecar");
                assertThrows(IllegalStateException.class, acker::abortAcknowledgements, "aborting a commit in flight");
                acker.commitAcknowledgements(acks, s.group); // the retry
                ShareTransactions.acknowledgeHandedOver(c, rs);
                int done = rs.count();
                while (done < 2) {
                    ConsumerRecords<String, String> more = pollSome(c, ScenariosTest.POLL);
                    acker.commitAcknowledgements(ShareAcknowledgements.fromRecords(more, AcknowledgeType.ACCEPT), s.group);
                    ShareTransactions.acknowledgeHandedOver(c, more);
                    done += more.count();
                }
            } finally {
                p.close(Duration.ofSeconds(10));
            }
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(ScenariosTest.QUIET), "records left after the retried commit");
        }
    }

    /** A SharetxProducer whose next commitTransaction runs while the sidecar is stopped (resumed after it returns). */
    static final class StallingProducer extends SharetxProducer<byte[], byte[]> {
        final String pid;
        volatile boolean stallNextCommit;

        StallingProducer(Map<String, Object> conf, String pid) {
            super(conf, new org.apache.kafka.common.serialization.ByteArraySerializer(), new org.apache.kafka.common.serialization.ByteArraySerializer());
            this.pid = pid;
        }

        @Override
        public void commitTransaction() {
            if (!stallNextCommit) {
                super.commitTransaction();
                return;
            }
            stallNextCommit = false;
            try {
                signal("STOP", pid);
                try {
                    super.commitTransaction();
                } finally {
                    signal("CONT", pid);
                }
            } catch (RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
    }

    /** The stall proxy's client configuration; skips the test without it. */
    static Map<String, Object> stallConf() {
        stallPid();
        return Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("SHARETX_STALL_BOOTSTRAP").trim());
    }

    /** The stall proxy's process id; skips the test without it. */
    static String stallPid() {
        String bs = System.getenv("SHARETX_STALL_BOOTSTRAP");
        String pid = System.getenv("SHARETX_STALL_PID");
        Assumptions.assumeTrue(bs != null && !bs.isBlank() && pid != null && !pid.isBlank(),
            "SHARETX_STALL_BOOTSTRAP/SHARETX_STALL_PID are not set: no proxy of this test's own to stop (test-with-proxy.sh starts one)");
        return pid.trim();
    }

    static void signal(String sig, String pid) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, pid).inheritIO().start();
        assertEquals(0, k.waitFor(), "kill -" + sig + " " + pid);
    }
}
