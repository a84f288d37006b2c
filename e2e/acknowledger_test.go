package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/configs"
)

// requestCounter is a kgo hook counting the requests a client writes, by key.
type requestCounter struct {
	mu sync.Mutex
	n  map[int16]int
}

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int16]int{}
	}
	c.n[key]++
}

// txnRequests counts what a transaction sends: InitProducerId, Produce,
// AddPartitionsToTxn, EndTxn and TxnShareAcknowledge.
func (c *requestCounter) txnRequests() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for key, name := range map[int16]string{int16(kmsg.InitProducerID): "InitProducerId", int16(kmsg.Produce): "Produce",
		int16(kmsg.AddPartitionsToTxn): "AddPartitionsToTxn", int16(kmsg.EndTxn): "EndTxn", 95: "TxnShareAcknowledge"} {
		if c.n[key] > 0 {
			out[name] = c.n[key]
		}
	}
	return out
}

// acknowledgerProducer is a transactional producer through the setup's
// proxy, for a TransactionalShareAcknowledger; reqs counts what it sends.
func (s *kipSetup) acknowledgerProducer(t *testing.T, txnID string, reqs *requestCounter) *client.Producer {
	opts := []kgo.Opt{kgo.TransactionalID(txnID)}
	if reqs != nil {
		opts = append(opts, kgo.WithHooks(reqs))
	}
	return newProducer(t, s.p, s.rec, opts...)
}

func newAcknowledger(t *testing.T, producer *client.Producer, md client.ShareGroupMetadata) *client.TransactionalShareAcknowledger {
	t.Helper()
	a, err := client.NewTransactionalShareAcknowledger(producer, md)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

type recordID struct {
	partition int32
	offset    int64
}

func idOf(r *kgo.Record) recordID { return recordID{r.Partition, r.Offset} }

func idsOf(recs []*kgo.Record) map[recordID]bool {
	out := make(map[recordID]bool, len(recs))
	for _, r := range recs {
		out[idOf(r)] = true
	}
	return out
}

// newKIPSetupWith is newKIPSetup in front of a proxy started with opts.
func newKIPSetupWith(t *testing.T, b *Backend, inputs int, opts ...ProxyOpt) *kipSetup {
	t.Helper()
	return newKIPSetupOn(t, b, StartProxy(t, b.Seeds, opts...), inputs, 2)
}

// pollBack polls until every record of want has been delivered again
// (delivery count >= 2), failing after within: a record that does not come
// back by then was acknowledged (or is held until its lock expires, which
// the bound stays under). It returns the records of the last poll, which
// the caller must acknowledge or release before polling again.
func (s *kipSetup) pollBack(t *testing.T, want map[recordID]bool, within time.Duration, seen func(r *kgo.Record)) []*kgo.Record {
	t.Helper()
	back := map[recordID]bool{}
	deadline := time.Now().Add(within)
	var last []*kgo.Record
	for len(back) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d records were delivered again within %s", len(back), len(want), within)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs := s.consumer.PollRecords(ctx, 100).Records()
		cancel()
		if len(recs) == 0 {
			continue
		}
		last = recs
		for _, r := range recs {
			if seen != nil {
				seen(r)
			}
			if want[idOf(r)] && r.DeliveryCount() >= 2 {
				back[idOf(r)] = true
			}
		}
	}
	return last
}

// TestAcknowledgerCheckpointsCommit: a stream processor without Kafka output
// acknowledges what it processed, stages the acknowledgements before every
// poll (Flush) and commits them every third poll, its "checkpoint". No record
// is delivered twice, the consumer's implicit ACCEPT of staged records is
// held back by the proxy, and the broker acknowledged every input (a fresh
// consumer gets nothing): the commits were applied.
func TestAcknowledgerCheckpointsCommit(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		const inputs = 60
		s := newKIPSetup(t, b, inputs)
		ctx := ctxT(t, 3*time.Minute)
		a := newAcknowledger(t, s.producer, s.md)
		seen := map[string]bool{}
		polls, commits, rejected := 0, 0, 0
		for len(seen) < inputs {
			if ctx.Err() != nil {
				t.Fatalf("only %d of %d inputs polled", len(seen), inputs)
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			recs := s.consumer.PollRecords(pctx, 7).Records()
			cancel()
			if len(recs) == 0 {
				continue
			}
			polls++
			for _, r := range recs {
				key := string(r.Key)
				if seen[key] {
					t.Fatalf("input %s was delivered again after its acknowledgement was staged", key)
				}
				seen[key] = true
				ty := client.Accept
				if len(seen)%9 == 0 {
					ty, rejected = client.Reject, rejected+1 // a poison record
				}
				if err := a.Acknowledge(r, ty); err != nil {
					t.Fatal(err)
				}
			}
			// Before the next poll: the implicit ACCEPT it carries must
			// find these records staged.
			if err := a.Flush(ctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			if polls%3 == 0 {
				if err := a.Commit(ctx); err != nil {
					t.Fatalf("checkpoint commit: %v", err)
				}
				commits++
			}
		}
		if err := a.Commit(ctx); err != nil {
			t.Fatalf("final commit: %v", err)
		}
		commits++
		if n := a.Len(); n != 0 {
			t.Fatalf("%d acknowledgements left after the final commit", n)
		}
		kip := s.p.KIP()
		Wait(t, 30*time.Second, "every committed acknowledgement applied", func() bool { return kip.Stats().Pending == 0 })
		st := kip.Stats()
		// One shadow record per Flush, each resolved as committed.
		if st.Committed < float64(polls) || st.Aborted != 0 {
			t.Fatalf("the proxy resolved %v staged calls as committed and %v as aborted, want %d and 0", st.Committed, st.Aborted, polls)
		}
		if st.AbsorbedAcks == 0 {
			t.Error("no implicit ACCEPT of a staged record was held back: Flush did not protect the records across polls")
		}
		if st.ApplyFailures != 0 {
			t.Errorf("%v committed acknowledgements failed upstream", st.ApplyFailures)
		}
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d inputs delivered again after their acknowledgements were committed", len(left))
		}
		t.Logf("%s: %d inputs in %d polls, %d commits (%d rejected); implicit acks held back %v", b.Name, inputs, polls, commits, rejected, st.AbsorbedAcks)
		s.rec.AssertOnlyProxy(t, s.p)
	})
}

// TestAcknowledgerAbortLeavesRecordsRedeliverable: Abort of buffered
// acknowledgements releases the records, which come back at once; Abort of
// staged ones whose implicit ACCEPT the consumer already sent leaves them
// unacknowledged at the broker (redelivered when the member goes away).
func TestAcknowledgerAbortLeavesRecordsRedeliverable(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 10)
		ctx := ctxT(t, 2*time.Minute)
		a := newAcknowledger(t, s.producer, s.md)

		// Buffered only: Abort releases them.
		first := s.pollSome(t, ctx, 10)
		if err := a.AcknowledgeAll(first, client.Accept); err != nil {
			t.Fatal(err)
		}
		if err := a.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if n := a.Len(); n != 0 {
			t.Fatalf("%d acknowledgements left after Abort", n)
		}
		// Well within the acquisition lock (30 s): released, not expired.
		last := s.pollBack(t, idsOf(first), 15*time.Second, nil)

		// Staged, then the implicit ACCEPT, then Abort.
		if err := a.AcknowledgeAll(last, client.Accept); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		kip := s.p.KIP()
		if p := kip.Stats().Pending; p != len(last) {
			t.Fatalf("%d records staged, want %d", p, len(last))
		}
		before := kip.Stats().AbsorbedAcks
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		next := s.consumer.PollRecords(pctx, 100).Records() // carries the implicit ACCEPT of last
		cancel()
		Wait(t, 10*time.Second, "the implicit ACCEPT of the staged records to be held back", func() bool {
			return kip.Stats().AbsorbedAcks >= before+float64(len(last))
		})
		if err := a.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		Wait(t, 30*time.Second, "the aborted records to be ACQUIRED again", func() bool { return kip.Stats().Pending == 0 })
		client.ReleaseForRedelivery(next...)
		back := map[recordID]bool{}
		for _, r := range s.remaining(t, b, 3*time.Second) {
			back[idOf(r)] = true
		}
		for id := range idsOf(last) {
			if !back[id] {
				t.Errorf("record %d@%d was acknowledged although its transaction aborted", id.offset, id.partition)
			}
		}
	})
}

// TestAcknowledgerFailedCommitRetried: a Commit the proxy refuses for a
// transient reason (its TX_PENDING limit, held by another transaction) fails
// with ErrRetriable and keeps the acknowledgement; the record stays acquired
// and unstaged, so the retry commits it once the limit frees up, and it is
// never delivered again. On kfake, a commit whose EndTxn fails is retried the
// same way.
func TestAcknowledgerFailedCommitRetried(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetupWith(t, b, 20, func(c *configs.Config) { c.KIP1289.MaxPendingRecords = 1 })
		ctx := ctxT(t, 2*time.Minute)
		recs := s.pollSome(t, ctx, 20)
		if len(recs) < 2 {
			t.Fatalf("the first poll returned %d record(s); the test needs two", len(recs))
		}
		mine, blocking := recs[0], recs[1]
		ackTxn := Unique("acker")
		a := newAcknowledger(t, s.acknowledgerProducer(t, ackTxn, nil), s.md)
		kip := s.p.KIP()

		// Another transaction holds the only TX_PENDING slot.
		if err := s.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := s.producer.SendShareAcknowledgementsToTransaction(ctx, acksOf([]*kgo.Record{blocking}, client.Accept), s.md); err != nil {
			t.Fatal(err)
		}
		if err := a.Acknowledge(mine, client.Accept); err != nil {
			t.Fatal(err)
		}
		err := a.Commit(ctx)
		if !errors.Is(err, client.ErrRetriable) || !errors.Is(err, kerr.TransactionAbortable) {
			t.Fatalf("commit over the TX_PENDING limit: %v, want ErrRetriable (TRANSACTION_ABORTABLE)", err)
		}
		var te *client.TransactionError
		if !errors.As(err, &te) || te.Kept != 1 || a.Len() != 1 {
			t.Fatalf("%v: the acknowledgement must be kept (Len %d)", err, a.Len())
		}
		if p := kip.Stats().Pending; p != 1 {
			t.Fatalf("%d records staged after the failed commit, want only the other transaction's", p)
		}

		// The other transaction aborts and releases its record.
		if err := s.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		client.ReleaseForRedelivery(blocking)
		Wait(t, 30*time.Second, "the other transaction's record to be ACQUIRED again", func() bool { return kip.Stats().Pending == 0 })
		if err := a.Commit(ctx); err != nil {
			t.Fatalf("retry: %v", err)
		}
		Wait(t, 30*time.Second, "the retried commit applied", func() bool { return kip.Stats().Pending == 0 })

		committed := map[recordID]bool{idOf(mine): true}
		back := map[recordID]bool{idOf(blocking): true}

		if b.Fake != nil && len(recs) >= 3 {
			// EndTxn itself fails once: retriable; the acknowledgement was
			// staged in the aborted transaction, so it is not kept: the
			// proxy released the record, which comes back.
			third := recs[2]
			fault := b.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: ackTxn, TopLevel: true, Err: kerr.TransactionAbortable,
				When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }})
			if err := a.Acknowledge(third, client.Reject); err != nil {
				t.Fatal(err)
			}
			err := a.Commit(ctx)
			if !errors.As(err, &te) || !errors.Is(err, client.ErrRetriable) || !errors.Is(err, kerr.TransactionAbortable) || fault.Hits() != 1 || a.Len() != 0 ||
				len(te.Released) != 1 || te.Released[0] != third {
				t.Fatalf("commit whose EndTxn fails: %v (%d faults, Len %d), want ErrRetriable with the staged acknowledgement Released", err, fault.Hits(), a.Len())
			}
			Wait(t, 30*time.Second, "the aborted record released", func() bool { return kip.Stats().Pending == 0 })
			back[idOf(third)] = true
		}

		// The aborted records come back; the committed ones never do.
		s.pollBack(t, back, 15*time.Second, func(r *kgo.Record) {
			if committed[idOf(r)] {
				t.Fatalf("record %d@%d delivered again after its acknowledgement was committed", r.Offset, r.Partition)
			}
		})
		for _, r := range s.remaining(t, b, 3*time.Second) {
			if committed[idOf(r)] {
				t.Fatalf("record %d@%d delivered again after its acknowledgement was committed", r.Offset, r.Partition)
			}
		}
	})
}

// TestAcknowledgerFencedIsTerminal: an acknowledger whose producer is fenced
// by a newer instance with the same transactional id (a zombie) gets a
// terminal error at its next Commit and sends nothing more; the
// acknowledgements it had staged went with the transaction the coordinator
// aborted (Released: the proxy released the records), and the new instance
// then processes and commits them, and the broker acknowledged every one.
func TestAcknowledgerFencedIsTerminal(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 6)
		ctx := ctxT(t, 2*time.Minute)
		txnID := Unique("fenced")
		reqs := &requestCounter{}
		zombie := newAcknowledger(t, s.acknowledgerProducer(t, txnID, reqs), s.md)
		recs := s.pollSome(t, ctx, 6)
		if err := zombie.AcknowledgeAll(recs, client.Accept); err != nil {
			t.Fatal(err)
		}
		if err := zombie.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		kip := s.p.KIP()
		if p := kip.Stats().Pending; p != len(recs) {
			t.Fatalf("%d staged, want %d", p, len(recs))
		}

		// The new instance initializes: the coordinator fences the zombie
		// and aborts its transaction; the proxy releases the records.
		freshProducer := s.acknowledgerProducer(t, txnID, nil)
		if _, _, err := freshProducer.Client().ProducerID(ctx); err != nil {
			t.Fatal(err)
		}
		Wait(t, 60*time.Second, "the fenced transaction's records released", func() bool { return kip.Stats().Pending == 0 })

		err := zombie.Commit(ctx)
		if !errors.Is(err, client.ErrTerminal) || errors.Is(err, client.ErrRetriable) {
			t.Fatalf("zombie commit: %v, want ErrTerminal", err)
		}
		t.Logf("%s: zombie commit: %v (ErrFenced: %v)", b.Name, err, errors.Is(err, client.ErrFenced))
		// Staged in the aborted transaction: not kept, Released.
		var te *client.TransactionError
		if !errors.As(err, &te) || zombie.Len() != 0 || len(te.Released) != len(recs) {
			t.Fatalf("the zombie kept %d acknowledgements and released %d, want 0 and %d", zombie.Len(), len(te.Released), len(recs))
		}
		sent := reqs.txnRequests()
		if again := zombie.Commit(ctx); again != err {
			t.Fatalf("second zombie commit: %v, want the same terminal error", again)
		}
		if again := zombie.Acknowledge(recs[0], client.Accept); !errors.Is(again, client.ErrTerminal) {
			t.Fatalf("zombie Acknowledge: %v", again)
		}
		if after := reqs.txnRequests(); fmt.Sprint(after) != fmt.Sprint(sent) {
			t.Fatalf("the terminal acknowledger sent more: %v, then %v", sent, after)
		}
		if err := zombie.Close(ctx); err != nil {
			t.Logf("zombie close: %v", err)
		}
		if err := zombie.Commit(ctx); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("commit after Close: %v", err)
		}

		// The proxy released them: the new instance gets them again, and
		// processes them as an application should, staging each poll's
		// acknowledgements before the next poll.
		fresh := newAcknowledger(t, freshProducer, s.md)
		want := idsOf(recs)
		back := map[recordID]bool{}
		deadline := time.Now().Add(15 * time.Second) // well within the 30 s lock: released, not expired
		for len(back) < len(want) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d records the zombie held were delivered again", len(back), len(want))
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			polled := s.consumer.PollRecords(pctx, 100).Records()
			cancel()
			for _, r := range polled {
				if want[idOf(r)] && r.DeliveryCount() >= 2 {
					back[idOf(r)] = true
				}
			}
			if err := fresh.AcknowledgeAll(polled, client.Accept); err != nil {
				t.Fatal(err)
			}
			if err := fresh.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := fresh.Commit(ctx); err != nil {
			t.Fatalf("the new instance's commit: %v", err)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return kip.Stats().Pending == 0 })
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records delivered again after the new instance committed them", len(left))
		}
	})
}

// TestAcknowledgerEmptyCommitSendsNothing: Commit, Flush and Abort with
// nothing buffered send no request (not even InitProducerId); a Commit with
// something buffered sends its transaction and is applied, and the empty
// Commit after it sends nothing again.
func TestAcknowledgerEmptyCommitSendsNothing(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		s := newKIPSetup(t, b, 4)
		ctx := ctxT(t, 2*time.Minute)
		reqs := &requestCounter{}
		a := newAcknowledger(t, s.acknowledgerProducer(t, Unique("empty"), reqs), s.md)
		nothing := func(when string) {
			t.Helper()
			before := reqs.txnRequests()
			for _, fn := range []func(context.Context) error{a.Commit, a.Flush, a.Abort, a.Commit} {
				if err := fn(ctx); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
			}
			if after := reqs.txnRequests(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("%s: the empty calls sent %v (before: %v)", when, after, before)
			}
		}
		nothing("before any transaction")
		if got := reqs.txnRequests(); len(got) != 0 {
			t.Fatalf("sent %v for nothing", got)
		}
		if p := s.p.KIP().Stats(); p.Committed != 0 || p.Aborted != 0 {
			t.Fatalf("the proxy resolved %v commits and %v aborts for nothing", p.Committed, p.Aborted)
		}

		// All four, over as many polls as the broker needs (one per
		// partition on a real one), staged before each next poll.
		for n := 0; n < 4; {
			recs := s.pollSome(t, ctx, 4)
			if err := a.AcknowledgeAll(recs, client.Accept); err != nil {
				t.Fatal(err)
			}
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			n += len(recs)
		}
		if err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got := reqs.txnRequests()
		if got["EndTxn"] == 0 || got["TxnShareAcknowledge"] == 0 || got["Produce"] == 0 {
			t.Fatalf("a commit with acknowledgements sent %v: want TxnShareAcknowledge, the touch Produce and EndTxn", got)
		}
		nothing("after a commit")
		Wait(t, 30*time.Second, "applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
		if left := s.remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records delivered again after their commit", len(left))
		}
	})
}
