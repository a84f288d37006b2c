// Package client is the franz-go side of sharetx: it lets an application bind
// share-group acknowledgements to its Kafka transaction (KIP-1289,
// transactional share-group acknowledgements). The acknowledgements are sent
// to the sharetx proxy in a TxnShareAcknowledge request (a new API key,
// default 95); the proxy stages them inside the transaction and applies them
// to the share group if and only if the transaction commits.
//
// # Setup
//
// The transactional producer is a Producer: NewProducer builds its kgo
// client from your kgo options (kgo.SeedBrokers naming the proxy,
// kgo.TransactionalID) and the sharetx settings (APIKey, ShadowTopic,
// Partitioner, MaxVersions: options of NewProducer, not of kgo). It adds the
// TxnShareAcknowledge key to kgo's version table (kgo refuses to send keys
// it does not know) and installs a record partitioner that can place the
// touch record (below) on an exact partition, so do not pass
// kgo.RecordPartitioner, or kgo.MaxVersions without the key, in the kgo
// options (NewProducer refuses them); use the Partitioner and MaxVersions
// options instead. The share consumer is a plain kgo client, seeded with
// the proxy too. To hold a transaction's worth of records per fetch, as a
// consumer group's PollRecords(n) does, give it kgo.ShareMaxRecords(n) and
// kgo.ShareMaxRecordsStrict; the latter also stops it fetching ahead of
// the polls unless kgo.MaxConcurrentFetches is set: with
// kgo.MaxConcurrentFetches(1) the next poll's records are fetched while
// this transaction commits (docs/benchmarks.md measured 20-30 % more
// throughput at 100 and 1000 records per transaction). The cost: a fetch
// still long-polling when the transaction commits (no records to hand
// out) holds the committed acknowledgements until it returns, at most the
// fetch's max wait (docs/design.md §6.2).
//
// # Consume-transform-produce
//
// The recommended order, per poll: begin a transaction, Produce the outputs
// asynchronously, send the acknowledgements while the outputs are in flight
// (SendShareAcknowledgementsToTransaction: no touch record is needed, and
// the proxy's shadow write overlaps the produce), Flush, commit
// (EndTransaction); on any failure abort and release the records.
//
//	consumer, _ := kgo.NewClient(
//		kgo.SeedBrokers("sharetx:9092"),
//		kgo.ShareGroup("orders-workers"),
//		kgo.ConsumeTopics("orders"),
//	)
//	producer, _ := client.NewProducer([]kgo.Opt{
//		kgo.SeedBrokers("sharetx:9092"),
//		kgo.TransactionalID("orders-worker-1"),
//	})
//	md := client.NewShareGroupMetadata("orders-workers")
//
//	for {
//		records := consumer.PollRecords(ctx, 100).Records()
//		if len(records) == 0 {
//			continue
//		}
//		if err := producer.BeginTransaction(); err != nil {
//			return err
//		}
//		var outputs kgo.FirstErrPromise
//		acks := client.NewShareAcknowledgements()
//		for _, r := range records {
//			out, err := process(r)
//			if err != nil {
//				acks.Add(r, client.Reject) // poison record: archived on commit
//				continue
//			}
//			producer.Produce(ctx, out, outputs.Promise())
//			acks.Add(r, client.Accept)
//		}
//		err := producer.SendShareAcknowledgementsToTransaction(ctx, acks, md)
//		if ferr := producer.Flush(ctx); err == nil {
//			err = ferr
//		}
//		if err == nil {
//			err = outputs.Err() // the first output that failed, if any
//		}
//		if err == nil {
//			err = producer.EndTransaction(ctx, kgo.TryCommit)
//		}
//		if err != nil {
//			// Abort, and release the records so they are redelivered.
//			// (If the commit itself failed with an unknown outcome,
//			// abort is still the right call: kgo retries it safely.)
//			if aerr := producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
//				log.Printf("abort: %v", aerr)
//			}
//			client.ReleaseForRedelivery(records...) // always safe; needed when staging failed
//		}
//		// Records processed by a committed transaction need nothing
//		// more: the proxy applies their acknowledgements.
//	}
//
// # The abort rule: release what was not staged
//
// franz-go's share consumer implicitly acknowledges every record of the
// previous poll with ACCEPT on the next PollRecords (and releases
// unacknowledged records on Close). The proxy absorbs client acknowledgements
// of offsets that are staged in a transaction or committed, so after a
// commit nothing needs to be done. When a transaction whose acknowledgements
// were staged aborts (EndTransaction abort, a failed commit, the transaction
// timing out, the producer being fenced), the proxy releases the records
// upstream at once, as a broker with KIP-1289 does: they are redelivered,
// possibly to another member, and the consumer's implicit acknowledgement of
// that delivery is absorbed, never applied to a redelivery.
//
// IMPORTANT: when SendShareAcknowledgementsToTransaction itself fails,
// nothing was staged: the records are still acquired by this member, and the
// next poll's implicit ACCEPT would mark them processed although no
// transaction processed them. Call ReleaseForRedelivery with them before
// polling again (it is always safe, so calling it after every abort is fine
// too). Do not Ack records yourself (Record.Ack) while their acknowledgement
// is bound to a transaction; a terminal Ack cannot be changed to RELEASE
// afterwards.
//
// # Applications without Kafka output: TransactionalShareAcknowledger
//
// An application whose effects live outside Kafka (a stream processor that
// checkpoints its state, a consumer that writes to a database) has no
// transaction of its own to bind acknowledgements to.
// TransactionalShareAcknowledger runs one for it, on a Producer dedicated to
// it:
//
//	producer, _ := client.NewProducer([]kgo.Opt{
//		kgo.SeedBrokers("sharetx:9092"),
//		kgo.TransactionalID("orders-checkpointer-1"),
//	})
//	defer producer.Close()
//	acker, err := client.NewTransactionalShareAcknowledger(producer, client.NewShareGroupMetadata("orders-workers"))
//	if err != nil {
//		return err
//	}
//	defer acker.Close(ctx) // aborts what is not committed, releases the records
//
//	// retry runs Flush or Commit until it succeeds or fails terminally
//	// (ErrFenced: another instance took over), before the next poll.
//	retry := func(op func(context.Context) error) error {
//		err := op(ctx)
//		for ctx.Err() == nil && (errors.Is(err, client.ErrRetriable) || errors.Is(err, client.ErrRejected)) {
//			time.Sleep(time.Second) // everything the proxy did not refuse is kept
//			err = op(ctx)
//		}
//		return err
//	}
//	for {
//		for _, r := range consumer.PollRecords(ctx, 100).Records() {
//			state.Apply(r)
//			acker.Acknowledge(r, client.Accept) // or client.Reject
//		}
//		// Stage them before polling again (see the rules below).
//		if err := retry(acker.Flush); err != nil {
//			return err
//		}
//		if state.CheckpointCompleted() {
//			if err := retry(acker.Commit); err != nil {
//				return err
//			}
//		}
//	}
//
// Acknowledge buffers (it is safe for concurrent use and never waits for the
// cluster). Flush stages the buffer in the acknowledger's open transaction,
// beginning one if needed. Commit stages what is buffered and commits the
// transaction; with nothing buffered or staged it sends nothing. Abort drops
// everything, aborts the transaction and releases the records
// (ReleaseForRedelivery); Close does the same and refuses further use
// (ErrClosed).
//
// The rules, all from the implicit ACCEPT described above:
//
//   - Flush (or Commit) before the share consumer polls again. The proxy holds
//     back the consumer's implicit ACCEPT only for staged records; for a
//     record merely buffered it reaches the broker, and the record is
//     acknowledged whether or not the transaction ever commits.
//   - After a failed Flush or Commit the transaction is aborted and the
//     acknowledgements kept are no longer staged: Flush or Commit again (or
//     Abort) before polling.
//   - A transaction stays open from the first Flush to the Commit: end it
//     within the producer's kgo.TransactionTimeout (40 s by default), or the
//     coordinator aborts it and the next Commit fails. Meanwhile the proxy
//     renews the staged records' acquisition locks.
//   - After an abort the records are ACQUIRED by the share consumer again.
//     Those of its latest poll are released and redelivered at once; those
//     whose implicit ACCEPT it already sent (earlier polls; held back by the
//     proxy) cannot be released by the client any more and stay acquired
//     until their acquisition lock expires or the consumer leaves, then are
//     redelivered.
//
// Failures are *TransactionError, of one kind matched with errors.Is:
// ErrRetriable (the transaction was aborted, every acknowledgement kept:
// Commit again), ErrRejected (the proxy refused some acknowledgements,
// *PartitionErrors: those are dropped and their records released, the rest
// kept), ErrTerminal (the producer can run no more transactions, ErrFenced when
// a newer instance with the same transactional id fenced it: every later call
// returns the same error; Close the acknowledger and start over). errors.Is
// reaches the cause too (kerr errors, context errors). A commit whose outcome
// is unknown (TransactionError.MaybeCommitted) is retriable: if it did commit,
// the proxy refuses the acknowledgements again (ErrRejected), so none takes
// effect twice.
//
// # Ack-only transactions and the touch record
//
// kgo's EndTransaction sends no EndTxn when the client produced nothing in
// the transaction, so a transaction that only acknowledges records (for
// example one that rejects a whole poll) would never commit. To prevent that,
// the first SendShareAcknowledgementsToTransaction of a transaction that has
// not produced a record yet produces one small touch record (value "sharetx-touch", header
// "sharetx"="touch") to the proxy's shadow topic, on a partition the proxy
// never writes this transactional id's staged acknowledgements to. The touch
// record is produced before the TxnShareAcknowledge request, so that a
// producer that is not inside a transaction fails before anything is staged.
// Transactions are told apart by producer id and epoch, which change on every
// EndTxn under transaction version 2; without transaction version 2 every
// call touches. A transaction that already produced a record successfully
// (the Producer's produce hook notes it), or has records buffered or in
// flight when the acknowledgements are sent, needs no touch.
// In the usual consume-transform-produce loop, Produce the outputs
// asynchronously, send the acknowledgements while they are in flight, then
// Flush and EndTransaction: the proxy's shadow write overlaps the produce
// and no touch is written. The shadow topic must have at least two
// partitions. The application's principal needs no WRITE on the shadow topic
// (DESCRIBE only, to look up its partitions): the proxy relays the touch
// record of the caller's own transaction with its own credentials.
//
// # Limits
//
// franz-go does not expose the share consumer's member id and epoch, so
// NewShareGroupMetadata leaves them to the proxy (MemberID "", MemberEpoch
// -1); the proxy resolves the member that acquired the offsets. Only ACCEPT
// and REJECT may be bound to a transaction.
package client
