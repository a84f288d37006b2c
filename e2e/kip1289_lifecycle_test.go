package e2e

// The application's life around a transaction: closing or dying right after
// a commit, and a transaction that stays open long.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/client"
)

// TestKIP1289CloseRightAfterCommit: the application commits and closes its
// share consumer at once, while the committed acknowledgements still wait
// behind a long-poll fetch: nothing is redelivered. (franz-go's polite close
// reaches the broker after the proxy's injected acknowledgement, so this
// holds even without the proxy holding the close; it guards the sequence.
// TestKIP1289ClientDiesRightAfterCommit is the one that needs the hold.)
func TestKIP1289CloseRightAfterCommit(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		const n = 30
		s := newKIPSetup(t, b, n)
		s.consumer.Close()
		consumer := s.p.NewClient(t, s.rec, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in),
			kgo.FetchMaxWait(3*time.Second))
		s.commitAllThenEnd(t, consumer, n, false, func() { consumer.Close() }) // at once, with a fetch in flight
		Wait(t, 60*time.Second, "the committed acknowledgements to be applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d committed records were redelivered after the application closed right after its commit", len(left))
		}
		if f := s.p.KIP().Stats().ApplyFailures; f != 0 {
			t.Fatalf("%v acknowledgements failed upstream", f)
		}
	})
}

// TestKIP1289ClientDiesRightAfterCommit: the application dies (its
// connections drop, nothing is closed politely) right after committing,
// while the committed acknowledgements still wait behind a long-poll fetch.
// The proxy keeps the upstream connection, and so the share session, open
// until they are applied: nothing is redelivered. The test checks the
// acknowledgements were still unapplied when the connections dropped.
func TestKIP1289ClientDiesRightAfterCommit(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		const n = 30
		s := newKIPSetup(t, b, n)
		s.consumer.Close()
		killer := &KillableDialer{}
		consumer, err := kgo.NewClient(kgo.SeedBrokers(s.p.Addr), kgo.Dialer(killer.Dial),
			kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in), kgo.FetchMaxWait(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		s.commitAllThenEnd(t, consumer, n, true, killer.Kill)
		Wait(t, 60*time.Second, "the committed acknowledgements to be applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d committed records were redelivered after the application died right after its commit", len(left))
		}
		if f := s.p.KIP().Stats().ApplyFailures; f != 0 {
			t.Fatalf("%v committed acknowledgements could not be applied after the application died", f)
		}
	})
}

func setGroupConfig(t testing.TB, cl *kgo.Client, group, name, value string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = name, kmsg.StringPtr(value)
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
	if err != nil {
		t.Fatalf("set %s: %v", name, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("set %s=%s: %v (%s)", name, value, err, deref(r.ErrorMessage))
		}
	}
}

// TestKIP1289LockRenewedWhileTxPending: a transaction stays open for almost
// twice the acquisition lock. The proxy renews the locks of the staged
// records (RENEW), so no other member is handed them meanwhile, and the
// commit applies them: nothing is redelivered.
func TestKIP1289LockRenewedWhileTxPending(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		lock := 15 * time.Second // a real broker's minimum (group.share.min.record.lock.duration.ms)
		if b.Fake != nil {
			lock = 2 * time.Second
		}
		s := newKIPSetup(t, b, 10)
		s.consumer.Close()
		setGroupConfig(t, s.admin, s.group, "share.record.lock.duration.ms", strconv.Itoa(int(lock.Milliseconds())))
		consumer := s.p.NewClient(t, s.rec, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in),
			kgo.FetchMaxWait(500*time.Millisecond))
		ctx := ctxT(t, 3*time.Minute)
		var recs []*kgo.Record
		for len(recs) == 0 && ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			recs = consumer.PollRecords(pctx, 10).Records()
			cancel()
		}
		staged := map[[2]int64]bool{}
		for _, r := range recs {
			staged[[2]int64{int64(r.Partition), r.Offset}] = true
		}
		if err := s.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md); err != nil {
			t.Fatal(err)
		}
		// Another member, straight to the cluster, polls all along: it
		// must never be handed a staged record.
		rival, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...), kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in), kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer rival.Close()
		open := lock * 9 / 5
		deadline := time.Now().Add(open)
		for time.Now().Before(deadline) {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			for _, r := range rival.PollRecords(pctx, 100).Records() {
				if staged[[2]int64{int64(r.Partition), r.Offset}] {
					t.Fatalf("record %d@%d, staged in an open transaction, was handed to another member: its lock expired", r.Offset, r.Partition)
				}
			}
			cancel()
			// The owner keeps polling too (its implicit acks are absorbed).
			pctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
			consumer.PollRecords(pctx, 1)
			cancel()
		}
		if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		st := s.p.KIP().Stats()
		if st.Renewals == 0 {
			t.Fatal("no lock was renewed")
		}
		if st.ApplyFailures != 0 {
			t.Fatalf("%v acknowledgements failed upstream after the renewals", st.ApplyFailures)
		}
		t.Logf("%s: transaction open %s with a %s lock: %v renewals, 0 redeliveries", b.Name, open, lock, st.Renewals)
	}, kfake.BrokerConfigs(map[string]string{"group.share.record.lock.duration.ms": "2000", "share.record.lock.sweep.interval.ms": "200"})) // kfake reads only the broker settings
}

// stageOutputs begins a transaction on producer, produces one output per
// record ("out-<key>") and binds the records' ACCEPTs to it; the caller
// ends it.
func (s *kipSetup) stageOutputs(t *testing.T, ctx context.Context, producer *client.Producer, recs []*kgo.Record) {
	t.Helper()
	if err := s.tryStageOutputs(t, ctx, producer, recs); err != nil {
		t.Fatalf("TxnShareAcknowledge: %v", err)
	}
}

// tryStageOutputs is stageOutputs returning the TxnShareAcknowledge's error.
func (s *kipSetup) tryStageOutputs(t *testing.T, ctx context.Context, producer *client.Producer, recs []*kgo.Record) error {
	t.Helper()
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		producer.Produce(ctx, &kgo.Record{Value: []byte("out-" + string(r.Key))}, nil)
	}
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md)
}

// commitAllThenEnd processes all n inputs through consumer in committed
// transactions. Before the last commit it starts a long-poll fetch, so the
// last acknowledgements have to be applied behind it; right after the last
// commit it calls end: the application goes away with the fetch in flight.
func (s *kipSetup) commitAllThenEnd(t *testing.T, consumer *kgo.Client, n int, mustBePending bool, end func()) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	done := 0
	for done < n {
		if ctx.Err() != nil {
			t.Fatalf("committed %d of %d", done, n)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		recs := consumer.PollRecords(pctx, n).Records()
		cancel()
		if len(recs) == 0 {
			continue
		}
		s.stageOutputs(t, ctx, s.producer, recs)
		last := done+len(recs) >= n
		var polling chan struct{}
		if last {
			polling = make(chan struct{})
			go func() {
				defer close(polling)
				pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				consumer.PollRecords(pctx, n)
			}()
			// There are no records left, so the fetch waits its full
			// FetchMaxWait upstream: the scenario needs it in flight.
			Wait(t, 10*time.Second, "a long-poll ShareFetch in flight", func() bool { return s.p.KIP().Stats().InFlight > 0 })
		}
		if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		done += len(recs)
		if last {
			end()
			if mustBePending && s.p.KIP().Stats().Pending == 0 {
				t.Fatal("the acknowledgements were applied before the application went away: the scenario was not exercised")
			}
			<-polling
		}
	}
}
