package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Errors of the Writer that carry no Kafka error code.
var (
	// ErrOutcomeUnknown: a produce of this (producer id, epoch, partition)
	// was sent and never answered, so the broker's next expected sequence
	// is unknown. Every later Write of the same epoch on that partition
	// fails with it; the transaction must be aborted (answer
	// TRANSACTION_ABORTABLE). A new epoch clears it.
	ErrOutcomeUnknown = errors.New("staging: outcome of an earlier shadow write is unknown; abort the transaction")
	// ErrProduceVersion: the partition leader does not support Produce v12
	// (transaction version 2), so it cannot add the shadow partition to the
	// transaction implicitly.
	ErrProduceVersion = errors.New("staging: partition leader does not support Produce v12+ (transaction version 2)")
	// ErrAcks: the Writer's client is not configured with
	// kgo.RequiredAcks(kgo.AllISRAcks()); kgo rewrites the acks of raw
	// produce requests to the client's setting.
	ErrAcks = errors.New("staging: writer client must use kgo.RequiredAcks(kgo.AllISRAcks())")
	// ErrTooFewPartitions: the shadow topic has fewer than 2 partitions, so
	// the touch partition would be the shadow partition (see
	// TouchPartitionFor).
	ErrTooFewPartitions = errors.New("staging: shadow topic needs at least 2 partitions")
)

// WriteError is a failed Write. Err is a *kerr.Error when the broker answered
// with an error code (errors.Is(err, kerr.ProducerFenced) works), else a
// transport or Writer error.
type WriteError struct {
	Topic     string
	Partition int32
	Err       error
	Message   string // broker's ErrorMessage, if any
}

func (e *WriteError) Error() string {
	s := fmt.Sprintf("staging: shadow write to %s[%d]: %v", e.Topic, e.Partition, e.Err)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *WriteError) Unwrap() error { return e.Err }

// Code returns the Kafka error code of the failure, or
// UNKNOWN_SERVER_ERROR (-1) if the broker did not answer with one.
func (e *WriteError) Code() int16 {
	var ke *kerr.Error
	if errors.As(e.Err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// Writer appends shadow records inside clients' transactions, with the
// clients' producer ids and epochs, through the proxy's own franz-go client.
// The client must use kgo.RequiredAcks(kgo.AllISRAcks()) (franz-go's default
// with idempotence). A Writer is safe for concurrent use; Writes of the same
// (producer id, partition) are serialized.
type Writer struct {
	cl    *kgo.Client
	topic string

	mu        sync.Mutex
	topicID   [16]byte
	leaders   map[int32]int32 // partition -> leader node
	produceOK map[int32]bool  // node -> supports Produce v12+
	seqs      map[seqKey]*seqState
	lastPrune time.Time

	// key signs every record (AppendSigned); nil writes unsigned version
	// 1 records, which no sharetx process trusts (tests only).
	key []byte

	// fresh: per producer id, the newest epoch this process saw the
	// coordinator hand out (MarkFresh). No batch of such an epoch can
	// predate this process, so its first write starts at sequence 0
	// without asking the leader.
	fresh map[int64]int16
}

// maxFresh bounds the fresh map; when full it is emptied, and the next
// writes ask the leader as they would without it.
const maxFresh = 100000

// MarkFresh records that the coordinator just gave producerID the epoch
// (an InitProducerId or EndTxn v5+ answer this process relayed): nothing of
// that epoch was written before, so the first write of it needs no
// DescribeProducers. Under transaction version 2 every transaction has a
// new epoch, so this saves one round trip per TxnShareAcknowledge.
//
// It assumes a transactional id's requests pass through one proxy (the
// sidecar model): were another proxy to write a shadow record in the same
// epoch first, this Writer's sequence 0 would be dropped as a duplicate
// (docs/guarantees.md lists the window).
func (w *Writer) MarkFresh(producerID int64, epoch int16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fresh == nil || len(w.fresh) >= maxFresh {
		w.fresh = map[int64]int16{}
	}
	w.fresh[producerID] = epoch
}

func (w *Writer) isFresh(producerID int64, epoch int16) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.fresh[producerID]
	return ok && e == epoch
}

type seqKey struct {
	pid       int64
	partition int32
}

// seqState is the Writer's view of one producer's sequence on one partition.
// mu is held across a produce so that sequences are assigned in order.
type seqState struct {
	mu       sync.Mutex
	init     bool  // epoch is set
	epoch    int16 // highest epoch written
	known    bool  // next is the broker's expected sequence for epoch
	next     int32
	poisoned bool // an unanswered produce of epoch; see ErrOutcomeUnknown
	lastUsed time.Time
}

// Sequence state idle for longer than this is dropped. A transaction cannot
// stay open longer than transaction.max.timeout.ms (default 15 minutes), and
// state lost early is recovered with DescribeProducers.
const seqIdle = time.Hour

// NewWriter returns a Writer for the shadow topic that signs its records
// with the shadow key key (DeriveShadowKey; nil: unsigned version 1
// records, which the markers Tailer of a proxy with a key does not trust).
func NewWriter(cl *kgo.Client, topic string, key []byte) *Writer {
	return &Writer{
		cl:        cl,
		topic:     topic,
		key:       append([]byte(nil), key...),
		leaders:   make(map[int32]int32),
		produceOK: make(map[int32]bool),
		seqs:      make(map[seqKey]*seqState),
	}
}

// TopicID returns the shadow topic's id, zero until the topic was looked up.
func (w *Writer) TopicID() [16]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.topicID
}

// Topic returns the shadow topic name.
func (w *Writer) Topic() string { return w.topic }

// EnsureTopic creates the shadow topic if it is missing, with the given
// partitions and replication factor (-1: broker default), and returns its
// partition count. An existing topic keeps its partition count; callers and
// clients must hash with the returned count. Fewer than 2 partitions is an
// error (ErrTooFewPartitions), see TouchPartitionFor.
func (w *Writer) EnsureTopic(ctx context.Context, partitions int32, replicationFactor int16) (int32, error) {
	n, err := w.refreshMetadata(ctx)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		if partitions < 2 {
			return 0, ErrTooFewPartitions
		}
		adm := kadm.NewClient(w.cl)
		resp, cerr := adm.CreateTopic(ctx, partitions, replicationFactor, nil, w.topic)
		if cerr == nil {
			cerr = resp.Err
		}
		if cerr != nil && !errors.Is(cerr, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("staging: create shadow topic %q: %w", w.topic, cerr)
		}
		// Leaders may take a moment to appear.
		for i := 0; ; i++ {
			n, err = w.refreshMetadata(ctx)
			if err == nil || i >= 20 || !retriable(err) {
				break
			}
			if serr := sleep(ctx, 100*time.Millisecond); serr != nil {
				return 0, serr
			}
		}
	}
	if err != nil {
		return 0, err
	}
	if n < 2 {
		return n, ErrTooFewPartitions
	}
	return n, nil
}

// refreshMetadata loads the topic id and partition leaders and returns the
// partition count.
func (w *Writer) refreshMetadata(ctx context.Context) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(w.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return 0, fmt.Errorf("staging: metadata for %q: %w", w.topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != w.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, fmt.Errorf("staging: metadata for %q: %w", w.topic, err)
		}
		leaders := make(map[int32]int32, len(t.Partitions))
		for _, p := range t.Partitions {
			if kerr.ErrorForCode(p.ErrorCode) == nil && p.Leader >= 0 {
				leaders[p.Partition] = p.Leader
			}
		}
		if len(leaders) < len(t.Partitions) {
			return 0, fmt.Errorf("staging: metadata for %q: %w", w.topic, kerr.LeaderNotAvailable)
		}
		w.mu.Lock()
		w.topicID = t.TopicID
		w.leaders = leaders
		w.mu.Unlock()
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("staging: metadata for %q: %w", w.topic, kerr.UnknownTopicOrPartition)
}

func (w *Writer) state(pid int64, p int32) *seqState {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.lastPrune) > time.Minute {
		w.lastPrune = now
		for k, s := range w.seqs {
			if s.mu.TryLock() {
				if now.Sub(s.lastUsed) > seqIdle {
					delete(w.seqs, k)
				}
				s.mu.Unlock()
			}
		}
	}
	k := seqKey{pid, p}
	s := w.seqs[k]
	if s == nil {
		s = &seqState{}
		w.seqs[k] = s
	}
	s.lastUsed = now
	return s
}

// Write appends rec as one transactional record batch to partition p of the
// shadow topic, with producerID/epoch, under transactional id txnID, and
// returns its offset. It uses Produce v12+ (transaction version 2): the
// partition leader adds the partition to the transaction implicitly. acks=-1.
//
// The first batch of an epoch on a partition has base sequence 0, later ones
// continue. Before the first write of an epoch it has not seen, the Writer
// asks the leader for the producer's last sequence (DescribeProducers): after
// a proxy restart in the middle of a transaction, sequence 0 would be taken
// as a duplicate of the earlier first batch and dropped without an error.
// An epoch marked fresh (MarkFresh) cannot have such batches and starts at 0
// without asking.
//
// NOT_LEADER, UNKNOWN_TOPIC_OR_PARTITION and similar errors are retried with
// a metadata refresh; a produce whose answer is lost is resent with the same
// bytes (the broker deduplicates it). A failed Write returns a *WriteError and
// does not advance the sequence.
func (w *Writer) Write(ctx context.Context, txnID string, producerID int64, epoch int16, p int32, rec *ShadowRecord) (int64, error) {
	werr := func(err error, msg string) error {
		return &WriteError{Topic: w.topic, Partition: p, Err: err, Message: msg}
	}
	if v := w.cl.OptValue(kgo.RequiredAcks); v != kgo.AllISRAcks() {
		return -1, werr(ErrAcks, "")
	}
	if err := rec.Validate(); err != nil {
		return -1, werr(err, "")
	}
	var value []byte
	if len(w.key) > 0 {
		value = rec.AppendSigned(nil, w.key)
	} else {
		value = rec.AppendTo(nil)
	}

	s := w.state(producerID, p)
	s.mu.Lock()
	defer s.mu.Unlock()

	// The state moves only on success (or on an unknown outcome), so a
	// write with a bogus epoch that the broker rejects changes nothing.
	same := s.init && epoch == s.epoch
	if same && s.poisoned {
		return -1, werr(ErrOutcomeUnknown, "")
	}
	var seq int32
	switch {
	case same && s.known:
		seq = s.next
	case !same && w.isFresh(producerID, epoch):
		seq = 0 // the epoch began after this process started: no batch of it exists
	default:
		// First write of this epoch that this Writer knows of. The
		// broker may already hold batches of the epoch (a restarted
		// proxy in the middle of a transaction); sending sequence 0
		// again would be taken as a duplicate of the first batch and
		// silently dropped. Ask the leader.
		last, err := w.lastSequence(ctx, producerID, epoch, p)
		if err != nil {
			return -1, werr(err, "")
		}
		seq = last + 1
	}

	offset, err := w.produce(ctx, txnID, producerID, epoch, p, seq, value)
	newer := !s.init || epoch >= s.epoch
	if err != nil {
		if newer && errors.Is(err, ErrOutcomeUnknown) {
			s.init, s.epoch, s.known, s.poisoned = true, epoch, false, true
		}
		return -1, err
	}
	if newer {
		s.init, s.epoch, s.known, s.next, s.poisoned = true, epoch, true, seq+1, false
	}
	return offset, nil
}

// produce sends one batch, retrying retriable errors with the same bytes.
func (w *Writer) produce(ctx context.Context, txnID string, pid int64, epoch int16, p int32, seq int32, value []byte) (int64, error) {
	batch := AppendRecordBatch(nil, pid, epoch, seq, time.Now().UnixMilli(), value)
	werr := func(err error, msg string) error {
		return &WriteError{Topic: w.topic, Partition: p, Err: err, Message: msg}
	}

	const attempts = 6
	var (
		lastErr error
		sent    bool // a request may have reached the broker unanswered
	)
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if err := sleep(ctx, time.Duration(50*i)*time.Millisecond); err != nil {
				lastErr = err
				break
			}
			if _, err := w.refreshMetadata(ctx); err != nil && !retriable(err) {
				return -1, werr(err, "")
			}
		}
		w.mu.Lock()
		leader, ok := w.leaders[p]
		topicID := w.topicID
		w.mu.Unlock()
		if !ok {
			if _, err := w.refreshMetadata(ctx); err != nil {
				lastErr = err
				if retriable(err) {
					continue
				}
				return -1, werr(err, "")
			}
			w.mu.Lock()
			leader, ok = w.leaders[p]
			topicID = w.topicID
			w.mu.Unlock()
			if !ok {
				lastErr = kerr.UnknownTopicOrPartition
				continue
			}
		}
		if err := w.checkProduceVersion(ctx, leader); err != nil {
			if errors.Is(err, ErrProduceVersion) {
				return -1, werr(err, "")
			}
			lastErr = err
			continue
		}

		req := kmsg.NewPtrProduceRequest()
		req.TransactionID = kmsg.StringPtr(txnID)
		req.Acks = -1
		req.TimeoutMillis = produceTimeout(ctx)
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = w.topic
		rt.TopicID = topicID // used from v13
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)

		kresp, err := w.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			// Unknown outcome unless the request never left; resend
			// the same batch, which the broker deduplicates.
			sent = true
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if req.Version < 12 {
			// Cannot happen after checkProduceVersion, but a v<12
			// transactional produce to an unadded partition must
			// never be trusted.
			return -1, werr(ErrProduceVersion, "")
		}
		resp := kresp.(*kmsg.ProduceResponse)
		var (
			found bool
			code  int16
			msg   string
			base  int64
		)
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if rp.Partition == p {
					found, code, base = true, rp.ErrorCode, rp.BaseOffset
					if rp.ErrorMessage != nil {
						msg = *rp.ErrorMessage
					}
				}
			}
		}
		if !found {
			sent = true
			lastErr = errors.New("produce response is missing the partition")
			continue
		}
		kerrv := kerr.ErrorForCode(code)
		if kerrv == nil {
			return base, nil
		}
		if !retriable(kerrv) {
			return -1, werr(kerrv, msg)
		}
		if kerrv == kerr.RequestTimedOut || kerrv == kerr.NotEnoughReplicasAfterAppend {
			sent = true // may have been appended
		}
		lastErr = kerrv
	}
	if sent {
		return -1, werr(fmt.Errorf("%w: %v", ErrOutcomeUnknown, lastErr), "")
	}
	return -1, werr(lastErr, "")
}

func retriable(err error) bool {
	switch {
	case errors.Is(err, kerr.NotLeaderForPartition),
		errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.NotEnoughReplicas),
		errors.Is(err, kerr.NotEnoughReplicasAfterAppend),
		errors.Is(err, kerr.RequestTimedOut),
		errors.Is(err, kerr.NetworkException),
		errors.Is(err, kerr.KafkaStorageError),
		errors.Is(err, kerr.ConcurrentTransactions),
		errors.Is(err, kerr.FencedLeaderEpoch),
		errors.Is(err, kerr.UnknownLeaderEpoch):
		return true
	}
	return false
}

func produceTimeout(ctx context.Context) int32 {
	const def = 30 * time.Second
	d := def
	if dl, ok := ctx.Deadline(); ok {
		if until := time.Until(dl); until < d {
			d = max(until, 100*time.Millisecond)
		}
	}
	return int32(d.Milliseconds())
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Riding: the shadow record inside the client's own Produce
// (docs/design.md §4.4). A Reservation is the next batch of one producer on
// one shadow partition, its sequence taken and held until Done, Retry,
// Unknown or Cancel settles it (once; later calls do nothing).
type Reservation struct {
	w         *Writer
	s         *seqState
	txnID     string
	pid       int64
	epoch     int16
	seq       int32
	value     []byte
	Partition int32
	TopicID   [16]byte
	Topic     string
	Batch     []byte // the record batch to append to the client's Produce
	settled   bool   // guarded by s.mu's holder (the reservation)
}

// Reserve takes the next sequence of (producerID, a shadow partition led by
// node) for the record rec, preferring partition prefer and never taking
// avoid (the touch partition), or reports false: no partition led by node,
// the partition busy with a write, or an epoch this Writer has no sequence
// for without asking the leader (only fresh epochs and epochs it wrote
// ride; the rest are written on their own).
func (w *Writer) Reserve(txnID string, producerID int64, epoch int16, node, prefer, avoid int32, rec *ShadowRecord) (*Reservation, bool) {
	if v := w.cl.OptValue(kgo.RequiredAcks); v != kgo.AllISRAcks() || rec.Validate() != nil {
		return nil, false
	}
	w.mu.Lock()
	p, found := int32(-1), false
	if l, ok := w.leaders[prefer]; ok && l == node && prefer != avoid {
		p, found = prefer, true
	} else {
		for q, l := range w.leaders {
			if l == node && q != avoid && (!found || q < p) {
				p, found = q, true
			}
		}
	}
	topicID := w.topicID
	w.mu.Unlock()
	if !found {
		return nil, false
	}
	s := w.state(producerID, p)
	if !s.mu.TryLock() {
		return nil, false
	}
	same := s.init && epoch == s.epoch
	var seq int32
	switch {
	case same && s.known && !s.poisoned:
		seq = s.next
	case !same && w.isFresh(producerID, epoch):
		seq = 0
	default:
		s.mu.Unlock()
		return nil, false
	}
	var value []byte
	if len(w.key) > 0 {
		value = rec.AppendSigned(nil, w.key)
	} else {
		value = rec.AppendTo(nil)
	}
	return &Reservation{w: w, s: s, txnID: txnID, pid: producerID, epoch: epoch, seq: seq, value: value,
		Partition: p, TopicID: topicID, Topic: w.topic,
		Batch: AppendRecordBatch(nil, producerID, epoch, seq, time.Now().UnixMilli(), value)}, true
}

// settle moves the sequence state as a write of the reservation's batch
// that ended with err (nil: appended) does, and releases it.
func (r *Reservation) settle(err error) {
	if r.settled {
		return
	}
	r.settled = true
	s := r.s
	newer := !s.init || r.epoch >= s.epoch
	switch {
	case err == nil && newer:
		s.init, s.epoch, s.known, s.next, s.poisoned = true, r.epoch, true, r.seq+1, false
	case errors.Is(err, ErrOutcomeUnknown) && newer:
		s.init, s.epoch, s.known, s.poisoned = true, r.epoch, false, true
	}
	s.mu.Unlock()
}

// Done: the broker appended the batch.
func (r *Reservation) Done() { r.settle(nil) }

// Cancel: the batch was never sent.
func (r *Reservation) Cancel() { r.settle(errors.New("not sent")) }

// Unknown: the batch was sent and never answered; later writes of the
// epoch on the partition fail (ErrOutcomeUnknown).
func (r *Reservation) Unknown() { r.settle(ErrOutcomeUnknown) }

// Retry sends the batch's sequence again on the Writer's own connection,
// after the Produce it rode on answered a retriable error for it (the
// broker deduplicates a batch it already has), and settles the
// reservation by its outcome.
func (r *Reservation) Retry(ctx context.Context) (int64, error) {
	if r.settled {
		return -1, &WriteError{Topic: r.Topic, Partition: r.Partition, Err: errors.New("reservation already settled")}
	}
	off, err := r.w.produce(ctx, r.txnID, r.pid, r.epoch, r.Partition, r.seq, r.value)
	r.settle(err)
	return off, err
}
