package intercept

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
)

// EndTxn: a successful EndTxn response is the coordinator's decision, used
// as the fast path to resolve staged acknowledgements (the control markers
// remain the path that cannot be missed). Under transaction version 2 (EndTxn v5+) every EndTxn bumps the
// producer epoch and the response carries the new one; the proxy follows it
// so the next transaction's TxnShareAcknowledge is checked against it.

type endTxnState struct {
	req   *kmsg.EndTxnRequest
	ident string
}

func (e *KIP1289) endTxnRequest(r *proxy.Request) (proxy.Action, *endTxnState) {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return proxy.Action{}, nil
	}
	e.txnRetries.stop(req.TransactionalID) // 24_add_partitions_to_txn.go
	return proxy.Action{}, &endTxnState{req, r.Conn.Principal()}
}

func (e *KIP1289) endTxnResponse(st *endTxnState, resp *kmsg.EndTxnResponse) bool {
	if st == nil || resp.ErrorCode != 0 {
		return false
	}
	req := st.req
	// The coordinator decided: resolve now (the markers tailer resolves
	// the same records again later, which changes nothing).
	e.resolver.EndTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	// What deferred calls held and no call staged is not in the
	// transaction, whatever it decided: released (staging/deferred.go).
	e.ledger.EndDeferred(req.TransactionalID, req.ProducerID, req.ProducerEpoch, false)
	e.ledger.ForgetOutputs(req.TransactionalID) // the next transaction's outputs are other batches
	if resp.Version >= 5 {
		e.setTxn(st.ident, req.TransactionalID, resp.ProducerID, resp.ProducerEpoch)
	}
	return false
}
