package client

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// How a TransactionalShareAcknowledger fails: a failed Flush or Commit is
// aborted, classified into one kind of TransactionError, and its
// acknowledgements kept, dropped or released accordingly.

// endTxnUnconfirmed reports whether a failed EndTransaction(TryCommit) may
// have committed: kgo leaves the outcome unconfirmed on anything but a
// definitive (non-retriable) Kafka error, and UNKNOWN_SERVER_ERROR.
// kerr.OperationNotAttempted is kgo's "commit not sent".
func endTxnUnconfirmed(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || ke.Code == kerr.UnknownServerError.Code
	}
	return true
}

// settle records a terminal failure and counts what is left in the buffer.
func (a *TransactionalShareAcknowledger) settle(te *TransactionError) *TransactionError {
	a.mu.Lock()
	defer a.mu.Unlock()
	te.Kept = len(a.acks)
	if te.kind >= kindTerminal && a.terminal == nil {
		a.terminal = te
	}
	return te
}

// abortKind classifies a failed abort: never ErrRejected.
func (a *TransactionalShareAcknowledger) abortKind(ctx context.Context, err error) errKind {
	if k := a.classify(ctx, err, nil, false); k != kindRejected {
		return k
	}
	return kindRetriable
}

// fail handles a failed Flush or Commit; txnMu is held. It aborts the open
// transaction, classifies the failure, and puts the acknowledgements back
// into the buffer, except those the proxy refused (batch is what this call
// was sending).
func (a *TransactionalShareAcknowledger) fail(ctx context.Context, op string, cause error, batch []*ackEntry, maybeCommitted, beginFailed bool) error {
	te := &TransactionError{Op: op, Err: cause, MaybeCommitted: maybeCommitted}
	if a.open || a.needAbort {
		te.AbortErr = a.abortTxn(ctx)
	}
	te.kind = a.classify(ctx, cause, te.AbortErr, beginFailed)

	var refused map[topicPartition]bool
	var pes *PartitionErrors
	if te.kind == kindRejected && errors.As(cause, &pes) {
		refused = make(map[topicPartition]bool)
		for _, pe := range pes.Failed() {
			refused[topicPartition{pe.Topic, pe.Partition}] = true
		}
	}
	inBatch := make(map[*ackEntry]bool, len(batch))
	for _, e := range batch {
		inBatch[e] = true
	}
	a.mu.Lock()
	for k, e := range a.acks {
		if e.state == ackBuffered {
			continue
		}
		if e.state == ackStaged {
			// Staged in the transaction that just aborted: the proxy
			// released the record upstream; its acknowledgement cannot
			// stand for a redelivery.
			te.Released = append(te.Released, e.r)
			delete(a.acks, k)
			continue
		}
		if inBatch[e] && refused[topicPartition{k.topic, k.partition}] {
			te.Dropped = append(te.Dropped, e.r)
			delete(a.acks, k)
			continue
		}
		e.state = ackBuffered
	}
	a.mu.Unlock()
	ReleaseForRedelivery(te.Dropped...)
	return a.settle(te)
}

// classify decides the kind of a failure; txnMu is held, and the failed
// transaction was aborted (or its abort failed). beginFailed is set when kgo
// refused to begin a transaction.
func (a *TransactionalShareAcknowledger) classify(ctx context.Context, cause, abortErr error, beginFailed bool) errKind {
	fenced := func(errs ...error) bool {
		for _, err := range errs {
			if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
				return true
			}
		}
		return false
	}
	switch {
	case errors.Is(cause, kerr.ProducerFenced) || errors.Is(abortErr, kerr.ProducerFenced):
		return kindFenced
	case beginFailed && fenced(cause):
		return kindFenced
	case beginFailed:
		return kindTerminal
	case errors.Is(cause, ErrNotAdvertised):
		return kindTerminal
	}
	for _, t := range []*kerr.Error{
		kerr.InvalidProducerIDMapping, // from the proxy: it never saw this producer initialize
		kerr.TransactionalIDAuthorizationFailed,
		kerr.GroupAuthorizationFailed,
		kerr.TopicAuthorizationFailed,
		kerr.ClusterAuthorizationFailed,
		kerr.UnknownMemberID, // the metadata's member: every later call fails the same
		kerr.StaleMemberEpoch,
	} {
		if errors.Is(cause, t) {
			return kindTerminal
		}
	}
	// Whether the producer survived is kgo's call: INVALID_PRODUCER_EPOCH
	// is fatal under transaction version 2 and recoverable before it
	// (KIP-588); a zombie's EndTxn may be answered INVALID_TXN_STATE; a
	// network error only needs the producer id reloaded. Ask it.
	if err := a.kgoFatal(ctx); err != nil {
		if fenced(cause, abortErr, err) {
			return kindFenced
		}
		return kindTerminal
	}
	var pes *PartitionErrors
	if errors.As(cause, &pes) {
		return kindRejected
	}
	return kindRetriable
}

// kgoFatal asks kgo whether the producer can still run transactions, by
// beginning one and ending it at once: with nothing produced, kgo ends it
// locally and sends nothing (BeginTransaction itself only reloads a producer
// id kgo already marked for reloading, as the next transaction would). It
// returns kgo's refusal to begin; nil when it began, or when the failed
// transaction could not be aborted and the question stays open. txnMu is
// held.
func (a *TransactionalShareAcknowledger) kgoFatal(ctx context.Context) error {
	if a.needAbort {
		if err := a.abortTxn(ctx); err != nil {
			return nil // unknown yet; the next call finds out
		}
	}
	if err := a.producer.BeginTransaction(); err != nil {
		return err
	}
	actx, cancel := a.abortCtx(ctx)
	defer cancel()
	if err := a.producer.EndTransaction(actx, kgo.TryAbort); err != nil {
		a.needAbort = true
	}
	return nil
}
