package intercept

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
)

// Writes of applications to the shadow topic. The one write an application
// has a use for is the Go and Java libraries' touch record, which makes the
// client's EndTransaction send EndTxn for a transaction that holds only
// acknowledgements. It is relayed with the proxy's own credentials, so no
// application needs WRITE on the shadow topic and its ACL can name sharetx's
// principal alone.
//
// A partition of the shadow topic in a Produce request is relayed only if it
// is a touch (isTouch): the transaction's own touch partition
// (kip1289.TouchPartition, never its shadow partition, whose sequence
// numbers the proxy's writer owns for that producer), exactly one
// transactional record batch of at most maxTouchBytes carrying the caller's
// producer id and epoch, one record, the touch header — and the caller is
// the principal the broker accepted the transactional id from
// (identity.go). Every other partition of the shadow topic is refused with
// TOPIC_AUTHORIZATION_FAILED, the broker's answer to a principal without
// WRITE there, before anything of it is copied: a non-transactional write,
// a batch of another producer id (at sequence 0 it would take the place of
// that producer's shadow record), a second batch behind a touch, a write to
// any other partition, or a big one. The rest of the request goes to the
// broker as it came. A Produce with acks=0 that names the shadow topic
// closes the connection, as the broker does on an acks=0 write it refuses.
// Nothing an application writes there could stage anything anyway: only
// records signed with the shadow key are trusted
// (staging.VerifyShadowRecord).

// maxTouchBytes bounds a touch batch: the record is 13 bytes of value and
// one header (under 100 bytes with the batch header); the rest leaves room
// for headers a producer interceptor adds (tracing).
const maxTouchBytes = 4096

// A relayed touch the broker answers with a retriable error of the
// transaction's verification is sent again by the proxy: at most
// touchRetries times, touchRetryFirst apart at first, doubling to
// touchRetryMax.
const (
	touchRetries    = 8
	touchRetryFirst = 2 * time.Millisecond
	touchRetryMax   = 20 * time.Millisecond
	// touchIdleWait bounds the wait for the transaction's Produce requests
	// in flight before a touch is relayed.
	touchIdleWait = time.Second
)

// relayCode is the error code of the relayed touch's partition (there is
// one), or -1 if the answer has none.
func relayCode(resp *kmsg.ProduceResponse) int16 {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			return p.ErrorCode
		}
	}
	return -1
}

// touchRetriable: the errors a broker gives a transactional write whose
// verification with the coordinator met another request of the same
// transaction or its previous transaction's end.
func touchRetriable(code int16) bool {
	return code == kerr.NotEnoughReplicas.Code || code == kerr.ConcurrentTransactions.Code || code == kerr.NetworkException.Code
}

// touchSplit is a Produce request split between the client's connection
// (rest), the proxy's own (the touch, relayed) and the proxy's answer (the
// refused partitions of the shadow topic).
type touchSplit struct {
	txn     produceTxnState
	isTxn   bool
	version int16
	relayed chan *kmsg.ProduceResponse // the side write's answer, one value; nil without a relay
	parts   []kmsg.ProduceRequestTopicPartition
	refused []int32 // partitions of the shadow topic answered TOPIC_AUTHORIZATION_FAILED
	topic   kmsg.ProduceRequestTopic
}

// shadowTopicID is the shadow topic's id, when the writer knows it.
func (e *KIP1289) shadowTopicID() ([16]byte, int32, bool) {
	s := e.stager.Load()
	if s == nil {
		return [16]byte{}, 0, false
	}
	return s.ShadowTopic()
}

// shadowWrites decides a Produce request (t is its transaction when isTxn):
// nil to forward it as it came (it names no partition of the shadow topic:
// the common case, walked without reading the records), or the action that
// relays its touch and refuses the rest of the shadow topic.
func (e *KIP1289) shadowWrites(r *proxy.Request, t produceTxnState, isTxn bool) (*proxy.Action, *touchSplit) {
	id, n, known := e.shadowTopicID()
	name := e.cfg.ShadowTopic
	body := r.Body()
	if !known && r.Version >= 13 {
		return nil, nil // by id only, and the id is not known yet: the writer is not ready, nothing is staged
	}
	if !produceNames(body, r.Version, name, id) {
		return nil, nil
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version = r.Version
	if req.ReadFrom(body) != nil { // the records alias body: nothing copied
		return &proxy.Action{Close: "malformed_frame"}, nil
	}
	if req.Acks == 0 {
		return &proxy.Action{Close: "shadow_topic_write_refused"}, nil
	}
	touchPart := int32(-1)
	if isTxn && known && n >= 2 && e.side != nil && e.ledger.OwnsTxn(t.txnID, t.producerID, t.ident) {
		touchPart = staging.TouchPartitionFor(t.txnID, n)
	}
	sp := &touchSplit{txn: t, isTxn: isTxn, version: r.Version}
	keep := req.Topics[:0]
	for _, tp := range req.Topics {
		if !(tp.Topic == name && r.Version < 13 || r.Version >= 13 && tp.TopicID == id) {
			keep = append(keep, tp)
			continue
		}
		sp.topic = tp
		for _, p := range tp.Partitions {
			if p.Partition == touchPart && len(sp.parts) == 0 && isTouch(p.Records, t.producerID, t.epoch) {
				p.Records = append([]byte(nil), p.Records...)
				sp.parts = append(sp.parts, p)
				continue
			}
			sp.refused = append(sp.refused, p.Partition)
		}
	}
	e.mRefused.Add(float64(len(sp.refused)))
	req.Topics = keep
	if len(sp.parts) > 0 {
		sp.relayed = make(chan *kmsg.ProduceResponse, 1)
		relay := kmsg.NewPtrProduceRequest()
		relay.TransactionID, relay.Acks, relay.TimeoutMillis = req.TransactionID, req.Acks, req.TimeoutMillis
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID, rt.Partitions = name, id, sp.parts
		relay.Topics = []kmsg.ProduceRequestTopic{rt}
		node := r.Conn.Node()
		side := e.side
		relayTouch := func() { // on the proxy's connection, the answer to sp.relayed
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second+time.Duration(req.TimeoutMillis)*time.Millisecond)
			defer cancel()
			var out *kmsg.ProduceResponse
			for try, wait := 0, touchRetryFirst; ; try, wait = try+1, min(2*wait, touchRetryMax) {
				resp, err := side(ctx, node, relay)
				out, _ = resp.(*kmsg.ProduceResponse)
				if err != nil || out == nil {
					e.log.Info("relaying a touch record to the shadow topic failed", "txn", t.txnID, "err", err)
					out = nil
					break
				}
				code := relayCode(out)
				if try+1 >= touchRetries || !touchRetriable(code) {
					break
				}
				// The broker's verification of the write with the
				// transaction coordinator met another of the transaction
				// (NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS): the same
				// batch again soon (the broker deduplicates it by its
				// sequence), rather than the client after its own back-off
				// (librdkafka's retry.backoff.ms, 100 ms).
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					break
				}
			}
			sp.relayed <- out
		}
		// Before the rest of the request, and once no other Produce of the
		// transaction is in flight through the proxy: the broker verifies
		// a transaction's first write to a partition with its coordinator,
		// and of two verifications of one transactional id pending at once
		// it fails the older with a retriable error (NOT_ENOUGH_REPLICAS),
		// which librdkafka retries after retry.backoff.ms, 100 ms. The
		// touch goes on the proxy's connection, the client's outputs on
		// its own: sent together, every fifth touch of confluent-kafka's
		// producer met it, on the touch or on the outputs. One round trip
		// on this connection's read loop instead, once per call.
		if isTxn {
			if idle := e.produces.idleOf(t.txnID, t.producerID, t.epoch); idle != nil {
				r.Conn.FlushUpstream() // they may wait behind this one, unsent
				select {
				case <-idle:
				case <-time.After(touchIdleWait):
				}
			}
		}
		relayTouch()
	}
	if len(req.Topics) == 0 {
		return &proxy.Action{Async: func() kmsg.Response {
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			resp.SetVersion(r.Version)
			e.mergeShadow(sp, resp)
			return resp
		}}, nil
	}
	return &proxy.Action{Body: req.AppendTo(nil)}, sp
}

// isTouch reports whether records is a touch of producer pid at epoch: one
// transactional record batch (magic 2, not a control batch) of one record,
// at most maxTouchBytes, with the touch header sharetx=touch. A compressed
// batch is judged by its batch header alone: decompressing what a client
// sent, to look at one header, would let a small batch cost the proxy
// much more memory than it is long.
func isTouch(records []byte, pid int64, epoch int16) bool {
	if len(records) < 61 || len(records) > maxTouchBytes {
		return false
	}
	var b kmsg.RecordBatch
	if b.ReadFrom(records) != nil || int(b.Length)+12 != len(records) || b.Magic != 2 {
		return false
	}
	const transactional, control, codec = 0x10, 0x20, 0x07
	if b.Attributes&transactional == 0 || b.Attributes&control != 0 || b.ProducerID != pid || b.ProducerEpoch != epoch || b.NumRecords != 1 {
		return false
	}
	if b.Attributes&codec != 0 {
		return true
	}
	var rec kmsg.Record
	if rec.ReadFrom(b.Records) != nil {
		return false
	}
	for _, h := range rec.Headers {
		if h.Key == kip1289.TouchHeader && string(h.Value) == kip1289.TouchHeaderValue {
			return true
		}
	}
	return false
}

// mergeShadow adds the shadow topic's answers to the client's response: the
// relayed touch's (the broker's own, or a retriable error when the relay
// failed) and TOPIC_AUTHORIZATION_FAILED for the refused partitions.
func (e *KIP1289) mergeShadow(sp *touchSplit, resp *kmsg.ProduceResponse) {
	rt := kmsg.NewProduceResponseTopic()
	rt.Topic, rt.TopicID = sp.topic.Topic, sp.topic.TopicID
	if sp.relayed != nil {
		got := <-sp.relayed
		for _, p := range sp.parts {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = kerr.RequestTimedOut.Code // retriable: the batch is resent with its sequence
			rp.BaseOffset = -1
			if got != nil {
				for _, t := range got.Topics {
					for _, gp := range t.Partitions {
						if gp.Partition == p.Partition {
							rp = gp
						}
					}
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
			if rp.ErrorCode == 0 {
				// Where the touch landed: a call with producer id -1 may
				// name it (kip1289 TouchOffset) and is then checked against
				// the ids it was written with.
				e.ledger.LearnTouch(sp.txn.ident, sp.txn.txnID, sp.txn.producerID, sp.txn.epoch, rp.BaseOffset)
			}
		}
	}
	for _, p := range sp.refused {
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = p
		rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
		rp.BaseOffset = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	resp.Topics = append(resp.Topics, rt)
}

// produceNames reports whether a Produce request names topic (by name, or
// by id from v13), walking its topics and partitions without reading the
// records: the cost is per partition, not per byte.
func produceNames(body []byte, version int16, topic string, id [16]byte) bool {
	if version < 3 {
		return false
	}
	named := false
	proxy.WalkProduce(body, version, func(name string, tid [16]byte) bool {
		named = version >= 13 && tid == id || version < 13 && name == topic
		return !named
	}, nil)
	return named
}
