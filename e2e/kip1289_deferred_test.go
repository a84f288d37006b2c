package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/kip1289"
)

// deferStage sends recs' acknowledgements (one type for all) in the
// producer's open transaction as the reference client's stage does, one
// request per partition, with sharetx's Defer extension when deferred
// (docs/protocol.md): checked and held back, nothing written.
func (rc *refClient) deferStage(t *testing.T, ctx context.Context, m refMember, recs []*kgo.Record, ty int8, deferred bool) refResult {
	t.Helper()
	pid, epoch, err := rc.producer.ProducerID(ctx)
	if err != nil {
		t.Fatalf("producer id: %v", err)
	}
	for _, p := range refPartitions(rc.topicIDs, recs, ty) {
		req := kip1289.TxnShareAcknowledgeRequest{TransactionalID: &rc.txnID, GroupID: m.group, ProducerID: pid, ProducerEpoch: epoch,
			MemberID: m.member, MemberEpoch: m.epoch, Defer: deferred}
		tp := kip1289.TxnShareAcknowledgePartition{Partition: p.partition}
		for _, b := range p.batches {
			tp.AcknowledgementBatches = append(tp.AcknowledgementBatches, kip1289.TxnShareAcknowledgeBatch{FirstOffset: b.first, LastOffset: b.last, AcknowledgeTypes: b.types})
		}
		req.Topics = []kip1289.TxnShareAcknowledgeTopic{{TopicID: p.topic, Partitions: []kip1289.TxnShareAcknowledgePartition{tp}}}
		if res := refSend(t, rc.leaderAddr(t, ctx, p), req.AppendTo(nil)); res.code != 0 {
			return res
		}
	}
	return refResult{}
}

// mustDefer is deferStage that fails the test on a refusal.
func (rc *refClient) mustDefer(t *testing.T, ctx context.Context, m refMember, recs []*kgo.Record, deferred bool) {
	t.Helper()
	if res := rc.deferStage(t, ctx, m, recs, 1, deferred); res.code != 0 {
		t.Fatalf("TxnShareAcknowledge (Defer %v): %v (%s)", deferred, res.err(), res.message)
	}
}

// A transaction over two polls, as the Python library runs one: each
// poll's acknowledgements deferred before the next poll (whose implicit
// acknowledgement of them the proxy holds back), then all of them staged by
// the transaction's last call, in one shadow record, and committed: every
// record acknowledged, none delivered again.
func TestKIP1289DeferredCallsStagedByTheLast(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newRefSetup(t, b, 6, 1)
		ctx := ctxT(t, 2*time.Minute)
		rc := s.client(t)
		first := rc.poll(t, ctx, 3)
		if err := rc.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		rc.producer.Produce(ctx, kgo.StringRecord("out"), nil)
		m := rc.metadata(t, ctx)
		writes := s.p.KIP().Stats()
		rc.mustDefer(t, ctx, m, first, true)
		before := s.p.KIP().Stats().AbsorbedAcks
		// The next poll acknowledges the first one's records implicitly.
		second := rc.pollUntil(t, ctx, 6-len(first))
		Wait(t, 10*time.Second, "the implicit acknowledgement of the deferred records to be absorbed", func() bool {
			return s.p.KIP().Stats().AbsorbedAcks >= before+float64(len(first))
		})
		rc.mustDefer(t, ctx, m, second, true)
		if p := s.p.KIP().Stats().Pending; p != 6 {
			t.Fatalf("%d records held after two deferred calls, want 6", p)
		}
		all := append(append([]*kgo.Record(nil), first...), second...)
		rc.mustDefer(t, ctx, m, all, false)
		if err := rc.producer.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rc.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		after := s.p.KIP().Stats()
		if got := after.Committed - writes.Committed; got != 1 {
			t.Fatalf("%v staged calls resolved as committed, want 1: the last call staged the deferred ones", got)
		}
		s.nothingLeft(t, rc)
	})
}

// What a deferred call held and no call of its transaction staged is not in
// the transaction: released when it ends, committed or aborted, and
// delivered again.
func TestKIP1289DeferredNotStagedIsReleased(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newRefSetup(t, b, 4, 1)
		ctx := ctxT(t, 2*time.Minute)
		rc := s.client(t)
		recs := rc.pollUntil(t, ctx, 4)
		for _, commit := range []bool{true, false} {
			if err := rc.producer.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			rc.producer.Produce(ctx, kgo.StringRecord("out"), nil)
			rc.mustDefer(t, ctx, rc.metadata(t, ctx), recs, true)
			// The member's own acknowledgement, held back.
			before := s.p.KIP().Stats().AbsorbedAcks
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			rc.consumer.PollRecords(pctx, 1)
			cancel()
			Wait(t, 10*time.Second, "the implicit acknowledgement to be absorbed", func() bool {
				return s.p.KIP().Stats().AbsorbedAcks >= before+float64(len(recs))
			})
			if err := rc.producer.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rc.producer.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
			Wait(t, 10*time.Second, "nothing held", func() bool { return s.p.KIP().Stats().Pending == 0 })
			// Released at once (not at the end of their lock): delivered
			// again well within it.
			start := time.Now()
			recs = rc.pollUntil(t, ctx, 4)
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("commit=%v: redelivered after %v, not released at the transaction's end", commit, d)
			}
		}
		// Delivered again, now acknowledged for good.
		rc.transact(t, ctx, recs, true)
		s.nothingLeft(t, rc)
	})
}
