package intercept

import (
	"context"
	"time"

	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareAcknowledge: epoch translation and held-back offsets as for
// ShareFetch. A partition whose acks were all held back is dropped from the
// request and answered by the proxy (success when absorbing,
// INVALID_RECORD_STATE when rejecting). NodeEndpoints are rewritten.

func (e *KIP1289) shareAcknowledgeRequest(r *proxy.Request) (proxy.Action, *shareState) {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return proxy.Action{}, nil
	}
	st := &shareState{node: r.Conn.Node(), group: deref(req.GroupID), member: deref(req.MemberID), ident: r.Conn.Principal()}
	if e.foreignMember("ShareAcknowledge", st) {
		resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
		resp.SetVersion(r.Version)
		resp.ErrorCode, resp.ErrorMessage = kerr.GroupAuthorizationFailed.Code, kmsg.StringPtr(foreignMemberMsg)
		return proxy.Action{Local: resp}, nil
	}
	changed := false
	if !req.IsRenewAck {
		keepTopics := req.Topics[:0]
		for _, t := range req.Topics {
			keepParts := t.Partitions[:0]
			for _, p := range t.Partitions {
				in := make([]staging.AckRange, len(p.AcknowledgementBatches))
				for i, b := range p.AcknowledgementBatches {
					in[i] = staging.AckRange{First: b.FirstOffset, Last: b.LastOffset, Types: b.AcknowledgeTypes}
				}
				out, held, plan := e.ledger.FilterClientAcks(st.group, st.member, t.TopicID, p.Partition, in)
				if plan != nil {
					st.plans = append(st.plans, plan)
				}
				if held > 0 {
					changed = true
					st.hold(t.TopicID, p.Partition)
					p.AcknowledgementBatches = p.AcknowledgementBatches[:0]
					for _, o := range out {
						b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
						b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = o.First, o.Last, o.Types
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
	if req.ShareSessionEpoch == -1 && e.cfg.CloseHold > 0 && e.ledger.HeldFor(st.node, st.group, st.member) > 0 {
		return e.holdClose(r, st, req), nil // answered by the proxy: no response comes from upstream
	}
	return e.onSession(r, st, &req.ShareSessionEpoch, changed, req, nil), st
}

func (e *KIP1289) shareAcknowledgeResponse(st *shareState, resp *kmsg.ShareAcknowledgeResponse) bool {
	e.noteSessionError(resp.ErrorCode, st, "ShareAcknowledge")
	if st == nil || resp.ErrorCode != 0 {
		return false
	}
	e.applyPlans(st, ackCodes(resp))
	if len(st.held) == 0 {
		return false
	}
	return addHeldPartitions(resp, st, e.cfg.ClientAcks == "reject")
}

// ackCodes looks up a partition's code in a ShareAcknowledge response.
func ackCodes(resp *kmsg.ShareAcknowledgeResponse) func([16]byte, int32) (int16, bool) {
	return func(topic [16]byte, part int32) (int16, bool) {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if t.TopicID == topic && rp.Partition == part {
					return rp.ErrorCode, true
				}
			}
		}
		return 0, false
	}
}

// addHeldPartitions gives every partition whose acks the proxy held back an
// entry in the response: success when absorbing, INVALID_RECORD_STATE when
// rejecting.
func addHeldPartitions(resp *kmsg.ShareAcknowledgeResponse, st *shareState, reject bool) bool {
	changed := false
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
}

// holdClose answers a client's closing of its share session (epoch -1)
// while acknowledgements of the session are staged or committed and not yet
// applied: closing now would release those records for redelivery. The
// close waits (up to kip1289.close_hold) until they are applied, then goes
// upstream on the client's connection, and its answer is the client's.
func (e *KIP1289) holdClose(r *proxy.Request, st *shareState, req *kmsg.ShareAcknowledgeRequest) proxy.Action {
	return proxy.Action{Async: func() kmsg.Response {
		if !e.waitHeld(st.node, st.group, st.member, e.cfg.CloseHold) {
			e.log.Warn("closing a share session with acknowledgements still not applied (kip1289.close_hold passed)",
				"group", st.group, "member", st.member, "node", st.node)
		}
		fail := func(err error) kmsg.Response {
			resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			msg := "sharetx: closing the share session upstream failed: " + err.Error()
			resp.ErrorMessage = &msg
			return resp
		}
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		resp, err := e.sessions.Get(st.sessionKey()).Close(ctx, r.Conn, req)
		if err != nil {
			return fail(err)
		}
		if resp.ErrorCode == 0 {
			e.applyPlans(st, ackCodes(resp))
		}
		addHeldPartitions(resp, st, e.cfg.ClientAcks == "reject")
		return resp
	}}
}
