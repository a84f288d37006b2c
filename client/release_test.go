package client

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReleaseForRedeliveryOnShareRecords checks the abort rule against a
// real kgo share consumer on kfake: records released with
// ReleaseForRedelivery come back on the next poll instead of being accepted
// implicitly, and Add takes their coordinates.
func TestReleaseForRedeliveryOnShareRecords(t *testing.T) {
	c := newCluster(t, 3)
	const group = "sharetx-release"
	c.SetGroupConfigs(group, map[string]string{"share.auto.offset.reset": "earliest"})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const total = 4
	for i := 0; i < total; i++ {
		if err := prod.ProduceSync(ctx, kgo.StringRecord("v")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cons, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ShareGroup(group),
		kgo.ConsumeTopics("in"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	var first []*kgo.Record
	for len(first) < total && ctx.Err() == nil {
		first = append(first, cons.PollFetches(ctx).Records()...)
	}
	if len(first) != total {
		t.Fatalf("polled %d records", len(first))
	}
	acks := NewShareAcknowledgements()
	for _, r := range first {
		if r.DeliveryCount() != 1 {
			t.Fatalf("delivery count %d", r.DeliveryCount())
		}
		acks.Add(r, Accept)
	}
	if acks.Len() != total || acks.validate() != nil {
		t.Fatalf("acks: %d %v", acks.Len(), acks.validate())
	}

	// "The transaction aborted."
	ReleaseForRedelivery(first...)

	var again []*kgo.Record
	for len(again) < total && ctx.Err() == nil {
		again = append(again, cons.PollFetches(ctx).Records()...)
	}
	if len(again) != total {
		t.Fatalf("redelivered %d of %d records", len(again), total)
	}
	for _, r := range again {
		if r.DeliveryCount() != 2 {
			t.Fatalf("%s[%d]@%d delivery count %d, want 2", r.Topic, r.Partition, r.Offset, r.DeliveryCount())
		}
	}
}
