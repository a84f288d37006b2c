package intercept

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupHeartbeat: the proxy learns member ids and epochs (a member
// leaving answers epoch -1 and is forgotten).
func init() { on(kmsg.ShareGroupHeartbeat, shareGroupHeartbeatRequest, shareGroupHeartbeatResponse) }

// heartbeatState is the group, member and principal of a heartbeat.
type heartbeatState struct{ group, member, ident string }

func shareGroupHeartbeatRequest(env *Env, r *Request) (Action, *heartbeatState) {
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return Action{}, nil
	}
	ident := env.KIP.identOf(r.Conn)
	if env.KIP.foreignMember("ShareGroupHeartbeat", &shareState{group: req.GroupID, member: req.MemberID, ident: ident}) {
		resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
		resp.SetVersion(r.Version)
		resp.ErrorCode, resp.ErrorMessage = kerr.GroupAuthorizationFailed.Code, kmsg.StringPtr(foreignMemberMsg)
		return Action{Local: resp}, nil
	}
	return Action{}, &heartbeatState{req.GroupID, req.MemberID, ident}
}

func shareGroupHeartbeatResponse(env *Env, st *heartbeatState, resp *kmsg.ShareGroupHeartbeatResponse) bool {
	if st == nil || resp.ErrorCode != 0 {
		return false
	}
	member := st.member
	if resp.MemberID != nil && *resp.MemberID != "" {
		member = *resp.MemberID
	}
	if member != "" {
		env.KIP.ledger.SetMember(st.ident, st.group, member, resp.MemberEpoch)
	}
	return false
}
