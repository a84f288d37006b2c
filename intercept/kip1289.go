package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/internal/promstat"
	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// ShadowWriter writes a shadow record inside a client's transaction.
type ShadowWriter interface {
	Write(ctx context.Context, txnID string, producerID int64, epoch int16, partition int32, rec *staging.ShadowRecord) (int64, error)
}

// KIP1289 is the transactional-acknowledgement engine: it learns members,
// acquisitions and transactions from the traffic passing through, stages
// TxnShareAcknowledge calls as TX_PENDING through a shadow record written in
// the caller's transaction, resolves them from the control markers, and
// applies committed ones with ShareAcknowledge on the member's own share
// session.
//
// Lock order: KIP1289.mu is never held while taking a session's mu; a
// session's mu is held across assigning an upstream epoch and writing the
// request that carries it (client request or injected), so epochs reach the
// broker in the order they were assigned.
type KIP1289 struct {
	cfg        configs.KIP1289
	key        int16
	log        *slog.Logger
	writer     ShadowWriter
	shadowPart int32
	proxyID    string
	m          kipMetrics

	mu      sync.Mutex
	members map[memberKey]memberInfo
	txns    map[string]txnInfo
	parts   map[partKey]*partState
	topics  map[string]map[[16]byte]bool // group → topic ids seen acquired
	staged  map[[2]int64]*stagedCall     // shadow partition, offset
	pending int                          // offsets STAGING..COMMITTED

	lastRejectLog time.Time // rate-limits the warning about untrusted shadow records

	ids     identities                 // who each connection is (identity.go)
	readers map[string]map[string]bool // group → principals the broker let fetch or heartbeat in it

	// Restart recovery and redelivery (recovery.go).
	known         map[partKey][]*knownRange
	knownAt       map[[2]int64][]knownRef    // shadow location → its ranges
	waiting       map[[2]int64][]*stagedCall // redelivered records held for an open transaction
	resolvedLocs  map[[2]int64]bool          // resolved before read; bounded by resolvedOrder
	resolvedOrder [][2]int64
	barrier       func(ctx context.Context) error
	recovered     chan struct{} // closed once the shadow topic was read back (MarkRecovered)
	waitRecovery  time.Duration // how long a redelivery waits for it, and for the barrier
	recoveredOnce sync.Once

	applyCtx    context.Context
	applyCancel context.CancelFunc
	conflict    atomic.Bool // the cluster advertises our key
	requireAuth atomic.Bool // the upstream requires SASL: unauthenticated callers are closed

	// sessions are the members' share sessions as the proxy translates
	// them; the proxy's own requests go on them (upstream/sessions.go).
	sessions *upstream.Sessions
	side     upstream.SideChannel // the proxy's own connection (touch.go relays on it)
	applier  *upstream.Applier    // sends committed acks, releases and RENEWs on the sessions
}

type kipMetrics struct {
	pending        prometheus.Gauge
	calls          *prometheus.CounterVec
	markers        *prometheus.CounterVec
	absorbed       prometheus.Counter
	epochErrors    prometheus.Counter
	known          prometheus.Gauge
	redelivered    *prometheus.CounterVec
	shadowRejected *prometheus.CounterVec
}

// NewKIP1289 builds the engine; side is the proxy's own connection to the
// brokers (upstream.SideChannel). The shadow writer comes when the shadow
// topic is ready (SetWriter).
func NewKIP1289(cfg configs.KIP1289, log *slog.Logger, reg prometheus.Registerer, side upstream.SideChannel) *KIP1289 {
	def := configs.Default().KIP1289
	if cfg.MaxOffsetsPerCall <= 0 {
		cfg.MaxOffsetsPerCall = def.MaxOffsetsPerCall
	}
	if cfg.MaxPartitionsPerCall <= 0 {
		cfg.MaxPartitionsPerCall = def.MaxPartitionsPerCall
	}
	id := cfg.ProxyID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	e := &KIP1289{
		cfg:     cfg,
		key:     int16(cfg.APIKey),
		log:     log,
		proxyID: id,
		members: map[memberKey]memberInfo{},
		readers: map[string]map[string]bool{},
		txns:    map[string]txnInfo{},
		parts:   map[partKey]*partState{},
		topics:  map[string]map[[16]byte]bool{},
		staged:  map[[2]int64]*stagedCall{},

		known:        map[partKey][]*knownRange{},
		knownAt:      map[[2]int64][]knownRef{},
		waiting:      map[[2]int64][]*stagedCall{},
		resolvedLocs: map[[2]int64]bool{},
		recovered:    make(chan struct{}),
		waitRecovery: redeliveryBarrierTimeout,
	}
	e.applyCtx, e.applyCancel = context.WithCancel(context.Background())
	e.sessions = upstream.NewSessions(e.applyCtx, side, log)
	e.side = side
	f := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "tx_pending_records",
		Help: "Records staged by TxnShareAcknowledge and not yet applied upstream (TX_PENDING or committed)."})
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "txn_share_acknowledge_total",
		Help: "TxnShareAcknowledge calls, by result (ok or the Kafka error name)."}, []string{"result"})
	markers := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "markers_total",
		Help: "Staged shadow records resolved, by type (commit, abort) and by what resolved them first (end_txn: the EndTxn response seen on the client connection; marker: the control marker in the shadow partition)."}, []string{"type", "via"})
	absorbed := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "client_acks_absorbed_total",
		Help: "Offsets a client acknowledged itself while they were TX_PENDING or committed; never forwarded."})
	epochErrs := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "client_share_session_epoch_errors_total",
		Help: "ShareFetch/ShareAcknowledge responses to clients with INVALID_SHARE_SESSION_EPOCH; the proxy's epoch translation should keep this at 0."})
	known := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "shadow_known_records",
		Help: "Shadow records (of any proxy) whose staged or committed acknowledgements the proxy remembers, to screen redelivered records."})
	redelivered := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "redelivered_records_total",
		Help: "Redelivered records taken out of ShareFetch responses, by outcome: committed (acknowledged by the proxy with the committed type), held_open (held for a transaction still open), held_then_committed, held_then_aborted (released), and unverified (the shadow topic could not be read to its end in time; handed to the client)."}, []string{"outcome"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_records_rejected_total",
		Help: "Shadow records read from the shadow topic and ignored, by reason: unsigned, bad_signature, copied (a signed record in another producer's batch), undecodable, implausible_range. Anything above 0 means someone other than sharetx writes the shadow topic."}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(f, calls, markers, absorbed, epochErrs, known, redelivered, rejected)
	}
	e.m = kipMetrics{pending: f, calls: calls, markers: markers, absorbed: absorbed,
		epochErrors: epochErrs, known: known, redelivered: redelivered, shadowRejected: rejected}
	e.applier = upstream.NewApplier(e.sessions, log, reg)
	go e.renewLoop()
	return e
}

// CheckRenew asks the cluster whether it can renew acquisition locks
// (ShareAcknowledge v2, Kafka 4.2+) and says so in the metrics and the log.
func (e *KIP1289) CheckRenew(ctx context.Context, cl *upstream.Client) { e.applier.CheckRenew(ctx, cl) }

// RequireAuthentication tells the engine that the upstream listener
// requires SASL (the proxy's own client authenticates): a TxnShareAcknowledge
// on a connection that did not authenticate closes it, as the broker closes
// one that sends requests before authenticating.
func (e *KIP1289) RequireAuthentication(on bool) { e.requireAuth.Store(on) }

// Key is the API key of TxnShareAcknowledge.
func (e *KIP1289) Key() int16 { return e.key }

// ProxyID names this process in shadow records.
func (e *KIP1289) ProxyID() string { return e.proxyID }

// SetWriter installs the shadow writer and the shadow partition count.
func (e *KIP1289) SetWriter(w ShadowWriter, partitions int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writer, e.shadowPart = w, partitions
}

// Close stops applying acknowledgements.
func (e *KIP1289) Close() { e.applyCancel() }

// ---------------------------------------------------------------- learning

func (e *KIP1289) setMember(ident, group, member string, epoch int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if epoch < 0 {
		delete(e.members, memberKey{group, member})
		return
	}
	e.members[memberKey{group, member}] = memberInfo{epoch: epoch, ident: ident}
	e.noteReaderLocked(group, ident)
}

// noteReaderLocked records that the broker let ident read group (a
// heartbeat or fetch of it was accepted from ident). Bounded: a group
// keeps at most maxReaders principals, the newest.
func (e *KIP1289) noteReaderLocked(group, ident string) {
	r := e.readers[group]
	if r == nil {
		r = map[string]bool{}
		e.readers[group] = r
	}
	if !r[ident] && len(r) >= maxReaders {
		clear(r)
	}
	r[ident] = true
}

// readsGroupLocked reports whether ident was seen allowed to read group, or
// no principal was.
func (e *KIP1289) readsGroupLocked(group, ident string) bool {
	r := e.readers[group]
	return len(r) == 0 || r[ident] // no member of it seen: nothing of it to take (checkOffsets refuses)
}

// maxReaders bounds the principals remembered per group or transaction.
const maxReaders = 64

// learnTxn records a transactional id's producer id and epoch from a write
// the broker accepted from ident, when the id is unknown or the epoch moved
// on; ident showed WRITE on the id.
func (e *KIP1289) learnTxn(ident, txnID string, pid int64, epoch int16) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.txns[txnID]
	if ok && t.producerID == pid {
		t.own(ident)
		if t.epoch < epoch {
			t.epoch = epoch
		}
		e.txns[txnID] = t
		return
	}
	if ok {
		return // a new producer id is learned from InitProducerId/EndTxn only
	}
	t = txnInfo{producerID: pid, epoch: epoch}
	t.own(ident)
	e.txns[txnID] = t
}

// setTxn records the producer id and epoch the coordinator just gave a
// transactional id (InitProducerId, EndTxn v5+) on a connection of ident.
// Such an epoch is fresh: the shadow writer starts it at sequence 0 without
// asking the leader.
func (e *KIP1289) setTxn(ident, txnID string, pid int64, epoch int16) {
	e.mu.Lock()
	t := e.txns[txnID]
	t.producerID, t.epoch = pid, epoch
	t.own(ident)
	e.txns[txnID] = t
	w := e.writer
	e.mu.Unlock()
	if f, ok := w.(interface{ MarkFresh(int64, int16) }); ok {
		f.MarkFresh(pid, epoch)
	}
}

// acquired records what a ShareFetch response handed to member.
func (e *KIP1289) acquired(ident string, node int32, group, member string, topic [16]byte, partition int32, recs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, lock time.Duration) {
	if len(recs) == 0 {
		return
	}
	now := time.Now()
	deadline := now.Add(lock)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := partKey{group, topic, partition}
	ps := e.parts[k]
	if ps == nil {
		ps = &partState{offsets: map[int64]*offState{}}
		e.parts[k] = ps
	}
	if e.topics[group] == nil {
		e.topics[group] = map[[16]byte]bool{}
	}
	e.topics[group][topic] = true
	e.noteReaderLocked(group, ident)
	if len(ps.acq) > 0 && now.After(ps.acq[0].deadline.Add(time.Minute)) {
		ps.pruneAcq(now, time.Minute)
	}
	for _, r := range recs {
		if r.LastOffset < r.FirstOffset || r.LastOffset-r.FirstOffset >= 1<<20 {
			continue // malformed; the client gets it as the broker sent it
		}
		// Entries in the range that are not held are superseded by this
		// acquisition. A held one stays: it was redelivered while we hold
		// it staged (the broker released it: lock expired, session
		// closed); recovery.go handles that window.
		if n := len(ps.offsets); n > 0 {
			if int64(n) < r.LastOffset-r.FirstOffset+1 {
				for o, cur := range ps.offsets {
					if o >= r.FirstOffset && o <= r.LastOffset && !cur.state.held() {
						delete(ps.offsets, o)
					}
				}
			} else {
				for o := r.FirstOffset; o <= r.LastOffset; o++ {
					if cur := ps.offsets[o]; cur != nil && !cur.state.held() {
						delete(ps.offsets, o)
					}
				}
			}
		}
		ps.acq = append(ps.acq, acqRange{first: r.FirstOffset, last: r.LastOffset, member: member, ident: ident, node: node, deadline: deadline, lock: lock})
	}
}

// ---------------------------------------------------------------- staging

type partResult struct {
	topic     [16]byte
	partition int32
	code      int16
	msg       string
}

// writeErrorCode maps a failed shadow write to the code a KIP-1289 client
// acts on correctly (docs/protocol.md): the broker's own verdict on the
// producer (fenced, wrong epoch or mapping, not authorised) and retriable
// codes pass through; anything else aborts the transaction, which is always
// safe, where a code the reference client does not know would be fatal.
func writeErrorCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping,
			kerr.TransactionalIDAuthorizationFailed, kerr.TransactionAbortable:
			return ke.Code
		}
		if ke.Retriable && !errors.Is(err, staging.ErrOutcomeUnknown) {
			return ke.Code
		}
	}
	return kerr.TransactionAbortable.Code
}

// Stage answers a TxnShareAcknowledge from principal ident (identity.go):
// it validates it against what the proxy saw, writes the shadow record in the caller's transaction, and only
// then marks the offsets TX_PENDING. All or nothing.
func (e *KIP1289) Stage(ctx context.Context, req *kip1289.TxnShareAcknowledgeRequest, ident string) *kip1289.TxnShareAcknowledgeResponse {
	resp, call := e.validateAndReserveAs(req, ident)
	if resp != nil {
		e.count(resp)
		return resp
	}
	rec := &staging.ShadowRecord{
		Version: 1, ProxyID: e.proxyID, TransactionalID: call.txnID,
		ProducerID: call.producerID, ProducerEpoch: call.epoch, GroupID: req.GroupID, MemberID: call.member,
	}
	for _, t := range req.Topics {
		st := staging.ShadowTopic{TopicID: t.TopicID}
		for _, p := range t.Partitions {
			sp := staging.ShadowPartition{Partition: p.Partition}
			for _, b := range p.AcknowledgementBatches {
				sp.Batches = append(sp.Batches, staging.ShadowBatch{FirstOffset: b.FirstOffset, LastOffset: b.LastOffset, AcknowledgeTypes: b.AcknowledgeTypes})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		rec.Topics = append(rec.Topics, st)
	}
	e.mu.Lock()
	w, n := e.writer, e.shadowPart
	e.mu.Unlock()
	if w == nil {
		e.unstage(call)
		return e.count(txnAckError(req, kerr.CoordinatorNotAvailable.Code, "sharetx: the shadow topic is not ready yet; retry"))
	}
	part := staging.ShadowPartitionFor(call.txnID, n)
	off, err := w.Write(ctx, call.txnID, call.producerID, call.epoch, part, rec)
	if err != nil {
		e.unstage(call)
		e.log.Info("TxnShareAcknowledge: the shadow write failed", "txn", call.txnID, "err", err)
		return e.count(txnAckError(req, writeErrorCode(err), "sharetx: writing the staged acknowledgements into the transaction failed: "+kerrName(err)))
	}
	call.shadowPart, call.shadowOff = part, off
	e.mu.Lock()
	for _, r := range call.offsets {
		if st := e.parts[r.part].offsets[r.offset]; st != nil && st.call == call {
			st.state = stTxPending
		}
	}
	e.staged[[2]int64{int64(part), off}] = call
	e.learnLocked([2]int64{int64(part), off}, rec)
	e.mu.Unlock()
	return e.count(okResponse(req))
}

func (e *KIP1289) count(r *kip1289.TxnShareAcknowledgeResponse) *kip1289.TxnShareAcknowledgeResponse {
	res := "ok"
	if r.ErrorCode != 0 {
		res = upstream.ErrName(r.ErrorCode)
	} else {
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 && p.ErrorCode != kerr.OperationNotAttempted.Code {
					res = upstream.ErrName(p.ErrorCode)
				}
			}
		}
	}
	e.m.calls.WithLabelValues(res).Inc()
	return r
}

// kerrName names a failed write by its Kafka error only: the writer's own
// message may carry the broker's, which can name epochs and sequences.
func kerrName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return "see the proxy's log"
}

// unstage returns the offsets of a call whose shadow write failed to
// ACQUIRED: nothing was staged, the member still holds them, and the client
// aborts its transaction (the reference broker leaves them acquired too).
func (e *KIP1289) unstage(call *stagedCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	releases := map[int32]upstream.Acks{}
	for _, r := range call.offsets {
		ps := e.parts[r.part]
		if ps == nil {
			continue
		}
		if st := ps.offsets[r.offset]; st != nil && st.call == call {
			st.state, st.call = stAcquired, nil
			if st.releaseReq {
				// The client released it while it was being staged:
				// release it upstream now.
				addRef(releases, r, kip1289.Release)
				delete(ps.offsets, r.offset)
				ps.settle(r.offset, r.offset)
				continue
			}
			st.clientAcked = false
		}
	}
	e.pending -= len(call.offsets)
	e.m.pending.Set(float64(e.pending))
	e.sendReleases(call, releases)
}

// abortCall releases the records of an aborted transaction upstream at once
// (ABORT marker, EndTxn abort, transaction timeout, fencing), as the
// reference broker does: AVAILABLE again, redelivered, possibly to another
// member, without the client doing anything. The client still acknowledges
// the delivery it polled (a franz-go share consumer implicitly on its next
// poll, a Java explicit-mode consumer before it may poll again): that one
// acknowledgement is owed, absorbed when it comes (filterClientAcks) and never
// applied to a later delivery of the same offset.
func (e *KIP1289) abortCall(call *stagedCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	releases := map[int32]upstream.Acks{}
	for _, r := range call.offsets {
		ps := e.parts[r.part]
		if ps == nil {
			continue
		}
		st := ps.offsets[r.offset]
		if st == nil || st.call != call {
			continue
		}
		addRef(releases, r, kip1289.Release)
		if !st.clientAcked {
			ps.oweAck(r.offset, call.member, now.Add(2*max(st.lock, time.Minute)))
		}
		delete(ps.offsets, r.offset)
		ps.settle(r.offset, r.offset)
	}
	e.pending -= len(call.offsets)
	e.m.pending.Set(float64(e.pending))
	e.sendReleases(call, releases)
}

func addRef(m map[int32]upstream.Acks, r offRef, ty int8) {
	if m[r.node] == nil {
		m[r.node] = upstream.Acks{}
	}
	m[r.node].Add(upstream.TopicPartition{Topic: r.part.topic, Partition: r.part.partition}, r.offset, ty)
}

// sendReleases releases offsets upstream on the member's share sessions, off
// the caller's goroutine (e.mu may be held).
func (e *KIP1289) sendReleases(call *stagedCall, releases map[int32]upstream.Acks) {
	for node, acks := range releases {
		e.applier.Release(upstream.SessionKey{Node: node, Group: call.group, Member: call.member}, acks, call.txnID)
	}
}

// ---------------------------------------------------------------- resolution

// endTxn resolves every staged record of the transaction that a successful
// EndTxn just ended.
func (e *KIP1289) endTxn(txnID string, pid int64, epoch int16, commit bool) {
	e.mu.Lock()
	var locs [][2]int64
	for loc, c := range e.staged {
		if c.txnID == txnID && c.producerID == pid && c.epoch == epoch {
			locs = append(locs, loc)
		}
	}
	e.mu.Unlock()
	for _, loc := range locs {
		e.resolve(int32(loc[0]), loc[1], commit, "end_txn")
	}
}

// Resolve applies a control marker to the staged record at shadow
// partition/offset. Idempotent: a record resolved once is forgotten.
func (e *KIP1289) Resolve(partition int32, offset int64, commit bool) {
	e.resolve(partition, offset, commit, "marker")
}

func (e *KIP1289) resolve(partition int32, offset int64, commit bool, via string) {
	loc := [2]int64{int64(partition), offset}
	e.resolveKnown(loc, commit)
	e.mu.Lock()
	call := e.staged[loc]
	delete(e.staged, loc)
	e.mu.Unlock()
	if call == nil {
		return
	}
	if !commit {
		e.m.markers.WithLabelValues("abort", via).Inc()
		e.abortCall(call)
		return
	}
	e.m.markers.WithLabelValues("commit", via).Inc()
	call.committed = time.Now()
	e.mu.Lock()
	for _, r := range call.offsets {
		if st := e.parts[r.part].offsets[r.offset]; st != nil && st.call == call {
			st.state = stCommitted
		}
	}
	e.mu.Unlock()
	go e.apply(call)
}

// apply sends the committed acknowledgements of call upstream, on the share
// session of the member that acquired them, retrying a stale epoch.
func (e *KIP1289) apply(call *stagedCall) {
	bySession := map[int32]upstream.Acks{}
	for _, r := range call.offsets {
		addRef(bySession, r, r.ackType)
	}
	ok := true
	for node, parts := range bySession {
		err := e.applier.Acknowledge(upstream.SessionKey{Node: node, Group: call.group, Member: call.member}, parts, call.committed)
		if err != nil {
			ok = false
			e.log.Warn("committed acknowledgements could not be applied upstream (a proxy that sees the records redelivered acknowledges them then)", "txn", call.txnID, "group", call.group, "member", call.member, "node", node, "err", err)
		}
	}
	if ok && call.shadowPart >= 0 && call.shadowOff >= 0 && !call.committed.IsZero() && !call.redelivered {
		// Applied: the broker never hands these offsets out again.
		loc := [2]int64{int64(call.shadowPart), call.shadowOff}
		e.mu.Lock()
		e.forgetKnownLocked(loc)
		e.markResolvedLocked(loc)
		e.mu.Unlock()
	}
	e.finish(call)
}

// finish marks a call's offsets applied; those the client already acked
// are forgotten, the rest wait for the client's (absorbed) ack.
func (e *KIP1289) finish(call *stagedCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range call.offsets {
		ps := e.parts[r.part]
		if ps == nil {
			continue
		}
		if st := ps.offsets[r.offset]; st != nil && st.call == call {
			if st.clientAcked || call.redelivered {
				delete(ps.offsets, r.offset)
			} else {
				st.state, st.call = stApplied, nil
			}
		}
	}
	e.pending -= len(call.offsets)
	e.m.pending.Set(float64(e.pending))
}

// Prune forgets acquired offsets whose lock expired long ago (they were
// redelivered or acked without the proxy seeing it) and applied ones the
// client never acked.
func (e *KIP1289) Prune(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, ps := range e.parts {
		for o, st := range ps.offsets {
			if (st.state == stAcquired || st.state == stApplied) && now.After(st.deadline.Add(time.Minute)) {
				delete(ps.offsets, o)
			}
		}
		ps.pruneAcq(now, time.Minute)
		ps.pruneOwed(now)
		if len(ps.offsets) == 0 && len(ps.acq) == 0 && len(ps.owed) == 0 {
			delete(e.parts, k)
		}
	}
	e.sessions.Prune()
}

// Stats is a snapshot of the engine for tests, benchmarks and logs.
type Stats struct {
	Pending       int     // records TX_PENDING or committed, not yet applied
	Applied       uint64  // acknowledgement batches applied upstream
	LatencyP50    float64 // commit→applied, seconds (bucket upper bounds)
	LatencyP99    float64
	LatencyMean   float64
	Committed     float64 // staged records resolved as committed
	Aborted       float64
	AbsorbedAcks  float64
	ApplyFailures float64
	EpochErrors   float64 // INVALID_SHARE_SESSION_EPOCH answers seen by clients
	Renewals      float64 // successful lock RENEWs
	InFlight      int     // client share-session requests waiting for their response
}

// Stats returns a snapshot of the engine.
func (e *KIP1289) Stats() Stats {
	e.mu.Lock()
	st := Stats{Pending: e.pending}
	e.mu.Unlock()
	st.InFlight = e.sessions.InFlight()
	as := e.applier.Stats()
	st.Applied, st.LatencyP50, st.LatencyP99, st.LatencyMean = as.Applied, as.LatencyP50, as.LatencyP99, as.Mean
	st.ApplyFailures, st.Renewals = as.Failures, as.Renewals
	st.Committed = promstat.Sum(e.m.markers, "commit")
	st.Aborted = promstat.Sum(e.m.markers, "abort")
	st.AbsorbedAcks = promstat.Value(e.m.absorbed)
	st.EpochErrors = promstat.Value(e.m.epochErrors)
	return st
}

// heldFor counts the offsets member acquired on node that are staged or
// committed and not yet applied.
func (e *KIP1289) heldFor(node int32, group, member string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for k, ps := range e.parts {
		if k.group != group {
			continue
		}
		for _, st := range ps.offsets {
			if st.node == node && st.member == member && st.state >= stStaging && st.state <= stCommitted {
				n++
			}
		}
	}
	return n
}

// waitHeld waits until member has nothing staged or committed-unapplied on
// node, or d passes; it reports whether it drained.
func (e *KIP1289) waitHeld(node int32, group, member string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for e.heldFor(node, group, member) > 0 {
		if time.Now().After(deadline) || e.applyCtx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// HoldsSessionsOn reports whether a share session on connection c has
// acknowledgements staged or committed and not yet applied: closing c's
// upstream connection would release those records.
func (e *KIP1289) HoldsSessionsOn(c Conn) bool {
	if e.cfg.CloseHold <= 0 {
		return false
	}
	for _, k := range e.sessions.On(c) {
		if e.heldFor(k.Node, k.Group, k.Member) > 0 {
			return true
		}
	}
	return false
}

// WaitSessionsDrained waits until no share session on c holds
// acknowledgements not yet applied, or d passes.
func (e *KIP1289) WaitSessionsDrained(c Conn, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for e.HoldsSessionsOn(c) {
		if time.Now().After(deadline) || e.applyCtx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// renewLoop keeps the acquisition locks of staged and committed records
// alive (ShareAcknowledge v2 RENEW, Kafka 4.2+) until they are resolved and
// applied, so a transaction may stay open longer than the lock.
func (e *KIP1289) renewLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.applyCtx.Done():
			return
		case now := <-t.C:
			e.renewDue(now)
		}
	}
}

// renewDue renews every held record with less than half its lock left.
func (e *KIP1289) renewDue(now time.Time) {
	due := map[upstream.SessionKey]upstream.Acks{}
	e.mu.Lock()
	for k, ps := range e.parts {
		for o, st := range ps.offsets {
			if st.state < stStaging || st.state > stCommitted || st.renewing || st.deadline.Sub(now) > st.lock/2 {
				continue
			}
			st.renewing = true
			sk := upstream.SessionKey{Node: st.node, Group: k.group, Member: st.member}
			if due[sk] == nil {
				due[sk] = upstream.Acks{}
			}
			due[sk].Add(upstream.TopicPartition{Topic: k.topic, Partition: k.partition}, o, 4) // RENEW
		}
	}
	e.mu.Unlock()
	for sk, parts := range due {
		go e.renew(sk, parts)
	}
}

func (e *KIP1289) renew(sk upstream.SessionKey, acks upstream.Acks) {
	sent := time.Now()
	r := e.applier.Renew(sk, acks)
	e.mu.Lock()
	defer e.mu.Unlock()
	for tp, offs := range acks {
		ps := e.parts[partKey{sk.Group, tp.Topic, tp.Partition}]
		if ps == nil {
			continue
		}
		for o := range offs {
			st := ps.offsets[o]
			if st == nil {
				continue
			}
			st.renewing = false
			if r.Renewed(tp) {
				l := st.lock
				if r.Lock > 0 {
					l = r.Lock
				}
				st.deadline = sent.Add(l)
			} else if r.Result == "unsupported" {
				st.deadline = st.deadline.Add(time.Hour) // do not retry every tick; the lock expires as it will
			}
		}
	}
}
