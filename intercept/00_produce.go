package intercept

import (
	"encoding/binary"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
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
		if outs := t.answered(resp); len(outs) > 0 {
			e.ledger.LearnOutputs(t.ident, t.txnID, t.producerID, t.epoch, outs)
		}
	}
	return changed
}

type produceTxnState struct {
	ident      string // the connection's principal (identity.go)
	txnID      string
	producerID int64
	epoch      int16
	// outs are the request's partitions and how many records each holds,
	// at most staging.MaxOutputPartitions of them: what the answer's
	// offsets teach the ledger (a call may name one of its outputs,
	// kip1289 OutputRecord).
	outs []outPart
}

// outPart is one partition of a transactional Produce request.
type outPart struct {
	topic     string   // before v13
	topicID   [16]byte // v13+
	partition int32
	records   int64
}

// answered returns the output batches the broker accepted, with their
// offsets, from the request's partitions and resp.
func (t *produceTxnState) answered(resp *kmsg.ProduceResponse) []staging.OutputBatch {
	if len(t.outs) == 0 {
		return nil
	}
	var outs []staging.OutputBatch
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 || rp.BaseOffset < 0 {
				continue
			}
			for _, o := range t.outs {
				if o.partition == rp.Partition && o.records > 0 &&
					((o.topic != "" && o.topic == rt.Topic) || (o.topicID != [16]byte{} && o.topicID == rt.TopicID)) {
					outs = append(outs, staging.OutputBatch{Topic: o.topic, TopicID: o.topicID, Partition: o.partition,
						First: rp.BaseOffset, Last: rp.BaseOffset + o.records - 1})
					break
				}
			}
		}
	}
	return outs
}

// batchRecords counts the records of a partition's record batches (v2) by
// their headers, never reading a record; 0 when they cannot be read.
func batchRecords(records []byte) int64 {
	var n int64
	for len(records) > 0 {
		// baseOffset 8, batchLength 4 (of what follows it), partition
		// leader epoch 4, magic 1 at 16, crc 4, attributes 2,
		// lastOffsetDelta 4 at 23.
		if len(records) < 27 || records[16] != 2 {
			return 0
		}
		size := 12 + int64(binary.BigEndian.Uint32(records[8:]))
		delta := int64(int32(binary.BigEndian.Uint32(records[23:])))
		if size < 27 || size > int64(len(records)) || delta < 0 {
			return 0
		}
		n += delta + 1
		records = records[size:]
	}
	return n
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
	if h, err := proxy.WalkProduce(body, version, nil, nil); err != nil || h.TxnID == nil || *h.TxnID == "" {
		return produceTxnState{}, false // not transactional: its partitions are not walked
	}
	var first []byte
	read := false
	var topic string
	var topicID [16]byte
	var outs []outPart
	h, err := proxy.WalkProduce(body, version, func(name string, id [16]byte) bool {
		topic, topicID = strings.Clone(name), id // once per topic: the body's buffer is reused
		return true
	}, func(p int32, recs []byte) bool {
		if !read {
			first, read = recs, true
		}
		if len(outs) < staging.MaxOutputPartitions {
			outs = append(outs, outPart{topic: topic, topicID: topicID, partition: p, records: batchRecords(recs)})
		}
		return true
	})
	if err != nil || !read || h.TxnID == nil || *h.TxnID == "" {
		return produceTxnState{}, false
	}
	// Record batch v2: producerId at 43, producerEpoch at 51; magic at 16,
	// attributes (bit 4: transactional) at 21.
	if len(first) < 53 || first[16] != 2 || binary.BigEndian.Uint16(first[21:])&0x10 == 0 {
		return produceTxnState{}, false
	}
	return produceTxnState{
		txnID:      strings.Clone(*h.TxnID), // the body's buffer is reused
		producerID: int64(binary.BigEndian.Uint64(first[43:])),
		epoch:      int16(binary.BigEndian.Uint16(first[51:])),
		outs:       outs,
	}, true
}
