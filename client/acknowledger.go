package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultAbortTimeout bounds the abort a failed Flush or Commit runs, see
// AbortTimeout.
const defaultAbortTimeout = 30 * time.Second

// AcknowledgerOpt is an option of NewTransactionalShareAcknowledger.
type AcknowledgerOpt interface{ apply(*acknowledgerConfig) }

type acknowledgerOpt func(*acknowledgerConfig)

func (o acknowledgerOpt) apply(c *acknowledgerConfig) { o(c) }

type acknowledgerConfig struct {
	abortTimeout time.Duration
}

// AbortTimeout bounds the abort that a failed Flush or Commit runs, and the
// one of Abort and Close. The abort runs even when the caller's context is
// already canceled (a canceled Commit must still end its transaction): it
// keeps the context's values, not its cancellation, and gets this timeout
// instead. The default is 30 seconds; values <= 0 keep it.
func AbortTimeout(d time.Duration) AcknowledgerOpt {
	return acknowledgerOpt(func(c *acknowledgerConfig) {
		if d > 0 {
			c.abortTimeout = d
		}
	})
}

// TransactionalShareAcknowledger commits share-group acknowledgements in
// Kafka transactions of their own, for applications that have no Kafka output
// to bind them to: a stream processor that acknowledges the records it
// processed when its checkpoint completes, a consumer that writes to a
// database. Acknowledge buffers; Flush stages the buffered acknowledgements
// in the acknowledger's open transaction; Commit commits the transaction;
// Abort drops everything and releases the records for redelivery. See the
// package documentation for the rules (in short: Flush or Commit before the
// share consumer polls again).
//
// It owns the transactions of its Producer: do not produce with it, begin or
// end its transactions yourself, or use it for a second acknowledger.
//
// Acknowledge, AcknowledgeAll and Len are safe for concurrent use with
// everything. Flush, Commit, Abort and Close may be called from any goroutine
// and run one at a time.
type TransactionalShareAcknowledger struct {
	producer *Producer
	md       ShareGroupMetadata
	cfg      acknowledgerConfig

	// txnMu serializes Flush, Commit, Abort and Close: kgo runs one
	// transaction at a time, and open/needAbort describe it.
	txnMu     sync.Mutex
	open      bool // BeginTransaction succeeded, the transaction did not end
	needAbort bool // ending the last transaction failed: abort it before anything else

	// mu guards what Acknowledge touches. It is never held across a
	// request, so Acknowledge never waits for the cluster.
	mu       sync.Mutex
	acks     map[recordKey]*ackEntry
	closed   bool
	terminal *TransactionError
}

type recordKey struct {
	topic     string
	partition int32
	offset    int64
}

type ackState uint8

const (
	ackBuffered ackState = iota // waiting for the next Flush or Commit
	ackSending                  // in a TxnShareAcknowledge right now
	ackStaged                   // TX_PENDING in the open transaction
)

type ackEntry struct {
	r     *kgo.Record
	t     AcknowledgeType
	state ackState
}

// NewTransactionalShareAcknowledger returns an acknowledger that commits the
// acknowledgements of records polled by md's share group in transactions of
// producer (NewProducer); the acknowledger owns its transactions until
// Close. md is usually NewShareGroupMetadata(group).
//
// Nothing is sent here: whether the cluster is reached through sharetx is
// found out by the first Flush or Commit (ErrNotAdvertised, terminal).
func NewTransactionalShareAcknowledger(producer *Producer, md ShareGroupMetadata, opts ...AcknowledgerOpt) (*TransactionalShareAcknowledger, error) {
	if err := checkProducer(producer, md); err != nil {
		return nil, err
	}
	cfg := acknowledgerConfig{abortTimeout: defaultAbortTimeout}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	producer.mu.Lock()
	defer producer.mu.Unlock()
	if producer.owned {
		return nil, errors.New("sharetx: the producer already belongs to an open TransactionalShareAcknowledger; each needs its own transactional producer")
	}
	producer.owned = true
	return &TransactionalShareAcknowledger{
		producer: producer,
		md:       md,
		cfg:      cfg,
		acks:     make(map[recordKey]*ackEntry),
	}, nil
}

// Acknowledge buffers the acknowledgement of r, a record polled by the share
// consumer, with t (Accept or Reject) for the next Flush or Commit.
// Acknowledging a buffered record again replaces its type. A record whose
// acknowledgement is already staged in the open transaction keeps it until
// Commit or Abort: acknowledging it again with the same type does nothing,
// with another type is an error.
//
// It fails at once on invalid input (nil record, no topic, a type other than
// Accept or Reject), with ErrClosed after Close, and with the terminal error
// after one (ErrTerminal).
//
// Keep r as it is until it is committed or aborted (do not Recycle it): the
// acknowledger releases it with ReleaseForRedelivery when Abort drops it.
func (a *TransactionalShareAcknowledger) Acknowledge(r *kgo.Record, t AcknowledgeType) error {
	if p := ackProblem(r, t); p != "" {
		return fmt.Errorf("sharetx: invalid acknowledgement: %s", p)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.usableLocked(); err != nil {
		return err
	}
	if err := a.conflictLocked(r, t); err != nil {
		return err
	}
	a.addLocked(r, t)
	return nil
}

// AcknowledgeAll is Acknowledge for every record of records, all or nothing:
// if one cannot be acknowledged, none is and the error says which.
func (a *TransactionalShareAcknowledger) AcknowledgeAll(records []*kgo.Record, t AcknowledgeType) error {
	for _, r := range records {
		if p := ackProblem(r, t); p != "" {
			return fmt.Errorf("sharetx: invalid acknowledgement: %s (nothing was acknowledged)", p)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.usableLocked(); err != nil {
		return err
	}
	for _, r := range records {
		if err := a.conflictLocked(r, t); err != nil {
			return fmt.Errorf("%w (nothing was acknowledged)", err)
		}
	}
	for _, r := range records {
		a.addLocked(r, t)
	}
	return nil
}

func keyOf(r *kgo.Record) recordKey { return recordKey{r.Topic, r.Partition, r.Offset} }

func (a *TransactionalShareAcknowledger) usableLocked() error {
	if a.closed {
		return ErrClosed
	}
	if a.terminal != nil {
		return a.terminal
	}
	return nil
}

func (a *TransactionalShareAcknowledger) conflictLocked(r *kgo.Record, t AcknowledgeType) error {
	if e, ok := a.acks[keyOf(r)]; ok && e.state != ackBuffered && e.t != t {
		return fmt.Errorf("sharetx: %s[%d]@%d is already acknowledged %v in the open transaction; it cannot change before Commit or Abort", r.Topic, r.Partition, r.Offset, e.t)
	}
	return nil
}

func (a *TransactionalShareAcknowledger) addLocked(r *kgo.Record, t AcknowledgeType) {
	k := keyOf(r)
	if e, ok := a.acks[k]; ok {
		if e.state == ackBuffered {
			e.r, e.t = r, t
		}
		return
	}
	a.acks[k] = &ackEntry{r: r, t: t}
}

// Len returns the number of acknowledgements not committed yet: buffered, or
// staged in the open transaction.
func (a *TransactionalShareAcknowledger) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acks)
}

// Flush stages the buffered acknowledgements in the acknowledger's open
// transaction, beginning one if none is open, without committing it. Staged
// records are TX_PENDING in the proxy: the share consumer's implicit ACCEPT
// of them (on its next poll) is held back, the proxy renews their
// acquisition locks, and they take effect when Commit commits the
// transaction. Call Flush before the share consumer polls again whenever
// acknowledgements are to outlive the poll (see the package documentation).
// With nothing buffered it does nothing and sends nothing.
//
// The transaction must still end (Commit or Abort) within the producer's
// kgo.TransactionTimeout, or the coordinator aborts it and the next Flush or
// Commit fails.
//
// On failure it aborts the transaction, including what earlier Flushes
// staged in it, and returns a *TransactionError; see Commit for what happens
// to the acknowledgements.
func (a *TransactionalShareAcknowledger) Flush(ctx context.Context) error {
	a.txnMu.Lock()
	defer a.txnMu.Unlock()
	if err := a.ready(ctx, "flush"); err != nil {
		return err
	}
	return a.stage(ctx, "flush")
}

// Commit atomically commits every acknowledgement buffered when it is called
// and every one staged by earlier Flushes: it begins a transaction if none
// is open, stages the buffered acknowledgements in it
// (SendShareAcknowledgementsToTransaction, which also writes the touch record
// that makes kgo really send EndTxn for a transaction that produced nothing
// else), and commits it (EndTransaction with kgo.TryCommit). The proxy then
// applies them to the share group. Acknowledgements made while Commit runs
// are left for the next one. With nothing buffered and nothing staged it
// does nothing and sends nothing.
//
// On failure the transaction is aborted, and the error is a
// *TransactionError. The acknowledgements that were already staged in it
// are gone with it: the proxy released their records upstream, to be
// redelivered (TransactionError.Released). What becomes of the others
// (not staged: their records are still this consumer's) its kind says
// (errors.Is):
//
//   - ErrRetriable: they are back in the buffer; call Commit again, or
//     Abort to give up on them.
//   - ErrRejected: the ones the proxy refused are dropped and their records
//     released (TransactionError.Dropped); the others are back in the
//     buffer, and Commit again commits them.
//   - ErrTerminal (ErrFenced among them): they stay in the buffer, and the
//     acknowledger refuses every further Flush, Commit and Acknowledge with
//     the same error; Close it, which releases their records.
//
// Until the next Commit succeeds or Abort runs, the kept acknowledgements
// are not staged: do not let the share consumer poll in between, or its
// implicit ACCEPT reaches the broker for them.
func (a *TransactionalShareAcknowledger) Commit(ctx context.Context) error {
	a.txnMu.Lock()
	defer a.txnMu.Unlock()
	if err := a.ready(ctx, "commit"); err != nil {
		return err
	}
	if err := a.stage(ctx, "commit"); err != nil {
		return err
	}
	if !a.open {
		return nil // nothing buffered, nothing staged
	}
	if err := a.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return a.fail(ctx, "commit", err, nil, endTxnUnconfirmed(err), false)
	}
	a.open = false
	a.mu.Lock()
	for k, e := range a.acks {
		if e.state == ackStaged {
			delete(a.acks, k)
		}
	}
	a.mu.Unlock()
	return nil
}

// Abort drops every acknowledgement, buffered or staged, without committing
// it: the open transaction, if any, is aborted, and the records are released
// with ReleaseForRedelivery, so the share consumer's next poll hands them
// back to the broker for redelivery. Records the consumer already
// acknowledged implicitly (polls ago, held back by the proxy while staged)
// cannot be released by the client any more: they stay acquired by the
// member until their acquisition lock expires (or its share session ends),
// then are redelivered. With nothing buffered and no transaction open it
// sends nothing.
//
// The acknowledgements are dropped even when ending the transaction fails
// (a *TransactionError with AbortErr); the acknowledger then retries the
// abort first thing on the next Flush, Commit or Abort.
func (a *TransactionalShareAcknowledger) Abort(ctx context.Context) error {
	a.txnMu.Lock()
	defer a.txnMu.Unlock()
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return a.abortAll(ctx, "abort")
}

// Close aborts like Abort and makes every later call but Close fail with
// ErrClosed; a Flush or Commit running concurrently finishes first. It does
// not close the producer, which may then serve a new acknowledger. Closing
// again does nothing.
func (a *TransactionalShareAcknowledger) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true // from now on Acknowledge refuses; a queued Flush or Commit too
	a.mu.Unlock()

	a.txnMu.Lock()
	defer a.txnMu.Unlock()
	err := a.abortAll(ctx, "close")
	a.producer.mu.Lock()
	a.producer.owned = false
	a.producer.mu.Unlock()
	return err
}

// ready refuses when closed or terminal, and finishes the abort of a
// transaction whose end failed earlier; txnMu is held.
func (a *TransactionalShareAcknowledger) ready(ctx context.Context, op string) error {
	a.mu.Lock()
	err := a.usableLocked()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if !a.needAbort {
		return nil
	}
	if err := a.abortTxn(ctx); err != nil {
		return a.settle(&TransactionError{Op: op, Err: fmt.Errorf("the previous transaction is still open and aborting it failed: %w", err),
			kind: a.abortKind(ctx, err)})
	}
	return nil
}

// stage sends the buffered acknowledgements into the open transaction,
// beginning one if needed; txnMu is held.
func (a *TransactionalShareAcknowledger) stage(ctx context.Context, op string) error {
	a.mu.Lock()
	batch := make([]*ackEntry, 0, len(a.acks))
	acks := NewShareAcknowledgements()
	for k, e := range a.acks {
		if e.state == ackBuffered {
			e.state = ackSending
			batch = append(batch, e)
			acks.add(k.topic, k.partition, k.offset, e.t)
		}
	}
	a.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if !a.open {
		// kgo refuses to begin only when its producer id is in a fatal
		// state (fenced) or a transaction is open that the acknowledger
		// did not begin (the producer is used elsewhere): terminal.
		if err := a.producer.BeginTransaction(); err != nil {
			return a.fail(ctx, op, fmt.Errorf("beginning a transaction: %w", err), batch, false, true)
		}
		a.open = true
	}
	if err := a.producer.SendShareAcknowledgementsToTransaction(ctx, acks, a.md); err != nil {
		return a.fail(ctx, op, err, batch, false, false)
	}
	a.mu.Lock()
	for _, e := range batch {
		e.state = ackStaged
	}
	a.mu.Unlock()
	return nil
}

// abortCtx is ctx without its cancellation, bounded by the abort timeout:
// an abort must run even for a canceled Commit.
func (a *TransactionalShareAcknowledger) abortCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), a.cfg.abortTimeout)
}

// abortTxn aborts the open transaction; txnMu is held. When it fails, kgo
// keeps the transaction open, and needAbort makes the next call retry.
func (a *TransactionalShareAcknowledger) abortTxn(ctx context.Context) error {
	actx, cancel := a.abortCtx(ctx)
	defer cancel()
	// Nothing of ours is buffered (the touch record is produced
	// synchronously), but kgo asks for this before an abort so that no
	// record ends up in the next transaction.
	_ = a.producer.cl.AbortBufferedRecords(actx)
	err := a.producer.EndTransaction(actx, kgo.TryAbort)
	a.open, a.needAbort = false, err != nil
	return err
}

// abortAll aborts the open transaction and drops and releases every
// acknowledgement; txnMu is held.
func (a *TransactionalShareAcknowledger) abortAll(ctx context.Context, op string) error {
	var abortErr error
	if a.open || a.needAbort {
		abortErr = a.abortTxn(ctx)
	}
	a.mu.Lock()
	records := make([]*kgo.Record, 0, len(a.acks))
	for _, e := range a.acks {
		records = append(records, e.r)
	}
	clear(a.acks)
	a.mu.Unlock()
	ReleaseForRedelivery(records...)
	if abortErr == nil {
		return nil
	}
	return a.settle(&TransactionError{Op: op, Err: abortErr, kind: a.abortKind(ctx, abortErr)})
}
