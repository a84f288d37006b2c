package intercept

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/staging"
)

// TestSpliceProduceTopic: the shadow batch becomes one more topic of the
// client's Produce, the client's own topics and batches byte for byte as
// they came, at v12 (topic names) and v13 (topic ids).
func TestSpliceProduceTopic(t *testing.T) {
	for _, v := range []int16{12, 13} {
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		req.TransactionID = kmsg.StringPtr("txn-a")
		req.Acks, req.TimeoutMillis = -1, 30000
		for i, name := range []string{"out-1", "out-2"} {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = name, [16]byte{byte(i + 1)}
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = int32(i), bytes.Repeat([]byte{byte(i + 7)}, 100+i)
			rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
			req.Topics = append(req.Topics, rt)
		}
		body := req.AppendTo(nil)
		res := &staging.Reservation{Partition: 3, TopicID: [16]byte{9, 9}, Topic: "__sharetx_shadow", Batch: []byte("batch-bytes")}
		out, ok := spliceProduceTopic(body, v, res)
		if !ok {
			t.Fatalf("v%d: not spliced", v)
		}
		got := kmsg.NewPtrProduceRequest()
		got.Version = v
		if err := got.ReadFrom(out); err != nil {
			t.Fatalf("v%d: the spliced request does not decode: %v", v, err)
		}
		if len(got.Topics) != 3 || *got.TransactionID != "txn-a" || got.Acks != -1 || got.TimeoutMillis != 30000 {
			t.Fatalf("v%d: %+v", v, got)
		}
		first := got.Topics[0]
		if (v >= 13 && first.TopicID != res.TopicID) || (v < 13 && first.Topic != res.Topic) ||
			len(first.Partitions) != 1 || first.Partitions[0].Partition != 3 || string(first.Partitions[0].Records) != "batch-bytes" {
			t.Fatalf("v%d: shadow topic %+v", v, first)
		}
		for i, tp := range got.Topics[1:] {
			want := req.Topics[i]
			if tp.Partitions[0].Partition != want.Partitions[0].Partition || !bytes.Equal(tp.Partitions[0].Records, want.Partitions[0].Records) {
				t.Fatalf("v%d: the client's topic %d changed: %+v", v, i, tp)
			}
		}
	}
	// A body that ends before its topics is not spliced.
	if _, ok := spliceProduceTopic([]byte{0}, 13, &staging.Reservation{}); ok {
		t.Fatal("a truncated body was spliced")
	}
}
