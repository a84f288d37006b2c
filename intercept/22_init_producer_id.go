package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// InitProducerId: the proxy learns which producer id and epoch a
// transactional id holds, so a TxnShareAcknowledge can only write into a
// transaction whose InitProducerId went through this proxy.
func init() {
	registerHook(kmsg.InitProducerID, func(env *Env, r *Request) Action {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version = r.Version
		if req.ReadFrom(r.Body()) != nil || req.TransactionalID == nil {
			return Action{}
		}
		return Action{State: [2]string{env.KIP.identOf(r.Conn), *req.TransactionalID}}
	})
	register(kmsg.InitProducerID, func(env *Env, state any, r kmsg.Response) bool {
		st, ok := state.([2]string)
		if !ok {
			return false
		}
		if resp := r.(*kmsg.InitProducerIDResponse); resp.ErrorCode == 0 {
			env.KIP.setTxn(st[0], st[1], resp.ProducerID, resp.ProducerEpoch)
		}
		return false
	})
}
