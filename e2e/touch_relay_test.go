package e2e

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/staging"
)

// produceWrites counts the Produce requests a client wrote to a broker.
type produceWrites struct{ n atomic.Int32 }

func (h *produceWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Produce) && err == nil {
		h.n.Add(1)
	}
}

// TestTouchRelayRetriesVerificationErrors: when the broker answers the
// relayed touch record with an error of the transaction's verification
// (NOT_ENOUGH_REPLICAS: the broker failed the older of two verifications of
// one transactional id pending at once), the proxy sends the same batch
// again itself, so the client's one Produce succeeds and its transaction
// commits with the touch in it; the client does not wait out its own retry
// back-off (librdkafka's retry.backoff.ms, 100 ms). kfake only: a real broker
// cannot be made to answer so on demand.
func TestTouchRelayRetriesVerificationErrors(t *testing.T) {
	b := FakeBackend(t, 1)
	ctx := ctxT(t, time.Minute)
	shadow, txnID := Unique("touch-shadow"), Unique("touch-txn")
	p := StartProxy(t, b.Seeds, func(c *configs.Config) {
		c.KIP1289.ShadowTopic = shadow
		c.KIP1289.ShadowPartitions = 2
	})
	touchPart := staging.TouchPartitionFor(txnID, 2)
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := kadm.NewClient(admin).ListTopics(ctx, shadow)
	if err != nil || topics.Error() != nil {
		t.Fatalf("the shadow topic: %v %v", err, topics.Error())
	}
	shadowID := topics[shadow].ID

	var touchProduces, refused atomic.Int32
	b.Fake.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.Fake.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		for _, tp := range req.Topics {
			if tp.Topic != shadow && tp.TopicID != shadowID {
				continue
			}
			for _, pp := range tp.Partitions {
				if pp.Partition != touchPart {
					continue
				}
				touchProduces.Add(1)
				if !refused.CompareAndSwap(0, 1) {
					return nil, nil, false
				}
				resp := req.ResponseKind().(*kmsg.ProduceResponse)
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = pp.Partition, kerr.NotEnoughReplicas.Code
				rt.Partitions = append(rt.Partitions, rp)
				resp.Topics = append(resp.Topics, rt)
				return resp, nil, true
			}
		}
		return nil, nil, false
	})

	writes := &produceWrites{}
	producer := p.NewClient(t, &DialRecorder{}, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(writes))
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, touchRecord(shadow, touchPart)).FirstErr(); err != nil {
		t.Fatalf("the touch record through the proxy: %v", err)
	}
	if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("committing the touched transaction: %v", err)
	}
	if got := touchProduces.Load(); got != 2 {
		t.Errorf("the broker saw %d Produce requests of the touch, want 2 (refused once, then the proxy's retry)", got)
	}
	if got := writes.n.Load(); got != 1 {
		t.Errorf("the client wrote %d Produce requests, want 1: the retry was the client's, not the proxy's", got)
	}
	// The touch is committed: read_committed, the touch partition holds it.
	reader, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{shadow: {touchPart: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs := reader.PollFetches(rctx)
	if recs := fs.Records(); len(recs) != 1 {
		t.Fatalf("read_committed, the touch partition holds %d records (errors %v), want the one touch", len(recs), fs.Errors())
	}
}
