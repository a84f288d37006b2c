/**
 * KIP-1289's client API (transactional share-group acknowledgements) for the stock kafka-clients
 * (4.2 and newer), through the sharetx sidecar: the application binds ACCEPT or REJECT of records
 * its share consumer acquired to its Kafka transaction, and they take effect if and only if the
 * transaction commits. The class and method names are the KIP's, so moving to the KIP's own
 * client later means changing imports (and {@link io.sharetx.clients.ShareTransactions#shareGroupMetadata}
 * to {@code consumer.shareGroupMetadata()}).
 *
 * <h2>Pieces</h2>
 * <ul>
 *   <li>{@link io.sharetx.clients.SharetxProducer}: a {@code KafkaProducer} with
 *       {@code sendShareAcknowledgementsToTransaction(ShareAcknowledgements, ShareGroupMetadata)}.</li>
 *   <li>{@link io.sharetx.clients.ShareAcknowledgements}, {@link io.sharetx.clients.ShareAcknowledgementBatch},
 *       {@link io.sharetx.clients.ShareGroupMetadata}: the KIP's value types.</li>
 *   <li>{@link io.sharetx.clients.ShareTransactions}: the consumer side (explicit mode, the group's
 *       metadata, what to do with handed-over records after commit and abort).</li>
 *   <li>{@link io.sharetx.clients.TransactionalShareAcknowledger}: transactions that hold only
 *       acknowledgements, for pipelines without Kafka output.</li>
 * </ul>
 *
 * <h2>On the wire</h2>
 * Every client connects to the sidecar ({@code bootstrap.servers} = the sidecar; it advertises
 * itself for every broker). The stock producer cannot send an API key it does not know, so the
 * library opens connections of its own, to the listener the metadata names for each partition's
 * leader, with kafka-clients' own network and security layer configured from the producer's
 * configuration ({@code security.protocol}, {@code ssl.*}, {@code sasl.*} apply unchanged: SSL,
 * SASL_PLAINTEXT and SASL_SSL with any mechanism), and sends TxnShareAcknowledge v0 in the
 * reference implementation's layout (API key {@code sharetx.api.key}, default 95; request header
 * v2), one request per leader. The producer's id and epoch are not visible through the stock API.
 * When the transaction's outputs were sent before the call, the library reads them from
 * kafka-clients' transaction manager (by reflection, {@code NetworkCompat.producerIdAndEpoch}) and
 * names them, and it sets sharetx's RideProduce extension while outputs are unacknowledged and
 * flushes them as soon as the call is written (their Produce leaves at once, not after
 * {@code linger.ms}), so the sidecar appends the shadow record to their Produce or writes it after
 * the one in flight. Otherwise it sends ProducerId/ProducerEpoch -1/-1: the
 * sidecar's extension for "the ones this sidecar saw for the transactional id" (InitProducerId,
 * EndTxn, transactional produce all pass through it). The member is "" / -1 unless the application
 * names it: "the member that acquired the offsets".
 *
 * <h2>The touch record</h2>
 * The stock {@code KafkaProducer} ends a transaction in which it produced nothing locally, without
 * EndTxn; the sidecar's shadow record would then never be resolved by a COMMIT and the
 * coordinator would abort it at the transaction timeout. So the first
 * {@code sendShareAcknowledgementsToTransaction} of each transaction produces one record to the
 * sidecar's shadow topic (value {@code sharetx-touch}, header {@code sharetx: touch}, partition
 * {@code (fnv32a(transactional.id) mod n + 1) mod n}), the Go library's touch record, and waits
 * for it, unless outputs of the transaction were sent first and the producer's id and epoch could
 * be read. Behind -1/-1 the touch is also how the library makes sure its producer is not fenced
 * before the sidecar resolves -1/-1 to the transactional id's current epoch (a zombie's touch is
 * refused by the broker with {@code ProducerFencedException}); with its own id and epoch a zombie
 * is refused by the sidecar (an older epoch than it knows: PRODUCER_FENCED) or by the broker (the
 * shadow write with an epoch the coordinator bumped), before anything is staged. The touch is
 * also how a sidecar learns the producer id and epoch behind -1/-1: a sidecar that has not seen
 * them (it restarted during the transaction) answers COORDINATOR_LOAD_IN_PROGRESS, and the library
 * produces the touch record again, through it, before it retries (at most three times per call).
 * The shadow topic needs at least two partitions.
 *
 * <h2>The consumer pattern</h2>
 * The stock {@code KafkaShareConsumer}, in explicit acknowledgement mode: see
 * {@link io.sharetx.clients.ShareTransactions}. In short: stage, then acknowledge the handed-over
 * records on the consumer ({@code acknowledgeHandedOver}, absorbed by the sidecar), commit; on any
 * failure abort and {@code releaseForRedelivery}; then poll again.
 */
package io.sharetx.clients;
