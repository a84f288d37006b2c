package intercept

import (
	"context"
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
	"github.com/sharetx/sharetx/markers"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// KIP1289 is the transactional-acknowledgement feature: the proxy's one
// filter (proxy.Filter), built complete by New from the context the
// transport hands it, its hooks declared by Register (docs/design.md §2).
// It holds the parts,
// each of which owns one concern:
//
//   - staging.Ledger: what the proxy learned from the traffic (members,
//     transactions, acquisitions) and the state of every offset it holds;
//   - staging.Stager: TxnShareAcknowledge → shadow record → TX_PENDING
//     (from Start, once the shadow topic is ready);
//   - markers.Resolver: TX_PENDING → committed or aborted, by the
//     transaction markers or the EndTxn answer; applying; recovery;
//   - upstream.Sessions and upstream.Applier: the members' share sessions
//     and every request the proxy sends on them;
//
// Who each connection is, the transport says (proxy.Conn.Principal). All
// of the parts are built by New; Start (startup.go) adds the Stager and the
// shadow topic's markers.Tailer.
type KIP1289 struct {
	cfg         configs.KIP1289
	full        configs.Config // the shadow key comes from the upstream credentials (docs/design.md §9.2)
	key         int16
	log         *slog.Logger
	proxyID     string
	requireAuth bool // the upstream requires SASL: unauthenticated callers are closed

	ledger   *staging.Ledger
	sessions *upstream.Sessions
	applier  *upstream.Applier
	resolver *markers.Resolver
	side     upstream.SideChannel           // the proxy's own connection (touch.go relays on it)
	stager   atomic.Pointer[staging.Stager] // nil until Start
	reg      prometheus.Registerer          // nil: metrics not registered

	tailMu sync.Mutex
	tailer *markers.Tailer // the shadow topic's, from Start until Close

	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	conflict atomic.Bool // a broker advertised our key (logged once; the proxy keeps serving it)
	built    time.Time   // NewKIP1289: kip1289.not_ready_retry_for counts from here

	produces produces // transactional Produce requests in flight (ride.go)

	txnRetries concurrentTxnRetries // AddPartitionsToTxn retried (24_add_partitions_to_txn.go)

	mCalls       *prometheus.CounterVec
	mEpochErrors prometheus.Counter
	mSessionWait prometheus.Histogram
	mShadowWrite *prometheus.CounterVec
	mStage       *prometheus.HistogramVec
	mRideMiss    *prometheus.CounterVec
	mRefused     prometheus.Counter
	mFailures    *prometheus.CounterVec

	mConcurrentRetries *prometheus.CounterVec
}

// New builds the feature as the transport's filter (cmd/sharetx hands it
// to proxy.New): fc.Config.KIP1289 configures it (validated: configs.Load,
// or configs.Default changed; its limits have no other default), fc.Send is
// the proxy's own connection to the brokers, fc.RequireAuth says the
// upstream listener requires SASL (a TxnShareAcknowledge on a connection
// that did not authenticate closes it, as the broker closes one that sends
// requests before authenticating). Metrics are registered in fc.Registry
// (nil: not registered). It learns from the traffic at once;
// TxnShareAcknowledge is answered COORDINATOR_NOT_AVAILABLE (retriable)
// until Start, for at most kip1289.not_ready_retry_for;
// TRANSACTION_ABORTABLE after that.
func New(fc proxy.FilterContext) (*KIP1289, error) {
	e := newKIP1289(fc.Config.KIP1289, fc.Log, fc.Registry, fc.Send, fc.RequireAuth)
	e.full = fc.Config
	return e, nil
}

// NewFilter is New as a proxy.NewFilter.
func NewFilter(fc proxy.FilterContext) (proxy.Filter, error) { return New(fc) }

var _ proxy.Filter = (*KIP1289)(nil)

// Register declares the feature's hooks: one per key it takes part in, each
// in the key's file, and the key it serves (txn_share_acknowledge.go).
func (e *KIP1289) Register(h *proxy.Hooks) {
	proxy.On(h, kmsg.Produce, e.produceRequest, e.produceResponse)
	h.KeepsNothing(kmsg.Produce) // produceTxn copies the transactional id; a ride builds a new body
	proxy.OnResponse(h, kmsg.ApiVersions, e.apiVersionsResponse)
	proxy.On(h, kmsg.InitProducerID, e.initProducerIDRequest, e.initProducerIDResponse)
	proxy.On(h, kmsg.EndTxn, e.endTxnRequest, e.endTxnResponse)
	if e.cfg.ConcurrentTxnRetry > 0 {
		proxy.On(h, kmsg.AddPartitionsToTxn, e.addPartitionsToTxnRequest, keepAddPartitionsAnswer)
	}
	proxy.On(h, kmsg.ShareGroupHeartbeat, e.shareGroupHeartbeatRequest, e.shareGroupHeartbeatResponse)
	proxy.On(h, kmsg.ShareFetch, e.shareFetchRequest, e.shareFetchResponse)
	proxy.On(h, kmsg.ShareAcknowledge, e.shareAcknowledgeRequest, e.shareAcknowledgeResponse)
	// TxnShareAcknowledge is flexible from v0 (request header v2) and
	// decoded whole.
	h.Serve(e.key, "TxnShareAcknowledge", 0, e.txnShareAcknowledgeRequest)
}

// newKIP1289 builds the feature from its part of the configuration: side
// is the proxy's own connection to the brokers (New says the rest).
func newKIP1289(cfg configs.KIP1289, log *slog.Logger, reg prometheus.Registerer, side upstream.SideChannel, requireAuth bool) *KIP1289 {
	id := cfg.ProxyID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	ctx, cancel := context.WithCancel(context.Background())
	sessions := upstream.NewSessions(ctx, side, log)
	applier := upstream.NewApplier(sessions, log, reg)
	applier.RideWait = cfg.AckRideWait
	ledger := staging.NewLedger(cfg, log, reg, applier)
	e := &KIP1289{
		cfg: cfg, key: int16(cfg.APIKey), log: log, proxyID: id, requireAuth: requireAuth,
		ledger: ledger, sessions: sessions, applier: applier, side: side, reg: reg,
		resolver: markers.NewResolver(ctx, ledger, applier, log, reg),
		ctx:      ctx, cancel: cancel, built: time.Now(),
		mCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "txn_share_acknowledge_total",
			Help: "TxnShareAcknowledge calls, by result (ok or the Kafka error name)."}, []string{"result"}),
		mEpochErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "client_share_session_epoch_errors_total",
			Help: "ShareFetch/ShareAcknowledge responses to clients with INVALID_SHARE_SESSION_EPOCH; the proxy's epoch translation should keep this at 0."}),
		mShadowWrite: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_writes_total",
			Help: "Shadow records written for TxnShareAcknowledge calls, by path: rode (inside the client's own Produce of the transaction) or own (a Produce of the proxy's)."}, []string{"path"}),
		mStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sharetx", Name: "stage_seconds",
			Help:    "Where the proxy's time of each staged TxnShareAcknowledge went, by phase: validate (checking it against what the member acquired, reserving the offsets), wait_produce (a call that offered its shadow record to its transaction's Produce, waiting for one), write_rode (the Produce it rode in, to its answer), write_own (its shadow record's own write).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}, []string{"phase"}),
		mRideMiss: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "ride_misses_total",
			Help: "TxnShareAcknowledge calls that offered their shadow record to their transaction's Produce (design.md §4.4) and were not carried, by reason. Seen from the Produce: not_ready (the call was not validated in time), no_partition (no shadow partition led by its broker could take the batch now), other (another producer epoch, the call's own connection). Seen from the call, which then wrote on its own: produce_first (the outputs' Produce passed before the call), no_produce (none came in time; a Produce counted above comes first), not_sent."}, []string{"reason"}),
		mRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "shadow_topic_writes_refused_total",
			Help: "Partitions of the shadow topic in client Produce requests refused with TOPIC_AUTHORIZATION_FAILED: everything but a transaction's own touch record."}),
		mFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "staging_failures_total",
			Help: "TxnShareAcknowledge calls the proxy failed to stage for a failure of its own, by reason: not_ready (the shadow topic was not ready) or shadow_write (writing the shadow record failed for something else than the caller's producer). Refusals of what a client sent are not counted here."}, []string{"reason"}),
		mConcurrentRetries: newConcurrentRetriesMetric(),
		mSessionWait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "sharetx", Name: "share_session_wait_seconds",
			Help:    "How long each client ShareFetch/ShareAcknowledge waited for its share session while a request of the proxy's own (committed acks, releases, RENEWs) held it; 0 when it was free. The connection's read loop waits with it.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
	}
	if reg != nil {
		reg.MustRegister(e.mCalls, e.mEpochErrors, e.mSessionWait, e.mShadowWrite, e.mStage, e.mRideMiss, e.mRefused, e.mFailures, e.mConcurrentRetries, newSizesCollector(e))
	}
	e.resolver.HoldBatches(cfg.WholeBatchWait)
	go e.renewLoop()
	return e
}

// install serves TxnShareAcknowledge: the shadow topic is ready (written
// with w, partitions partitions) and was read back; barrier returns once it
// is read to its current end (markers.Resolver.Recovered). Once only.
func (e *KIP1289) install(w staging.ShadowWriter, partitions int32, barrier func(ctx context.Context) error) {
	s := staging.NewStager(e.ledger, w, partitions, e.proxyID, e.log)
	s.SetInFlight(e.produces.idleOf)
	s.SetOnWriteFailure(func() { e.mFailures.WithLabelValues("shadow_write").Inc() })
	e.stager.CompareAndSwap(nil, s)
	e.resolver.Recovered(barrier)
}

// Resolver resolves the staged calls; the shadow topic's Tailer feeds it.
func (e *KIP1289) Resolver() *markers.Resolver { return e.resolver }

// Recovered reports whether the shadow topic was read back (Start).
func (e *KIP1289) Recovered() bool { return e.resolver.IsRecovered() }

// Ready implements proxy.Filter: ready once the shadow topic was read back.
func (e *KIP1289) Ready() (bool, string) {
	if !e.Recovered() {
		return false, "the shadow topic " + e.cfg.ShadowTopic + " has not been read back yet (staged and committed acknowledgements are being recovered)"
	}
	return true, ""
}

// Key is the API key of TxnShareAcknowledge.
func (e *KIP1289) Key() int16 { return e.key }

// ProxyID names this process in shadow records.
func (e *KIP1289) ProxyID() string { return e.proxyID }

// KnownRanges is how many shadow records the proxy holds knowledge of.
func (e *KIP1289) KnownRanges() int { return e.ledger.KnownRanges() }

// Close stops applying acknowledgements and tailing the shadow topic.
func (e *KIP1289) Close() {
	e.cancel()
	e.closeTailer()
}

// stage answers a TxnShareAcknowledge of principal ident.
func (e *KIP1289) stage(ctx context.Context, req *kip1289.TxnShareAcknowledgeRequest, ident string) *kip1289.TxnShareAcknowledgeResponse {
	s := e.stager.Load()
	if s == nil {
		// Retriable while a start-up may still finish; abortable once it
		// has taken longer than that: the KIP's client retries a retriable
		// code without limit, ahead of the EndTxn that would end the
		// transaction (design.md §4.1).
		e.mFailures.WithLabelValues("not_ready").Inc()
		if time.Since(e.built) < e.cfg.NotReadyRetryFor {
			return e.count(staging.ErrorResponse(req, kerr.CoordinatorNotAvailable.Code, "sharetx: the shadow topic is not ready yet; retry"))
		}
		return e.count(staging.ErrorResponse(req, kerr.TransactionAbortable.Code, fmt.Sprintf(
			"sharetx: the shadow topic is still not ready %s after start (see the proxy's log: it may be unable to create kip1289.shadow_topic); abort this transaction", time.Since(e.built).Truncate(time.Second))))
	}
	resp, staged := s.Stage(ctx, req, ident)
	if staged != nil {
		e.resolver.Track(staged)
		path := "own"
		if staged.Rode {
			path = "rode"
		}
		e.mShadowWrite.WithLabelValues(path).Inc()
		ph := staged.Phases
		e.mStage.WithLabelValues("validate").Observe(ph.Validate.Seconds())
		if req.RideProduce {
			e.mStage.WithLabelValues("wait_produce").Observe(ph.WaitProduce.Seconds())
		}
		e.mStage.WithLabelValues("write_" + path).Observe(ph.Write.Seconds())
		if ph.Miss != "" {
			e.mRideMiss.WithLabelValues(ph.Miss).Inc()
		}
	}
	return e.count(resp)
}

// setTxn records the producer id and epoch the coordinator just gave a
// transactional id on a connection of ident. Such an epoch is fresh: the
// shadow writer starts it at sequence 0 without asking the leader.
func (e *KIP1289) setTxn(ident, txnID string, pid int64, epoch int16) {
	e.ledger.SetTxn(ident, txnID, pid, epoch)
	if s := e.stager.Load(); s != nil {
		s.MarkFresh(pid, epoch)
	}
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
	e.mCalls.WithLabelValues(res).Inc()
	return r
}

// Prune forgets what the proxy no longer needs: acquisitions whose lock
// expired long ago, applied offsets the client never acked, sessions whose
// connection closed, in-flight counts of Produces never answered.
func (e *KIP1289) Prune(now time.Time) {
	e.ledger.Prune(now)
	e.sessions.Prune()
	e.produces.prune(now)
}

// PruneKnown forgets known ranges below their group's share-partition start
// offset.
func (e *KIP1289) PruneKnown(ctx context.Context, fetch markers.StartOffsets) error {
	return e.resolver.PruneKnown(ctx, fetch)
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
	// Parts of acquired batches held for the rest of their batch, by how
	// the hold ended (kip1289.whole_batch_wait).
	HoldsCompleted, HoldsExpired, HoldsAborted float64
}

// Stats returns a snapshot of the engine.
func (e *KIP1289) Stats() Stats {
	st := Stats{Pending: e.ledger.Pending(), InFlight: e.sessions.InFlight()}
	as := e.applier.Stats()
	st.Applied, st.LatencyP50, st.LatencyP99, st.LatencyMean = as.Applied, as.LatencyP50, as.LatencyP99, as.Mean
	st.ApplyFailures, st.Renewals = as.Failures, as.Renewals
	st.Committed, st.Aborted = e.resolver.Stats()
	st.HoldsCompleted, st.HoldsExpired, st.HoldsAborted = e.resolver.Holds()
	st.AbsorbedAcks = e.ledger.Absorbed()
	st.EpochErrors = promstat.Value(e.mEpochErrors)
	return st
}

// waitHeld waits until member has nothing staged or committed-unapplied on
// node, or d passes; it reports whether it drained.
func (e *KIP1289) waitHeld(node int32, group, member string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for e.ledger.HeldFor(node, group, member) > 0 {
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// HoldsSessionsOn reports whether a share session on connection c has
// acknowledgements staged or committed and not yet applied: closing c's
// upstream connection would release those records.
func (e *KIP1289) HoldsSessionsOn(c proxy.Conn) bool {
	if e.cfg.CloseHold <= 0 {
		return false
	}
	for _, k := range e.sessions.On(c) {
		if e.ledger.HeldFor(k.Node, k.Group, k.Member) > 0 {
			return true
		}
	}
	return false
}

// WaitSessionsDrained waits until no share session on c holds
// acknowledgements not yet applied, or kip1289.close_hold passes (then it
// says so).
func (e *KIP1289) WaitSessionsDrained(c proxy.Conn) {
	if !e.waitSessionsDrained(c, e.cfg.CloseHold) {
		e.log.Warn("gave up holding the upstream connection of a gone client; its unapplied acknowledgements are lost and the records will be redelivered",
			"hold", e.cfg.CloseHold)
	}
}

// Started is the line the transport prints once Start succeeded.
func (e *KIP1289) Started() string {
	return fmt.Sprintf("TxnShareAcknowledge served on API key %d; shadow topic %s", e.key, e.cfg.ShadowTopic)
}

// waitSessionsDrained waits until no share session on c holds
// acknowledgements not yet applied, or d passes; false if d passed.
func (e *KIP1289) waitSessionsDrained(c proxy.Conn, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for e.HoldsSessionsOn(c) {
		if time.Now().After(deadline) || e.ctx.Err() != nil {
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
		case <-e.ctx.Done():
			return
		case now := <-t.C:
			e.renewDue(now)
		}
	}
}

// renewDue renews every held record with less than half its lock left.
func (e *KIP1289) renewDue(now time.Time) {
	for sk, acks := range e.ledger.DueForRenewal(now) {
		go func() {
			sent := time.Now()
			e.ledger.Renewed(sk, acks, e.applier.Renew(sk, acks), sent)
		}()
	}
}
