package intercept

import (
	"encoding/binary"
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
	p.Records = encodeBatch(batch)
	tp.Partitions = append(tp.Partitions, p)
	req.Topics = append(req.Topics, tp)
	return req.AppendTo(nil)
}

// encodeBatch encodes b with its length field set, as a producer sends it.
func encodeBatch(b kmsg.RecordBatch) []byte {
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	return out
}

// The transactional id, producer id and epoch are read from a Produce
// request at every version that carries them; non-transactional requests
// and batches are skipped.
func TestProduceTxn(t *testing.T) {
	id := "orders-1"
	for v := int16(3); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		got, ok := produceTxn(produceBody(t, v, &id, 0x10, 77, 3), v)
		want := outPart{topic: "out", partition: 0, records: 1}
		if v >= 13 {
			want = outPart{topicID: [16]byte{1}, partition: 0, records: 1}
		}
		if !ok || got.txnID != "orders-1" || got.producerID != 77 || got.epoch != 3 || len(got.outs) != 1 || got.outs[0] != want {
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

// TestProduceOutputsAnswered: a transactional Produce's partitions are
// counted by their batch headers (several batches in one partition too),
// and the answer's base offsets turn them into the output batches the
// ledger learns; a partition the broker refused, or one not in the request,
// teaches nothing.
func TestProduceOutputsAnswered(t *testing.T) {
	id := "orders-1"
	batch := func(records int32) []byte {
		b := kmsg.RecordBatch{Magic: 2, Attributes: 0x10, ProducerID: 77, ProducerEpoch: 3, LastOffsetDelta: records - 1, NumRecords: records, Records: []byte{0}}
		return encodeBatch(b)
	}
	for _, v := range []int16{12, 13} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.TransactionID, req.Acks, req.TimeoutMillis = v, &id, -1, 1000
		tp := kmsg.NewProduceRequestTopic()
		tp.Topic, tp.TopicID = "out", [16]byte{1}
		for p, recs := range [][]byte{batch(10), append(batch(3), batch(4)...), batch(1)} {
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Partition, pp.Records = int32(p), recs
			tp.Partitions = append(tp.Partitions, pp)
		}
		req.Topics = append(req.Topics, tp)
		st, ok := produceTxn(req.AppendTo(nil), v)
		if !ok || len(st.outs) != 3 || st.outs[0].records != 10 || st.outs[1].records != 7 || st.outs[2].records != 1 {
			t.Fatalf("v%d: %+v %v", v, st.outs, ok)
		}
		resp := kmsg.NewPtrProduceResponse()
		rt := kmsg.NewProduceResponseTopic()
		if v >= 13 {
			rt.TopicID = [16]byte{1}
		} else {
			rt.Topic = "out"
		}
		for p, base := range []int64{100, 200, 300, 400} {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset = int32(p), base
			if p == 2 {
				rp.ErrorCode, rp.BaseOffset = 47, -1 // refused: nothing learned
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		got := st.answered(resp)
		if len(got) != 2 || got[0].First != 100 || got[0].Last != 109 || got[1].First != 200 || got[1].Last != 206 ||
			got[0].Partition != 0 || got[1].Partition != 1 {
			t.Fatalf("v%d: learned %+v", v, got)
		}
		if (v >= 13) != (got[0].TopicID == [16]byte{1}) || (v < 13) != (got[0].Topic == "out") {
			t.Fatalf("v%d: named %+v", v, got[0])
		}
	}
	if n := batchRecords([]byte{1, 2, 3}); n != 0 {
		t.Fatalf("a truncated batch counted %d records", n)
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
