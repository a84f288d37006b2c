package markers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

var recTopic = [16]byte{7}

// testResolver is a Resolver over an empty ledger, with no share sessions
// (what it applies fails, as for a member gone).
func testResolver(t testing.TB) (*Resolver, *staging.Ledger) {
	cfg := configs.Default().KIP1289
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	applier := upstream.NewApplier(upstream.NewSessions(ctx, nil, log), log, nil)
	l := staging.NewLedger(cfg, log, nil, applier)
	return NewResolver(ctx, l, applier, log, nil), l
}

// ackAccepted runs a client acknowledgement through the ledger as the
// broker accepting it would.
func ackAccepted(l *staging.Ledger, group, member string, topic [16]byte, partition int32, batches []staging.AckRange) ([]staging.AckRange, int) {
	out, held, plan := l.FilterClientAcks(group, member, topic, partition, batches)
	if plan != nil {
		l.ApplyAckPlan(plan)
	}
	return out, held
}

func shadowOf(group string, partition int32, first, last int64, typ int8) *staging.ShadowRecord {
	return &staging.ShadowRecord{Version: 1, GroupID: group, Topics: []staging.ShadowTopic{{TopicID: recTopic,
		Partitions: []staging.ShadowPartition{{Partition: partition, AcknowledgementBatches: []staging.ShadowBatch{{FirstOffset: first, LastOffset: last, AcknowledgeTypes: []int8{typ}}}}}}}}
}

func fetchResp(partition int32, first, last int64, count int16) *kmsg.ShareFetchResponse {
	resp := kmsg.NewPtrShareFetchResponse()
	t := kmsg.NewShareFetchResponseTopic()
	t.TopicID = recTopic
	p := kmsg.NewShareFetchResponseTopicPartition()
	p.Partition = partition
	p.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: count}}
	t.Partitions = append(t.Partitions, p)
	resp.Topics = append(resp.Topics, t)
	return resp
}

func ranges(resp *kmsg.ShareFetchResponse) string {
	return fmt.Sprint(resp.Topics[0].Partitions[0].AcquiredRecords)
}

// A redelivered range is split around the known offsets: committed ones
// are taken for the proxy to acknowledge, open ones are held, the rest go
// to the client. The barrier runs for redelivered records only.
func TestScreenRedelivered(t *testing.T) {
	e, l := testResolver(t)
	barriers := 0
	e.Recovered(func(context.Context) error { barriers++; return nil })
	e.OnShadowRecord(0, 10, shadowOf("g", 0, 3, 4, 1))  // will commit
	e.OnShadowRecord(0, 11, shadowOf("g", 0, 7, 7, 3))  // stays open
	e.OnShadowRecord(1, 5, shadowOf("g", 0, 20, 21, 1)) // will abort
	e.OnShadowRecord(0, 10, shadowOf("g", 0, 3, 4, 1))  // read twice: no change
	if n := l.KnownRanges(); n != 3 {
		t.Fatalf("known %d, want 3", n)
	}
	e.Resolve(0, 10, true)
	e.Resolve(1, 5, false)
	if n := l.KnownRanges(); n != 2 {
		t.Fatalf("after an abort known %d, want 2", n)
	}
	e.OnShadowRecord(1, 5, shadowOf("g", 0, 20, 21, 1)) // read after its abort: stays forgotten
	if n := l.KnownRanges(); n != 2 {
		t.Fatalf("a record read after its abort was learned again: known %d", n)
	}

	st := staging.Fetcher{Node: 1, Group: "g", Member: "m"}
	first := fetchResp(0, 0, 9, 1)
	if e.Screen(st, first, time.Minute, time.Time{}) {
		// First deliveries are screened too (no barrier), and 3,4,7 are known.
		if got, want := ranges(first), "[{0 2 1 {map[]}} {5 6 1 {map[]}} {8 9 1 {map[]}}]"; got != want {
			t.Fatalf("first delivery screened to %s, want %s", got, want)
		}
	} else {
		t.Fatal("known offsets in a first delivery were not screened")
	}
	if barriers != 0 {
		t.Fatalf("barrier ran %d times for a first delivery", barriers)
	}
	again := fetchResp(0, 20, 25, 2)
	if e.Screen(st, again, time.Minute, time.Time{}) {
		t.Fatalf("offsets of an aborted transaction were screened: %s", ranges(again))
	}
	if barriers != 1 {
		t.Fatalf("barrier ran %d times for a redelivery, want 1", barriers)
	}
	if c := testutil.ToFloat64(e.mRedelivered.WithLabelValues("held_open")); c != 1 {
		t.Fatalf("held for the open transaction %v, want 1 (offset 7)", c)
	}
	if c := testutil.ToFloat64(e.mRedelivered.WithLabelValues("committed")); c != 2 {
		t.Fatalf("committed taken %v, want 2", c)
	}
	// The client's own ack of a held offset never reaches the broker.
	out, held := ackAccepted(l, "g", "m1", recTopic, 0, []staging.AckRange{{First: 6, Last: 8, Types: []int8{1}}})
	if held != 1 || fmt.Sprint(out) != "[{6 6 [1]} {8 8 [1]}]" {
		t.Fatalf("client ack 6-8 became %v with %d held, want 6 and 8 forwarded, 7 held", out, held)
	}
	// An offset known only from the shadow topic (not acquired here) is held too.
	e.OnShadowRecord(0, 12, shadowOf("g", 0, 30, 30, 1))
	if _, held := ackAccepted(l, "g", "m1", recTopic, 0, []staging.AckRange{{First: 30, Last: 30, Types: []int8{2}}}); held != 1 {
		t.Fatal("a client ack of an offset staged through another proxy was forwarded")
	}
	// The open transaction aborts: the held offset is released (type 2).
	e.Resolve(0, 11, false)
	if _, held := ackAccepted(l, "g", "m", recTopic, 0, []staging.AckRange{{First: 7, Last: 7, Types: []int8{1}}}); held != 0 {
		t.Fatal("offset 7 is still held after its transaction aborted (it is released, AVAILABLE again)")
	}
	if c := testutil.ToFloat64(e.mRedelivered.WithLabelValues("held_then_aborted")); c != 1 {
		t.Fatalf("held_then_aborted %v, want 1", c)
	}
}

// PruneKnown forgets what lies below the share-partition start offset.
func TestPruneKnown(t *testing.T) {
	e, l := testResolver(t)
	e.OnShadowRecord(0, 1, shadowOf("g", 0, 0, 9, 1))
	e.OnShadowRecord(0, 2, shadowOf("g", 0, 10, 19, 1))
	e.OnShadowRecord(0, 3, shadowOf("h", 0, 0, 9, 1))
	err := e.PruneKnown(context.Background(), func(_ context.Context, groups []string) (map[string]map[[16]byte]map[int32]int64, error) {
		if fmt.Sprint(groups) != "[g h]" {
			t.Errorf("asked for %v", groups)
		}
		return map[string]map[[16]byte]map[int32]int64{"g": {recTopic: {0: 15}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.KnownRanges(); n != 2 {
		t.Fatalf("after pruning at 15: %d shadow records known, want 2 (10-19 of g, 0-9 of h)", n)
	}
	// 0-9 of g was forgotten: a first delivery of 0-19 keeps 0-9 only.
	resp := fetchResp(0, 0, 19, 1)
	e.Screen(staging.Fetcher{Node: 1, Group: "g", Member: "m"}, resp, time.Minute, time.Time{})
	if got, want := ranges(resp), "[{0 9 1 {map[]}}]"; got != want {
		t.Fatalf("after pruning, a delivery of 0-19 of g was screened to %s, want %s", got, want)
	}
}

// Until the shadow topic was read back, a redelivery waits for it; a
// first delivery does not.
func TestRedeliveryWaitsForRecovery(t *testing.T) {
	e, _ := testResolver(t)
	e.waitRecovery = 5 * time.Second
	st := staging.Fetcher{Node: 1, Group: "g", Member: "m"}
	start := time.Now()
	e.Screen(st, fetchResp(0, 0, 9, 1), time.Minute, time.Time{})
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a first delivery waited %v for the recovery", d)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		e.OnShadowRecord(0, 1, shadowOf("g", 0, 0, 9, 1))
		e.Resolve(0, 1, true)
		e.Recovered(func(context.Context) error { return nil })
	}()
	resp := fetchResp(0, 0, 9, 2)
	if !e.Screen(st, resp, time.Minute, time.Time{}) || len(resp.Topics[0].Partitions[0].AcquiredRecords) != 0 {
		t.Fatalf("a redelivery before the read-back went through unscreened: %s", ranges(resp))
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("the redelivery did not wait for the recovery (%v)", d)
	}
}

// A redelivery waits for the read-back and the barrier only as long as its
// client waits for the fetch (the deadline Screen is given): a barrier that
// takes longer, or a read-back that does, hands the response on at the
// deadline, screened against what is known and counted unverified. Held
// past it, the response would come after the client gave the fetch up.
func TestRedeliveryWaitEndsAtTheClientsDeadline(t *testing.T) {
	st := staging.Fetcher{Node: 1, Group: "g", Member: "m"}
	for _, c := range []struct {
		name      string
		recovered bool // the read-back is done, with a barrier that never finishes
	}{{"barrier", true}, {"read-back", false}} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := testResolver(t)
			if c.recovered {
				e.OnShadowRecord(0, 1, shadowOf("g", 0, 4, 4, 1))
				e.Resolve(0, 1, true)
				e.Recovered(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			}
			start := time.Now()
			resp := fetchResp(0, 0, 9, 2)
			e.Screen(st, resp, time.Minute, start.Add(300*time.Millisecond))
			if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
				t.Fatalf("the redelivery waited %v, want about the 300 ms its client waits (never the %v of waitRecovery)", d, e.waitRecovery)
			}
			if n := testutil.ToFloat64(e.mRedelivered.WithLabelValues("unverified")); n != 1 {
				t.Fatalf("unverified responses %v, want 1", n)
			}
			want := "[{0 9 2 {map[]}}]"
			if c.recovered {
				want = "[{0 3 2 {map[]}} {5 9 2 {map[]}}]" // what is known still screened: 4 committed
			}
			if got := ranges(resp); got != want {
				t.Fatalf("handed on %s, want %s", got, want)
			}
		})
	}
	// No deadline: waitRecovery bounds the wait.
	e, _ := testResolver(t)
	e.waitRecovery = 200 * time.Millisecond
	start := time.Now()
	e.Screen(st, fetchResp(0, 0, 9, 2), time.Minute, time.Time{})
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("with no client deadline the redelivery waited %v, want waitRecovery's 200 ms", d)
	}
}
