package intercept

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareAcknowledge: epoch translation and held-back offsets as for
// ShareFetch. A partition whose acks were all held back is dropped from the
// request and answered by the proxy (success when absorbing,
// INVALID_RECORD_STATE when rejecting). NodeEndpoints are rewritten.
func init() {
	registerHook(kmsg.ShareAcknowledge, func(env *Env, r *Request) Action {
		e := env.KIP
		if e == nil {
			return Action{}
		}
		req := kmsg.NewPtrShareAcknowledgeRequest()
		req.Version = r.Version
		if req.ReadFrom(r.Body()) != nil {
			return Action{}
		}
		st := &shareState{node: r.Conn.Node(), group: deref(req.GroupID), member: deref(req.MemberID)}
		changed := false
		if !req.IsRenewAck {
			keepTopics := req.Topics[:0]
			for _, t := range req.Topics {
				keepParts := t.Partitions[:0]
				for _, p := range t.Partitions {
					in := make([]ackRange, len(p.AcknowledgementBatches))
					for i, b := range p.AcknowledgementBatches {
						in[i] = ackRange{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes}
					}
					out, held := e.filterClientAcks(st.group, t.TopicID, p.Partition, in)
					if held > 0 {
						changed = true
						st.hold(t.TopicID, p.Partition)
						p.AcknowledgementBatches = p.AcknowledgementBatches[:0]
						for _, o := range out {
							b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
							b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = o.first, o.last, o.types
							p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
						}
					}
					if len(p.AcknowledgementBatches) > 0 {
						keepParts = append(keepParts, p)
					}
				}
				t.Partitions = keepParts
				if len(t.Partitions) > 0 {
					keepTopics = append(keepTopics, t)
				}
			}
			req.Topics = keepTopics
		}
		return e.onSession(r, st, &req.ShareSessionEpoch, changed, req)
	})
	register(kmsg.ShareAcknowledge, func(env *Env, state any, r kmsg.Response) bool {
		resp := r.(*kmsg.ShareAcknowledgeResponse)
		changed := false
		for i := range resp.NodeEndpoints {
			b := &resp.NodeEndpoints[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		env.KIP.noteSessionError(resp.ErrorCode, state, "ShareAcknowledge")
		st, ok := state.(*shareState)
		if !ok || env.KIP == nil || len(st.held) == 0 || resp.ErrorCode != 0 {
			return changed
		}
		reject := env.KIP.cfg.ClientAcks == "reject"
		for topic, parts := range st.held {
			ti := -1
			for i := range resp.Topics {
				if resp.Topics[i].TopicID == topic {
					ti = i
				}
			}
			if ti < 0 {
				t := kmsg.NewShareAcknowledgeResponseTopic()
				t.TopicID = topic
				resp.Topics = append(resp.Topics, t)
				ti = len(resp.Topics) - 1
			}
			for part := range parts {
				pi := -1
				for i := range resp.Topics[ti].Partitions {
					if resp.Topics[ti].Partitions[i].Partition == part {
						pi = i
					}
				}
				if pi < 0 {
					p := kmsg.NewShareAcknowledgeResponseTopicPartition()
					p.Partition = part
					resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, p)
					pi = len(resp.Topics[ti].Partitions) - 1
					changed = true
				}
				if reject && resp.Topics[ti].Partitions[pi].ErrorCode == 0 {
					resp.Topics[ti].Partitions[pi].ErrorCode = kerr.InvalidRecordState.Code
					msg := "sharetx: these records are acknowledged by a transaction (TX_PENDING or committed)"
					resp.Topics[ti].Partitions[pi].ErrorMessage = &msg
					changed = true
				}
			}
		}
		return changed
	})
}
