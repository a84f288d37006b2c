package intercept

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
)

// ShareGroupHeartbeat: the proxy learns member ids and epochs (a member
// leaving answers epoch -1 and is forgotten).

// heartbeatState is the group, member and principal of a heartbeat.
type heartbeatState struct{ group, member, ident string }

func (e *KIP1289) shareGroupHeartbeatRequest(r *proxy.Request) (proxy.Action, *heartbeatState) {
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return proxy.Action{}, nil
	}
	ident := r.Conn.Principal()
	if e.foreignMember("ShareGroupHeartbeat", &shareState{group: req.GroupID, member: req.MemberID, ident: ident}) {
		resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
		resp.SetVersion(r.Version)
		resp.ErrorCode, resp.ErrorMessage = kerr.GroupAuthorizationFailed.Code, kmsg.StringPtr(foreignMemberMsg)
		return proxy.Action{Local: resp}, nil
	}
	return proxy.Action{}, &heartbeatState{req.GroupID, req.MemberID, ident}
}

func (e *KIP1289) shareGroupHeartbeatResponse(st *heartbeatState, resp *kmsg.ShareGroupHeartbeatResponse) bool {
	if st == nil || resp.ErrorCode != 0 {
		return false
	}
	member := st.member
	if resp.MemberID != nil && *resp.MemberID != "" {
		member = *resp.MemberID
	}
	if member != "" {
		e.ledger.SetMember(st.ident, st.group, member, resp.MemberEpoch)
	}
	return false
}

// foreignMemberMsg is the message of a share-group request refused because
// it names a member bound to another principal.
const foreignMemberMsg = "sharetx: this member id belongs to another principal"

// foreignMember reports whether a share-group request (api) of st's
// connection names a member bound to another principal
// (staging.Ledger.MemberOfAnother); such a request is answered
// GROUP_AUTHORIZATION_FAILED and never reaches the broker, which would let
// it close or take over the member's share session.
func (e *KIP1289) foreignMember(api string, st *shareState) bool {
	if !e.ledger.MemberOfAnother(st.group, st.member, st.ident) {
		return false
	}
	e.log.Info("refused a share-group request naming another principal's member", "api", api, "group", st.group, "member", st.member, "principal", st.ident)
	return true
}
