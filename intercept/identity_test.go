package intercept

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

type fakeConn struct{ done chan struct{} }

func (c *fakeConn) Node() int32 { return 0 }
func (c *fakeConn) StartInject(kmsg.Request) (func(context.Context) (kmsg.Response, error), error) {
	return nil, nil
}
func (c *fakeConn) Done() <-chan struct{} { return c.done }

// TestSASLIdentity: PLAIN and SCRAM exchanges the broker accepted name the
// connection User:<name> (the same identity through either mechanism);
// SCRAM only after its second round trip; another mechanism is identified
// by its first token; nothing before the broker accepted.
func TestSASLIdentity(t *testing.T) {
	e := testEngine()
	plain := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(plain, "PLAIN")
	if !e.authenticating(plain) || e.identOf(plain) != "" {
		t.Fatal("identified before the broker accepted the credentials")
	}
	e.saslAuthenticated(plain, []byte("\x00alice\x00alice-secret"))
	if got := e.identOf(plain); got != "User:alice" {
		t.Fatalf("PLAIN: %q", got)
	}
	scram := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(scram, "SCRAM-SHA-256")
	e.saslAuthenticated(scram, []byte("n,,n=alice,r=abcdef"))
	if e.identOf(scram) != "" || !e.authenticating(scram) {
		t.Fatal("SCRAM identified after its first round trip")
	}
	e.saslAuthenticated(scram, []byte("c=biws,r=abcdefxyz,p=proof"))
	if got := e.identOf(scram); got != "User:alice" {
		t.Fatalf("SCRAM: %q", got)
	}
	// OAUTHBEARER: two tokens of one subject are one identity, the
	// subject's; a token that is not a JWT identifies its connection only.
	jwt := func(sub string, n int) string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":%q,"iat":%d}`, sub, n)))
		return h + "." + p + ".c2ln"
	}
	conns := make([]*fakeConn, 4)
	for i := range conns {
		conns[i] = &fakeConn{done: make(chan struct{})}
		e.saslHandshake(conns[i], "OAUTHBEARER")
	}
	e.saslAuthenticated(conns[0], []byte("n,,\x01auth=Bearer "+jwt("alice", 1)+"\x01\x01"))
	e.saslAuthenticated(conns[1], []byte("n,,\x01auth=Bearer "+jwt("alice", 2)+"\x01\x01"))
	e.saslAuthenticated(conns[2], []byte("n,,\x01auth=Bearer opaque-1\x01\x01"))
	e.saslAuthenticated(conns[3], []byte("n,,\x01auth=Bearer opaque-2\x01\x01"))
	if a, b := e.identOf(conns[0]), e.identOf(conns[1]); a != "User:alice" || b != "User:alice" {
		t.Fatalf("OAUTHBEARER JWTs of alice: %q %q, want User:alice", a, b)
	}
	if a, b := e.identOf(conns[2]), e.identOf(conns[3]); a == "" || b == "" || a == b || strings.HasPrefix(a, "User:") {
		t.Fatalf("opaque OAUTHBEARER tokens: %q %q: want distinct token identities", a, b)
	}
	if u, ok := scramUser([]byte("n,a=x,n=we=2Cird=3Dname,r=1")); !ok || u != "we,ird=name" {
		t.Fatalf("escaped SCRAM user: %q %v", u, ok)
	}
	close(plain.done)
	deadline := time.Now().Add(5 * time.Second)
	for e.identOf(plain) != "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.identOf(plain) != "" {
		t.Fatal("a closed connection's identity is kept")
	}
}

// TestStagingBoundToPrincipal: a transaction whose writes the broker
// accepted from alice, a group alice fetched in and alice's acquisitions
// cannot be used by bob, with the reference's codes; messages name no
// epoch.
func TestStagingBoundToPrincipal(t *testing.T) {
	topic := [16]byte{9}
	e := testEngine()
	e.cfg.MaxPendingRecords = 100
	e.setTxn("User:alice", "tx", 7, 2)
	e.setMember("User:alice", "g", "m1", 3)
	e.acquired("User:alice", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
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
	if r, _ := e.validateAndReserveAs(req("", 0), "User:bob"); code(r) != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("bob into alice's transaction: %+v", r)
	}
	e.setTxn("User:bob", "tx-bob", 8, 0)
	bobReq := func(member string, epoch int32) *kip1289.TxnShareAcknowledgeRequest {
		r := req(member, epoch)
		r.TransactionalID, r.ProducerID, r.ProducerEpoch = kmsg.StringPtr("tx-bob"), 8, 0
		return r
	}
	if r, _ := e.validateAndReserveAs(bobReq("", 0), "User:bob"); code(r) != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("bob, never seen reading the group: %+v", r)
	}
	e.setMember("User:bob", "g", "m2", 3)
	if r, _ := e.validateAndReserveAs(bobReq("m1", 3), "User:bob"); code(r) != kerr.UnknownMemberID.Code {
		t.Fatalf("bob naming alice's member: %+v", r)
	}
	r, _ := e.validateAndReserveAs(bobReq("", 0), "User:bob")
	if code(r) != kerr.InvalidRecordState.Code {
		t.Fatalf("bob, member left to the proxy, alice's offsets: %+v", r)
	}
	if r, _ := e.validateAndReserveAs(req("", 0), "User:alice"); r != nil {
		t.Fatalf("alice's own call refused: %+v", r)
	}
	old := req("", 0)
	old.ProducerEpoch = 1
	r, _ = e.validateAndReserveAs(old, "User:alice")
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
	e.setTxn("", "tx", 7, 2)
	e.acquired("", 0, "g", "m1", topic, 0, acq(0, 9), time.Minute)
	_, call := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 1)))
	if call == nil {
		t.Fatal("not staged")
	}
	for _, r := range call.offsets {
		e.parts[r.part].offsets[r.offset].state = stTxPending // as Stage does once written
	}
	r, again := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 1)))
	if again != nil || r == nil || r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("retry: %+v, call %v; want success and nothing staged", r, again)
	}
	if e.pending != 3 {
		t.Fatalf("pending %d after a retry, want 3", e.pending)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(0, 3, 1))); r == nil || r.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("staged and new offsets mixed: %+v", r)
	}
	if r, _ := e.validateAndReserve(txnReq(topic, 0, ab(0, 2, 3))); r == nil || r.ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("the same offsets with another type: %+v", r)
	}
}

// TestCallBounds: too many offsets or partitions are refused before any
// expansion, and a refusal is no larger than a success for the same
// partitions plus one message.
func TestCallBounds(t *testing.T) {
	topic := [16]byte{11}
	e := testEngine()
	e.setTxn("", "tx", 7, 2)
	wide := txnReq(topic, 0, ab(0, 1<<40, 1))
	if r, _ := e.validateAndReserve(wide); r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("2^40 offsets: %+v", r)
	}
	many := txnReq(topic, 0, ab(0, 0, 1))
	for i := int32(1); i < 5000; i++ {
		many.Topics[0].Partitions = append(many.Topics[0].Partitions, kip1289.TxnShareAcknowledgePartition{Partition: i,
			AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{ab(0, 0, 1)}})
	}
	r, _ := e.validateAndReserve(many)
	if r == nil || r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("5000 partitions: %+v", r)
	}
	r.APIKey = e.key
	req := many
	req.APIKey = e.key
	okSize := len(okResponse(req).AppendTo(nil))
	if got := len(r.AppendTo(nil)); got > okSize+200 {
		t.Fatalf("refusal of %d partitions is %d bytes, a success %d", len(many.Topics[0].Partitions), got, okSize)
	}
}

// TestEpochErrorsCountOnlyTheProxys: INVALID_SHARE_SESSION_EPOCH answered
// to a client that kept its numbering in step counts against the proxy;
// one answered to a client that skipped an epoch, or to another principal
// naming the session, does not (clients cannot drive the alert).
func TestEpochErrorsCountOnlyTheProxys(t *testing.T) {
	e := testEngine()
	c := &fakeConn{done: make(chan struct{})}
	send := func(ident string, epoch int32) *shareState {
		st := &shareState{node: 0, group: "g", member: "m", ident: ident}
		req := kmsg.NewPtrShareFetchRequest()
		req.ShareSessionEpoch = epoch
		act := e.onSession(&Request{Conn: c, Key: req.Key(), Version: 1}, st, &req.ShareSessionEpoch, false, req)
		if act.After != nil {
			act.After()
		}
		return st
	}
	count := func() float64 {
		m := &dto.Metric{}
		e.m.epochErrors.Write(m)
		return m.GetCounter().GetValue()
	}
	e.noteSessionError(0, send("User:alice", 0), "ShareFetch")
	e.noteSessionError(kerr.InvalidShareSessionEpoch.Code, send("User:alice", 1), "ShareFetch") // in step
	if got := count(); got != 1 {
		t.Fatalf("in-step epoch error counted %v times, want 1", got)
	}
	e.noteSessionError(kerr.InvalidShareSessionEpoch.Code, send("User:alice", 7), "ShareFetch")   // skipped 2..6
	e.noteSessionError(kerr.InvalidShareSessionEpoch.Code, send("User:mallory", 8), "ShareFetch") // not hers
	if got := count(); got != 1 {
		t.Fatalf("epoch errors of a skipping client and of a stranger counted: %v, want 1", got)
	}
}
