package markers

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharetx/sharetx/internal/promstat"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// Resolver is the one owner of the step from TX_PENDING to committed or
// aborted (docs/design.md §5). It holds this proxy's staged calls by the
// location of their shadow records, resolves them by the record's
// transaction marker (Resolve, from the Tailer) or, first, by the EndTxn
// answer the client got (EndTxn), applies committed acknowledgements upstream
// on the member's session and releases aborted ones. It also keeps what every
// proxy's shadow records say, to screen redelivered records (recovery.go).
type Resolver struct {
	ledger  *staging.Ledger
	applier *upstream.Applier
	ctx     context.Context // ends when the proxy stops
	log     *slog.Logger

	mu            sync.Mutex
	calls         map[staging.Loc]*staging.Call // staged by this proxy, not yet resolved
	barrier       func(ctx context.Context) error
	lastRejectLog time.Time // rate-limits the warning about untrusted shadow records

	recovered     chan struct{} // closed once the shadow topic was read back (Recovered)
	recoveredOnce sync.Once
	waitRecovery  time.Duration // how long a redelivery waits for it, and for the barrier

	hold atomic.Pointer[batchHold] // nil: committed acknowledgements go upstream at once

	mHolds       *prometheus.CounterVec
	mMarkers     *prometheus.CounterVec
	mRedelivered *prometheus.CounterVec
	mRejected    *prometheus.CounterVec
	mRead        *prometheus.CounterVec
	mReadBytes   *prometheus.CounterVec
	readCounters map[string]readCounter // kind → its counters, filled by countRead (the tailer's goroutine only)
}

// redeliveryBarrierTimeout bounds how long a ShareFetch response with
// redelivered records waits for the shadow topic to be read back and to
// its end, when its client would wait longer (Screen).
const redeliveryBarrierTimeout = 15 * time.Second

// NewResolver resolves the calls staged in ledger, applying and releasing
// through applier, until ctx ends. A shadow record naming more offsets or
// partitions than one call may stage (the ledger's kip1289 limits) is not
// trusted. Its metrics are registered in reg (nil: not registered).
func NewResolver(ctx context.Context, ledger *staging.Ledger, applier *upstream.Applier, log *slog.Logger, reg prometheus.Registerer) *Resolver {
	r := &Resolver{ledger: ledger, applier: applier, ctx: ctx, log: log,
		calls: map[staging.Loc]*staging.Call{}, recovered: make(chan struct{}), waitRecovery: redeliveryBarrierTimeout,
		mMarkers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "markers_total",
			Help: "Staged shadow records resolved, by type (commit, abort) and by what resolved them first (end_txn: the EndTxn response seen on the client connection; marker: the control marker in the shadow partition)."}, []string{"type", "via"}),
		mRedelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "redelivered_records_total",
			Help: "Redelivered records taken out of ShareFetch responses, by outcome: committed (acknowledged by the proxy with the committed type), held_open (held for a transaction still open), held_then_committed, held_then_aborted (released); and unverified: ShareFetch responses with redelivered records handed to the client before the shadow topic could be read to its end."}, []string{"outcome"}),
		mRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_records_rejected_total",
			Help: "Shadow records read from the shadow topic and ignored, by reason: unsigned, bad_signature, copied (a signed record in another producer's batch), undecodable, implausible_range. Anything above 0 means someone other than sharetx writes the shadow topic."}, []string{"reason"}),
		mRead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_read_records_total",
			Help: "Records the proxy read from the shadow topic (every sidecar reads every sidecar's), by kind: staged (a trusted shadow record), marker (COMMIT/ABORT), rejected, other (touch records, other control records). Compared with the fleet's staged calls, it shows what one sidecar pays for the others."}, []string{"kind"}),
		mReadBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_read_bytes_total",
			Help: "Key and value bytes of the records the proxy read from the shadow topic, by kind (as sharetx_shadow_read_records_total)."}, []string{"kind"}),
	}
	r.mHolds = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "batch_holds_total",
		Help: "Committed acknowledgements of part of an acquired batch held for the rest of it (kip1289.whole_batch_wait), by how the hold ended: completed (the rest was committed: the batch went upstream whole), expired (not within the wait: sent on their own), aborted (a transaction with records of the batch aborted: sent at once)."}, []string{"outcome"})
	r.readCounters = map[string]readCounter{}
	if reg != nil {
		reg.MustRegister(r.mHolds, r.mMarkers, r.mRedelivered, r.mRejected, r.mRead, r.mReadBytes)
	}
	return r
}

// HoldBatches makes committed acknowledgements that cover only part of an
// acquired batch wait up to wait for the rest of it (wholebatch.go); 0: they
// never wait. Parts held before keep their own wait.
func (r *Resolver) HoldBatches(wait time.Duration) {
	var h *batchHold
	if wait > 0 {
		h = &batchHold{wait: wait, held: map[heldKey]*heldPart{}}
	}
	r.hold.Store(h)
}

// countRead counts a record the tailer read (it runs for every shadow record
// of every sidecar), on counters resolved once per kind, at its first record:
// /metrics lists only kinds that were read. Only the tailer's goroutine calls
// it, so readCounters needs no lock.
func (r *Resolver) countRead(kind string, bytes int) {
	c, ok := r.readCounters[kind]
	if !ok {
		c = readCounter{r.mRead.WithLabelValues(kind), r.mReadBytes.WithLabelValues(kind)}
		r.readCounters[kind] = c
	}
	c.records.Inc()
	c.bytes.Add(float64(bytes))
}

type readCounter struct{ records, bytes prometheus.Counter }

// Track hands the Resolver a call the Stager staged.
func (r *Resolver) Track(s *staging.Staged) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[s.Loc] = s.Call
}

// EndTxn resolves every staged call of the transaction that a successful
// EndTxn just ended: the coordinator decided (the markers resolve the same
// records again later, which changes nothing).
func (r *Resolver) EndTxn(txnID string, pid int64, epoch int16, commit bool) {
	r.mu.Lock()
	var locs []staging.Loc
	for loc, c := range r.calls {
		if c.Matches(txnID, pid, epoch) {
			locs = append(locs, loc)
		}
	}
	r.mu.Unlock()
	r.resolveTogether(locs, commit, "end_txn")
}

// Resolve applies a control marker to the shadow record at
// partition/offset. Idempotent: a record resolved once is forgotten.
func (r *Resolver) Resolve(partition int32, offset int64, commit bool) {
	r.resolveTogether([]staging.Loc{{int64(partition), offset}}, commit, "marker")
}

// ResolveAll applies one control marker to every shadow record it resolves
// (the records of its transaction on that partition, Follow).
func (r *Resolver) ResolveAll(res []Resolution) {
	if len(res) == 0 {
		return
	}
	locs := make([]staging.Loc, len(res))
	for i, x := range res {
		locs[i] = staging.Loc{int64(x.Partition), x.Offset}
	}
	r.resolveTogether(locs, res[0].Commit, "marker")
}

// resolveTogether resolves the calls of one transaction and applies the
// committed ones together: one acknowledgement per member session for the
// whole transaction, not one per call (a transaction fed by several polls
// stages a call for each).
func (r *Resolver) resolveTogether(locs []staging.Loc, commit bool, via string) {
	var committed []*staging.Call
	for _, loc := range locs {
		if c := r.resolve(loc, commit, via); c != nil {
			committed = append(committed, c)
		}
	}
	if len(committed) > 0 {
		go r.apply(committed...)
	}
}

// resolve settles the call staged at loc (and the redelivered records held
// for it) as commit says. It returns the call when it committed, for the
// caller to apply; nil when there was none or it aborted.
func (r *Resolver) resolve(loc staging.Loc, commit bool, via string) *staging.Call {
	held := r.ledger.ResolveKnown(loc, commit)
	for _, call := range held {
		r.mRedelivered.WithLabelValues(map[bool]string{true: "held_then_committed", false: "held_then_aborted"}[commit]).Add(float64(call.Len()))
		go r.apply(call)
	}
	r.mu.Lock()
	call := r.calls[loc]
	delete(r.calls, loc)
	r.mu.Unlock()
	if call == nil {
		return nil
	}
	if !commit {
		r.mMarkers.WithLabelValues("abort", via).Inc()
		if h := r.hold.Load(); h != nil {
			// The rest of a held batch will not be committed now.
			go r.flushBatches(h, call.Batches())
		}
		for k, acks := range r.ledger.Abort(call) {
			r.applier.Release(k, acks, call.TxnID()) // off this goroutine
		}
		return nil
	}
	r.mMarkers.WithLabelValues("commit", via).Inc()
	r.ledger.Commit(call)
	return call
}

// apply sends the committed acknowledgements of calls upstream, one request
// per share session of the members that acquired them (the calls' offsets
// are disjoint: a record is staged once), then marks each call applied
// whose every session took them. With the batch hold on, the part of an
// acquired batch they cover only in part waits for the rest of it
// (wholebatch.go).
func (r *Resolver) apply(calls ...*staging.Call) {
	bySession := map[upstream.SessionKey]upstream.Acks{}
	callsOf := map[upstream.SessionKey][]int{}
	for i, call := range calls {
		for k, acks := range call.Acks() {
			if merged := bySession[k]; merged == nil {
				bySession[k] = acks
			} else {
				merged.Merge(acks)
			}
			callsOf[k] = append(callsOf[k], i)
		}
	}
	job := &applyJob{calls: calls, failed: make([]bool, len(calls)), left: 1} // 1: until every request is counted
	var batches map[upstream.SessionKey]map[upstream.TopicPartition][]staging.Batch
	hold := r.hold.Load()
	if hold != nil {
		batches = batchesOf(calls)
	}
	var sends []*upstreamSend
	for k, acks := range bySession {
		ref := jobRef{job, callsOf[k]}
		s := &upstreamSend{k: k, acks: acks, refs: []jobRef{ref}, committed: calls[callsOf[k][0]].CommittedAt()}
		if hold != nil && len(batches[k]) > 0 {
			if n := hold.split(s, batches[k], ref, func(key heldKey, hp *heldPart) { r.expire(hold, key, hp) }); n > 0 {
				r.mHolds.WithLabelValues("completed").Add(float64(n))
			}
		}
		if len(s.acks) == 0 {
			continue // all held
		}
		job.add()
		sends = append(sends, s)
	}
	for _, s := range sends {
		r.send(s)
	}
	if job.done(nil, nil) {
		r.finish(job)
	}
}

// batchesOf lists the acquired batches of calls' offsets per session and
// partition, each once.
func batchesOf(calls []*staging.Call) map[upstream.SessionKey]map[upstream.TopicPartition][]staging.Batch {
	out := map[upstream.SessionKey]map[upstream.TopicPartition][]staging.Batch{}
	for _, call := range calls {
		for k, m := range call.Batches() {
			if out[k] == nil {
				out[k] = m
				continue
			}
			for tp, bs := range m {
				for _, b := range bs {
					if !slices.Contains(out[k][tp], b) {
						out[k][tp] = append(out[k][tp], b)
					}
				}
			}
		}
	}
	return out
}

// expire sends a held part of a batch on its own: the rest of the batch
// was not committed within the hold.
func (r *Resolver) expire(h *batchHold, key heldKey, hp *heldPart) {
	if !h.take(key, hp) {
		return
	}
	r.mHolds.WithLabelValues("expired").Inc()
	r.send(&upstreamSend{k: key.session, acks: upstream.Acks{key.tp: hp.acks}, refs: hp.refs, committed: hp.committed})
}

// flushBatches sends at once what is held of batches.
func (r *Resolver) flushBatches(h *batchHold, batches map[upstream.SessionKey]map[upstream.TopicPartition][]staging.Batch) {
	for k, m := range batches {
		for tp, bs := range m {
			for _, b := range bs {
				if hp := h.release(heldKey{k, tp, b}); hp != nil {
					hp.timer.Stop()
					r.mHolds.WithLabelValues("aborted").Inc()
					r.send(&upstreamSend{k: k, acks: upstream.Acks{tp: hp.acks}, refs: hp.refs, committed: hp.committed})
				}
			}
		}
	}
}

// send sends s and counts it answered for every job it carries.
func (r *Resolver) send(s *upstreamSend) {
	err := r.applier.Acknowledge(s.k, s.acks, s.committed)
	if err != nil && r.ctx.Err() != nil {
		r.log.Debug("committed acknowledgements not applied upstream: the proxy is stopping (a proxy that sees the records redelivered acknowledges them then)", "member", s.k.Member, "err", err)
	} else if err != nil {
		first := s.refs[0].job.calls[s.refs[0].calls[0]]
		r.log.Warn("committed acknowledgements could not be applied upstream (a proxy that sees the records redelivered acknowledges them then)", "txn", first.TxnID(), "group", s.k.Group, "member", s.k.Member, "node", s.k.Node, "calls", len(s.refs), "err", err)
	}
	for _, ref := range s.refs {
		if ref.job.done(ref.calls, err) {
			r.finish(ref.job)
		}
	}
}

// finish marks the job's calls applied (those whose every request
// succeeded) and finished.
func (r *Resolver) finish(job *applyJob) {
	for i, call := range job.calls {
		if loc, staged := call.Loc(); !job.failed[i] && staged && !call.CommittedAt().IsZero() {
			// Applied: the broker never hands these offsets out again.
			r.ledger.ForgetApplied(loc)
		}
		r.ledger.Finish(call)
	}
}

// Stats counts the staged calls resolved as committed and as aborted.
func (r *Resolver) Stats() (committed, aborted float64) {
	return promstat.Sum(r.mMarkers, "commit"), promstat.Sum(r.mMarkers, "abort")
}

// Holds counts the parts of acquired batches held for the rest of their
// batch, by how the hold ended.
func (r *Resolver) Holds() (completed, expired, aborted float64) {
	return promstat.Sum(r.mHolds, "completed"), promstat.Sum(r.mHolds, "expired"), promstat.Sum(r.mHolds, "aborted")
}

// HeldParts is how many parts of acquired batches the hold keeps now.
func (r *Resolver) HeldParts() int {
	h := r.hold.Load()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// Calls is how many of this proxy's staged calls await their resolution.
func (r *Resolver) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}
