package intercept

import (
	"bytes"
	"testing"
	"time"

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

// TestProducesForgetsTheNeverAnswered: a transaction whose Produces were
// never all answered (the connection closed with one in flight) is
// forgotten producesForgetAfter after its last Produce started, and a call
// waiting for it is let go; one with a Produce started since is kept.
func TestProducesForgetsTheNeverAnswered(t *testing.T) {
	var p produces
	dead := produceTxnState{txnID: "dead", producerID: 1, epoch: 0}
	live := produceTxnState{txnID: "live", producerID: 2, epoch: 0}
	p.start(dead)
	p.start(dead)
	p.done(dead) // one of two answered; the other's connection closed
	p.start(live)
	idle := p.idleOf("dead", 1, 0)
	if idle == nil {
		t.Fatal("no in-flight count for a transaction with a Produce unanswered")
	}
	now := time.Now()
	p.prune(now.Add(time.Minute))
	if p.size() != 2 {
		t.Fatalf("pruned after a minute: %d left, want 2", p.size())
	}
	p.m["live"].last = now.Add(4 * time.Minute) // a Produce started since
	p.prune(now.Add(producesForgetAfter + time.Second))
	select {
	case <-idle:
	default:
		t.Fatal("a call waiting for the never-answered Produce was not let go")
	}
	if p.idleOf("dead", 1, 0) != nil || p.size() != 1 || p.idleOf("live", 2, 0) == nil {
		t.Fatalf("after the prune: %d left, dead %v, live %v", p.size(), p.idleOf("dead", 1, 0) != nil, p.idleOf("live", 2, 0) != nil)
	}
}

// size is how many transactions have Produces counted in flight.
func (p *produces) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
