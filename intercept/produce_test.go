package intercept

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func produceBody(t testing.TB, version int16, txnID *string, attrs int16, pid int64, epoch int16) []byte {
	t.Helper()
	batch := kmsg.RecordBatch{Magic: 2, Attributes: attrs, ProducerID: pid, ProducerEpoch: epoch, NumRecords: 1, Records: []byte{0}}
	req := kmsg.NewPtrProduceRequest()
	req.Version = version
	req.TransactionID = txnID
	req.Acks = -1
	req.TimeoutMillis = 1000
	tp := kmsg.NewProduceRequestTopic()
	tp.Topic = "out"
	tp.TopicID = [16]byte{1}
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = batch.AppendTo(nil)
	tp.Partitions = append(tp.Partitions, p)
	req.Topics = append(req.Topics, tp)
	return req.AppendTo(nil)
}

// The transactional id, producer id and epoch are read from a Produce
// request at every version that carries them; non-transactional requests
// and batches are skipped.
func TestProduceTxn(t *testing.T) {
	id := "orders-1"
	for v := int16(3); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		got, ok := produceTxn(produceBody(t, v, &id, 0x10, 77, 3), v)
		if !ok || got != (produceTxnState{txnID: "orders-1", producerID: 77, epoch: 3}) {
			t.Errorf("v%d: %+v %v", v, got, ok)
		}
		if _, ok := produceTxn(produceBody(t, v, nil, 0, 77, 3), v); ok {
			t.Errorf("v%d: a non-transactional request was read as transactional", v)
		}
		if _, ok := produceTxn(produceBody(t, v, &id, 0, 77, 3), v); ok {
			t.Errorf("v%d: a batch without the transactional bit was taken", v)
		}
		body := produceBody(t, v, &id, 0x10, 77, 3)
		for n := 0; n < len(body); n++ {
			if got, ok := produceTxn(body[:n], v); ok && got.producerID != 77 {
				t.Fatalf("v%d: truncated to %d bytes read %+v", v, n, got)
			}
		}
	}
}

func FuzzProduceTxn(f *testing.F) {
	id := "t"
	for _, v := range []int16{3, 8, 9, 12, 13} {
		f.Add(v, produceBody(f, v, &id, 0x10, 1, 1))
	}
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		produceTxn(body, version) // must not panic
	})
}

// TestProduceNames: the shadow topic is found by name (by id from v13) in
// any topic of a Produce request, at every version, and a request without
// it (or truncated) is not taken for one with it.
func TestProduceNames(t *testing.T) {
	id := "orders-1"
	for v := int16(3); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		body := produceBody(t, v, &id, 0x10, 77, 3)
		if !produceNames(body, v, "out", [16]byte{1}) {
			t.Errorf("v%d: topic out (id 1) not found", v)
		}
		if produceNames(body, v, "__sharetx_shadow", [16]byte{9}) {
			t.Errorf("v%d: a topic the request does not name was found", v)
		}
		for n := 0; n < len(body); n++ {
			produceNames(body[:n], v, "out", [16]byte{1}) // no panic on truncation
		}
		// The shadow topic second, after a topic of two partitions.
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		if err := req.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, req.Topics[0].Partitions[0])
		second := req.Topics[0]
		second.Topic, second.TopicID = "__sharetx_shadow", [16]byte{9}
		req.Topics = append(req.Topics, second)
		if !produceNames(req.AppendTo(nil), v, "__sharetx_shadow", [16]byte{9}) {
			t.Errorf("v%d: the shadow topic as the second topic not found", v)
		}
	}
}
