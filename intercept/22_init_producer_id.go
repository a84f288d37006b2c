package intercept

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
)

// initState is what an InitProducerId response needs of its request.
type initState struct {
	ident, txnID string
	timeout      time.Duration
}

// InitProducerId: the proxy learns which producer id and epoch a
// transactional id holds, so a TxnShareAcknowledge can only write into a
// transaction whose InitProducerId went through this proxy.

func (e *KIP1289) initProducerIDRequest(r *proxy.Request) (proxy.Action, *initState) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil || req.TransactionalID == nil {
		return proxy.Action{}, nil
	}
	e.txnRetries.stop(*req.TransactionalID) // 24_add_partitions_to_txn.go
	return proxy.Action{}, &initState{r.Conn.Principal(), *req.TransactionalID, time.Duration(req.TransactionTimeoutMillis) * time.Millisecond}
}

func (e *KIP1289) initProducerIDResponse(st *initState, resp *kmsg.InitProducerIDResponse) bool {
	if st != nil && resp.ErrorCode == 0 {
		e.setTxn(st.ident, st.txnID, resp.ProducerID, resp.ProducerEpoch)
		e.ledger.SetTxnTimeout(st.txnID, st.timeout)
		// A new producer of the id: the older one's transaction is over,
		// and what its deferred calls held is released.
		e.ledger.EndDeferred(st.txnID, resp.ProducerID, resp.ProducerEpoch, true)
	}
	return false
}
