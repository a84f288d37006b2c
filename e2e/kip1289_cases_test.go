package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
)

// pollSome polls until it gets records (at most max).
func (s *kipSetup) pollSome(t *testing.T, ctx context.Context, max int) []*kgo.Record {
	t.Helper()
	return pollNonEmpty(t, ctx, s.consumer, max)
}

// pollNonEmpty returns the next non-empty poll of at most max records of
// the share consumer cl, failing the test when ctx ends first.
func pollNonEmpty(t *testing.T, ctx context.Context, cl *kgo.Client, max int) []*kgo.Record {
	t.Helper()
	for {
		if ctx.Err() != nil {
			t.Fatal("no records to poll")
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		recs := cl.PollRecords(pctx, max).Records()
		cancel()
		if len(recs) > 0 {
			return recs
		}
	}
}

// remaining closes the setup's consumer, then drains the share group with a
// fresh consumer connected straight to the cluster (not through the proxy)
// and returns what it was delivered. Records the broker acknowledged are
// never delivered again; records it still counts acquired were released by
// the close and come back. The share-group lag is no substitute: on a real
// broker it does not count acquired records.
func (s *kipSetup) remaining(t *testing.T, b *Backend, quiet time.Duration) []*kgo.Record {
	t.Helper()
	s.consumer.Close()
	return freshMemberGets(t, b, s.group, s.in, quiet)
}

func acksOf(recs []*kgo.Record, ty client.AcknowledgeType) *client.ShareAcknowledgements {
	a := client.NewShareAcknowledgements()
	for _, r := range recs {
		a.Add(r, ty)
	}
	return a
}

// TestKIP1289AckOnlyTransactionCommits: a transaction that produces nothing
// and only acknowledges (say, it rejected a whole poll) still commits: the
// acknowledgements are applied (REJECT archives the records).
func TestKIP1289AckOnlyTransactionCommits(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		const n = 10
		s := newKIPSetup(t, b, n)
		ctx := ctxT(t, 2*time.Minute)
		done := 0
		for done < n {
			recs := s.pollSome(t, ctx, n)
			if err := s.producer.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Reject), s.md); err != nil {
				t.Fatalf("TxnShareAcknowledge: %v", err)
			}
			if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("commit of an ack-only transaction: %v", err)
			}
			done += len(recs)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records delivered again after the ack-only transaction committed their REJECT", len(left))
		}
	})
}

// TestKIP1289ClientAckOfPendingNeverReachesBroker: the share consumer's
// implicit ACCEPT of records that are TX_PENDING is held back by the proxy:
// when the transaction then aborts, the records are still the broker's to
// redeliver.
func TestKIP1289ClientAckOfPendingNeverReachesBroker(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 8)
		ctx := ctxT(t, 2*time.Minute)
		// One poll: the next poll acknowledges this one's records implicitly.
		recs := s.pollSome(t, ctx, 8)
		n := len(recs)
		if err := s.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md); err != nil {
			t.Fatal(err)
		}
		before := s.p.KIP().Stats().AbsorbedAcks
		// The next poll carries the implicit ACCEPT of every record above.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		s.consumer.PollRecords(pctx, 1)
		cancel()
		Wait(t, 10*time.Second, "the implicit acknowledgement to be absorbed", func() bool {
			return s.p.KIP().Stats().AbsorbedAcks >= before+float64(n)
		})
		// Abort: had the ACCEPT reached the broker, the records would be
		// acknowledged for good. Held back, they are still acquired by the
		// member, and closing it releases them for redelivery.
		if err := s.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		back := map[[2]int64]bool{}
		for _, r := range s.remaining(t, b, 3*time.Second) {
			back[[2]int64{int64(r.Partition), r.Offset}] = true
		}
		for _, r := range recs {
			if !back[[2]int64{int64(r.Partition), r.Offset}] {
				t.Errorf("record %d@%d was not redelivered after the abort: the client's acknowledgement of it while TX_PENDING reached the broker", r.Offset, r.Partition)
			}
		}
	})
}

// TestKIP1289TransactionProxyNeverSaw: a producer that initialized straight
// against the cluster cannot use the proxy's credentials to write into its
// transaction: TRANSACTION_ABORTABLE (the code a KIP-1289 client aborts on,
// not a fatal one: a restarted proxy meets the same case), nothing staged.
func TestKIP1289TransactionProxyNeverSaw(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 4)
		ctx := ctxT(t, 2*time.Minute)
		recs := s.pollSome(t, ctx, 4)
		txnID := Unique("direct")
		direct, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...), kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(s.out))
		if err != nil {
			t.Fatal(err)
		}
		defer direct.Close()
		if err := direct.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := direct.ProduceSync(ctx, kgo.StringRecord("direct")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pid, epoch, err := direct.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		topicID := topicIDOf(t, s.admin, s.in)
		req := &kip1289.TxnShareAcknowledgeRequest{TransactionalID: &txnID, ProducerID: pid, ProducerEpoch: epoch,
			GroupID: s.group, MemberEpoch: -1, Topics: []kip1289.TxnShareAcknowledgeTopic{{TopicID: topicID,
				Partitions: []kip1289.TxnShareAcknowledgePartition{{Partition: recs[0].Partition,
					AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: recs[0].Offset, LastOffset: recs[0].Offset, AcknowledgeTypes: []int8{1}}}}}}}}
		resp := rawRoundTrip(t, s.p.Addr, req).(*kip1289.TxnShareAcknowledgeResponse)
		if resp.ErrorCode != kerr.TransactionAbortable.Code {
			t.Fatalf("error %d (%v), want TRANSACTION_ABORTABLE", resp.ErrorCode, topMessage(resp))
		}
		if p := s.p.KIP().Stats().Pending; p != 0 {
			t.Fatalf("%d records staged by a refused call", p)
		}
		direct.EndTransaction(ctx, kgo.TryAbort)
	})
}

// TestKIP1289ZombieFenced: once a new producer with the same transactional
// id initialized, the old one (a zombie) cannot stage acknowledgements.
func TestKIP1289ZombieFenced(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 4)
		ctx := ctxT(t, 2*time.Minute)
		recs := s.pollSome(t, ctx, 4)
		txnID := Unique("zombie")
		mk := func() *client.Producer {
			return newProducer(t, s.p, s.rec, kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(s.out))
		}
		zombie := mk()
		if err := zombie.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := zombie.ProduceSync(ctx, kgo.StringRecord("zombie")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		fresh := mk()
		if err := fresh.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := fresh.ProduceSync(ctx, kgo.StringRecord("fresh")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The proxy's own check, without the client library's touch record
		// (which the broker already refuses): the zombie's epoch is old.
		zpid, zepoch, _ := zombie.Client().ProducerID(ctx)
		raw := &kip1289.TxnShareAcknowledgeRequest{TransactionalID: &txnID, ProducerID: zpid, ProducerEpoch: zepoch,
			GroupID: s.group, MemberEpoch: -1, Topics: []kip1289.TxnShareAcknowledgeTopic{{TopicID: topicIDOf(t, s.admin, s.in),
				Partitions: []kip1289.TxnShareAcknowledgePartition{{Partition: recs[0].Partition,
					AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: recs[0].Offset, LastOffset: recs[0].Offset, AcknowledgeTypes: []int8{1}}}}}}}}
		if resp := rawRoundTrip(t, s.p.Addr, raw).(*kip1289.TxnShareAcknowledgeResponse); resp.ErrorCode != kerr.ProducerFenced.Code {
			t.Fatalf("zombie epoch %d: error %d (%s), want PRODUCER_FENCED", zepoch, resp.ErrorCode, topMessage(resp))
		}
		err := zombie.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md)
		if err == nil {
			t.Fatal("a fenced producer staged acknowledgements")
		}
		t.Logf("zombie refused: %v", err)
		if p := s.p.KIP().Stats().Pending; p != 0 {
			t.Fatalf("%d records staged by a zombie", p)
		}
		// The fresh producer stages them and commits.
		if err := fresh.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md); err != nil {
			t.Fatalf("fresh producer: %v", err)
		}
		if err := fresh.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
	})
}

// TestKIP1289TransactionTimeout: a transaction that never ends is aborted by
// the coordinator; its ABORT marker reverts the staged records to ACQUIRED,
// so the member can stage them again in a new transaction.
func TestKIP1289TransactionTimeout(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 4)
		ctx := ctxT(t, 3*time.Minute)
		recs := s.pollSome(t, ctx, 4)
		stuck := newProducer(t, s.p, s.rec, kgo.TransactionalID(Unique("stuck")), kgo.DefaultProduceTopic(s.out),
			kgo.TransactionTimeout(time.Second))
		if err := stuck.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := stuck.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), s.md); err != nil {
			t.Fatal(err)
		}
		if p := s.p.KIP().Stats().Pending; p != len(recs) {
			t.Fatalf("%d pending, want %d", p, len(recs))
		}
		// No EndTxn: only the coordinator's timeout abort (a marker) ends it.
		Wait(t, 90*time.Second, "the timed-out transaction's ABORT marker", func() bool {
			st := s.p.KIP().Stats()
			return st.Aborted >= 1 && st.Pending == 0
		})
		// The proxy released them upstream at the abort: they are
		// redelivered, and the redelivery can be staged and committed.
		want := map[recordID]bool{}
		for _, r := range recs {
			want[idOf(r)] = true
		}
		var again []*kgo.Record
		for len(want) > 0 && ctx.Err() == nil {
			for _, r := range s.pollSome(t, ctx, 4) {
				if want[idOf(r)] && r.DeliveryCount() >= 2 {
					delete(want, idOf(r))
					again = append(again, r)
				}
			}
		}
		if len(want) > 0 {
			t.Fatalf("%d records of the timed-out transaction not redelivered", len(want))
		}
		if err := s.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(again, client.Accept), s.md); err != nil {
			t.Fatalf("staging the redelivered records: %v", err)
		}
		if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records left after the redelivery committed", len(left))
		}
	})
}

func topicIDOf(t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	md, err := kadm.NewClient(cl).Metadata(ctxT(t, 30*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[topic].ID
}

// topMessage is the message sharetx puts beside a top-level code (on the
// partitions: the reference layout has no top-level message).
func topMessage(r *kip1289.TxnShareAcknowledgeResponse) string {
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == r.ErrorCode && p.ErrorMessage != nil {
				return *p.ErrorMessage
			}
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestKIP1289ClientAcksRejectMode: with kip1289.client_acks=reject a client's
// own acknowledgement of TX_PENDING records is answered INVALID_RECORD_STATE
// (the KIP's answer to explicit-mode misuse), and still never forwarded.
func TestKIP1289ClientAcksRejectMode(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.KIP1289.ClientAcks = "reject" })
		rec := &DialRecorder{}
		admin := p.NewClient(t, rec)
		in := createTopic(t, kadm.NewClient(admin), b, 1)
		produceN(t, admin, in, 5)
		group := Unique("reject")
		setShareAutoOffsetReset(t, admin, group)
		results := make(chan error, 100)
		consumer := p.NewClient(t, rec, kgo.ShareGroup(group), kgo.ConsumeTopics(in), kgo.FetchMaxWait(500*time.Millisecond),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) { results <- rs.Error() }))
		producer := newProducer(t, p, rec, kgo.TransactionalID(Unique("reject-txn")))
		ctx := ctxT(t, time.Minute)
		var recs []*kgo.Record
		for len(recs) == 0 && ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			recs = consumer.PollRecords(pctx, 5).Records()
			cancel()
		}
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(recs, client.Accept), client.NewShareGroupMetadata(group)); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		consumer.PollRecords(pctx, 1) // carries the implicit ACCEPT of recs
		cancel()
		var got error
		for got == nil {
			select {
			case got = <-results:
			case <-ctx.Done():
				t.Fatal("no acknowledgement result reached the client")
			}
		}
		if !errors.Is(got, kerr.InvalidRecordState) {
			t.Fatalf("client ack of TX_PENDING records: %v, want INVALID_RECORD_STATE", got)
		}
		if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return p.KIP().Stats().Pending == 0 })
	})
}

// TestKIP1289AnotherMembersOffsets: naming a member explicitly, offsets
// another member acquired are refused with INVALID_RECORD_STATE; with the
// member left to the proxy, each call stages for the member that acquired.
func TestKIP1289AnotherMembersOffsets(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 40)
		ctx := ctxT(t, 2*time.Minute)
		member := func(id string) *kgo.Client {
			return s.p.NewClient(t, s.rec, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in), kgo.ClientID(id),
				kgo.FetchMaxWait(500*time.Millisecond), kgo.ShareMaxRecords(5), kgo.ShareMaxRecordsStrict())
		}
		s.consumer.Close() // two members of our own, with small fetches
		memberA, memberB := member("member-a"), member("member-b")
		var mine, theirs []*kgo.Record
		for (len(mine) == 0 || len(theirs) == 0) && ctx.Err() == nil {
			if len(mine) == 0 {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				mine = memberA.PollRecords(pctx, 5).Records()
				cancel()
			}
			if len(theirs) == 0 {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				theirs = memberB.PollRecords(pctx, 5).Records()
				cancel()
			}
		}
		if len(mine) == 0 || len(theirs) == 0 {
			t.Fatal("both members need records")
		}
		dg, err := kadm.NewClient(s.admin).DescribeShareGroups(ctx, s.group)
		if err != nil {
			t.Fatal(err)
		}
		var a string
		var aEpoch int32
		for _, m := range dg[s.group].Members {
			if m.ClientID == "member-a" {
				a, aEpoch = m.MemberID, m.MemberEpoch
			}
		}
		if a == "" {
			t.Fatalf("member A not found in %+v", dg[s.group].Members)
		}
		if err := s.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		md := s.md
		md.MemberID, md.MemberEpoch = a, aEpoch // a member id comes with its current epoch
		err = s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(theirs, client.Accept), md)
		if !errors.Is(err, kerr.InvalidRecordState) {
			t.Fatalf("member A acknowledging member B's records: %v, want INVALID_RECORD_STATE", err)
		}
		if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf(mine, client.Accept), md); err != nil {
			t.Fatalf("member A acknowledging its own records: %v", err)
		}
		if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKIP1289CallsOfOneTransactionAppliedTogether: three records staged by
// three calls in one transaction (as an application that feeds a
// transaction from several polls stages each poll's part); at the commit
// the proxy applies them upstream in one acknowledgement of the member's
// session (the applier counts each request it made for a committed
// transaction), not one per call, and nothing is left to deliver.
func TestKIP1289CallsOfOneTransactionAppliedTogether(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newRefSetup(t, b, 3, 1)
		ctx := ctxT(t, 2*time.Minute)
		rc := s.client(t)
		recs := rc.pollUntil(t, ctx, 3)
		rc.beginAndStage(t, ctx, recs[:1], 1)
		m := rc.metadata(t, ctx)
		for i, r := range recs[1:] {
			if res := rc.stage(t, ctx, m, []*kgo.Record{r}, 1); res.code != 0 {
				t.Fatalf("TxnShareAcknowledge %d: %v (%s)", i+2, res.err(), res.message)
			}
		}
		before := s.p.KIP().Stats().Applied
		rc.endTxn(t, ctx, true)
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if got := s.p.KIP().Stats().Applied - before; got != 1 {
			t.Fatalf("the transaction's three calls took %d acknowledgements upstream, want 1", got)
		}
		s.nothingLeft(t, rc)
	})
}

// pollUntil polls until it holds n records.
func (rc *refClient) pollUntil(t *testing.T, ctx context.Context, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for len(recs) < n {
		recs = append(recs, rc.poll(t, ctx, n-len(recs))...)
	}
	return recs
}

// oneBatchSetup is a refSetup whose input holds n records written as one
// record batch: the broker hands them out as one acquired batch.
func oneBatchSetup(t *testing.T, b *Backend, n int, opts ...ProxyOpt) *refSetup {
	t.Helper()
	s := newRefSetupWith(t, b, "ref-group", func(adm *kadm.Client) string { return createTopic(t, adm, b, 1) }, 1, opts...)
	cl := s.p.NewClient(t, &DialRecorder{}, kgo.ManualFlushing(), kgo.DefaultProduceTopic(s.in))
	ctx := ctxT(t, time.Minute)
	var results []<-chan error
	for i := 0; i < n; i++ {
		done := make(chan error, 1)
		cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("value-%d", i))}, func(_ *kgo.Record, err error) { done <- err })
		results = append(results, done)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if err := <-r; err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// transact runs one transaction as an application does: an output record,
// recs' acknowledgements staged (ACCEPT), the outputs flushed, then franz-go's
// EndTransaction (commit or abort).
func (rc *refClient) transact(t *testing.T, ctx context.Context, recs []*kgo.Record, commit bool) {
	t.Helper()
	if err := rc.producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rc.producer.Produce(ctx, kgo.StringRecord("out"), nil)
	if res := rc.stage(t, ctx, rc.metadata(t, ctx), recs, 1); res.code != 0 {
		t.Fatalf("TxnShareAcknowledge: %v (%s)", res.err(), res.message)
	}
	if err := rc.producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rc.producer.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("EndTransaction(commit=%v): %v", commit, err)
	}
}

func wholeBatchWait(d time.Duration) ProxyOpt {
	return func(c *configs.Config) { c.KIP1289.WholeBatchWait = d }
}

// A transaction that commits part of an acquired batch leaves it with the
// proxy until the next transaction commits the rest: the broker takes the
// batch whole, in one acknowledgement (design.md §5.2, kip1289.whole_batch_wait).
func TestKIP1289PartOfABatchWaitsForTheRest(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := oneBatchSetup(t, b, 200, wholeBatchWait(5*time.Second)) // the next commit comes well within it
		ctx := ctxT(t, 2*time.Minute)
		rc := s.client(t)
		recs := rc.pollUntil(t, ctx, 200)
		before := s.p.KIP().Stats()
		rc.transact(t, ctx, recs[:120], true)
		if st := s.p.KIP().Stats(); st.Pending != 120 || st.Applied != before.Applied {
			t.Fatalf("after the first commit: %d pending, %d acknowledgements applied; want 120 pending (held for the rest of the batch), none applied", st.Pending, st.Applied-before.Applied)
		}
		rc.transact(t, ctx, recs[120:], true)
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		st := s.p.KIP().Stats()
		if got := st.Applied - before.Applied; got != 1 {
			t.Fatalf("two transactions over one acquired batch took %d acknowledgements upstream, want 1 (the batch whole)", got)
		}
		if st.HoldsCompleted-before.HoldsCompleted != 1 || st.HoldsExpired != before.HoldsExpired {
			t.Fatalf("holds: %v completed, %v expired; want 1 completed, none expired", st.HoldsCompleted-before.HoldsCompleted, st.HoldsExpired-before.HoldsExpired)
		}
		s.nothingLeft(t, rc)
	})
}

// A held part whose batch is not completed within the wait goes upstream on
// its own; a transaction that aborts sends what is held of its batches at
// once. Either way every committed record is acknowledged.
func TestKIP1289PartOfABatchAfterTheWaitOrAnAbort(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := oneBatchSetup(t, b, 300, wholeBatchWait(200*time.Millisecond))
		ctx := ctxT(t, 2*time.Minute)
		rc := s.client(t)
		recs := rc.pollUntil(t, ctx, 300)
		before := s.p.KIP().Stats()
		rc.transact(t, ctx, recs[:100], true)
		Wait(t, 30*time.Second, "the held part sent after the wait", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if st := s.p.KIP().Stats(); st.HoldsExpired-before.HoldsExpired != 1 || st.Applied-before.Applied != 1 {
			t.Fatalf("after the wait: %v holds expired, %d acknowledgements applied; want 1 and 1", st.HoldsExpired-before.HoldsExpired, st.Applied-before.Applied)
		}

		// Held again (100 of the 200 left), then a transaction over the
		// last 100 aborts: the held part goes at once, not after the wait.
		s.p.KIP().Resolver().HoldBatches(time.Hour)
		rc.transact(t, ctx, recs[100:200], true)
		// The commit's part is held off the resolver's goroutine; an
		// abort flushed before that would leave nothing to hold (unit
		// test TestBatchHoldReleasedBatchIsNotHeld), not what this tests.
		Wait(t, 30*time.Second, "the committed part held", func() bool { return s.p.KIP().Resolver().HeldParts() == 1 })
		rc.transact(t, ctx, recs[200:], false)
		Wait(t, 30*time.Second, "the held part sent at the abort", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if st := s.p.KIP().Stats(); st.HoldsAborted-before.HoldsAborted != 1 {
			t.Fatalf("%v holds ended by the abort, want 1", st.HoldsAborted-before.HoldsAborted)
		}
		// The aborted hundred come back, offset by offset; committed, they
		// complete nothing held.
		again := rc.pollUntil(t, ctx, 100)
		rc.transact(t, ctx, again, true)
		s.nothingLeft(t, rc)
	})
}

// A proxy killed while it holds the committed part of a batch leaves it as
// any committed, unapplied acknowledgement: the broker redelivers the
// records, and the restarted proxy, reading the shadow topic back,
// acknowledges them itself; the application never sees them again.
func TestKIP1289HeldPartOfABatchSurvivesAProxyKill(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := oneBatchSetup(t, b, 200)
		s.p.KIP().Resolver().HoldBatches(time.Hour) // held until the kill, however slow the machine
		ctx := ctxT(t, 3*time.Minute)
		rc := s.client(t)
		recs := rc.pollUntil(t, ctx, 200)
		rc.transact(t, ctx, recs[:120], true)
		committed := map[int64]bool{}
		for _, r := range recs[:120] {
			committed[r.Offset] = true
		}
		if st := s.p.KIP().Stats(); st.Pending != 120 || st.Applied != 0 {
			t.Fatalf("before the kill: %d pending, %d applied; want the 120 committed records held", st.Pending, st.Applied)
		}

		s.p.Kill()
		rc.consumer.Close() // its application died with the pod's proxy
		restarted := StartProxy(t, b.Seeds, OnAddrsOf(s.p))
		consumer := restarted.NewClient(t, &DialRecorder{}, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in), kgo.FetchMaxWait(500*time.Millisecond))
		got := 0
		for got < 80 || restarted.KIP().Resolver().Redelivered("committed") < 120 {
			if ctx.Err() != nil {
				t.Fatalf("after the kill: %d of the 80 uncommitted records delivered, %v committed ones acknowledged by the restarted proxy", got, restarted.KIP().Resolver().Redelivered("committed"))
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := consumer.PollRecords(pctx, 200)
			cancel()
			for _, r := range fs.Records() {
				if committed[r.Offset] {
					t.Fatalf("offset %d was handed to the application again although its acknowledgement committed (held by the killed proxy)", r.Offset)
				}
				r.Ack(kgo.AckAccept)
				got++
			}
		}
		if got != 80 {
			t.Fatalf("%d records delivered after the kill, want the 80 never staged", got)
		}
		consumer.Close() // its last acknowledgements go with the leave
		Wait(t, 30*time.Second, "nothing pending", func() bool { return restarted.KIP().Stats().Pending == 0 })
		if left := freshMemberGets(t, b, s.group, s.in, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records still to be delivered (first: offset %d)", len(left), left[0].Offset)
		}
	})
}
