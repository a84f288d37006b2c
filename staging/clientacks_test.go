package staging

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/sharetx/sharetx/kip1289"
)

// TestRefusedAckChangesNothing: a client acknowledgement the broker refuses
// (its plan is never applied) and one naming another member leave every
// acquisition as it was; only the acquiring member's accepted ack settles.
func TestRefusedAckChangesNothing(t *testing.T) {
	topic := [16]byte{3}
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	e.Acquired("", 0, "g", "victim", topic, 0, acq(0, 9), time.Minute)
	k := partKey{"g", topic, 0}
	before := fmt.Sprint(e.parts[k].acq)

	// Refused: filtered, never applied.
	if _, _, plan := e.FilterClientAcks("g", "victim", topic, 0, []AckRange{{0, 9, []int8{1}}}); plan == nil {
		t.Fatal("no plan for an ack of acquired offsets")
	}
	if got := fmt.Sprint(e.parts[k].acq); got != before {
		t.Fatalf("a refused ack changed the acquisitions: %s, was %s", got, before)
	}
	// Accepted for a bogus member: the victim's acquisitions stand.
	ackAccepted(e, "g", "bogus", topic, 0, []AckRange{{0, 9, []int8{1}}})
	if got := fmt.Sprint(e.parts[k].acq); got != before {
		t.Fatalf("another member's ack settled the victim's acquisitions: %s, was %s", got, before)
	}
	if r, call := e.validateAndReserve(withMember(txnReq(topic, 0, ab(0, 7, 1)), ""), ""); call == nil {
		t.Fatalf("the victim's records are no longer stageable after another member's ack: %+v", r)
	}
}

// TestWideBatchNotExpanded: a batch [0, 2^40] with one type is cut around
// the held offsets with work bounded by the state, not the range.
func TestWideBatchNotExpanded(t *testing.T) {
	topic := [16]byte{4}
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	e.Acquired("", 0, "g", "m1", topic, 0, acq(100, 109), time.Minute)
	if _, call := e.validateAndReserve(txnReq(topic, 0, ab(102, 104, 1)), ""); call == nil {
		t.Fatal("not staged")
	}
	wide := []AckRange{{0, 1 << 40, []int8{1}}}
	start := time.Now()
	out, held, plan := e.FilterClientAcks("g", "m1", topic, 0, wide)
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("took %v", d) // informative only: the assertions below are on the result
	}
	want := []AckRange{{0, 101, []int8{1}}, {105, 1 << 40, []int8{1}}}
	if held != 3 || !reflect.DeepEqual(out, want) {
		t.Fatalf("held %d, out %+v; want 3, %+v", held, out, want)
	}
	if len(plan.acked) != 3 {
		t.Fatalf("plan marks %v acked, want 102..104", plan.acked)
	}
	if n := testing.AllocsPerRun(20, func() { e.FilterClientAcks("g", "m1", topic, 0, wide) }); n > 40 {
		t.Fatalf("%v allocations for one wide batch: the range is being expanded", n)
	}
}

// TestWidePathMatchesPerOffset: the wide path (state points and known
// ranges) decides exactly what the per-offset path decides, on random
// ledgers and acknowledgements.
func TestWidePathMatchesPerOffset(t *testing.T) {
	defer func(v int64) { expandLimit = v }(expandLimit)
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 300; round++ {
		e := testEngine()
		e.cfg.MaxPendingRecords = 1 << 20
		e.SetTxn("", "tx", 7, 2)
		topic := [16]byte{5}
		k := partKey{"g", topic, 0}
		members := []string{"m1", "m2"}
		for i := 0; i < 3; i++ {
			f := rng.Int63n(60)
			e.Acquired("", 0, "g", members[rng.Intn(2)], topic, 0, acq(f, f+rng.Int63n(10)), time.Minute)
		}
		for i := 0; i < 3; i++ {
			f := rng.Int63n(60)
			e.validateAndReserve(withMember(txnReq(topic, 0, ab(f, f+rng.Int63n(4), 1)), ""), "")
		}
		ps := e.parts[k]
		for i := 0; i < 4; i++ {
			o := rng.Int63n(70)
			if ps.offsets[o] == nil {
				ps.oweAck(o, members[rng.Intn(2)], time.Now().Add(time.Minute))
			}
		}
		if rng.Intn(2) == 0 {
			f := rng.Int63n(60)
			e.addKnownLocked(k, &knownRange{first: f, last: f + rng.Int63n(8), types: []int8{1}, open: true})
		}
		var batches []AckRange
		for i, n := 0, 1+rng.Intn(3); i < n; i++ {
			f := rng.Int63n(70)
			l := f + rng.Int63n(15)
			b := AckRange{First: f, Last: l, Types: []int8{int8(1 + rng.Intn(3))}}
			if rng.Intn(2) == 0 {
				b.Types = make([]int8, l-f+1)
				for j := range b.Types {
					b.Types[j] = int8(1 + rng.Intn(3))
				}
			}
			batches = append(batches, b)
		}
		member := members[rng.Intn(2)]
		expandLimit = 1 << 62
		out1, held1, plan1 := e.FilterClientAcks("g", member, topic, 0, batches)
		expandLimit = 0
		out2, held2, plan2 := e.FilterClientAcks("g", member, topic, 0, batches)
		norm := func(p *AckPlan) string {
			if p == nil {
				return "nil"
			}
			s := func(v []int64) []int64 {
				v = append([]int64(nil), v...)
				sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
				return v
			}
			return fmt.Sprint(p.allHeld, p.settle, s(p.owed), s(p.acked), s(p.drop))
		}
		if held1 != held2 || !reflect.DeepEqual(out1, out2) || norm(plan1) != norm(plan2) {
			t.Fatalf("round %d, batches %+v:\nper offset: held %d out %+v plan %s\nwide:       held %d out %+v plan %s",
				round, batches, held1, out1, norm(plan1), held2, out2, norm(plan2))
		}
	}
}

func withMember(r *kip1289.TxnShareAcknowledgeRequest, member string) *kip1289.TxnShareAcknowledgeRequest {
	r.MemberID = member
	return r
}

// FuzzClientAcks: any acknowledgement (offsets and types from the fuzzer,
// ranges up to 2^62 wide) against a ledger with staged, owed and known
// offsets: no panic, work bounded by the state (a wide range is never
// expanded), every offset either forwarded or held exactly once, and the
// wide path agrees with the per-offset one where both can run.
func FuzzClientAcks(f *testing.F) {
	f.Add([]byte{0, 9, 1, 3, 40, 2, 1, 5})
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 63, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		e := testEngine()
		e.cfg.MaxPendingRecords = 1 << 20
		e.SetTxn("", "tx", 7, 2)
		topic := [16]byte{6}
		k := partKey{"g", topic, 0}
		e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 40), time.Minute)
		e.validateAndReserve(txnReq(topic, 0, ab(3, 6, 1), ab(20, 20, 3)), "")
		e.parts[k].oweAck(30, "m1", time.Now().Add(time.Minute))
		e.addKnownLocked(k, &knownRange{first: 100, last: 1 << 30, types: []int8{1}, open: true})
		var batches []AckRange
		var total int64
		for len(data) >= 3 && len(batches) < 16 {
			first := int64(data[0]) << (data[2] % 56)
			width := int64(data[1]) << (data[2] % 40)
			b := AckRange{First: first, Last: first + width, Types: []int8{int8(data[2] % 4)}}
			data = data[3:]
			if width < 64 && len(data) > 0 && data[0]%2 == 0 {
				b.Types = make([]int8, width+1)
				for i := range b.Types {
					b.Types[i] = int8(i % 4)
				}
			}
			batches = append(batches, b)
			total += width + 1
		}
		out, held, _ := e.FilterClientAcks("g", "m1", topic, 0, batches)
		var sent int64
		for _, o := range out {
			if o.First > o.Last || !validBatch(o) {
				t.Fatalf("forwarded a malformed batch %+v", o)
			}
			sent += o.Last - o.First + 1
		}
		if held > 0 && sent+int64(held) != total {
			t.Fatalf("batches %+v: %d forwarded + %d held != %d sent", batches, sent, held, total)
		}
	})
}
