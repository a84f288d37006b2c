package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestThreeBrokersLeadersSpread: with three brokers and partition leaders on
// each, clients follow Metadata to the proxy's per-broker listeners and never
// dial a real broker. The real-broker half needs a three-node cluster
// (make test KAFKA_NODES=3, or E2E_KAFKA_SEEDS naming three brokers).
func TestThreeBrokersLeadersSpread(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) {
		if b.Nodes < 3 {
			t.Skipf("%s backend has %d broker(s); this test needs three", b.Name, b.Nodes)
		}
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		cl := p.NewClient(t, rec)
		adm := kadm.NewClient(cl)
		topic := createTopic(t, adm, b, 9)
		ctx := ctxT(t, 60*time.Second)
		if b.Fake != nil {
			// kfake places leaders at random (all nine on two brokers in
			// about one run in thirteen): spread them, the test's premise.
			for i := int32(0); i < 9; i++ {
				if err := b.Fake.MoveTopicPartition(topic, i, i%3); err != nil {
					t.Fatal(err)
				}
			}
		}

		// The client answers Metadata from its cache for a few seconds
		// (kgo's metadata min age): the moves above show once it expires.
		var leaders map[int32]bool
		deadline := time.Now().Add(20 * time.Second)
		for {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			leaders = map[int32]bool{}
			for _, pd := range md.Topics[topic].Partitions {
				leaders[pd.Leader] = true
			}
			if len(leaders) >= 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if len(leaders) < 3 {
			t.Fatalf("leaders on %d brokers, want 3 (%v)", len(leaders), leaders)
		}
		if got := len(p.Brokers()); got < 3 {
			t.Fatalf("proxy serves %d brokers, want 3", got)
		}

		const n = 900
		produceN(t, cl, topic, n)
		cons := p.NewClient(t, rec, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		for got < n {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", got, n)
			}
			got += fs.NumRecords()
		}
		rec.AssertOnlyProxy(t, p)
		// Every broker listener was used: clients went to each leader through it.
		dialed := rec.Addrs()
		for _, br := range p.Brokers() {
			if dialed[br.Proxy] == 0 {
				t.Errorf("no client dialed the proxy listener of broker %d (%s)", br.NodeID, br.Proxy)
			}
		}

		if b.Fake != nil {
			// Leaders move: clients learn new leaders (KIP-951 NodeEndpoints
			// and Metadata) and still dial only proxy addresses.
			b.Fake.ShufflePartitionLeaders()
			produceN(t, cl, topic, 300)
			rec.AssertOnlyProxy(t, p)
		}
	})
}
