package intercept

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// shareState is what a ShareFetch/ShareAcknowledge request leaves for its
// response: who sent it, and the partitions whose acks the proxy held back.
type shareState struct {
	counted       bool  // counted in the session's in-flight requests
	epoch         int32 // upstream epoch sent
	node          int32
	group, member string
	ident         string // the connection's principal (identity.go)
	foreign       bool   // another principal's request on a member's session: passed through, changes nothing
	inStep        bool   // the client's epoch followed the session's: an epoch error is the proxy's
	held          map[[16]byte]map[int32]bool
	plans         []*staging.AckPlan // applied once the broker accepted the acknowledgements
	rider         *upstream.Rider    // the proxy's acknowledgements this ShareFetch carries (fetch_ride.go)
	// clientWaits is, for a ShareFetch, until when its client still waits
	// for the response (fetchPatience): what screening a redelivery may
	// take of it.
	clientWaits time.Time
}

// fetchPatience is how long past its MaxWait a client is taken to wait for a
// ShareFetch response. franz-go gives a fetch MaxWait + 5 s, then closes the
// connection (Java and librdkafka wait 30 and 60 s); a response the proxy
// holds longer to screen redelivered records comes too late, so screening
// ends with a second to spare (markers.Resolver.Screen).
const fetchPatience = 4 * time.Second

// applyPlans applies the plans of the partitions whose acknowledgement the
// broker accepted (the response's top-level code is 0): a plan whose
// offsets were all held back needs only that; one that went upstream needs
// its partition in the response with code 0 (codeOf: the partition's
// acknowledgement code, false if absent).
func (e *KIP1289) applyPlans(st *shareState, codeOf func(topic [16]byte, part int32) (int16, bool)) {
	for _, p := range st.plans {
		if p.Applies(codeOf) {
			e.ledger.ApplyAckPlan(p)
		}
	}
}

func (s *shareState) hold(topic [16]byte, partition int32) {
	if s.held == nil {
		s.held = map[[16]byte]map[int32]bool{}
	}
	if s.held[topic] == nil {
		s.held[topic] = map[int32]bool{}
	}
	s.held[topic][partition] = true
}

// sessionKey is the share session a request names.
func (st *shareState) sessionKey() upstream.SessionKey {
	return upstream.SessionKey{Node: st.node, Group: st.group, Member: st.member}
}

// onSession translates the request's share-session epoch (epoch points
// into req) and returns the action: the session stays locked until the
// request is written, so epochs reach the broker in the order assigned.
// ride, when set, may add to req what waits to ride on the session
// (fetch_ride.go) and reports whether it did; it runs with the session
// locked.
func (e *KIP1289) onSession(r *proxy.Request, st *shareState, epoch *int32, changed bool, req kmsg.Request, ride func(upstream.Step) bool) proxy.Action {
	step := e.sessions.Get(st.sessionKey()).Begin(r.Conn, st.ident, *epoch, r.Version)
	e.mSessionWait.Observe(step.Waited.Seconds())
	if ride != nil && !step.Foreign && ride(step) {
		changed = true
	}
	act := proxy.Action{Written: step.Written}
	if step.Foreign {
		st.foreign = true
	} else if step.Epoch != *epoch {
		*epoch = step.Epoch
		changed = true
	}
	st.epoch, st.inStep, st.counted = *epoch, step.InStep, step.Counted
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("share session request", "key", r.Key, "node", st.node, "member", st.member, "epoch", *epoch, "foreign", step.Foreign)
	}
	if changed {
		act.Body = req.AppendTo(nil) // held offsets stay held, also on a foreign request
	}
	return act
}

// responded marks a client request of a share session answered.
func (e *KIP1289) responded(st *shareState) {
	if st == nil || !st.counted {
		return
	}
	e.sessions.Get(st.sessionKey()).Responded()
}

// noteSessionError counts INVALID_SHARE_SESSION_EPOCH answers to clients
// (st: the request's, nil when the proxy did not decode it).
func (e *KIP1289) noteSessionError(code int16, st *shareState, api string) {
	e.responded(st)
	if code != kerr.InvalidShareSessionEpoch.Code {
		return
	}
	if st != nil && (st.foreign || !st.inStep) {
		// Not the proxy's doing: another principal's request, or a client
		// that skipped or repeated an epoch itself (the broker refuses it
		// as it would without the proxy). Only the proxy's own mistakes
		// drive the alert.
		return
	}
	e.mEpochErrors.Inc()
	if st != nil {
		last, delta := e.sessions.Get(st.sessionKey()).Peek()
		e.log.Warn("a client got INVALID_SHARE_SESSION_EPOCH", "api", api, "sent_epoch", st.epoch, "node", st.node,
			"group", st.group, "member", st.member, "session_last", last, "session_delta", delta)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ShareFetch: the request carries the member's share-session epoch, which
// the proxy translates (it injects requests of its own on the session), and
// piggybacked acknowledgements, from which it holds back offsets that are
// TX_PENDING or committed. The response tells the proxy which member
// acquired which offsets, and carries NodeEndpoints when a leader moved.

func (e *KIP1289) shareFetchRequest(r *proxy.Request) (proxy.Action, *shareState) {
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return proxy.Action{}, nil // the broker answers the malformed request
	}
	st := &shareState{node: r.Conn.Node(), group: deref(req.GroupID), member: deref(req.MemberID), ident: r.Conn.Principal(),
		clientWaits: time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond + fetchPatience)}
	if e.foreignMember("ShareFetch", st) {
		resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
		resp.SetVersion(r.Version)
		resp.ErrorCode, resp.ErrorMessage = kerr.GroupAuthorizationFailed.Code, kmsg.StringPtr(foreignMemberMsg)
		return proxy.Action{Local: resp}, nil
	}
	changed := false
	for ti := range req.Topics {
		t := &req.Topics[ti]
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			if len(p.AcknowledgementBatches) == 0 {
				continue
			}
			in := make([]staging.AckRange, len(p.AcknowledgementBatches))
			for i, b := range p.AcknowledgementBatches {
				in[i] = staging.AckRange{First: b.FirstOffset, Last: b.LastOffset, Types: b.AcknowledgeTypes}
			}
			out, held, plan := e.ledger.FilterClientAcks(st.group, st.member, t.TopicID, p.Partition, in)
			if plan != nil {
				st.plans = append(st.plans, plan)
			}
			if held == 0 {
				continue
			}
			changed = true
			st.hold(t.TopicID, p.Partition)
			p.AcknowledgementBatches = p.AcknowledgementBatches[:0]
			for _, o := range out {
				b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
				b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = o.First, o.Last, o.Types
				p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
			}
		}
	}
	return e.onSession(r, st, &req.ShareSessionEpoch, changed, req, func(step upstream.Step) bool {
		return e.takeRider(r, st, step, req)
	}), st
}

func (e *KIP1289) shareFetchResponse(st *shareState, resp *kmsg.ShareFetchResponse) bool {
	e.noteSessionError(resp.ErrorCode, st, "ShareFetch")
	rode := answerRider(st, resp)
	if st == nil || resp.ErrorCode != 0 {
		return rode
	}
	e.applyPlans(st, func(topic [16]byte, part int32) (int16, bool) {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if t.TopicID == topic && rp.Partition == part {
					return rp.AcknowledgeErrorCode, true
				}
			}
		}
		return 0, false
	})
	lock := time.Duration(resp.AcquisitionLockTimeoutMillis) * time.Millisecond
	if lock <= 0 {
		lock = 30 * time.Second
	}
	changed := e.resolver.Screen(staging.Fetcher{Node: st.node, Group: st.group, Member: st.member, Ident: st.ident}, resp, lock, st.clientWaits) || rode
	reject := e.cfg.ClientAcks == "reject"
	answered := map[[16]byte]map[int32]bool{}
	for ti := range resp.Topics {
		t := &resp.Topics[ti]
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			if p.ErrorCode == 0 {
				e.ledger.Acquired(st.ident, st.node, st.group, st.member, t.TopicID, p.Partition, p.AcquiredRecords, lock)
			}
			if !st.held[t.TopicID][p.Partition] {
				continue
			}
			if answered[t.TopicID] == nil {
				answered[t.TopicID] = map[int32]bool{}
			}
			answered[t.TopicID][p.Partition] = true
			if reject && p.AcknowledgeErrorCode == 0 {
				setHeldAckError(p)
				changed = true
			}
		}
	}
	// A partition whose acks the proxy held back entirely may be
	// missing from the broker's answer; the client needs an ack result
	// for every partition it acknowledged.
	for topic, parts := range st.held {
		for part := range parts {
			if answered[topic][part] {
				continue
			}
			ti := -1
			for i := range resp.Topics {
				if resp.Topics[i].TopicID == topic {
					ti = i
				}
			}
			if ti < 0 {
				t := kmsg.NewShareFetchResponseTopic()
				t.TopicID = topic
				resp.Topics = append(resp.Topics, t)
				ti = len(resp.Topics) - 1
			}
			p := kmsg.NewShareFetchResponseTopicPartition()
			p.Partition = part
			// Records is not nullable from v1 on (kmsg still
			// encodes a nil as null): kafka-clients fails the
			// whole response on a null.
			p.Records = []byte{}
			if reject {
				setHeldAckError(&p)
			}
			resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, p)
			changed = true
		}
	}
	return changed
}

func setHeldAckError(p *kmsg.ShareFetchResponseTopicPartition) {
	p.AcknowledgeErrorCode = kerr.InvalidRecordState.Code
	msg := "sharetx: these records are acknowledged by a transaction (TX_PENDING or committed)"
	p.AcknowledgeErrorMessage = &msg
}
