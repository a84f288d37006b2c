package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

// The acknowledger's failures: each kind of TransactionError, and what it
// keeps, drops and releases.

func wantTouches(cl *Producer, tv2, tv1 int) int {
	if cl.tv2 {
		return tv2
	}
	return tv1 // without transaction version 2 every TxnShareAcknowledge touches
}

// TestAcknowledgerRetriable: a transient refusal (the proxy's TX_PENDING
// limit: TRANSACTION_ABORTABLE) aborts the transaction, including what an
// earlier Flush staged in it (released by the proxy for redelivery: in
// Released, no longer kept), keeps the acknowledgements it could not stage,
// and a retry commits them.
func TestAcknowledgerRetriable(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	ctx := context.Background()
	names := namesOf(t, cl)
	aborts := observeEndTxn(c, false)

	if err := a.Acknowledge(rec("in", 0, 5), Accept); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.AcknowledgeAll([]*kgo.Record{rec("in", 1, 3), rec("in2", 0, 9)}, Reject)
	f.setAnswer(func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
		return topLevelError(kerr.TransactionAbortable.Code, "sharetx: the TX_PENDING limit is reached")
	})
	err := a.Commit(ctx)
	if !errors.Is(err, ErrRetriable) || errors.Is(err, ErrRejected) || errors.Is(err, ErrTerminal) || !errors.Is(err, kerr.TransactionAbortable) {
		t.Fatalf("Commit: %v, want ErrRetriable wrapping TRANSACTION_ABORTABLE", err)
	}
	te := asTxnError(t, err)
	if te.Op != "commit" || te.Kept != 2 || len(te.Dropped) != 0 || len(te.Released) != 1 || te.Released[0].Offset != 5 || te.MaybeCommitted || te.AbortErr != nil || a.Len() != 2 {
		t.Fatalf("%+v, Len %d", te, a.Len())
	}
	if !strings.Contains(err.Error(), "(retriable; 2 acknowledgement(s) kept)") {
		t.Fatalf("message: %v", err)
	}
	if aborts.Hits() != 1 {
		t.Fatalf("%d EndTxn aborts, want 1", aborts.Hits())
	}
	if n := len(touches(t, c)); n != 0 {
		t.Fatalf("%d committed touch records: the failed transaction was not aborted", n)
	}

	f.setAnswer(nil)
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if got := strings.Join(offsetsOf(reqs[len(reqs)-1:], names), " "); got != "in2[0]@9=3 in[1]@3=3" {
		t.Fatalf("the retry staged %s", got)
	}
	if a.Len() != 0 || len(touches(t, c)) != 1 {
		t.Fatalf("Len %d, touches %d", a.Len(), len(touches(t, c)))
	}
}

// TestAcknowledgerRejected: acknowledgements the proxy refuses per
// partition are dropped (and released), the rest kept and committed by the
// retry.
func TestAcknowledgerRejected(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	ctx := context.Background()
	names := namesOf(t, cl)
	ids := topicIDs(t, cl, "in")
	bad1, bad2 := rec("in", 1, 10), rec("in", 1, 12)
	a.AcknowledgeAll([]*kgo.Record{bad1, bad2, rec("in", 0, 3), rec("in2", 2, 7)}, Accept)
	msg := "offset 10 is not acquired by the member"
	f.setAnswer(func(req *kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
		resp := &kip1289.TxnShareAcknowledgeResponse{}
		for _, tp := range req.Topics {
			rt := kip1289.TxnShareAcknowledgeResponseTopic{TopicID: tp.TopicID}
			for _, p := range tp.Partitions {
				rp := kip1289.TxnShareAcknowledgeResponsePartition{Partition: p.Partition, ErrorCode: kerr.OperationNotAttempted.Code}
				if tp.TopicID == ids["in"] && p.Partition == 1 {
					rp.ErrorCode, rp.ErrorMessage = kerr.InvalidRecordState.Code, &msg
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	})
	err := a.Commit(ctx)
	var pes *PartitionErrors
	if !errors.Is(err, ErrRejected) || errors.Is(err, ErrRetriable) || !errors.Is(err, kerr.InvalidRecordState) || !errors.As(err, &pes) {
		t.Fatalf("Commit: %v, want ErrRejected with *PartitionErrors", err)
	}
	te := asTxnError(t, err)
	if te.Kept != 2 || a.Len() != 2 || len(te.Dropped) != 2 {
		t.Fatalf("kept %d, Len %d, dropped %d", te.Kept, a.Len(), len(te.Dropped))
	}
	dropped := map[*kgo.Record]bool{te.Dropped[0]: true, te.Dropped[1]: true}
	if !dropped[bad1] || !dropped[bad2] {
		t.Fatalf("dropped %v, want in[1]@10 and in[1]@12", te.Dropped)
	}
	f.setAnswer(nil)
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if got := strings.Join(offsetsOf(reqs[len(reqs)-1:], names), " "); got != "in2[2]@7=1 in[0]@3=1" {
		t.Fatalf("the retry staged %s", got)
	}
}

// TestAcknowledgerEndTxnFails: the commit itself fails. A definitive
// TRANSACTION_ABORTABLE and an UNKNOWN_SERVER_ERROR whose outcome is unknown
// are both retriable; the transaction is aborted, and the acknowledgements,
// all staged in it, are Released (the proxy releases their records for
// redelivery), not kept: the retry has nothing to send.
func TestAcknowledgerEndTxnFails(t *testing.T) {
	for _, tc := range []struct {
		err   *kerr.Error
		maybe bool
	}{
		{kerr.TransactionAbortable, false},
		{kerr.UnknownServerError, true},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			c := newCluster(t, 3)
			f := &fakeSharetx{key: 95}
			cl := newProducer(t, c, f)
			a := newAcknowledger(t, cl)
			ctx := context.Background()
			a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 1), rec("in", 0, 2)}, Accept)
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: testTxnID, TopLevel: true, Err: tc.err,
				When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }})
			err := a.Commit(ctx)
			if !errors.Is(err, ErrRetriable) || !errors.Is(err, tc.err) {
				t.Fatalf("Commit: %v, want ErrRetriable wrapping %v", err, tc.err)
			}
			te := asTxnError(t, err)
			if fault.Hits() != 1 || te.MaybeCommitted != tc.maybe || te.Kept != 0 || len(te.Released) != 2 || te.AbortErr != nil {
				t.Fatalf("%d faults, %+v", fault.Hits(), te)
			}
			if n := len(touches(t, c)); n != 0 {
				t.Fatalf("%d touch records committed by a failed commit", n)
			}
			if err := a.Commit(ctx); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if a.Len() != 0 || len(touches(t, c)) != 0 || len(f.requests()) != 1 {
				t.Fatalf("after the retry: Len %d, %d touches, %d requests", a.Len(), len(touches(t, c)), len(f.requests()))
			}
		})
	}
}

// TestAcknowledgerFenced: a producer fenced by a newer instance with the same
// transactional id gets ErrFenced, a terminal error: the acknowledgements are
// kept, nothing is sent again, every later call fails the same way until
// Close. Also when it is the proxy that answers PRODUCER_FENCED.
func TestAcknowledgerFenced(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fenceFirst bool // the new instance initializes before the zombie stages anything
	}{{"while staged", false}, {"before staging", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			f := &fakeSharetx{key: 95}
			zombie := newProducer(t, c, f)
			a := newAcknowledger(t, zombie)
			ctx := context.Background()
			if _, _, err := zombie.Client().ProducerID(ctx); err != nil {
				t.Fatal(err)
			}
			fence := func() {
				fresh := newProducer(t, c, f)
				if _, _, err := fresh.Client().ProducerID(ctx); err != nil { // InitProducerId: fences the zombie
					t.Fatal(err)
				}
			}
			a.AcknowledgeAll([]*kgo.Record{rec("in", 0, 1), rec("in", 0, 2)}, Accept)
			if tc.fenceFirst {
				fence()
			} else {
				if err := a.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				fence()
			}
			obs := observeTxn(c)
			err := a.Commit(ctx)
			if !errors.Is(err, ErrTerminal) || errors.Is(err, ErrRetriable) || errors.Is(err, ErrRejected) {
				t.Fatalf("zombie Commit: %v, want ErrTerminal", err)
			}
			// The coordinator names the fencing (PRODUCER_FENCED, or
			// INVALID_PRODUCER_EPOCH to a produce), except that kfake
			// answers a zombie's EndTxn INVALID_TXN_STATE.
			named := errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
			if named != errors.Is(err, ErrFenced) || tc.fenceFirst && !named {
				t.Fatalf("zombie Commit: %v: ErrFenced %v", err, errors.Is(err, ErrFenced))
			}
			te := asTxnError(t, err)
			// Staged before the fencing: the aborted transaction took them
			// (Released); not staged yet: kept.
			kept := 0
			if tc.fenceFirst {
				kept = 2
			}
			if te.Kept != kept || a.Len() != kept || len(te.Released) != 2-kept {
				t.Fatalf("kept %d, Len %d, released %d; want %d kept", te.Kept, a.Len(), len(te.Released), kept)
			}
			t.Logf("zombie: %v", err)
			sent := obs.Hits()
			reqs := len(f.requests())
			for _, fn := range []func() error{
				func() error { return a.Commit(ctx) },
				func() error { return a.Flush(ctx) },
				func() error { return a.Acknowledge(rec("in", 0, 3), Accept) },
			} {
				if again := fn(); again != err {
					t.Fatalf("after the terminal error: %v", again)
				}
			}
			if obs.Hits() != sent || len(f.requests()) != reqs {
				t.Fatal("a terminal acknowledger sent requests again")
			}
			if err := a.Close(ctx); err != nil {
				t.Logf("close: %v", err)
			}
			if err := a.Commit(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("after Close: %v", err)
			}
			if n := len(touches(t, c)); n != 0 {
				t.Fatalf("%d touch records committed", n)
			}
		})
	}
	t.Run("proxy", func(t *testing.T) {
		c := newCluster(t, 3)
		f := &fakeSharetx{key: 95}
		a := newAcknowledger(t, newProducer(t, c, f))
		a.Acknowledge(rec("in", 0, 1), Accept)
		f.setAnswer(func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
			return topLevelError(kerr.ProducerFenced.Code, "sharetx: producer epoch 0 is older than the current 1")
		})
		err := a.Commit(context.Background())
		if !errors.Is(err, ErrFenced) || !errors.Is(err, kerr.ProducerFenced) {
			t.Fatalf("Commit: %v, want ErrFenced", err)
		}
		if !strings.Contains(err.Error(), "terminal") {
			t.Fatalf("message: %v", err)
		}
	})
}

// TestAcknowledgerTerminal: refusals that no retry can fix are terminal.
func TestAcknowledgerTerminal(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.InvalidProducerIDMapping, kerr.UnknownMemberID, kerr.TransactionalIDAuthorizationFailed} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 3)
			f := &fakeSharetx{key: 95}
			a := newAcknowledger(t, newProducer(t, c, f))
			a.Acknowledge(rec("in", 0, 1), Accept)
			f.setAnswer(func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
				return topLevelError(code.Code, "")
			})
			err := a.Commit(context.Background())
			if !errors.Is(err, ErrTerminal) || errors.Is(err, ErrFenced) || !errors.Is(err, code) {
				t.Fatalf("%v, want ErrTerminal wrapping %v", err, code)
			}
		})
	}
	t.Run("not advertised", func(t *testing.T) {
		c := newCluster(t, 3)
		a := newAcknowledger(t, newProducer(t, c, nil)) // no proxy
		a.Acknowledge(rec("in", 0, 1), Accept)
		err := a.Commit(context.Background())
		if !errors.Is(err, ErrTerminal) || !errors.Is(err, ErrNotAdvertised) {
			t.Fatalf("%v, want ErrTerminal wrapping ErrNotAdvertised", err)
		}
	})
}

// TestAcknowledgerCanceledContext: a Commit whose context is canceled still
// aborts its transaction, and keeps the acknowledgements it had not staged
// (the flushed one went with the aborted transaction).
func TestAcknowledgerCanceledContext(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	a := newAcknowledger(t, cl)
	a.Acknowledge(rec("in", 0, 1), Accept)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Acknowledge(rec("in", 0, 2), Accept)
	aborts := observeEndTxn(c, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := a.Commit(ctx)
	if !errors.Is(err, ErrRetriable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want ErrRetriable wrapping context.Canceled", err)
	}
	if te := asTxnError(t, err); a.Len() != 1 || aborts.Hits() != 1 || len(te.Released) != 1 {
		t.Fatalf("Len %d, %d aborts, %+v", a.Len(), aborts.Hits(), te)
	}
	if err := a.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(touches(t, c)); n != 1 {
		t.Fatalf("%d touch records", n)
	}
}

// topLevelError refuses a call as sharetx does: the code at the top (the
// reference layout has no top-level message) and on the partitions, with the
// message there.
func topLevelError(code int16, msg string) *kip1289.TxnShareAcknowledgeResponse {
	r := &kip1289.TxnShareAcknowledgeResponse{ErrorCode: code}
	if msg != "" {
		r.Topics = []kip1289.TxnShareAcknowledgeResponseTopic{{Partitions: []kip1289.TxnShareAcknowledgeResponsePartition{{ErrorCode: code, ErrorMessage: &msg}}}}
	}
	return r
}
