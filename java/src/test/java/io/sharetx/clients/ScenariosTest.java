package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static io.sharetx.clients.Sidecar.Setup.pollSome;
import static io.sharetx.clients.Sidecar.list;
import static io.sharetx.clients.Sidecar.offsets;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The reference implementation's scenarios (ShareConsumerTransactionTest and sharetx's
 * e2e/reference_client_test.go, e2e/kip1289_cases_test.go), with the stock KafkaShareConsumer in
 * explicit mode and this library, against the sidecar named by SHARETX_BOOTSTRAP in front of a
 * real cluster.
 */
@Timeout(value = 4, unit = TimeUnit.MINUTES)
class ScenariosTest {

    static final Duration POLL = Duration.ofSeconds(60);
    static final Duration QUIET = Duration.ofSeconds(3);

    /** commit: one record, its output and its ACCEPT in one transaction; the output is committed, nothing is left. */
    @Test
    void commitWithOutputRecordInSameTransaction() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 1)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            p.beginTransaction();
            for (ConsumerRecord<String, String> r : rs) {
                p.send(new ProducerRecord<>(s.out, r.key(), "out-" + r.value()));
            }
            p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT),
                ShareTransactions.shareGroupMetadata(c));
            p.commitTransaction();
            ShareTransactions.acknowledgeHandedOver(c, rs);
            c.poll(Duration.ofMillis(500)); // sends the consumer's acknowledgement: absorbed
            assertEquals(List.of("out-value-0"), s.committedOutputs(QUIET));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records delivered again after the commit");
        }
    }

    /** abort → redelivered: neither the output nor the ACCEPT survives; the record comes back to the member. */
    @Test
    void abortIsRedelivered() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 1)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            p.beginTransaction();
            p.send(new ProducerRecord<>(s.out, "k", "aborted-output"));
            p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT),
                ShareTransactions.shareGroupMetadata(c));
            ShareTransactions.acknowledgeHandedOver(c, rs);
            p.abortTransaction();
            ShareTransactions.releaseForRedelivery(c, rs); // replaces the ACCEPT; absorbed: the sidecar released it
            long ms = waitRedelivered(c, list(rs), Duration.ofSeconds(30), again -> {
                // Processed again, in a transaction that commits this time.
                p.beginTransaction();
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(again, AcknowledgeType.ACCEPT),
                    ShareTransactions.shareGroupMetadata(c));
                p.commitTransaction();
                ShareTransactions.acknowledgeHandedOver(c, again);
            });
            System.out.printf("abort -> redelivered: %d ms%n", ms);
            assertEquals(List.of(), s.committedOutputs(QUIET));
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the redelivery committed");
        }
    }

    /** reject: a committed REJECT archives the record; it is never delivered again. */
    @Test
    void commitReject() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 1)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            p.beginTransaction();
            p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.REJECT),
                ShareTransactions.shareGroupMetadata(c));
            ShareTransactions.acknowledgeHandedOver(c, rs);
            p.commitTransaction();
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "a committed REJECT was delivered again");
        }
    }

    /**
     * invalid record state: acknowledgements of records no longer acquired (their transaction
     * committed) fail with InvalidRecordStateException, an abortable error; the committed outcome
     * stands and nothing is delivered again.
     */
    @Test
    void acknowledgingCommittedRecordsIsInvalidRecordState() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 2)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            transact(p, c, rs, md, AcknowledgeType.ACCEPT);
            ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT);
            p.beginTransaction();
            assertThrows(InvalidRecordStateException.class, () -> p.sendShareAcknowledgementsToTransaction(acks, md),
                "the same acknowledgements again, after their commit");
            assertThrows(KafkaException.class, p::commitTransaction, "commit after an abortable error");
            p.abortTransaction();
            drain(p, c, md, rs.count(), 2); // the other input, if the first poll did not bring it
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the commit and the refused second staging");
        }
    }

    /** several polls in one transaction: each poll staged, acknowledged on the consumer, polled on; one commit. */
    @Test
    void commitAcrossMultiplePolls() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 0)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            p.beginTransaction();
            int polls = 0;
            Set<Long> seen = new HashSet<>();
            for (int i = 0; i < 3; i++) {
                s.produce(1, i); // one record at a time: one poll each
                ConsumerRecords<String, String> rs = pollSome(c, POLL);
                polls++;
                seen.addAll(offsets(list(rs)));
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), md);
                ShareTransactions.acknowledgeHandedOver(c, rs); // so the consumer may poll again
            }
            p.commitTransaction();
            assertEquals(3, polls);
            assertEquals(3, seen.size());
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the multi-poll commit");
        }
    }

    /** several partitions: 12 partitions, 48 records, one transaction. */
    @Test
    void commitAcrossManyPartitions() throws Exception {
        final int parts = 12;
        try (Sidecar.Setup s = new Sidecar.Setup(parts, 4 * parts)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            p.beginTransaction();
            Set<Integer> partitions = new HashSet<>();
            int n = 0;
            while (n < 4 * parts) {
                ConsumerRecords<String, String> rs = pollSome(c, POLL);
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), md);
                ShareTransactions.acknowledgeHandedOver(c, rs);
                rs.forEach(r -> partitions.add(r.partition()));
                n += rs.count();
            }
            p.commitTransaction();
            assertEquals(parts, partitions.size());
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the 12-partition commit");
        }
    }

    /**
     * fenced member epoch: with the member's real id (as the group has it), an epoch one ahead and one
     * behind fail with CommitFailedException; after the abort the record is still to be delivered;
     * with the current epoch the same acknowledgement stages and commits.
     */
    @Test
    void fencedMemberEpochs() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 1)) {
            String clientId = Sidecar.unique("jepoch");
            KafkaShareConsumer<String, String> c = s.consumer(clientId, Map.of());
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            ShareGroupMetadata m = s.memberOf(clientId);
            ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT);
            for (int epoch : new int[] {m.memberEpoch() + 1, m.memberEpoch() - 1}) {
                p.beginTransaction();
                ShareGroupMetadata bad = new ShareGroupMetadata(m.groupId(), m.memberId(), epoch);
                CommitFailedException e = assertThrows(CommitFailedException.class, () -> p.sendShareAcknowledgementsToTransaction(acks, bad));
                assertTrue(e.getMessage().contains("STALE_MEMBER_EPOCH"), e.getMessage());
                assertThrows(KafkaException.class, p::commitTransaction, "commit after an abortable error");
                p.abortTransaction();
            }
            // The reference client's metadata, right: stages (the epoch read from the group may
            // move on meanwhile: a new transaction with the newer one).
            for (int attempt = 1; ; attempt++) {
                p.beginTransaction();
                try {
                    p.sendShareAcknowledgementsToTransaction(acks, s.memberOf(clientId));
                    p.abortTransaction();
                    break;
                } catch (CommitFailedException e) {
                    p.abortTransaction();
                    if (attempt == 3) {
                        throw e;
                    }
                }
            }
            ShareTransactions.releaseForRedelivery(c, rs);
            s.closeClients();
            List<ConsumerRecord<String, String>> left = s.leftForFreshMember(QUIET);
            assertEquals(offsets(list(rs)), offsets(left), "after the refused stagings and the abort the record is to be delivered");
        }
    }

    /** zombie producer: once a newer instance with the same transactional id initialised, the old one cannot stage. */
    @Test
    void zombieProducerIsFenced() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 4)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            String txnId = Sidecar.unique("jzombie");
            SharetxProducer<String, String> zombie = s.producer(txnId, Map.of());
            zombie.initTransactions();
            List<ConsumerRecord<String, String>> rs = new ArrayList<>();
            while (rs.size() < 4) {
                ConsumerRecords<String, String> got = pollSome(c, POLL);
                got.forEach(rs::add);
                if (rs.size() < 4) {
                    fail("want the 4 records in one poll, got " + got.count()); // explicit mode: one poll to hand over
                }
            }
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(s.out, "k", "zombie")).get();
            SharetxProducer<String, String> fresh = s.producer(txnId, Map.of());
            fresh.initTransactions();
            fresh.beginTransaction();
            fresh.send(new ProducerRecord<>(s.out, "k", "fresh")).get();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            ShareAcknowledgements acks = ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT);
            KafkaException e = assertThrows(KafkaException.class, () -> zombie.sendShareAcknowledgementsToTransaction(acks, md));
            assertTrue(e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException,
                "zombie: " + e.getClass().getName() + ": " + e.getMessage());
            assertThrows(KafkaException.class, () -> zombie.sendShareAcknowledgementsToTransaction(acks, md), "fatal: refused again");
            // The fresh instance stages the same records and commits.
            fresh.sendShareAcknowledgementsToTransaction(acks, md);
            fresh.commitTransaction();
            ShareTransactions.acknowledgeHandedOver(c, rs);
            c.poll(Duration.ofMillis(500));
            assertEquals(List.of("fresh"), s.committedOutputs(QUIET));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the fresh producer committed");
        }
    }

    /**
     * transaction timeout: a transaction that never ends is aborted by the coordinator; the sidecar
     * releases its records (redelivered), and a new transaction stages and commits them.
     */
    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void transactionTimeout() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 4)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            Map<String, Object> shortTxn = new HashMap<>();
            shortTxn.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 1000);
            SharetxProducer<String, String> stuck = s.producer(Sidecar.unique("jstuck"), shortTxn);
            stuck.initTransactions();
            List<ConsumerRecord<String, String>> rs = list(pollSome(c, POLL));
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            stuck.beginTransaction();
            stuck.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), md);
            ShareTransactions.acknowledgeHandedOver(c, rs);
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            // No commit, no abort: only the coordinator's time-out ends it.
            long ms = waitRedelivered(c, rs, Duration.ofSeconds(120), again -> {
                p.beginTransaction();
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(again, AcknowledgeType.ACCEPT), md);
                p.commitTransaction();
                ShareTransactions.acknowledgeHandedOver(c, again);
            });
            System.out.printf("transaction timeout -> redelivered: %d ms%n", ms);
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the redelivery committed");
        }
    }

    /** ack-only transaction: produces nothing, only REJECTs whole polls, and still commits (the touch record). */
    @Test
    void ackOnlyTransactionCommits() throws Exception {
        final int n = 10;
        try (Sidecar.Setup s = new Sidecar.Setup(1, n)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            ShareGroupMetadata md = ShareTransactions.shareGroupMetadata(c);
            int done = 0;
            while (done < n) {
                ConsumerRecords<String, String> rs = pollSome(c, POLL);
                p.beginTransaction();
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.REJECT), md);
                p.commitTransaction();
                ShareTransactions.acknowledgeHandedOver(c, rs);
                done += rs.count();
            }
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records delivered again after ack-only transactions committed");
        }
    }

    /** TransactionalShareAcknowledger: commits acknowledgements with no Kafka output; an abort leaves them to be redelivered. */
    @Test
    void transactionalShareAcknowledger() throws Exception {
        try (Sidecar.Setup s = new Sidecar.Setup(1, 4)) {
            KafkaShareConsumer<String, String> c = s.consumer();
            Map<String, Object> cfg = new HashMap<>();
            cfg.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, Sidecar.bootstrap());
            cfg.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Sidecar.unique("jacker"));
            try (TransactionalShareAcknowledger acker = new TransactionalShareAcknowledger(cfg)) {
                acker.initTransactions();
                acker.commitAcknowledgements(ShareAcknowledgements.empty(), s.group); // nothing
                List<ConsumerRecord<String, String>> rs = list(pollSome(c, POLL));
                acker.commitAcknowledgements(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), s.group);
                ShareTransactions.acknowledgeHandedOver(c, rs);
                // Acknowledging the same offsets again is refused (they are committed): aborted, rethrown.
                assertThrows(KafkaException.class,
                    () -> acker.commitAcknowledgements(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT), s.group));
                acker.abortAcknowledgements();
            }
            c.poll(Duration.ofMillis(500));
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(QUIET), "records left after the acknowledger committed");
        }
    }

    /** Without a sidecar (straight to the cluster) the call fails with UnsupportedVersionException, before anything is written. */
    @Test
    void noSidecarIsUnsupportedVersion() throws Exception {
        Sidecar.bootstrap();
        String kafka = System.getenv(Sidecar.KAFKA_ENV);
        Assumptions.assumeTrue(kafka != null && !kafka.isBlank(), Sidecar.KAFKA_ENV + " is not set (the cluster's own bootstrap)");
        Map<String, Object> cfg = new HashMap<>();
        cfg.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka);
        cfg.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Sidecar.unique("jdirect"));
        cfg.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20_000);
        try (SharetxProducer<String, String> p = new SharetxProducer<>(cfg, new org.apache.kafka.common.serialization.StringSerializer(),
            new org.apache.kafka.common.serialization.StringSerializer())) {
            p.initTransactions();
            p.beginTransaction();
            ShareAcknowledgements acks = ShareAcknowledgements.builder().add(
                new org.apache.kafka.common.TopicIdPartition(org.apache.kafka.common.Uuid.randomUuid(), 0, "whatever"), 0,
                AcknowledgeType.ACCEPT).build();
            assertThrows(UnsupportedVersionException.class, () -> p.sendShareAcknowledgementsToTransaction(acks,
                ShareGroupMetadata.forGroup("g")));
            assertInstanceOf(UnsupportedVersionException.class, assertThrows(KafkaException.class, p::commitTransaction));
            p.abortTransaction();
        }
    }

    /** One transaction of {@code rs}'s acknowledgements of {@code type}: begin, stage, acknowledgeHandedOver, commit. */
    static void transact(SharetxProducer<String, String> p, KafkaShareConsumer<String, String> c, ConsumerRecords<String, String> rs,
                         ShareGroupMetadata md, AcknowledgeType type) {
        p.beginTransaction();
        p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, type), md);
        ShareTransactions.acknowledgeHandedOver(c, rs);
        p.commitTransaction();
    }

    /** Polls and commits (ACCEPT, a transaction per poll) until {@code done} reaches {@code total}. */
    static void drain(SharetxProducer<String, String> p, KafkaShareConsumer<String, String> c, ShareGroupMetadata md, int done, int total) {
        while (done < total) {
            ConsumerRecords<String, String> rs = pollSome(c, POLL);
            transact(p, c, rs, md, AcknowledgeType.ACCEPT);
            done += rs.count();
        }
    }

    /**
     * Polls until every record of {@code want} is delivered again (delivery count at least 2),
     * handing each poll's redeliveries to {@code handler}, which must acknowledge them (explicit
     * mode) before the next poll; returns how long it took.
     */
    static long waitRedelivered(KafkaShareConsumer<String, String> c, List<ConsumerRecord<String, String>> want, Duration within,
                                java.util.function.Consumer<List<ConsumerRecord<String, String>>> handler) {
        long t0 = System.nanoTime();
        Set<Long> left = offsets(want);
        long end = System.currentTimeMillis() + within.toMillis();
        while (!left.isEmpty()) {
            if (System.currentTimeMillis() > end) {
                fail(left.size() + " of " + want.size() + " records not redelivered within " + within);
            }
            List<ConsumerRecord<String, String>> mine = new ArrayList<>();
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                if (left.remove(((long) r.partition() << 40) | r.offset())) {
                    assertTrue(r.deliveryCount().orElse((short) 0) >= 2, "redelivered with delivery count " + r.deliveryCount());
                    mine.add(r);
                } else {
                    c.acknowledge(r, AcknowledgeType.RELEASE); // not one of ours
                }
            }
            if (!mine.isEmpty()) {
                handler.accept(mine);
            }
        }
        return (System.nanoTime() - t0) / 1_000_000;
    }
}
