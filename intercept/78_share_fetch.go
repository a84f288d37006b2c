package intercept

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareState is what a ShareFetch/ShareAcknowledge request leaves for its
// response: who sent it, and the partitions whose acks the proxy held back.
type shareState struct {
	node          int32
	group, member string
	held          map[[16]byte]map[int32]bool
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
func init() {
	registerHook(kmsg.ShareFetch, func(env *Env, r *Request) Action {
		e := env.KIP
		if e == nil {
			return Action{}
		}
		req := kmsg.NewPtrShareFetchRequest()
		req.Version = r.Version
		if req.ReadFrom(r.Body()) != nil {
			return Action{} // the broker answers the malformed request
		}
		st := &shareState{node: r.Conn.Node(), group: deref(req.GroupID), member: deref(req.MemberID)}
		changed := false
		for ti := range req.Topics {
			t := &req.Topics[ti]
			for pi := range t.Partitions {
				p := &t.Partitions[pi]
				if len(p.AcknowledgementBatches) == 0 {
					continue
				}
				in := make([]ackRange, len(p.AcknowledgementBatches))
				for i, b := range p.AcknowledgementBatches {
					in[i] = ackRange{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes}
				}
				out, held := e.filterClientAcks(st.group, t.TopicID, p.Partition, in)
				if held == 0 {
					continue
				}
				changed = true
				st.hold(t.TopicID, p.Partition)
				p.AcknowledgementBatches = p.AcknowledgementBatches[:0]
				for _, o := range out {
					b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
					b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = o.first, o.last, o.types
					p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
				}
			}
		}
		sess := e.session(st.node, st.group, st.member)
		sess.mu.Lock()
		if up := sess.translate(r.Conn, req.ShareSessionEpoch, r.Version); up != req.ShareSessionEpoch {
			req.ShareSessionEpoch = up
			changed = true
		}
		act := Action{After: sess.mu.Unlock, State: st}
		if changed {
			act.Body = req.AppendTo(nil)
		}
		return act
	})
	register(kmsg.ShareFetch, func(env *Env, state any, r kmsg.Response) bool {
		resp := r.(*kmsg.ShareFetchResponse)
		changed := false
		for i := range resp.NodeEndpoints {
			b := &resp.NodeEndpoints[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		if env.KIP != nil && resp.ErrorCode == kerr.InvalidShareSessionEpoch.Code {
			env.KIP.m.epochErrors.Inc()
		}
		st, ok := state.(*shareState)
		if !ok || env.KIP == nil || resp.ErrorCode != 0 {
			return changed
		}
		lock := time.Duration(resp.AcquisitionLockTimeoutMillis) * time.Millisecond
		if lock <= 0 {
			lock = 30 * time.Second
		}
		reject := env.KIP.cfg.ClientAcks == "reject"
		for ti := range resp.Topics {
			t := &resp.Topics[ti]
			for pi := range t.Partitions {
				p := &t.Partitions[pi]
				if p.ErrorCode == 0 {
					env.KIP.acquired(st.node, st.group, st.member, t.TopicID, p.Partition, p.AcquiredRecords, lock)
				}
				if reject && st.held[t.TopicID][p.Partition] && p.AcknowledgeErrorCode == 0 {
					p.AcknowledgeErrorCode = kerr.InvalidRecordState.Code
					msg := "sharetx: these records are acknowledged by a transaction (TX_PENDING or committed)"
					p.AcknowledgeErrorMessage = &msg
					changed = true
				}
			}
		}
		return changed
	})
}
