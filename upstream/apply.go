package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/internal/promstat"
	"github.com/sharetx/sharetx/kip1289"
)

// TopicPartition is a share partition of one group (the group is the
// session's).
type TopicPartition struct {
	Topic     [16]byte
	Partition int32
}

// Acks are acknowledgements to send: per partition, offset → type.
type Acks map[TopicPartition]map[int64]int8

// Add sets offset o of tp to type ty.
func (a Acks) Add(tp TopicPartition, o int64, ty int8) {
	m := a[tp]
	if m == nil {
		m = map[int64]int8{}
		a[tp] = m
	}
	m[o] = ty
}

// Count is the number of offsets in a.
func (a Acks) Count() int {
	n := 0
	for _, offs := range a {
		n += len(offs)
	}
	return n
}

// Merge adds every acknowledgement of b to a (b's type wins for an offset
// both hold; the resolver merges calls, whose offsets are disjoint). A
// partition's map that a lacks is taken over from b, not copied.
func (a Acks) Merge(b Acks) {
	for tp, offs := range b {
		m := a[tp]
		if m == nil {
			a[tp] = offs
			continue
		}
		for o, ty := range offs {
			m[o] = ty
		}
	}
}

// Applier sends the proxy's own acknowledgements upstream on the members'
// share sessions: committed acknowledgements, releases of aborted
// transactions' records, and RENEWs of held records' locks. It keeps the
// metrics of those requests.
type Applier struct {
	sessions *Sessions
	log      *slog.Logger
	// RideWait is how long acknowledgements wait for the member's next
	// ShareFetch to ride in (Sessions.Ride) before they go in a
	// ShareAcknowledge of their own; 0: always on their own. Set before use.
	RideWait time.Duration

	latency  prometheus.Histogram
	failures *prometheus.CounterVec
	renewals *prometheus.CounterVec
	canRenew prometheus.Gauge
	released prometheus.Counter
	rides    *prometheus.CounterVec
}

// NewApplier builds the applier on sessions, its metrics registered in reg
// (nil: not registered).
func NewApplier(sessions *Sessions, log *slog.Logger, reg prometheus.Registerer) *Applier {
	a := &Applier{sessions: sessions, log: log,
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "sharetx", Name: "commit_to_applied_seconds",
			Help:    "From the COMMIT marker being read to the acknowledgement applied upstream.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "upstream_ack_failures_total",
			Help: "Committed acknowledgements the broker did not apply, by error."}, []string{"error"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "lock_renewals_total",
			Help: "RENEWs of the acquisition locks of staged or committed records, by result (ok, unsupported: the session cannot renew, or the error)."}, []string{"result"}),
		canRenew: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "lock_renewal_supported",
			Help: "1 when the cluster speaks ShareAcknowledge v2 (RENEW, Kafka 4.2+), so staged records' locks are kept alive; 0 when a transaction must end within the acquisition lock duration."}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "aborted_records_released_total",
			Help: "Records of aborted transactions the proxy released upstream at once (AVAILABLE for redelivery), as a broker with KIP-1289 does."}),
		rides: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "own_acknowledgements_total",
			Help: "The proxy's own acknowledgement requests (a committed transaction's, an aborted one's releases) per member session, by how they went upstream: fetch (riding in the member's next ShareFetch), request (a ShareAcknowledge of the proxy's, which the member's next request waits behind)."}, []string{"path"}),
	}
	if reg != nil {
		reg.MustRegister(a.latency, a.failures, a.renewals, a.canRenew, a.released, a.rides)
	}
	return a
}

// Acknowledge sends acks on session k and waits for the broker's answer.
// committed, when set, is when the transaction was seen committed (the
// latency metric's start).
//
// With RideWait set they first wait that long for the member's next
// ShareFetch to carry them (docs/design.md §6.4); when none does, or the
// fetch that did was refused as a whole, they go in a ShareAcknowledge of
// their own.
func (a *Applier) Acknowledge(k SessionKey, acks Acks, committed time.Time) error {
	codes := map[TopicPartition]int16{}
	rode := false
	if a.RideWait > 0 {
		if res, ok := a.sessions.Ride(k, acks, a.RideWait); ok && res.Err == nil {
			codes, rode = res.Codes, true
			a.rides.WithLabelValues("fetch").Inc()
		} else if ok {
			a.log.Debug("the ShareFetch carrying acknowledgements was refused or not answered; sending them on their own", "member", k.Member, "err", res.Err)
		}
	}
	if !rode {
		a.rides.WithLabelValues("request").Inc()
		resp, err := a.sessions.Send(k, ackRequest(k.Group, k.Member, acks))
		if err != nil {
			a.failures.WithLabelValues("session_unavailable").Inc()
			return err
		}
		if resp.ErrorCode != 0 {
			a.failures.WithLabelValues(ErrName(resp.ErrorCode)).Inc()
			return kerr.ErrorForCode(resp.ErrorCode)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				codes[TopicPartition{t.TopicID, p.Partition}] = p.ErrorCode
			}
		}
	}
	var perr error
	for tp := range acks {
		code, answered := codes[tp]
		switch {
		case !answered && rode:
			// The broker lists every partition a ShareFetch acknowledged;
			// one missing was not applied as far as the proxy can tell.
			a.failures.WithLabelValues("not_answered").Inc()
			perr = fmt.Errorf("partition %d: not in the answer of the fetch that carried it", tp.Partition)
		case code != 0:
			a.failures.WithLabelValues(ErrName(code)).Inc()
			perr = fmt.Errorf("partition %d: %w", tp.Partition, kerr.ErrorForCode(code))
		}
	}
	if perr == nil && !committed.IsZero() {
		a.latency.Observe(time.Since(committed).Seconds())
	}
	return perr
}

// Release releases acks (type 2) on session k, off the caller's goroutine:
// the records are AVAILABLE for redelivery at once.
func (a *Applier) Release(k SessionKey, acks Acks, txnID string) {
	go func() {
		if err := a.Acknowledge(k, acks, time.Time{}); err != nil {
			// The session is gone (its connection closed, which released
			// them) or the lock expired: the broker redelivers them anyway.
			a.log.Debug("releasing records upstream failed; the broker releases them when the member's session or lock ends", "txn", txnID, "member", k.Member, "err", err)
			return
		}
		a.released.Add(float64(acks.Count()))
	}()
}

// Renewal is the broker's answer to a RENEW.
type Renewal struct {
	Result string                  // ok, unsupported, session_unavailable, or the error's name
	Lock   time.Duration           // the lock the broker granted, 0 when not said
	Failed map[TopicPartition]bool // partitions the broker refused
	Err    error                   // the request was not answered
}

// Renewed reports whether tp's locks were renewed: the request was
// answered without a top-level error and tp was not refused.
func (r Renewal) Renewed(tp TopicPartition) bool {
	return r.Result == "ok" || (r.Err == nil && !r.Failed[tp])
}

// Renew renews the acquisition locks of acks' offsets on session k
// (ShareAcknowledge v2 RENEW, Kafka 4.2+).
func (a *Applier) Renew(k SessionKey, acks Acks) Renewal {
	for _, offs := range acks {
		for o := range offs {
			offs[o] = 4 // RENEW
		}
	}
	req := ackRequest(k.Group, k.Member, acks)
	req.IsRenewAck = true
	resp, err := a.sessions.Send(k, req)
	out := Renewal{Result: "ok", Err: err, Failed: map[TopicPartition]bool{}}
	switch {
	case errors.Is(err, errRenewUnsupported):
		out.Result = "unsupported"
		a.log.Warn("cannot renew the acquisition locks of staged records: a transaction must end within the lock duration", "err", err)
	case err != nil:
		out.Result = "session_unavailable"
	case resp.ErrorCode != 0:
		out.Result = ErrName(resp.ErrorCode)
	}
	if resp != nil {
		if resp.AcquisitionLockTimeoutMillis > 0 {
			out.Lock = time.Duration(resp.AcquisitionLockTimeoutMillis) * time.Millisecond
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					out.Failed[TopicPartition{t.TopicID, p.Partition}] = true
					out.Result = ErrName(p.ErrorCode)
				}
			}
		}
		if resp.ErrorCode != 0 {
			out.Err = kerr.ErrorForCode(resp.ErrorCode)
		}
	}
	a.renewals.WithLabelValues(out.Result).Inc()
	return out
}

// ackRequest is a ShareAcknowledge of acks for member (topics and
// partitions in a stable order).
func ackRequest(group, member string, acks Acks) *kmsg.ShareAcknowledgeRequest {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &group, &member
	tps := make([]TopicPartition, 0, len(acks))
	for tp := range acks {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return string(tps[i].Topic[:]) < string(tps[j].Topic[:])
		}
		return tps[i].Partition < tps[j].Partition
	})
	for _, tp := range tps {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].TopicID != tp.Topic {
			t := kmsg.NewShareAcknowledgeRequestTopic()
			t.TopicID = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewShareAcknowledgeRequestTopicPartition()
		p.Partition = tp.Partition
		for _, b := range kip1289.Batches(acks[tp]) {
			kb := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
			kb.FirstOffset, kb.LastOffset, kb.AcknowledgeTypes = b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			p.AcknowledgementBatches = append(p.AcknowledgementBatches, kb)
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, p)
	}
	return req
}

// ErrName names a Kafka error code for metrics and logs.
func ErrName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			return ke.Message
		}
	}
	return fmt.Sprintf("code_%d", code)
}

// CheckRenew asks the cluster whether it can keep the locks of staged
// records alive (ShareAcknowledge v2 RENEW, Kafka 4.2+), sets the
// lock_renewal_supported gauge, and warns when it cannot.
func (a *Applier) CheckRenew(ctx context.Context, cl *Client) {
	r, err := cl.Client.Request(ctx, kmsg.NewPtrApiVersionsRequest())
	resp, ok := r.(*kmsg.ApiVersionsResponse)
	if err != nil || !ok {
		a.log.Warn("could not ask the cluster whether it can renew acquisition locks", "err", err)
		return
	}
	var max int16 = -1
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.ShareAcknowledge.Int16() {
			max = k.MaxVersion
		}
	}
	if max >= 2 {
		a.canRenew.Set(1)
		return
	}
	a.canRenew.Set(0)
	a.log.Warn("the cluster cannot renew acquisition locks (ShareAcknowledge v2 RENEW needs Kafka 4.2+): a transaction must commit within the share group's record lock duration (group.share.record.lock.duration.ms, 30 s by default), or its records are redelivered and its acknowledgements fail",
		"share_acknowledge_max_version", max)
}

// StartOffsets describes the share-partition start offsets of groups
// (DescribeShareGroupOffsets): per group, topic id and partition.
func StartOffsets(ctx context.Context, cl *Client, groups []string) (map[string]map[[16]byte]map[int32]int64, error) {
	d, err := kadm.NewClient(cl.Client).DescribeShareGroupOffsets(ctx, groups...)
	if err != nil && len(d) == 0 {
		return nil, err
	}
	out := map[string]map[[16]byte]map[int32]int64{}
	for g, gd := range d {
		if gd.Err != nil {
			continue
		}
		m := map[[16]byte]map[int32]int64{}
		for _, ps := range gd.Offsets {
			for p, o := range ps {
				if o.Err != nil || o.StartOffset < 0 {
					continue
				}
				id := [16]byte(o.TopicID)
				if m[id] == nil {
					m[id] = map[int32]int64{}
				}
				m[id][p] = o.StartOffset
			}
		}
		out[g] = m
	}
	return out, nil
}

// ApplierStats is a snapshot of the applier's metrics.
type ApplierStats struct {
	Applied                      uint64 // acknowledgements applied after a commit
	LatencyP50, LatencyP99, Mean float64
	Failures, Renewals           float64
}

// Stats reads the applier's metrics back.
func (a *Applier) Stats() ApplierStats {
	h := promstat.ReadHistogram(a.latency)
	return ApplierStats{Applied: h.Count, LatencyP50: h.P50, LatencyP99: h.P99, Mean: h.Mean,
		Failures: promstat.Sum(a.failures, ""), Renewals: promstat.Sum(a.renewals, "ok")}
}
