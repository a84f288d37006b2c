package intercept

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// initState is what an InitProducerId response needs of its request.
type initState struct {
	ident, txnID string
	timeout      time.Duration
}

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
		return Action{State: initState{env.KIP.identOf(r.Conn), *req.TransactionalID, time.Duration(req.TransactionTimeoutMillis) * time.Millisecond}}
	})
	register(kmsg.InitProducerID, func(env *Env, state any, r kmsg.Response) bool {
		st, ok := state.(initState)
		if !ok {
			return false
		}
		if resp := r.(*kmsg.InitProducerIDResponse); resp.ErrorCode == 0 {
			env.KIP.setTxn(st.ident, st.txnID, resp.ProducerID, resp.ProducerEpoch)
			env.KIP.ledger.SetTxnTimeout(st.txnID, st.timeout)
		}
		return false
	})
}
