package intercept

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/staging"
)

// Writes of applications to the shadow topic (the Go client's touch record,
// which makes kgo's EndTransaction send EndTxn for a transaction that holds
// only acknowledgements) are relayed with the proxy's own credentials, so no
// application needs WRITE on the shadow topic and its ACL can name sharetx's
// principal alone.
//
// Only a transactional write of the caller's own transaction (its principal
// is one the broker accepted the transactional id from, identity.go) is
// relayed, and never to the transaction's shadow partition, whose sequence
// numbers the proxy's shadow writer owns for that producer. Anything else
// goes to the broker as it came, to be authorised as the caller. Nothing an
// application writes there can stage anything: only records signed with the
// shadow key are trusted (staging.VerifyShadowRecord).

// touchSplit is a Produce request split between the client's connection
// (rest) and the proxy's own (the shadow-topic partitions, relayed).
type touchSplit struct {
	txn     produceTxnState
	version int16
	relayed chan *kmsg.ProduceResponse // the side write's answer, one value
	parts   []kmsg.ProduceRequestTopicPartition
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

// relayTouch decides a transactional Produce request: nil to forward it as
// it came, or the action that relays its shadow-topic partitions.
func (e *KIP1289) relayTouch(r *Request, t produceTxnState) *Action {
	id, n, ok := e.shadowTopicID()
	name := e.cfg.ShadowTopic
	body := r.Body()
	if !ok || n == 0 || !produceNames(body, r.Version, name, id) {
		return nil // the shadow topic is not named: the common case, nothing decoded
	}
	owned := e.ledger.OwnsTxn(t.txnID, t.producerID, t.ident)
	side := e.side
	if !owned || side == nil {
		return nil
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version = r.Version
	if req.ReadFrom(body) != nil || req.Acks == 0 {
		return nil
	}
	own := staging.ShadowPartitionFor(t.txnID, n)
	sp := &touchSplit{txn: t, version: r.Version, relayed: make(chan *kmsg.ProduceResponse, 1)}
	keep := req.Topics[:0]
	for _, tp := range req.Topics {
		if !(tp.Topic == name || (r.Version >= 13 && tp.TopicID == id)) {
			keep = append(keep, tp)
			continue
		}
		var stay []kmsg.ProduceRequestTopicPartition
		for _, p := range tp.Partitions {
			if p.Partition == own {
				stay = append(stay, p)
				continue
			}
			p.Records = append([]byte(nil), p.Records...)
			sp.parts = append(sp.parts, p)
		}
		sp.topic = tp
		if len(stay) > 0 {
			tp.Partitions = stay
			keep = append(keep, tp)
		}
	}
	if len(sp.parts) == 0 {
		return nil
	}
	req.Topics = keep
	relay := kmsg.NewPtrProduceRequest()
	relay.TransactionID, relay.Acks, relay.TimeoutMillis = req.TransactionID, req.Acks, req.TimeoutMillis
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID, rt.Partitions = name, id, sp.parts
	relay.Topics = []kmsg.ProduceRequestTopic{rt}
	node := r.Conn.Node()
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second+time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
		resp, err := side(ctx, node, relay)
		out, _ := resp.(*kmsg.ProduceResponse)
		if err != nil || out == nil {
			e.log.Info("relaying a write to the shadow topic failed", "txn", t.txnID, "err", err)
			out = nil
		}
		sp.relayed <- out
	}()
	if len(req.Topics) == 0 {
		return &Action{Async: func() kmsg.Response {
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			resp.SetVersion(r.Version)
			e.mergeRelayed(sp, resp)
			return resp
		}}
	}
	return &Action{Body: req.AppendTo(nil), State: sp}
}

// mergeRelayed adds the relayed partitions' answers to the client's
// response: the broker's own, or a retriable error when the relay failed.
func (e *KIP1289) mergeRelayed(sp *touchSplit, resp *kmsg.ProduceResponse) {
	got := <-sp.relayed
	rt := kmsg.NewProduceResponseTopic()
	rt.Topic, rt.TopicID = sp.topic.Topic, sp.topic.TopicID
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
			e.ledger.LearnTxn(sp.txn.ident, sp.txn.txnID, sp.txn.producerID, sp.txn.epoch)
		}
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
	r := &reader{b: body}
	flexible := version >= 9
	str := func() string {
		if flexible {
			return r.compactString()
		}
		return string(r.take(int(r.int16())))
	}
	arrayLen := func() int {
		if flexible {
			return r.compactLen(1)
		}
		return int(r.int32())
	}
	if flexible {
		r.compactNullableString() // transactional id
	} else if n := int(r.int16()); n > 0 {
		r.take(n)
	}
	r.int16() // acks
	r.int32() // timeout
	topics := arrayLen()
	for i := 0; i < topics && r.err == nil; i++ {
		if version >= 13 {
			if r.uuid() == id {
				return true
			}
		} else if str() == topic {
			return true
		}
		parts := arrayLen()
		for j := 0; j < parts && r.err == nil; j++ {
			r.int32() // partition
			if flexible {
				if n := r.compactLen(1); n > 0 {
					r.take(n)
				}
				r.tags()
			} else if n := int(r.int32()); n > 0 {
				r.take(n)
			}
		}
		if flexible {
			r.tags()
		}
	}
	return false
}
