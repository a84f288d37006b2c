package io.sharetx.clients;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;

/**
 * Commits share-group acknowledgements in Kafka transactions of their own (KIP-1289 §3.2), for
 * pipelines without Kafka output: a Flink source acknowledging at its checkpoint, a consumer
 * writing to a database. Each {@link #commitAcknowledgements} begins a transaction, stages the
 * acknowledgements through the sidecar and commits; the transaction holds only the touch record
 * and the sidecar's shadow record.
 *
 * <pre>{@code
 * try (TransactionalShareAcknowledger acker = new TransactionalShareAcknowledger(props)) { // bootstrap = sidecar, transactional.id
 *     acker.initTransactions();
 *     while (running) {
 *         ConsumerRecords<K, V> records = consumer.poll(Duration.ofSeconds(1));
 *         database.write(records);
 *         try {
 *             acker.commitAcknowledgements(ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), groupId);
 *             ShareTransactions.acknowledgeHandedOver(consumer, records);
 *         } catch (ProducerFencedException e) {
 *             throw e;                                            // another instance took over
 *         } catch (TimeoutException e) {                         // commit outcome unknown: the next call retries it
 *             acker.commitAcknowledgements(ShareAcknowledgements.fromRecords(records, AcknowledgeType.ACCEPT), groupId);
 *             ShareTransactions.acknowledgeHandedOver(consumer, records);
 *         } catch (KafkaException e) {                           // aborted already
 *             ShareTransactions.releaseForRedelivery(consumer, records);
 *         }
 *     }
 * }
 * }</pre>
 *
 * Not thread safe.
 */
public class TransactionalShareAcknowledger implements AutoCloseable {

    private final SharetxProducer<?, ?> producer;
    private final boolean owned;
    private boolean open;
    /** The acknowledgements whose commit timed out (to be retried), or null. */
    private ShareAcknowledgements pendingCommit;

    /** An acknowledger with a producer of its own, built from {@code configs} (bootstrap.servers = the sidecar, transactional.id). */
    public TransactionalShareAcknowledger(Map<String, Object> configs) {
        this(new SharetxProducer<>(configs, new ByteArraySerializer(), new ByteArraySerializer()), true);
    }

    public TransactionalShareAcknowledger(Properties properties) {
        this(new SharetxProducer<>(properties, new ByteArraySerializer(), new ByteArraySerializer()), true);
    }

    /** An acknowledger that runs its transactions on {@code producer} (which it does not close); nothing else may use it meanwhile. */
    public TransactionalShareAcknowledger(SharetxProducer<?, ?> producer) {
        this(producer, false);
    }

    private TransactionalShareAcknowledger(SharetxProducer<?, ?> producer, boolean owned) {
        this.producer = Objects.requireNonNull(producer, "producer cannot be null");
        this.owned = owned;
        if (producer.transactionalId() == null) {
            if (owned) {
                producer.close(Duration.ZERO);
            }
            throw new IllegalArgumentException("a TransactionalShareAcknowledger needs a transactional producer (transactional.id)");
        }
    }

    /** {@code initTransactions} of the producer: fences earlier instances with the same transactional id. */
    public void initTransactions() {
        producer.initTransactions();
    }

    /** {@link #commitAcknowledgements(ShareAcknowledgements, ShareGroupMetadata)} with the member left to the sidecar. */
    public void commitAcknowledgements(ShareAcknowledgements acknowledgements, String groupId) {
        commitAcknowledgements(acknowledgements, ShareGroupMetadata.forGroup(groupId));
    }

    /**
     * Begins a transaction, stages {@code acknowledgements} in it and commits it: when it returns,
     * the acknowledgements are committed (the sidecar applies them to the group). Empty
     * acknowledgements do nothing. On failure the transaction is aborted (nothing takes effect;
     * records staged by the call are released by the sidecar) and the error is rethrown, except
     * after fatal errors (ProducerFencedException, UnsupportedVersionException, authorization and
     * authentication failures: close the acknowledger) and a {@code TimeoutException} of the
     * commit itself, whose outcome is unknown. After that time-out the commit is pending: the
     * producer may only retry it. Call {@code commitAcknowledgements} again: with the same
     * acknowledgements it retries the commit and returns once it is done; with others it first
     * completes the pending commit, then commits them in a transaction of their own. Closing the
     * acknowledger instead leaves the pending transaction to the coordinator (or to the next
     * {@code initTransactions} of its transactional id).
     */
    public void commitAcknowledgements(ShareAcknowledgements acknowledgements, ShareGroupMetadata groupMetadata) {
        Objects.requireNonNull(acknowledgements, "acknowledgements cannot be null");
        Objects.requireNonNull(groupMetadata, "groupMetadata cannot be null");
        if (pendingCommit != null) {
            ShareAcknowledgements pending = pendingCommit;
            try {
                producer.commitTransaction(); // KafkaProducer completes the commit that timed out
            } catch (TimeoutException e) {
                throw e; // still pending
            } catch (KafkaException e) {
                pendingCommit = null;
                abortUnlessFatal(e);
                throw e;
            }
            pendingCommit = null;
            open = false;
            if (pending.equals(acknowledgements)) {
                return;
            }
        }
        if (acknowledgements.isEmpty()) {
            return;
        }
        if (open) {
            abortAcknowledgements();
        }
        producer.beginTransaction();
        open = true;
        try {
            producer.sendShareAcknowledgementsToTransaction(acknowledgements, groupMetadata);
        } catch (KafkaException e) {
            abortUnlessFatal(e);
            throw e;
        }
        try {
            producer.commitTransaction();
            open = false;
        } catch (TimeoutException e) {
            pendingCommit = acknowledgements; // outcome unknown: the next commitAcknowledgements retries it
            throw e;
        } catch (KafkaException e) {
            abortUnlessFatal(e);
            throw e;
        }
    }

    private void abortUnlessFatal(KafkaException e) {
        if (e instanceof ProducerFencedException || e instanceof UnsupportedVersionException
            || e instanceof AuthorizationException || e instanceof AuthenticationException) {
            return;
        }
        try {
            abortAcknowledgements();
        } catch (KafkaException suppressed) {
            e.addSuppressed(suppressed);
        }
    }

    /**
     * Aborts the acknowledger's open transaction, if any: nothing of it takes effect.
     *
     * @throws IllegalStateException if its commit timed out: a commit in flight cannot be aborted
     *     (KafkaProducer's rule); retry it with {@link #commitAcknowledgements}, or close
     */
    public void abortAcknowledgements() {
        if (!open) {
            return;
        }
        if (pendingCommit != null) {
            throw new IllegalStateException("sharetx-clients: the last commitAcknowledgements timed out and its commit is pending; "
                + "call commitAcknowledgements again (with the same acknowledgements to retry it), or close the acknowledger");
        }
        producer.abortTransaction();
        open = false;
    }

    /** Aborts what is open and closes the producer if the acknowledger built it. */
    @Override
    public void close() {
        close(Duration.ofSeconds(30));
    }

    public void close(Duration timeout) {
        try {
            if (open && pendingCommit == null) {
                abortAcknowledgements();
            }
        } catch (KafkaException | IllegalStateException ignored) {
            // closing: the coordinator aborts the transaction when it times out (a pending commit
            // is settled by the coordinator or the next initTransactions of the transactional id)
        } finally {
            if (owned) {
                producer.close(timeout);
            }
        }
    }

    /** The producer the acknowledger runs its transactions on. */
    public SharetxProducer<?, ?> producer() {
        return producer;
    }
}
