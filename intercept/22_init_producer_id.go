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
func init() { on(kmsg.InitProducerID, initProducerIDRequest, initProducerIDResponse) }

func initProducerIDRequest(env *Env, r *Request) (Action, *initState) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil || req.TransactionalID == nil {
		return Action{}, nil
	}
	return Action{}, &initState{env.KIP.identOf(r.Conn), *req.TransactionalID, time.Duration(req.TransactionTimeoutMillis) * time.Millisecond}
}

func initProducerIDResponse(env *Env, st *initState, resp *kmsg.InitProducerIDResponse) bool {
	if st != nil && resp.ErrorCode == 0 {
		env.KIP.setTxn(st.ident, st.txnID, resp.ProducerID, resp.ProducerEpoch)
		env.KIP.ledger.SetTxnTimeout(st.txnID, st.timeout)
	}
	return false
}
