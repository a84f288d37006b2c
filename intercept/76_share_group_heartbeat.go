package intercept

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupHeartbeat: the proxy learns member ids and epochs (a member
// leaving answers epoch -1 and is forgotten).
func init() {
	registerHook(kmsg.ShareGroupHeartbeat, func(env *Env, r *Request) Action {
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.Version = r.Version
		if req.ReadFrom(r.Body()) != nil {
			return Action{}
		}
		ident := env.KIP.identOf(r.Conn)
		if env.KIP.foreignMember("ShareGroupHeartbeat", &shareState{group: req.GroupID, member: req.MemberID, ident: ident}) {
			resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
			resp.SetVersion(r.Version)
			resp.ErrorCode, resp.ErrorMessage = kerr.GroupAuthorizationFailed.Code, kmsg.StringPtr(foreignMemberMsg)
			return Action{Local: resp}
		}
		return Action{State: [3]string{req.GroupID, req.MemberID, ident}}
	})
	register(kmsg.ShareGroupHeartbeat, func(env *Env, state any, r kmsg.Response) bool {
		gm, ok := state.([3]string)
		if !ok {
			return false
		}
		resp := r.(*kmsg.ShareGroupHeartbeatResponse)
		if resp.ErrorCode != 0 {
			return false
		}
		member := gm[1]
		if resp.MemberID != nil && *resp.MemberID != "" {
			member = *resp.MemberID
		}
		if member != "" {
			env.KIP.ledger.SetMember(gm[2], gm[0], member, resp.MemberEpoch)
		}
		return false
	})
}
