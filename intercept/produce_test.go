package intercept

import (
	"fmt"
	"strings"
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

// TestWalkProduce: the walker reads acks at every version (v0-v2 have no
// transactional id), sees every topic and partition with its records as
// kmsg encoded them, and fails, without panicking, on every truncation
// that cuts into what it walks.
func TestWalkProduce(t *testing.T) {
	for v := int16(0); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		req.Acks, req.TimeoutMillis = 1, 500
		if v >= 3 {
			req.TransactionID = kmsg.StringPtr("t")
		}
		for i := 0; i < 3; i++ {
			tp := kmsg.NewProduceRequestTopic()
			tp.Topic, tp.TopicID = "topic-"+string(rune('a'+i)), [16]byte{byte(i + 1)}
			for j := 0; j <= i; j++ {
				p := kmsg.NewProduceRequestTopicPartition()
				p.Partition, p.Records = int32(j), []byte{byte(i), byte(j)}
				tp.Partitions = append(tp.Partitions, p)
			}
			req.Topics = append(req.Topics, tp)
		}
		body := req.AppendTo(nil)
		if acks, err := produceAcks(body, v); err != nil || acks != 1 {
			t.Fatalf("v%d: acks %d %v", v, acks, err)
		}
		var got []string
		h, err := walkProduce(body, v, func(name string, id [16]byte) bool {
			got = append(got, fmt.Sprintf("%s/%d", name, id[0]))
			return true
		}, func(p int32, recs []byte) bool {
			got = append(got, fmt.Sprintf("%d:%v", p, recs))
			return true
		})
		if err != nil || (v >= 3) != (h.txnID != nil) {
			t.Fatalf("v%d: %+v %v", v, h, err)
		}
		want := "topic-a/0 0:[0 0] topic-b/0 0:[1 0] 1:[1 1] topic-c/0 0:[2 0] 1:[2 1] 2:[2 2]"
		if v >= 13 {
			want = "/1 0:[0 0] /2 0:[1 0] 1:[1 1] /3 0:[2 0] 1:[2 1] 2:[2 2]"
		}
		if s := strings.Join(got, " "); s != want {
			t.Errorf("v%d: walked %s, want %s", v, s, want)
		}
		walked := len(body)
		if v >= 9 {
			walked-- // the request's own (empty) tag section, after the topics: not walked
		}
		for n := 0; n < walked; n++ {
			if _, err := walkProduce(body[:n], v, func(string, [16]byte) bool { return true }, nil); err == nil {
				t.Errorf("v%d: truncated to %d of %d bytes, walked without an error", v, n, len(body))
			}
		}
	}
}
