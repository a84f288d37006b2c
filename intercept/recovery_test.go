package intercept

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/staging"
)

var recTopic = [16]byte{7}

func shadowOf(group string, partition int32, first, last int64, typ int8) *staging.ShadowRecord {
	return &staging.ShadowRecord{Version: 1, GroupID: group, Topics: []staging.ShadowTopic{{TopicID: recTopic,
		Partitions: []staging.ShadowPartition{{Partition: partition, Batches: []staging.ShadowBatch{{FirstOffset: first, LastOffset: last, AcknowledgeTypes: []int8{typ}}}}}}}}
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
	e := testEngine()
	defer e.Close()
	e.MarkRecovered()
	barriers := 0
	e.SetBarrier(func(context.Context) error { barriers++; return nil })
	e.OnShadowRecord(0, 10, shadowOf("g", 0, 3, 4, 1))  // will commit
	e.OnShadowRecord(0, 11, shadowOf("g", 0, 7, 7, 3))  // stays open
	e.OnShadowRecord(1, 5, shadowOf("g", 0, 20, 21, 1)) // will abort
	e.OnShadowRecord(0, 10, shadowOf("g", 0, 3, 4, 1))  // read twice: no change
	if n := e.KnownRanges(); n != 3 {
		t.Fatalf("known %d, want 3", n)
	}
	e.Resolve(0, 10, true)
	e.Resolve(1, 5, false)
	if n := e.KnownRanges(); n != 2 {
		t.Fatalf("after an abort known %d, want 2", n)
	}
	e.OnShadowRecord(1, 5, shadowOf("g", 0, 20, 21, 1)) // read after its abort: stays forgotten
	if n := e.KnownRanges(); n != 2 {
		t.Fatalf("a record read after its abort was learned again: known %d", n)
	}

	st := &shareState{node: 1, group: "g", member: "m"}
	first := fetchResp(0, 0, 9, 1)
	if e.screenResponse(st, first, time.Minute) {
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
	if e.screenResponse(st, again, time.Minute) {
		t.Fatalf("offsets of an aborted transaction were screened: %s", ranges(again))
	}
	if barriers != 1 {
		t.Fatalf("barrier ran %d times for a redelivery, want 1", barriers)
	}
	e.mu.Lock()
	var heldState recState = 255
	if s := e.parts[partKey{"g", recTopic, 0}].offsets[7]; s != nil {
		heldState = s.state
	}
	waiting := len(e.waiting[[2]int64{0, 11}])
	e.mu.Unlock()
	if heldState != stTxPending {
		t.Fatalf("offset 7 (open transaction) is %v, want TX_PENDING", heldState)
	}
	if waiting != 1 {
		t.Fatalf("%d calls wait for the open transaction, want 1", waiting)
	}
	if c := testutil.ToFloat64(e.RedeliveredMetric().WithLabelValues("committed")); c != 2 {
		t.Fatalf("committed taken %v, want 2", c)
	}
	// The client's own ack of a held offset never reaches the broker.
	out, held := ackAccepted(e, "g", "m1", recTopic, 0, []ackRange{{first: 6, last: 8, types: []int8{1}}})
	if held != 1 || fmt.Sprint(out) != "[{6 6 [1]} {8 8 [1]}]" {
		t.Fatalf("client ack 6-8 became %v with %d held, want 6 and 8 forwarded, 7 held", out, held)
	}
	// An offset known only from the shadow topic (not acquired here) is held too.
	e.OnShadowRecord(0, 12, shadowOf("g", 0, 30, 30, 1))
	if _, held := ackAccepted(e, "g", "m1", recTopic, 0, []ackRange{{first: 30, last: 30, types: []int8{2}}}); held != 1 {
		t.Fatal("a client ack of an offset staged through another proxy was forwarded")
	}
	// The open transaction aborts: the held offset is released (type 2).
	e.Resolve(0, 11, false)
	e.mu.Lock()
	var relType int8 = -1
	if s := e.parts[partKey{"g", recTopic, 0}].offsets[7]; s != nil {
		relType = s.ackType
	}
	e.mu.Unlock()
	if relType != 2 && relType != -1 {
		t.Fatalf("held offset after abort has type %d, want RELEASE (2)", relType)
	}
	if c := testutil.ToFloat64(e.RedeliveredMetric().WithLabelValues("held_then_aborted")); c != 1 {
		t.Fatalf("held_then_aborted %v, want 1", c)
	}
}

// PruneKnown forgets what lies below the share-partition start offset.
func TestPruneKnown(t *testing.T) {
	e := testEngine()
	defer e.Close()
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
	e.mu.Lock()
	_, first := e.knownAt[[2]int64{0, 1}]
	_, second := e.knownAt[[2]int64{0, 2}]
	_, other := e.knownAt[[2]int64{0, 3}]
	e.mu.Unlock()
	if first || !second || !other {
		t.Fatalf("after pruning at 15: 0-9 kept %v (want false), 10-19 kept %v, group h kept %v (want true)", first, second, other)
	}
}

// Until the shadow topic was read back, a redelivery waits for it; a
// first delivery does not.
func TestRedeliveryWaitsForRecovery(t *testing.T) {
	e := testEngine()
	defer e.Close()
	e.waitRecovery = 5 * time.Second
	e.SetBarrier(func(context.Context) error { return nil })
	st := &shareState{node: 1, group: "g", member: "m"}
	start := time.Now()
	e.screenResponse(st, fetchResp(0, 0, 9, 1), time.Minute)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a first delivery waited %v for the recovery", d)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		e.OnShadowRecord(0, 1, shadowOf("g", 0, 0, 9, 1))
		e.Resolve(0, 1, true)
		e.MarkRecovered()
	}()
	resp := fetchResp(0, 0, 9, 2)
	if !e.screenResponse(st, resp, time.Minute) || len(resp.Topics[0].Partitions[0].AcquiredRecords) != 0 {
		t.Fatalf("a redelivery before the read-back went through unscreened: %s", ranges(resp))
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("the redelivery did not wait for the recovery (%v)", d)
	}
}
