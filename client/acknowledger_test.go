package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

func newAcknowledger(t *testing.T, producer *Producer) *TransactionalShareAcknowledger {
	t.Helper()
	a, err := NewTransactionalShareAcknowledger(producer, NewShareGroupMetadata("g"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// observeTxn counts the transactional requests the cluster receives.
func observeTxn(c *kfake.Cluster) *kfake.FaultHandle {
	return c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID, kmsg.Produce, kmsg.AddPartitionsToTxn, kmsg.EndTxn}, Observe: true, Count: -1})
}

func observeEndTxn(c *kfake.Cluster, commit bool) *kfake.FaultHandle {
	return c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Observe: true, Count: -1,
		When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit == commit }})
}

// offsetsOf lists what a TxnShareAcknowledge carried as "topic[p]@o=type",
// sorted.
func offsetsOf(reqs []*kip1289.TxnShareAcknowledgeRequest, names map[[16]byte]string) []string {
	var out []string
	for _, r := range reqs {
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				for _, b := range p.AcknowledgementBatches {
					for o := b.FirstOffset; o <= b.LastOffset; o++ {
						ty := b.AcknowledgeTypes[0]
						if len(b.AcknowledgeTypes) > 1 {
							ty = b.AcknowledgeTypes[o-b.FirstOffset]
						}
						out = append(out, fmt.Sprintf("%s[%d]@%d=%d", names[tp.TopicID], p.Partition, o, ty))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func namesOf(t *testing.T, cl *Producer) map[[16]byte]string {
	t.Helper()
	out := map[[16]byte]string{}
	for n, id := range topicIDs(t, cl, "in", "in2") {
		out[id] = n
	}
	return out
}

func asTxnError(t *testing.T, err error) *TransactionError {
	t.Helper()
	var te *TransactionError
	if !errors.As(err, &te) {
		t.Fatalf("%v (%T) is not a *TransactionError", err, err)
	}
	return te
}

func TestAcknowledgerNew(t *testing.T) {
	c := newCluster(t, 3)
	md := NewShareGroupMetadata("g")
	if _, err := NewTransactionalShareAcknowledger(nil, md); err == nil || !strings.Contains(err.Error(), "nil producer") {
		t.Fatalf("nil producer: %v", err)
	}
	cl := newProducer(t, c, nil)
	if _, err := NewTransactionalShareAcknowledger(cl, ShareGroupMetadata{}); err == nil || !strings.Contains(err.Error(), "GroupID") {
		t.Fatalf("no group: %v", err)
	}

	a, err := NewTransactionalShareAcknowledger(cl, md, AbortTimeout(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.abortTimeout != time.Second {
		t.Fatalf("abort timeout %v", a.cfg.abortTimeout)
	}
	if _, err := NewTransactionalShareAcknowledger(cl, md); err == nil || !strings.Contains(err.Error(), "already belongs") {
		t.Fatalf("second acknowledger on one producer: %v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := NewTransactionalShareAcknowledger(cl, md, AbortTimeout(-1))
	if err != nil {
		t.Fatalf("after Close the producer is free again: %v", err)
	}
	if b.cfg.abortTimeout != defaultAbortTimeout {
		t.Fatalf("abort timeout %v", b.cfg.abortTimeout)
	}
	b.Close(context.Background())
}

func TestAcknowledgerAcknowledge(t *testing.T) {
	c := newCluster(t, 3)
	a := newAcknowledger(t, newProducer(t, c, nil))
	for name, fn := range map[string]func() error{
		"nil":        func() error { return a.Acknowledge(nil, Accept) },
		"no topic":   func() error { return a.Acknowledge(rec("", 0, 1), Accept) },
		"negative":   func() error { return a.Acknowledge(rec("in", 0, -1), Accept) },
		"release":    func() error { return a.Acknowledge(rec("in", 0, 1), AcknowledgeType(2)) },
		"renew":      func() error { return a.Acknowledge(rec("in", 0, 1), AcknowledgeType(4)) },
		"all or one": func() error { return a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 1), nil}, Accept) },
	} {
		if err := fn(); err == nil || !strings.Contains(err.Error(), "invalid acknowledgement") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := a.Len(); n != 0 {
		t.Fatalf("invalid acknowledgements were buffered: Len %d", n)
	}
	if err := a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 1), rec("in", 0, 2), rec("in2", 1, 2)}, Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Acknowledge(rec("in", 0, 1), Reject); err != nil { // replaces
		t.Fatal(err)
	}
	if n := a.Len(); n != 3 {
		t.Fatalf("Len %d, want 3", n)
	}
	if got := a.acks[recordKey{"in", 0, 1}].t; got != Reject {
		t.Fatalf("type %v, want the last one, REJECT", got)
	}
}

// TestAcknowledgerCommitNothingSendsNothing: Commit, Flush and Abort with
// nothing buffered send no request at all, not even InitProducerId; with
// something buffered they do (so the counters can tell).
func TestAcknowledgerCommitNothingSendsNothing(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	obs := observeTxn(c)
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 2; i++ {
		if err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Commit(canceled); err != nil {
			t.Fatal(err)
		}
		if n, h := len(f.requests()), obs.Hits(); n != 0 || h != 0 {
			t.Fatalf("round %d: %d TxnShareAcknowledge and %d transactional requests for nothing", i, n, h)
		}
		// Positive control, then nothing again.
		if i == 0 {
			if err := a.Acknowledge(rec("in", 0, 1), Accept); err != nil {
				t.Fatal(err)
			}
			if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if n, h := len(f.requests()), obs.Hits(); n != 1 || h == 0 {
				t.Fatalf("a real commit sent %d TxnShareAcknowledge and %d transactional requests", n, h)
			}
			f.mu.Lock()
			f.reqs = nil
			f.mu.Unlock()
			obs.Remove()
			obs = observeTxn(c)
		}
	}
}

// TestAcknowledgerCommit: Commit stages the buffered acknowledgements in an
// ack-only transaction and really commits it (the touch record is committed);
// Flush stages early; a staged record cannot change type.
func TestAcknowledgerCommit(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	ctx := context.Background()
	names := namesOf(t, cl)
	commits := observeEndTxn(c, true)

	if err := a.AcknowledgeAll([]*kgo.Record{rec("in", 1, 10), rec("in", 1, 11), rec("in2", 2, 7)}, Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Acknowledge(rec("in", 1, 11), Reject); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(offsetsOf(f.requests(), names), " "), "in2[2]@7=1 in[1]@10=1 in[1]@11=3"; got != want {
		t.Fatalf("staged %s, want %s", got, want)
	}
	if a.Len() != 0 || commits.Hits() != 1 {
		t.Fatalf("after Commit: Len %d, %d EndTxn commits", a.Len(), commits.Hits())
	}
	if n := len(touches(t, c)); n != 1 {
		t.Fatalf("%d committed touch records, want 1: the ack-only transaction did not commit", n)
	}

	// Flush stages in an open transaction; Commit ends it.
	if err := a.Acknowledge(rec("in", 0, 1), Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.requests()) != 2 || a.Len() != 1 || commits.Hits() != 1 {
		t.Fatalf("Flush: %d requests, Len %d, %d commits", len(f.requests()), a.Len(), commits.Hits())
	}
	if err := a.Acknowledge(rec("in", 0, 1), Accept); err != nil {
		t.Fatalf("the same acknowledgement of a staged record: %v", err)
	}
	if err := a.Acknowledge(rec("in", 0, 1), Reject); err == nil || !strings.Contains(err.Error(), "already acknowledged ACCEPT in the open transaction") {
		t.Fatalf("changing a staged record's type: %v", err)
	}
	if err := a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 2), rec("in", 0, 1)}, Reject); err == nil || a.Len() != 1 {
		t.Fatalf("AcknowledgeAll with a staged record of another type: %v, Len %d", err, a.Len())
	}
	if err := a.Acknowledge(rec("in", 0, 2), Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 3 || strings.Join(offsetsOf(reqs[2:], names), " ") != "in[0]@2=1" {
		t.Fatalf("Commit after Flush must stage only what was buffered since: %v", offsetsOf(reqs[1:], names))
	}
	if reqs[1].ProducerEpoch != reqs[2].ProducerEpoch {
		t.Fatal("Flush and Commit staged in different transactions")
	}
	if a.Len() != 0 || commits.Hits() != 2 {
		t.Fatalf("Len %d, %d commits", a.Len(), commits.Hits())
	}
	if n, want := len(touches(t, c)), wantTouches(cl, 2, 3); n != want {
		t.Fatalf("%d committed touch records, want %d", n, want)
	}
}

// TestAcknowledgerAbortAndClose: Abort aborts the open transaction and drops
// everything; Close does the same and refuses further use.
func TestAcknowledgerAbortAndClose(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a, err := NewTransactionalShareAcknowledger(cl, NewShareGroupMetadata("g"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	aborts := observeEndTxn(c, false)
	a.Acknowledge(rec("in", 0, 1), Accept)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.Acknowledge(rec("in", 0, 2), Accept)
	if err := a.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Len() != 0 || aborts.Hits() != 1 {
		t.Fatalf("Abort: Len %d, %d EndTxn aborts", a.Len(), aborts.Hits())
	}
	if err := a.Abort(ctx); err != nil || aborts.Hits() != 1 {
		t.Fatalf("a second Abort: %v, %d aborts", err, aborts.Hits())
	}
	if err := a.Commit(ctx); err != nil || len(f.requests()) != 1 {
		t.Fatalf("Commit after Abort: %v, %d requests", err, len(f.requests()))
	}

	// Close with a transaction open.
	a.Acknowledge(rec("in", 0, 3), Reject)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.Acknowledge(rec("in", 0, 4), Reject)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if aborts.Hits() != 2 || a.Len() != 0 {
		t.Fatalf("Close: %d aborts, Len %d", aborts.Hits(), a.Len())
	}
	for name, err := range map[string]error{
		"Acknowledge":    a.Acknowledge(rec("in", 0, 5), Accept),
		"AcknowledgeAll": a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 5)}, Accept),
		"Flush":          a.Flush(ctx),
		"Commit":         a.Commit(ctx),
		"Abort":          a.Abort(ctx),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := len(touches(t, c)); n != 0 {
		t.Fatalf("%d touch records committed by aborted transactions", n)
	}
}

// TestAcknowledgerConcurrent: Acknowledge from many goroutines while another
// commits in a loop: every acknowledgement is staged exactly once, each by
// the Commit that followed it or a later one.
func TestAcknowledgerConcurrent(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	ctx := context.Background()
	names := namesOf(t, cl)
	const workers, each = 8, 40
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := a.Acknowledge(rec("in", int32(w%2), int64(w*each+i)), Accept); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	commits := 0
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
		}
		if err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		commits++
		_ = a.Len()
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := offsetsOf(f.requests(), names)
	if len(got) != workers*each || a.Len() != 0 {
		t.Fatalf("%d offsets staged over %d commits, want %d; Len %d", len(got), commits, workers*each, a.Len())
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("%s staged twice", got[i])
		}
	}
	t.Logf("%d acknowledgements in %d transactions", len(got), len(f.requests()))
}

// TestAcknowledgerAbortReleases: with a real kgo share consumer on kfake,
// records whose acknowledgements Abort dropped are released and come back on
// the next poll instead of being accepted implicitly.
func TestAcknowledgerAbortReleases(t *testing.T) {
	c := newCluster(t, 3)
	const group = "sharetx-acknowledger"
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
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ShareGroup(group), kgo.ConsumeTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	a := newAcknowledger(t, newProducer(t, c, nil))
	var first []*kgo.Record
	for len(first) < total && ctx.Err() == nil {
		first = append(first, cons.PollFetches(ctx).Records()...)
	}
	if err := a.AcknowledgeAll(first, Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(ctx); err != nil { // no transaction open: sends nothing, releases
		t.Fatal(err)
	}
	var again []*kgo.Record
	for len(again) < total && ctx.Err() == nil {
		again = append(again, cons.PollFetches(ctx).Records()...)
	}
	if len(again) != total {
		t.Fatalf("%d of %d records redelivered after Abort", len(again), total)
	}
	for _, r := range again {
		if r.DeliveryCount() != 2 {
			t.Fatalf("%s[%d]@%d delivery count %d, want 2", r.Topic, r.Partition, r.Offset, r.DeliveryCount())
		}
	}
}
