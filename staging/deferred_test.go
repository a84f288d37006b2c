package staging

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

// deferReq is txnReq with kip1289 Defer.
func deferReq(topic [16]byte, part int32, batches ...kip1289.TxnShareAcknowledgeBatch) *kip1289.TxnShareAcknowledgeRequest {
	r := txnReq(topic, part, batches...)
	r.Defer = true
	return r
}

// deferAcquired has member m1 of group g acquire offsets first..last of
// topic/0 and defers first..deferLast in transaction tx.
func deferAcquired(t *testing.T, e *Ledger, topic [16]byte, first, last, deferLast int64) *Call {
	t.Helper()
	e.Acquired("", 0, "g", "m1", topic, 0, acq(first, last), time.Minute)
	resp, call := e.validateAndReserve(deferReq(topic, 0, ab(first, deferLast, 1)), "")
	if call == nil {
		t.Fatalf("deferring offsets %d-%d was refused: %+v", first, deferLast, resp)
	}
	return call
}

func stateOf(e *Ledger, topic [16]byte, o int64) recState {
	if ps := e.parts[partKey{"g", topic, 0}]; ps != nil && ps.offsets[o] != nil {
		return ps.offsets[o].state
	}
	return 255
}

// TestDeferredCallHeldThenStagedByALaterCall: a deferred call holds its
// offsets back from the client's own acknowledgements without writing
// anything; its repeat is answered as it was; a later call of the same
// transaction that names them again takes them over with its own, each
// offset counted once as pending, and the deferred call is forgotten.
func TestDeferredCallHeldThenStagedByALaterCall(t *testing.T) {
	topic := [16]byte{21}
	e := txnEngine()
	deferAcquired(t, e, topic, 0, 5, 2)
	for o := int64(0); o <= 2; o++ {
		if s := stateOf(e, topic, o); s != stDeferred {
			t.Fatalf("offset %d is %v, want DEFERRED", o, s)
		}
	}
	if e.pending != 3 || e.DeferredCalls() != 1 {
		t.Fatalf("pending %d, deferred calls %d; want 3, 1", e.pending, e.DeferredCalls())
	}
	// The consumer's own acknowledgement of the poll: 0-2 held back, 3-5
	// (not deferred) go upstream.
	out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 5, []int8{1}}})
	if held != 3 || len(out) != 1 || out[0].First != 3 || out[0].Last != 5 {
		t.Fatalf("the consumer's ack: held %d, out %+v; want 0-2 held, 3-5 upstream", held, out)
	}
	// A repeat of the deferred call: the same answer, nothing twice.
	if resp, call := e.validateAndReserve(deferReq(topic, 0, ab(0, 2, 1)), ""); call != nil || resp == nil || resp.ErrorCode != 0 {
		t.Fatalf("the deferred call again: %+v, %v; want OK and nothing reserved", resp, call)
	}
	// The same offsets deferred with another type: refused.
	if resp, _ := e.validateAndReserve(deferReq(topic, 0, ab(0, 0, 3)), ""); resp == nil || resp.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("deferring a deferred offset with another type: %+v", resp)
	}
	// Another transaction cannot stage them.
	e.SetTxn("", "other", 8, 0)
	other := txnReq(topic, 0, ab(0, 0, 1))
	other.TransactionalID, other.ProducerID, other.ProducerEpoch = kmsg.StringPtr("other"), 8, 0
	if resp, _ := e.validateAndReserve(other, ""); resp == nil || resp.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("another transaction staging a deferred offset: %+v", resp)
	}
	// The transaction's last call: 0-2 taken over, 6-7 new (acquired now).
	e.Acquired("", 0, "g", "m1", topic, 0, acq(6, 7), time.Minute)
	req := txnReq(topic, 0, ab(0, 2, 1), ab(6, 7, 1))
	resp, call := e.validateAndReserve(req, "")
	if call == nil {
		t.Fatalf("the staging call was refused: %+v", resp)
	}
	if len(call.offsets) != 5 || adoptedIn(call.offsets) != 3 {
		t.Fatalf("the staging call holds %d offsets, %d taken over; want 5, 3", len(call.offsets), adoptedIn(call.offsets))
	}
	for _, o := range []int64{0, 1, 2, 6, 7} {
		if s := stateOf(e, topic, o); s != stStaging {
			t.Fatalf("offset %d is %v, want STAGING", o, s)
		}
	}
	if e.pending != 5 || e.DeferredCalls() != 0 {
		t.Fatalf("pending %d, deferred calls %d; want 5, 0", e.pending, e.DeferredCalls())
	}
	// Its EndTxn releases nothing: no deferred call holds anything.
	if n := e.EndDeferred("tx", 7, 2, false); n != 0 {
		t.Fatalf("EndDeferred released %d after the staging call took everything over", n)
	}
	if e.pending != 5 {
		t.Fatalf("pending %d after EndDeferred, want 5", e.pending)
	}
}

// TestDeferredReleasedAtTheTransactionsEnd: what deferred calls hold and no
// call staged is released at the transaction's EndTxn (either outcome) and
// when a newer producer takes the transactional id, never for another
// producer's EndTxn; the member owes the ack it has not sent yet.
func TestDeferredReleasedAtTheTransactionsEnd(t *testing.T) {
	topic := [16]byte{22}
	e := txnEngine()
	deferAcquired(t, e, topic, 0, 3, 3)
	ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 1, []int8{1}}}) // 0-1 acknowledged by the consumer
	if n := e.EndDeferred("tx", 7, 3, false); n != 0 {
		t.Fatalf("another epoch's EndTxn released %d", n)
	}
	if n := e.EndDeferred("tx", 7, 2, true); n != 0 {
		t.Fatalf("the same producer's InitProducerId answer released %d", n)
	}
	if n := e.EndDeferred("tx", 7, 2, false); n != 4 {
		t.Fatalf("EndTxn released %d, want 4", n)
	}
	ps := e.parts[partKey{"g", topic, 0}]
	for o := int64(0); o <= 3; o++ {
		if st := ps.get(o); st != nil {
			t.Fatalf("offset %d still with the member after its release: %+v", o, st)
		}
	}
	if e.pending != 0 || e.DeferredCalls() != 0 || len(ps.owed) != 2 {
		t.Fatalf("pending %d, deferred calls %d, owed %v; want 0, 0, offsets 2-3", e.pending, e.DeferredCalls(), ps.owed)
	}
	// A newer producer of the id releases the older one's.
	deferAcquired(t, e, topic, 10, 11, 11)
	if n := e.EndDeferred("tx", 7, 3, true); n != 2 || e.pending != 0 {
		t.Fatalf("a newer producer released %d (pending %d), want 2 (0)", n, e.pending)
	}
}

// TestDeferredNotRenewedNorKeptOpenNorKept: a deferred offset's lock is not
// renewed and does not keep a closed member connection open (nothing is
// committed a release would lose); once the lock has long ended, Prune
// forgets the call, and a redelivery of the offset to another member
// replaces it at once (that member's acknowledgements go upstream).
func TestDeferredNotRenewedNorKeptOpenNorKept(t *testing.T) {
	topic := [16]byte{23}
	e := txnEngine()
	deferAcquired(t, e, topic, 0, 2, 2)
	if due := e.DueForRenewal(time.Now().Add(59 * time.Second)); len(due) != 0 {
		t.Fatalf("deferred offsets due for renewal: %+v", due)
	}
	if n := e.HeldFor(0, "g", "m1"); n != 0 {
		t.Fatalf("HeldFor counts %d deferred offsets", n)
	}
	// Redelivered to m2 (m1's lock ended or its session closed).
	e.Acquired("", 0, "g", "m2", topic, 0, acq(0, 0), time.Minute)
	if out, held := ackAccepted(e, "g", "m2", topic, 0, []AckRange{{0, 0, []int8{1}}}); held != 0 || len(out) != 1 {
		t.Fatalf("m2's ack of its delivery: held %d, out %+v; want it upstream", held, out)
	}
	// The transaction's end releases what the call still holds (1-2), not
	// the offset m2 has now.
	if n := e.EndDeferred("tx", 7, 2, false); n != 2 || e.pending != 0 {
		t.Fatalf("EndDeferred released %d, pending %d; want 2 (offsets 1-2), 0", n, e.pending)
	}
	// Never ended: Prune forgets it after the lock and a minute.
	deferAcquired(t, e, topic, 5, 6, 6)
	e.Prune(time.Now().Add(30 * time.Second))
	if e.DeferredCalls() != 1 || e.pending != 2 {
		t.Fatalf("Prune within the lock: deferred calls %d, pending %d; want 1, 2", e.DeferredCalls(), e.pending)
	}
	e.Prune(time.Now().Add(3 * time.Minute))
	if e.DeferredCalls() != 0 || e.pending != 0 || stateOf(e, topic, 5) != 255 {
		t.Fatalf("Prune after the lock: deferred calls %d, pending %d, offset 5 %v", e.DeferredCalls(), e.pending, stateOf(e, topic, 5))
	}
}

// TestDeferredTakenOverThenUnstaged: when the call that took deferred
// offsets over fails to write, the ones the consumer already acknowledged
// (an earlier poll's: it will not acknowledge them again) are released
// upstream at once; the others are the member's again.
func TestDeferredTakenOverThenUnstaged(t *testing.T) {
	topic := [16]byte{24}
	e := txnEngine()
	deferAcquired(t, e, topic, 0, 3, 1)
	ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 1, []int8{1}}})
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(0, 3, 1)), "")
	if call == nil {
		t.Fatal("the staging call was refused")
	}
	e.unstage(call)
	ps := e.parts[partKey{"g", topic, 0}]
	for o := int64(0); o <= 1; o++ {
		if st := ps.get(o); st != nil {
			t.Fatalf("acknowledged offset %d still the member's after the failed write: %+v", o, st)
		}
	}
	for o := int64(2); o <= 3; o++ {
		if s := stateOf(e, topic, o); s != stAcquired {
			t.Fatalf("offset %d is %v, want ACQUIRED", o, s)
		}
	}
	if e.pending != 0 || e.DeferredCalls() != 0 {
		t.Fatalf("pending %d, deferred calls %d", e.pending, e.DeferredCalls())
	}
}
