package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// EndTxn: a successful EndTxn response is the coordinator's decision, used
// as the fast path to resolve staged acknowledgements (the control markers
// remain the path that cannot be missed). Under transaction version 2 (EndTxn v5+) every EndTxn bumps the
// producer epoch and the response carries the new one; the proxy follows it
// so the next transaction's TxnShareAcknowledge is checked against it.
func init() {
	registerHook(kmsg.EndTxn, func(env *Env, r *Request) Action {
		req := kmsg.NewPtrEndTxnRequest()
		req.Version = r.Version
		if req.ReadFrom(r.Body()) != nil {
			return Action{}
		}
		return Action{State: endTxnState{req, env.KIP.identOf(r.Conn)}}
	})
	register(kmsg.EndTxn, func(env *Env, state any, r kmsg.Response) bool {
		st, ok := state.(endTxnState)
		req := st.req
		if !ok {
			return false
		}
		resp := r.(*kmsg.EndTxnResponse)
		if resp.ErrorCode != 0 {
			return false
		}
		// The coordinator decided: resolve now (the markers tailer resolves
		// the same records again later, which changes nothing).
		env.KIP.resolver.EndTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
		if resp.Version >= 5 {
			env.KIP.setTxn(st.ident, req.TransactionalID, resp.ProducerID, resp.ProducerEpoch)
		}
		return false
	})
}

type endTxnState struct {
	req   *kmsg.EndTxnRequest
	ident string
}
