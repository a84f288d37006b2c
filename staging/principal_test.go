package staging

import (
	"testing"
	"time"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStagingBoundToPrincipal: a transaction whose writes the broker
// accepted from alice, a group alice fetched in and alice's acquisitions
// cannot be used by bob, with the reference's codes; messages name no
// epoch.
func TestStagingBoundToPrincipal(t *testing.T) {
	topic := [16]byte{9}
	e := testEngine()
	e.cfg.MaxPendingRecords = 100
	e.SetTxn("User:alice", "tx", 7, 2)
	e.SetMember("User:alice", "g", "m1", 3)
	e.Acquired("User:alice", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	code := func(r *kip1289.TxnShareAcknowledgeResponse) int16 {
		if r == nil {
			return 0
		}
		return r.ErrorCode
	}
	req := func(member string, epoch int32) *kip1289.TxnShareAcknowledgeRequest {
		r := txnReq(topic, 0, ab(0, 1, 1))
		r.MemberID, r.MemberEpoch = member, epoch
		return r
	}
	if r, _ := e.validateAndReserve(req("", 0), "User:bob"); code(r) != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("bob into alice's transaction: %+v", r)
	}
	e.SetTxn("User:bob", "tx-bob", 8, 0)
	bobReq := func(member string, epoch int32) *kip1289.TxnShareAcknowledgeRequest {
		r := req(member, epoch)
		r.TransactionalID, r.ProducerID, r.ProducerEpoch = kmsg.StringPtr("tx-bob"), 8, 0
		return r
	}
	if r, _ := e.validateAndReserve(bobReq("", 0), "User:bob"); code(r) != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("bob, never seen reading the group: %+v", r)
	}
	e.SetMember("User:bob", "g", "m2", 3)
	if r, _ := e.validateAndReserve(bobReq("m1", 3), "User:bob"); code(r) != kerr.UnknownMemberID.Code {
		t.Fatalf("bob naming alice's member: %+v", r)
	}
	r, _ := e.validateAndReserve(bobReq("", 0), "User:bob")
	if code(r) != kerr.InvalidRecordState.Code {
		t.Fatalf("bob, member left to the proxy, alice's offsets: %+v", r)
	}
	if r, _ := e.validateAndReserve(req("", 0), "User:alice"); r != nil {
		t.Fatalf("alice's own call refused: %+v", r)
	}
	old := req("", 0)
	old.ProducerEpoch = 1
	r, _ = e.validateAndReserve(old, "User:alice")
	if code(r) != kerr.ProducerFenced.Code {
		t.Fatalf("older epoch: %+v", r)
	}
	for _, tp := range r.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorMessage != nil && (containsDigit(*p.ErrorMessage)) {
				t.Fatalf("a fenced caller learns a number: %q", *p.ErrorMessage)
			}
		}
	}
}

func containsDigit(s string) bool {
	for _, c := range s {
		if c >= '0' && c <= '9' {
			return true
		}
	}
	return false
}

// TestRetryOfStagedCallSameAnswer: the same call again, once staged, gets
// success and stages nothing twice; a call mixing staged and new offsets is
// refused.
func TestRetryOfStagedCallSameAnswer(t *testing.T) {
	topic := [16]byte{10}
	e := testEngine()
	e.cfg.MaxPendingRecords = 100
	e.SetTxn("", "tx", 7, 2)
	e.Acquired("", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 1)), "")
	if call == nil {
		t.Fatal("not staged")
	}
	for _, r := range call.offsets {
		e.parts[r.part].offsets[r.offset].state = stTxPending // as Stage does once written
	}
	r, again := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 1)), "")
	if again != nil || r == nil || r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("retry: %+v, call %v; want success and nothing staged", r, again)
	}
	if e.pending != 3 {
		t.Fatalf("pending %d after a retry, want 3", e.pending)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(0, 3, 1)), ""); r == nil || r.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("staged and new offsets mixed: %+v", r)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 3)), ""); r == nil || r.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("the same offsets with another type: %+v", r)
	}
}

// TestCallBounds: too many offsets or partitions are refused before any
// expansion, and a refusal is no larger than a success for the same
// partitions plus one message.
func TestCallBounds(t *testing.T) {
	topic := [16]byte{11}
	e := testEngine()
	e.SetTxn("", "tx", 7, 2)
	wide := txnReq(topic, 0, ab(0, 1<<40, 1))
	if r, _ := e.validateAndReserve(wide, ""); r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("2^40 offsets: %+v", r)
	}
	many := txnReq(topic, 0, ab(0, 0, 1))
	for i := int32(1); i < 5000; i++ {
		many.Topics[0].Partitions = append(many.Topics[0].Partitions, kip1289.TxnShareAcknowledgePartition{Partition: i,
			AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{ab(0, 0, 1)}})
	}
	r, _ := e.validateAndReserve(many, "")
	if r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("5000 partitions: %+v", r)
	}
	r.APIKey = int16(e.cfg.APIKey)
	req := many
	req.APIKey = int16(e.cfg.APIKey)
	okSize := len(okResponse(req).AppendTo(nil))
	if got := len(r.AppendTo(nil)); got > okSize+200 {
		t.Fatalf("refusal of %d partitions is %d bytes, a success %d", len(many.Topics[0].Partitions), got, okSize)
	}
}

func TestLearnTxn(t *testing.T) {
	e := testEngine()
	e.LearnTxn("", "a", 5, 2)
	e.LearnTxn("", "a", 5, 1) // an older write answered late
	e.LearnTxn("", "a", 9, 7) // another producer id: only InitProducerId/EndTxn set that
	if got := e.txns["a"]; got.producerID != 5 || got.epoch != 2 {
		t.Fatalf("got %+v, want producer 5 epoch 2", got)
	}
	e.LearnTxn("User:alice", "a", 5, 4)
	if got := e.txns["a"]; got.producerID != 5 || got.epoch != 4 || !got.ownedBy("") || !got.ownedBy("User:alice") || got.ownedBy("User:bob") {
		t.Fatalf("got %+v, want epoch 4, owned by \"\" and alice, not bob", got)
	}
}
