package staging

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/upstream"
)

func TestCompressExpand(t *testing.T) {
	m := map[int64]int8{5: 1, 6: 1, 7: 1, 9: 3, 10: 1, 11: 3}
	var got []AckRange
	for _, b := range kip1289.Batches(m) {
		got = append(got, AckRange{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes})
	}
	want := []AckRange{{5, 7, []int8{1}}, {9, 11, []int8{3, 1, 3}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Batches = %+v, want %+v", got, want)
	}
	back := map[int64]int8{}
	for _, r := range got {
		offs, types, ok := r.expand()
		if !ok {
			t.Fatalf("expand %+v failed", r)
		}
		for i, o := range offs {
			back[o] = types[i]
		}
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip %v, want %v", back, m)
	}
	for _, bad := range []AckRange{{5, 4, []int8{1}}, {1, 3, []int8{1, 1}}, {-1, 2, []int8{1}}, {0, 0, nil}} {
		if _, _, ok := bad.expand(); ok {
			t.Errorf("malformed %+v expanded", bad)
		}
	}
}

func testEngine() *Ledger {
	cfg := configs.Default().KIP1289
	cfg.MaxPendingRecords = 8
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return NewLedger(cfg, log, nil, upstream.NewApplier(upstream.NewSessions(context.Background(), nil, log), log, nil))
}

func acq(first, last int64) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	return []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: 1}}
}

func txnReq(topic [16]byte, part int32, batches ...kip1289.TxnShareAcknowledgeBatch) *kip1289.TxnShareAcknowledgeRequest {
	return &kip1289.TxnShareAcknowledgeRequest{TransactionalID: kmsg.StringPtr("tx"), ProducerID: 7, ProducerEpoch: 2, GroupID: "g", MemberEpoch: -1,
		Topics: []kip1289.TxnShareAcknowledgeTopic{{TopicID: topic, Partitions: []kip1289.TxnShareAcknowledgePartition{{Partition: part, AcknowledgementBatches: batches}}}}}
}

// TestValidateErrors: the KIP's refusals, decided before anything is
// written, and all-or-nothing across partitions.
func TestValidateErrors(t *testing.T) {
	topic := [16]byte{1}
	e := testEngine()
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	e.Acquired("", 0, "g", "m2", topic, 1, acq(0, 9), time.Minute)
	e.SetMember("", "g", "m1", 5)

	// A transactional id the proxy has not seen: with ProducerId -1 (the
	// extension) the proxy cannot know the ids yet and asks for a retry;
	// with explicit ids it refuses to write with its own credentials, with
	// a code the reference client aborts on (never a fatal one).
	req := txnReq(topic, 0, ab(0, 1, 1))
	req.ProducerID, req.ProducerEpoch = -1, -1
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.CoordinatorLoadInProgress.Code || r.Topics[0].Partitions[0].ErrorCode != r.ErrorCode {
		t.Fatalf("unknown transactional id, ProducerId -1: %+v", r)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(0, 1, 1)), ""); r == nil || r.ErrorCode != kerr.TransactionAbortable.Code {
		t.Fatalf("unknown transactional id, explicit ids: %+v", r)
	}
	req.TransactionalID = nil
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("null transactional id: %+v", r)
	}
	e.SetTxn("", "tx", 7, 2)
	req = txnReq(topic, 0, ab(0, 1, 1))
	req.ProducerEpoch = 1
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("old epoch: %+v", r)
	}
	req.ProducerEpoch = 3
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.TransactionAbortable.Code {
		t.Fatalf("an epoch the proxy has not seen: %+v", r)
	}
	req.ProducerID, req.ProducerEpoch = 8, 2
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.InvalidProducerIDMapping.Code {
		t.Fatalf("another producer id: %+v", r)
	}
	m := "m1"
	req = txnReq(topic, 0, ab(0, 1, 1))
	for _, ep := range []int32{4, 6, -1} { // stale, ahead, and no wildcard
		req.MemberID, req.MemberEpoch = m, ep
		if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.StaleMemberEpoch.Code {
			t.Fatalf("member epoch %d (current 5): %+v", ep, r)
		}
	}
	req.MemberID = "m9"
	if r, _ := e.validateAndReserve(req, ""); r == nil || r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member: %+v", r)
	}
	req = txnReq(topic, 0, ab(0, 1, 1))
	req.ProducerID, req.ProducerEpoch = -1, -1
	if r, call := e.validateAndReserve(req, ""); call == nil || call.producerID != 7 || call.epoch != 2 {
		t.Fatalf("ProducerId -1 takes the ids the proxy saw: %+v %+v", r, call)
	} else {
		e.unstage(call)
	}
	partErr := func(req *kip1289.TxnShareAcknowledgeRequest) int16 {
		r, call := e.validateAndReserve(req, "")
		if call != nil {
			e.unstage(call)
			return 0
		}
		return r.Topics[0].Partitions[0].ErrorCode
	}
	for name, tc := range map[string]struct {
		b    kip1289.TxnShareAcknowledgeBatch
		want int16
	}{
		"release":   {ab(0, 0, 2), kerr.InvalidRecordState.Code},
		"renew":     {ab(0, 0, 4), kerr.InvalidRecordState.Code},
		"gap ok":    {ab(0, 0, 0), 0},
		"not acq":   {ab(20, 21, 1), kerr.InvalidRecordState.Code},
		"malformed": {ab(5, 3, 1), kerr.InvalidRequest.Code},
		"bad types": {ab(0, 2, 1, 1), kerr.InvalidRequest.Code},
		"accept ok": {ab(0, 2, 1), 0},
		"mixed ok":  {ab(0, 2, 1, 3, 1), 0},
		"gaps ok":   {ab(0, 2, 1, 0, 3), 0},
	} {
		if got := partErr(txnReq(topic, 0, tc.b)); got != tc.want {
			t.Errorf("%s: error %d, want %d", name, got, tc.want)
		}
	}
	if got := partErr(txnReq([16]byte{9}, 0, ab(0, 0, 1))); got != kerr.InvalidRecordState.Code {
		t.Errorf("unknown topic: %d", got)
	}

	// Two partitions, the second acquired by another member: nothing is
	// staged, the good one answers OPERATION_NOT_ATTEMPTED.
	req = txnReq(topic, 0, ab(0, 1, 1))
	req.MemberID = m
	req.MemberEpoch = 5
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, kip1289.TxnShareAcknowledgePartition{Partition: 1,
		AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{ab(0, 0, 1)}})
	r, call := e.validateAndReserve(req, "")
	if call != nil || r == nil {
		t.Fatal("partial failure staged something")
	}
	codes := map[int32]int16{}
	for _, p := range r.Topics[0].Partitions {
		codes[p.Partition] = p.ErrorCode
	}
	if codes[0] != kerr.OperationNotAttempted.Code || codes[1] != kerr.InvalidRecordState.Code || r.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("partial failure codes %v, top-level %d (the first failure's)", codes, r.ErrorCode)
	}
	if st := e.parts[partKey{"g", topic, 0}].offsets[0]; st.state != stAcquired {
		t.Fatalf("offset 0 is %s after a refused call", st.state)
	}

	// Staged offsets cannot be staged again, and count against the limit.
	_, call = e.validateAndReserve(txnReq(topic, 0, ab(0, 4, 1)), "")
	if call == nil {
		t.Fatal("valid call refused")
	}
	if got := partErr(txnReq(topic, 0, ab(4, 4, 1))); got != kerr.InvalidRecordState.Code {
		t.Errorf("already staged: %d", got)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(5, 9, 1)), ""); r == nil || r.ErrorCode != kerr.TransactionAbortable.Code {
		t.Errorf("over max_pending_records (8; 5 staged + 5): %+v", r)
	}
}

// TestClientAcksHeldBack: a client's own ack of staged offsets is absorbed;
// of acquired ones, forwarded.
func TestClientAcksHeldBack(t *testing.T) {
	topic := [16]byte{2}
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(2, 4, 1)), "")
	if call == nil {
		t.Fatal("not staged")
	}
	out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 9, []int8{1}}})
	if held != 3 {
		t.Fatalf("held %d, want 3", held)
	}
	if want := []AckRange{{0, 1, []int8{1}}, {5, 9, []int8{1}}}; !reflect.DeepEqual(out, want) {
		t.Fatalf("forwarded %+v, want %+v", out, want)
	}
	// Commit then apply: the absorbed offsets are forgotten.
	e.Finish(call)
	if len(e.parts[partKey{"g", topic, 0}].offsets) != 0 {
		t.Fatalf("offsets left: %v", e.parts[partKey{"g", topic, 0}].offsets)
	}
	if e.pending != 0 {
		t.Fatalf("pending %d", e.pending)
	}
}

// Acquisitions are kept as ranges: the client's own acks settle them (a
// settled offset is no longer acquired), a later acquisition of an offset
// supersedes the earlier one unless the offset is held, and expired ranges
// are pruned.
func TestAcquisitionRanges(t *testing.T) {
	e := testEngine()
	e.cfg.MaxPendingRecords = 1000
	e.SetTxn("", "tx", 7, 2)
	topic := [16]byte{1}
	k := partKey{"g", topic, 0}
	e.Acquired("", 1, "g", "m1", topic, 0, acq(0, 99), time.Minute)
	ps := e.parts[k]
	if len(ps.offsets) != 0 || len(ps.acq) != 1 {
		t.Fatalf("one fetch of 100 records: %d entries, %d ranges; want 0 and 1", len(ps.offsets), len(ps.acq))
	}
	// The client acks 10-19 and 50: split into [0,9] [20,49] [51,99].
	out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{10, 19, []int8{1}}, {50, 50, []int8{2}}})
	if held != 0 || len(out) != 2 {
		t.Fatalf("plain acks: held %d, out %+v", held, out)
	}
	want := [][2]int64{{0, 9}, {20, 49}, {51, 99}}
	if len(ps.acq) != len(want) {
		t.Fatalf("ranges after acks: %+v", ps.acq)
	}
	for i, w := range want {
		if ps.acq[i].first != w[0] || ps.acq[i].last != w[1] {
			t.Fatalf("range %d = [%d,%d], want %v", i, ps.acq[i].first, ps.acq[i].last, w)
		}
	}
	if got := partErr2(e, txnReq(topic, 0, ab(15, 15, 1))); got != kerr.InvalidRecordState.Code {
		t.Fatalf("staging an offset the client acked: error %d, want INVALID_RECORD_STATE", got)
	}
	// Stage 20-24 (member m1, resolved from the range).
	r, call := e.validateAndReserve(txnReq(topic, 0, ab(20, 24, 1)), "")
	if call == nil {
		t.Fatalf("staging acquired offsets refused: %+v", r)
	}
	if call.member != "m1" {
		t.Fatalf("member resolved as %q", call.member)
	}
	// Redelivered to m2 (the broker released them): the held ones stay
	// staged; the others are m2's now.
	e.Acquired("", 1, "g", "m2", topic, 0, acq(20, 29), time.Minute)
	if st := ps.get(22); st == nil || !st.state.held() || st.member != "m1" {
		t.Fatalf("held offset 22 after a redelivery: %+v", st)
	}
	if st := ps.get(27); st == nil || st.state != stAcquired || st.member != "m2" {
		t.Fatalf("offset 27 after a redelivery to m2: %+v", st)
	}
	// A client ack of a held offset is held back, and the rest settle.
	out, held = ackAccepted(e, "g", "m1", topic, 0, []AckRange{{20, 29, []int8{1}}})
	if held != 5 || len(out) != 1 || out[0].First != 25 || out[0].Last != 29 {
		t.Fatalf("acks over held offsets: held %d, out %+v", held, out)
	}
	// 25-29 are m2's now: m1's ack of them (the broker refuses it) leaves
	// them m2's; m2's own ack settles them.
	if st := ps.get(27); st == nil || st.member != "m2" {
		t.Fatalf("offset 27 after another member acked it: %+v, want still m2's", st)
	}
	ackAccepted(e, "g", "m2", topic, 0, []AckRange{{25, 29, []int8{1}}})
	if st := ps.get(27); st != nil {
		t.Fatalf("offset 27 still acquired after m2 acked it: %+v", st)
	}
	// Pruning: ranges whose lock expired a minute ago go.
	e.Prune(time.Now().Add(3 * time.Minute))
	if len(ps.acq) != 0 {
		t.Fatalf("ranges after their locks expired: %+v", ps.acq)
	}
}

// partErr2 is the partition error of a refused call, 0 for a staged one,
// -1 for a call refused as a whole.
func partErr2(e *Ledger, req *kip1289.TxnShareAcknowledgeRequest) int16 {
	r, call := e.validateAndReserve(req, "")
	if call != nil {
		e.unstage(call)
		return 0
	}
	if r == nil || len(r.Topics) == 0 || len(r.Topics[0].Partitions) == 0 {
		return -1
	}
	return r.Topics[0].Partitions[0].ErrorCode
}

func ab(first, last int64, types ...int8) kip1289.TxnShareAcknowledgeBatch {
	return kip1289.TxnShareAcknowledgeBatch{FirstOffset: first, LastOffset: last, AcknowledgeTypes: types}
}

// TestAbortReleasesAndOwesOneAck: an aborted call's offsets leave the
// member at once (no entry, no live acquisition range: the proxy released
// them upstream), and the member owes one acknowledgement of that delivery:
// its first ack of each offset is absorbed, a later one (of a redelivery)
// goes upstream, and another member's is never absorbed. An offset whose
// ack was already absorbed while staged owes nothing.
func TestAbortReleasesAndOwesOneAck(t *testing.T) {
	topic := [16]byte{7}
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(0, 4, 1)), "")
	if call == nil {
		t.Fatal("valid call refused")
	}
	// While staged, the client acknowledged offset 4 itself (absorbed).
	if out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{4, 4, []int8{1}}}); held != 1 || len(out) != 0 {
		t.Fatalf("ack of a staged offset: held %d, out %+v", held, out)
	}
	rel := e.Abort(call)
	if acks, ok := rel[upstream.SessionKey{Node: 0, Group: "g", Member: "m1"}]; len(rel) != 1 || !ok || acks.Count() != 5 {
		t.Fatalf("releases %+v, want offsets 0-4 on m1's session", rel)
	}
	ps := e.parts[partKey{"g", topic, 0}]
	for o := int64(0); o <= 4; o++ {
		if st := ps.get(o); st != nil {
			t.Fatalf("offset %d still with the member after the abort: %+v", o, st)
		}
	}
	if len(ps.owed) != 4 || e.pending != 0 {
		t.Fatalf("owed %v, pending %d; want offsets 0-3 owed (4 was acked while staged), nothing pending", ps.owed, e.pending)
	}
	// Another member's ack of those offsets is its own delivery's.
	if out, held := ackAccepted(e, "g", "m2", topic, 0, []AckRange{{0, 0, []int8{1}}}); held != 0 || len(out) != 1 {
		t.Fatalf("another member's ack: held %d, out %+v", held, out)
	}
	// The member's implicit ACCEPT of its whole poll: 0-3 absorbed, 4-9
	// upstream (4 was settled while staged; 5-9 are plain acquisitions).
	out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 9, []int8{1}}})
	if held != 4 || len(out) != 1 || out[0].First != 4 || out[0].Last != 9 {
		t.Fatalf("the member's ack after the abort: held %d, out %+v", held, out)
	}
	// A later ack of offset 0 by the member is of a redelivery: upstream.
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 0), time.Minute)
	if out, held := ackAccepted(e, "g", "m1", topic, 0, []AckRange{{0, 0, []int8{1}}}); held != 0 || len(out) != 1 {
		t.Fatalf("ack of the redelivery: held %d, out %+v", held, out)
	}
	// Owed acks expire.
	ps.oweAck(20, "m1", time.Now().Add(-time.Second))
	e.Prune(time.Now())
	if _, ok := ps.owed[20]; ok {
		t.Fatal("an expired owed ack survived Prune")
	}
}

// TestStaleCallTouchesNothing: a call's transitions reach its offsets'
// entries through pointers (offRef), not the map, so an entry that left the
// map must not answer to the old call any more. A call aborted twice (the
// ABORT marker, then the EndTxn abort), or committed or finished after its
// offsets were re-acquired and staged by another call, releases nothing
// twice and leaves the other call's offsets as they are.
func TestStaleCallTouchesNothing(t *testing.T) {
	topic := [16]byte{8}
	e := txnEngine()
	old := stageAcquired(t, e, topic, 0, 3)
	if rel := e.Abort(old); rel[upstream.SessionKey{Group: "g", Member: "m1"}].Count() != 4 {
		t.Fatalf("first abort released %+v, want offsets 0-3", rel)
	}
	if rel := e.Abort(old); len(rel) != 0 {
		t.Fatalf("second abort of the same call released %+v, want nothing", rel)
	}
	// Redelivered to the member, and staged by a new call.
	cur := stageAcquired(t, e, topic, 0, 3)
	ps := e.parts[partKey{"g", topic, 0}]
	e.Commit(old)
	e.Finish(old)
	if rel := e.Abort(old); len(rel) != 0 {
		t.Fatalf("a third abort of the old call released %+v", rel)
	}
	for o := int64(0); o <= 3; o++ {
		st := ps.offsets[o]
		if st == nil || st.call != cur || st.state != stStaging {
			t.Fatalf("offset %d after the old call's transitions: %+v, want STAGING in the new call", o, st)
		}
	}
	// An entry replaced under a call (the screen of a redelivery puts its
	// own over a held one) is no longer that call's.
	ps.put(3, &offState{member: "m1", state: stCommitted, call: &Call{txnID: "(redelivered)"}})
	if rel := e.Abort(cur); rel[upstream.SessionKey{Group: "g", Member: "m1"}].Count() != 3 {
		t.Fatalf("the new call's abort released %+v, want offsets 0-2 (3 was replaced)", rel)
	}
	if st := ps.offsets[3]; st == nil || st.state != stCommitted {
		t.Fatalf("the replacing entry of offset 3 after the abort: %+v", st)
	}
}

// ackAccepted is a client acknowledgement the broker accepted: filtered,
// then its plan applied.
func ackAccepted(e *Ledger, group, member string, topic [16]byte, partition int32, batches []AckRange) ([]AckRange, int) {
	out, held, plan := e.FilterClientAcks(group, member, topic, partition, batches)
	if plan != nil {
		e.ApplyAckPlan(plan)
	}
	return out, held
}

// TestPruneForgetsIdleOwners: a member no heartbeat named for memberIdle
// (a killed client never leaves) and a transactional id idle past its
// timeout and txnIdleFloor with nothing staged are forgotten, a group's
// principals go with their last member and acquisition, and its topics with
// its last member and share partition; a live member, a recent transaction,
// one with a longer timeout, one with offsets staged and a group with
// acquisitions stay. Ids longer than MaxKeptIDBytes are never kept.
func TestPruneForgetsIdleOwners(t *testing.T) {
	e := testEngine()
	topic := [16]byte{9}
	e.SetMember("User:a", "gone", "dead", 1)
	e.SetMember("User:a", "kept", "live", 1)
	e.SetMember("User:b", "kept", "left", 1)
	e.SetTxn("User:a", "old", 1, 0)
	e.SetTxn("User:a", "new", 2, 0)
	e.SetTxn("User:a", "slow", 3, 0)
	e.SetTxnTimeout("slow", 2*time.Hour)
	e.SetTxn("", "tx", 7, 2) // txnReq's
	e.Acquired("User:a", 0, "busy", "m", topic, 0, acq(0, 9), 10*time.Hour)
	e.Acquired("", 0, "g", "m1", topic, 0, acq(100, 109), 10*time.Hour)
	if r, call := e.validateAndReserve(txnReq(topic, 0, ab(102, 104, 1)), ""); call == nil {
		t.Fatalf("not staged: %+v", r)
	}
	long := strings.Repeat("x", MaxKeptIDBytes+1)
	e.SetTxn("User:a", long, 4, 0)
	e.SetMember("User:a", long, "m", 1)
	e.SetMember("User:a", "g2", long, 1)
	e.Acquired("User:a", 0, long, "m", topic, 0, acq(0, 9), time.Hour)
	if s := e.Sizes(); s.Transactions != 4 || s.Members != 3 || s.SharePartition != 2 {
		t.Fatalf("ids longer than %d bytes were kept: %+v", MaxKeptIDBytes, s)
	}
	if r, _ := e.validateAndReserve(&kip1289.TxnShareAcknowledgeRequest{TransactionalID: &long, GroupID: "g"}, ""); r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("a call naming a transactional id longer than %d bytes: %+v, want INVALID_REQUEST", MaxKeptIDBytes, r)
	}
	now := time.Now()
	idle := now.Add(-txnIdleFloor - time.Minute - time.Second)
	e.mu.Lock()
	for _, k := range []memberKey{{"gone", "dead"}, {"kept", "left"}} {
		m := e.members[k]
		m.seen = now.Add(-memberIdle - time.Second)
		e.members[k] = m
	}
	for _, id := range []string{"old", "slow", "tx"} {
		tx := e.txns[id]
		tx.seen = idle
		e.txns[id] = tx
	}
	e.mu.Unlock()

	e.Prune(now)
	s := e.Sizes()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.members[memberKey{"gone", "dead"}]; ok || s.Members != 1 {
		t.Errorf("idle members kept (members %d)", s.Members)
	}
	if _, ok := e.txns["old"]; ok || s.Transactions != 3 {
		t.Errorf("an idle transactional id was kept (transactions %d)", s.Transactions)
	}
	if _, ok := e.txns["slow"]; !ok {
		t.Error("a transactional id within its own (longer) timeout was forgotten")
	}
	if _, ok := e.txns["tx"]; !ok {
		t.Error("a transactional id with offsets staged was forgotten")
	}
	if e.readers["gone"] != nil {
		t.Error("the principals of a group with nothing left are kept")
	}
	if r := e.readers["kept"]; r == nil || !r["User:a"] || r["User:b"] {
		t.Errorf("group kept: principals %v, want User:a only (User:b's member is gone)", r)
	}
	if e.readers["busy"] == nil || e.topics["busy"] == nil {
		t.Errorf("a live group was forgotten: readers %v topics %v", e.readers, e.topics)
	}
}

// TestTouchOffsetFencesTheZombieWindow: with producer id -1/-1 a call that
// names its touch (kip1289 TouchOffset) is checked against the ids that
// touch was written with. The window it closes: a zombie's touch accepted
// just before a newer instance's InitProducerId, its call just after, which
// -1/-1 alone resolves to the newer instance's ids (staging the zombie's
// acknowledgements into the newer transaction); naming its touch, it is
// PRODUCER_FENCED. The newer instance's own touch stages; a touch never
// relayed here, or pushed out by newer ones, asks for a new touch
// (retriable).
func TestTouchOffsetFencesTheZombieWindow(t *testing.T) {
	topic := [16]byte{1}
	e := testEngine()
	e.Acquired("User:app", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	e.SetTxn("User:app", "tx", 7, 2)
	e.LearnTouch("User:app", "tx", 7, 2, 100) // the zombie's touch, at epoch 2
	call := func(off *int64, ident string) (int16, *Call) {
		req := txnReq(topic, 0, ab(0, 1, 1))
		req.ProducerID, req.ProducerEpoch, req.TouchOffset = -1, -1, off
		r, c := e.validateAndReserve(req, ident)
		if c != nil {
			e.unstage(c)
			return 0, c
		}
		return r.ErrorCode, nil
	}
	zombie, newer, unknown := int64(100), int64(101), int64(55)

	if code, c := call(&zombie, "User:app"); code != 0 || c.epoch != 2 {
		t.Fatalf("the zombie's call before the newer instance initialised: %v, %+v", kerr.ErrorForCode(code), c)
	}
	e.SetTxn("User:app", "tx", 7, 3) // the newer instance's InitProducerId
	if code, c := call(nil, "User:app"); code != 0 || c.epoch != 3 {
		t.Fatalf("-1/-1 alone resolves to the latest ids (the window): %v, %+v", kerr.ErrorForCode(code), c)
	}
	if code, _ := call(&zombie, "User:app"); code != kerr.ProducerFenced.Code {
		t.Fatalf("the zombie's call naming its touch after the newer instance initialised: %v, want PRODUCER_FENCED", kerr.ErrorForCode(code))
	}
	e.LearnTouch("User:app", "tx", 7, 3, newer)
	if code, c := call(&newer, "User:app"); code != 0 || c.epoch != 3 {
		t.Fatalf("the newer instance's call naming its touch: %v, %+v", kerr.ErrorForCode(code), c)
	}
	if code, _ := call(&zombie, "User:app"); code != kerr.ProducerFenced.Code {
		t.Fatalf("the zombie's touch beside the newer one: %v, want PRODUCER_FENCED", kerr.ErrorForCode(code))
	}
	if code, _ := call(&unknown, "User:app"); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("a touch never relayed here: %v, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(code))
	}
	for i := int64(0); i < maxTouches; i++ { // the kept touches are the newest
		e.LearnTouch("User:app", "tx", 7, 3, 200+i)
	}
	if code, _ := call(&newer, "User:app"); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("a touch pushed out by %d newer ones: %v, want COORDINATOR_LOAD_IN_PROGRESS", maxTouches, kerr.ErrorForCode(code))
	}
}

// TestOutputRecordFencesTheZombieWindow: a call with producer id -1/-1 that
// names one of its outputs (kip1289 OutputRecord) instead of a touch is
// checked as TestTouchOffsetFencesTheZombieWindow's calls are: against the
// ids the output's batch was written with. Kept is the first batch per
// partition of the transaction (by topic name or id, as the Produce named
// it), until its EndTxn (ForgetOutputs); a record in no kept batch, or
// another principal's, asks for a touch (retriable).
func TestOutputRecordFencesTheZombieWindow(t *testing.T) {
	topic := [16]byte{1}
	e := testEngine()
	e.Acquired("User:app", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	e.SetTxn("User:app", "tx", 7, 2)
	// The zombie's outputs, at epoch 2: "out" partition 0 by name (Produce
	// v12), partition 1 by id (v13).
	outID := [16]byte{9}
	e.LearnOutputs("User:app", "tx", 7, 2, []OutputBatch{{Topic: "out", Partition: 0, First: 10, Last: 19}, {TopicID: outID, Partition: 1, First: 40, Last: 40}})
	e.LearnOutputs("User:app", "tx", 7, 2, []OutputBatch{{Topic: "out", Partition: 0, First: 20, Last: 29}}) // a later batch: the first stays
	call := func(ref *kip1289.OutputRef, ident string) (int16, *Call) {
		req := txnReq(topic, 0, ab(0, 1, 1))
		req.ProducerID, req.ProducerEpoch, req.OutputRecord = -1, -1, ref
		r, c := e.validateAndReserve(req, ident)
		if c != nil {
			e.unstage(c)
			return 0, c
		}
		return r.ErrorCode, nil
	}
	byName := &kip1289.OutputRef{Topic: "out", TopicID: outID, Partition: 0, Offset: 15}
	byID := &kip1289.OutputRef{Topic: "out", TopicID: outID, Partition: 1, Offset: 40}
	for _, ref := range []*kip1289.OutputRef{byName, byID} {
		if code, c := call(ref, "User:app"); code != 0 || c.epoch != 2 {
			t.Fatalf("%+v: the zombie's call before the newer instance initialised: %v, %+v", *ref, kerr.ErrorForCode(code), c)
		}
	}
	for name, ref := range map[string]*kip1289.OutputRef{
		"an offset of the later batch": {Topic: "out", Partition: 0, Offset: 25},
		"another partition":            {Topic: "out", Partition: 2, Offset: 15},
		"another topic":                {Topic: "other", Partition: 0, Offset: 15},
	} {
		if code, _ := call(ref, "User:app"); code != kerr.CoordinatorLoadInProgress.Code {
			t.Fatalf("%s: %v, want COORDINATOR_LOAD_IN_PROGRESS", name, kerr.ErrorForCode(code))
		}
	}
	if code, _ := call(byName, "User:other"); code == 0 {
		t.Fatalf("another principal naming the output was staged")
	}
	e.SetTxn("User:app", "tx", 7, 3) // the newer instance's InitProducerId
	for _, ref := range []*kip1289.OutputRef{byName, byID} {
		if code, _ := call(ref, "User:app"); code != kerr.ProducerFenced.Code {
			t.Fatalf("%+v: the zombie's call naming its output after the newer instance initialised: %v, want PRODUCER_FENCED", *ref, kerr.ErrorForCode(code))
		}
	}
	// The newer instance's first batch in partition 0 replaces the zombie's.
	e.LearnOutputs("User:app", "tx", 7, 3, []OutputBatch{{Topic: "out", Partition: 0, First: 30, Last: 31}})
	if code, c := call(&kip1289.OutputRef{Topic: "out", Partition: 0, Offset: 31}, "User:app"); code != 0 || c.epoch != 3 {
		t.Fatalf("the newer instance's call naming its output: %v, %+v", kerr.ErrorForCode(code), c)
	}
	e.ForgetOutputs("tx") // its EndTxn
	if code, _ := call(&kip1289.OutputRef{Topic: "out", Partition: 0, Offset: 31}, "User:app"); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("an output of an ended transaction: %v, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(code))
	}
	// Bounded: past MaxOutputPartitions partitions nothing more is kept.
	var many []OutputBatch
	for p := int32(0); p < MaxOutputPartitions+10; p++ {
		many = append(many, OutputBatch{Topic: "wide", Partition: p, First: 1, Last: 1})
	}
	e.LearnOutputs("User:app", "tx", 7, 3, many)
	if n := len(e.txns["tx"].outputs); n != MaxOutputPartitions {
		t.Fatalf("%d output partitions kept, want %d", n, MaxOutputPartitions)
	}
	// A transaction another principal owns learns nothing from this one.
	e.SetTxn("User:bob", "bobs", 8, 1)
	e.LearnOutputs("User:app", "bobs", 8, 1, []OutputBatch{{Topic: "out", Partition: 0, First: 1, Last: 1}})
	if n := len(e.txns["bobs"].outputs); n != 0 {
		t.Fatalf("another principal's transaction learned %d output partitions", n)
	}
}

// TestCallAcksRuns: Call.Acks groups a call's offsets run by run; whatever
// their order (a redelivery screen appends partition by partition, but
// nothing requires it), it must give what adding them one by one gives.
func TestCallAcksRuns(t *testing.T) {
	p0, p1 := partKey{"g", [16]byte{1}, 0}, partKey{"g", [16]byte{1}, 1}
	c := &Call{group: "g", member: "m", offsets: []offRef{
		{part: p0, node: 1, offset: 5, ackType: 1}, {part: p0, node: 1, offset: 6, ackType: 3},
		{part: p1, node: 2, offset: 5, ackType: 1},
		{part: p0, node: 1, offset: 9, ackType: 2},  // p0 again, after p1
		{part: p0, node: 3, offset: 10, ackType: 1}, // p0 on another node
	}}
	want := Releases{}
	for _, r := range c.offsets {
		c.addRef(want, r, r.ackType)
	}
	if got := c.Acks(); !reflect.DeepEqual(map[upstream.SessionKey]upstream.Acks(want), got) {
		t.Fatalf("Acks() = %v, want %v", got, want)
	}
}

// TestAckPlanSkipsAGoneEntry: a client ack's plan is made under one lock
// and applied under another, after the broker's answer. If the offset's
// entry left the map in between (its transaction aborted) and a new
// delivery of it was staged, the ack was of the old delivery: the new
// entry is not marked acknowledged by it.
func TestAckPlanSkipsAGoneEntry(t *testing.T) {
	topic := [16]byte{9}
	e := txnEngine()
	old := stageAcquired(t, e, topic, 0, 1)
	_, held, plan := e.FilterClientAcks("g", "m1", topic, 0, []AckRange{{0, 1, []int8{1}}})
	if held != 2 || plan == nil {
		t.Fatalf("the ack of staged offsets: held %d, plan %v", held, plan)
	}
	e.Abort(old)
	ps := e.parts[partKey{"g", topic, 0}]
	delete(ps.owed, 0)
	delete(ps.owed, 1)
	stageAcquired(t, e, topic, 0, 1) // the redelivery
	e.ApplyAckPlan(plan)
	for o := int64(0); o <= 1; o++ {
		if st := ps.offsets[o]; st == nil || st.clientAcked {
			t.Fatalf("offset %d of the new delivery: %+v, want staged and not acknowledged by the old ack", o, st)
		}
	}
}

// TestStaleAckPlanKeepsANewEntry: two plans of the client's ack of an
// applied offset (the ack sent twice); the first forgets the entry, the
// offset is acquired and staged again, then the second plan is applied:
// it must not take the new delivery's entry out of the map.
func TestStaleAckPlanKeepsANewEntry(t *testing.T) {
	topic := [16]byte{10}
	e := txnEngine()
	call := stageAcquired(t, e, topic, 0, 0)
	e.Commit(call)
	e.Finish(call) // APPLIED, waiting for the client's ack
	_, _, first := e.FilterClientAcks("g", "m1", topic, 0, []AckRange{{0, 0, []int8{1}}})
	_, _, second := e.FilterClientAcks("g", "m1", topic, 0, []AckRange{{0, 0, []int8{1}}})
	if first == nil || second == nil {
		t.Fatal("no plans")
	}
	e.ApplyAckPlan(first)
	ps := e.parts[partKey{"g", topic, 0}]
	if ps.offsets[0] != nil {
		t.Fatalf("the applied offset was not forgotten on the client's ack: %+v", ps.offsets[0])
	}
	stageAcquired(t, e, topic, 0, 0) // the redelivery
	e.ApplyAckPlan(second)
	if st := ps.offsets[0]; st == nil || st.state != stStaging {
		t.Fatalf("the new delivery's entry after the stale plan: %+v, want STAGING", st)
	}
}

// stageAcquired has member m1 of group g acquire offsets first..last of
// topic/0 and stages them in transaction tx (set up by the caller).
func stageAcquired(t *testing.T, e *Ledger, topic [16]byte, first, last int64) *Call {
	t.Helper()
	e.Acquired("", 0, "g", "m1", topic, 0, acq(first, last), time.Minute)
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(first, last, 1)), "")
	if call == nil {
		t.Fatalf("staging offsets %d-%d was refused", first, last)
	}
	return call
}

// txnEngine is testEngine with transaction tx (producer id 7, epoch 2)
// known, as txnReq sends it.
func txnEngine() *Ledger {
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	return e
}

// TestAbortAcrossPartitionsWithASkippedOffset: a transition looks each
// share partition up once, and an offset it skips (no longer the call's)
// must not make the next one of another partition use the wrong one.
func TestAbortAcrossPartitionsWithASkippedOffset(t *testing.T) {
	topic := [16]byte{11}
	e := txnEngine()
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 0), time.Minute)
	e.Acquired("", 0, "g", "m1", topic, 1, acq(0, 1), time.Minute)
	req := txnReq(topic, 0, ab(0, 0, 1))
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, kip1289.TxnShareAcknowledgePartition{Partition: 1, AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{ab(0, 1, 1)}})
	_, call := e.validateAndReserve(req, "")
	if call == nil {
		t.Fatal("valid call refused")
	}
	p1 := e.parts[partKey{"g", topic, 1}]
	p1.put(0, &offState{member: "m1", state: stCommitted, call: &Call{txnID: "(redelivered)"}}) // 1/0 no longer the call's
	if rel := e.Abort(call); rel[upstream.SessionKey{Group: "g", Member: "m1"}].Count() != 2 {
		t.Fatalf("released %+v, want 0/0 and 1/1", rel)
	}
	if st := p1.offsets[1]; st != nil {
		t.Fatalf("offset 1/1 still held after the abort: %+v", st)
	}
}
