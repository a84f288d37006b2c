package intercept

import (
	"encoding/binary"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
)

// Produce: a transactional Produce tells the KIP-1289 engine which producer id
// and epoch its transactional id holds, once the broker accepted it: a proxy
// that restarted under a running application learns its transactions from
// their next write instead of refusing their TxnShareAcknowledge with
// INVALID_PRODUCER_ID_MAPPING.
// produceState is what a Produce request leaves for its response, one of:
// the shadow-topic partitions split off it (touch.go), the shadow batch
// riding in it (ride.go, with its transaction), or its transaction.
type produceState struct {
	touch *touchSplit
	ride  *rideState
	txn   *produceTxnState
}

// produceRequest is the KIP-1289 engine's part of a Produce request.
func (e *KIP1289) produceRequest(r *proxy.Request) (proxy.Action, *produceState) {
	t, isTxn := produceTxn(r.Body(), r.Version)
	if isTxn {
		t.ident = r.Conn.Principal()
	}
	if act, sp := e.shadowWrites(r, t, isTxn); act != nil {
		if sp != nil {
			return *act, &produceState{touch: sp}
		}
		return *act, nil
	}
	if isTxn {
		e.produces.start(t)
		if act, rs := e.rideOn(r, t); act != nil {
			return *act, &produceState{ride: rs}
		}
		return proxy.Action{}, &produceState{txn: &t}
	}
	return proxy.Action{}, nil
}

// produceResponse is the KIP-1289 engine's part of a Produce response.
func (e *KIP1289) produceResponse(st *produceState, resp *kmsg.ProduceResponse) bool {
	if st == nil {
		return false
	}
	if sp := st.touch; sp != nil {
		// Not counted in produces (shadowWrites returned before start):
		// the broker's answer to the rest teaches the transaction.
		if sp.isTxn && produceOK(resp) {
			e.ledger.LearnTxn(sp.txn.ident, sp.txn.txnID, sp.txn.producerID, sp.txn.epoch)
		}
		e.mergeShadow(sp, resp)
		return true
	}
	changed, t := false, st.txn
	if rs := st.ride; rs != nil {
		e.rideAnswered(rs, resp)
		t, changed = &rs.txn, true
	}
	if t != nil {
		e.produces.done(*t)
		if produceOK(resp) {
			e.ledger.LearnTxn(t.ident, t.txnID, t.producerID, t.epoch)
		}
	}
	return changed
}

type produceTxnState struct {
	ident      string // the connection's principal (identity.go)
	txnID      string
	producerID int64
	epoch      int16
}

func produceOK(resp *kmsg.ProduceResponse) bool {
	n := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return false
			}
			n++
		}
	}
	return n > 0
}

// produceTxn reads, without decoding the records, the transactional id of a
// Produce request and the producer id and epoch of its first record batch.
// ok is false for a non-transactional request or anything it cannot read.
func produceTxn(body []byte, version int16) (produceTxnState, bool) {
	if version < 3 {
		return produceTxnState{}, false
	}
	var records []byte
	read := false
	h, err := proxy.WalkProduce(body, version, func(string, [16]byte) bool { return true }, func(_ int32, recs []byte) bool {
		records, read = recs, true
		return false // the first partition's first batch is enough
	})
	if err != nil || !read || h.TxnID == nil || *h.TxnID == "" {
		return produceTxnState{}, false
	}
	// Record batch v2: producerId at 43, producerEpoch at 51; magic at 16,
	// attributes (bit 4: transactional) at 21.
	if len(records) < 53 || records[16] != 2 || binary.BigEndian.Uint16(records[21:])&0x10 == 0 {
		return produceTxnState{}, false
	}
	return produceTxnState{
		txnID:      strings.Clone(*h.TxnID), // the body's buffer is reused
		producerID: int64(binary.BigEndian.Uint64(records[43:])),
		epoch:      int16(binary.BigEndian.Uint16(records[51:])),
	}, true
}
