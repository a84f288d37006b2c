package intercept

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sharetx/sharetx/configs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
func testEngine() *KIP1289 {
	e := NewKIP1289(configs.Default().KIP1289, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil, false)
	return e
}

func TestSASLIdentity(t *testing.T) {
	e := testEngine()
	plain := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(plain, "PLAIN")
	if !e.authenticating(plain) || e.identOf(plain) != "" {
		t.Fatal("identified before the broker accepted the credentials")
	}
	e.saslAuthenticated(plain, []byte("\x00alice\x00alice-secret"), nil)
	if got := e.identOf(plain); got != "User:alice" {
		t.Fatalf("PLAIN: %q", got)
	}
	scram := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(scram, "SCRAM-SHA-256")
	e.saslAuthenticated(scram, []byte("n,,n=alice,r=abcdef"), nil)
	if e.identOf(scram) != "" || !e.authenticating(scram) {
		t.Fatal("SCRAM identified after its first round trip")
	}
	e.saslAuthenticated(scram, []byte("c=biws,r=abcdefxyz,p=proof"), nil)
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
	e.saslAuthenticated(conns[0], []byte("n,,\x01auth=Bearer "+jwt("alice", 1)+"\x01\x01"), nil)
	e.saslAuthenticated(conns[1], []byte("n,,\x01auth=Bearer "+jwt("alice", 2)+"\x01\x01"), nil)
	e.saslAuthenticated(conns[2], []byte("n,,\x01auth=Bearer opaque-1\x01\x01"), nil)
	e.saslAuthenticated(conns[3], []byte("n,,\x01auth=Bearer opaque-2\x01\x01"), nil)
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

// TestSASLIdentitySettings: kip1289.oauthbearer_sub_claim names the token
// claim that is the principal (an unsecured JWS reads the same); a token
// without it, or with a claim that is not a string, identifies its
// connection only. kip1289.gssapi_principal makes every GSSAPI connection
// that principal once its exchange completed (the broker's empty final
// reply after the security-layer offer), and not before; unset, GSSAPI
// connections are identities of their own.
func TestSASLIdentitySettings(t *testing.T) {
	cfg := configs.Default().KIP1289
	cfg.OAuthBearerSubClaim = "preferred_username"
	cfg.GSSAPIPrincipal = "User:app"
	e := NewKIP1289(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil, false)
	token := func(payload string) []byte {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(payload))
		return []byte("n,,\x01auth=Bearer " + h + "." + p + ".\x01\x01")
	}
	oauth := func(payload string) string {
		c := &fakeConn{done: make(chan struct{})}
		e.saslHandshake(c, "OAUTHBEARER")
		e.saslAuthenticated(c, token(payload), nil)
		return e.identOf(c)
	}
	if got := oauth(`{"sub":"svc-7f3a","preferred_username":"alice"}`); got != "User:alice" {
		t.Errorf("claim preferred_username: %q, want User:alice", got)
	}
	for _, payload := range []string{`{"sub":"alice"}`, `{"preferred_username":["alice"]}`, `{"preferred_username":""}`} {
		if got := oauth(payload); got == "" || strings.HasPrefix(got, "User:") {
			t.Errorf("token %s without a string preferred_username: %q, want a token identity", payload, got)
		}
	}

	krb := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(krb, "GSSAPI")
	e.saslAuthenticated(krb, []byte("AP-REQ"), []byte("AP-REP"))
	e.saslAuthenticated(krb, nil, []byte("wrapped security-layer offer"))
	if e.identOf(krb) != "" || !e.authenticating(krb) {
		t.Fatalf("GSSAPI identified before its exchange completed: %q", e.identOf(krb))
	}
	e.saslAuthenticated(krb, []byte("wrapped choice"), nil)
	if got := e.identOf(krb); got != "User:app" {
		t.Fatalf("GSSAPI with gssapi_principal: %q, want User:app", got)
	}
	// A first step the broker answered with nothing is not the end.
	krb2 := &fakeConn{done: make(chan struct{})}
	e.saslHandshake(krb2, "GSSAPI")
	e.saslAuthenticated(krb2, []byte("AP-REQ"), nil)
	if e.identOf(krb2) != "" {
		t.Fatalf("GSSAPI identified after one round trip: %q", e.identOf(krb2))
	}

	plain := testEngine() // gssapi_principal unset
	a, b := &fakeConn{done: make(chan struct{})}, &fakeConn{done: make(chan struct{})}
	for i, c := range []*fakeConn{a, b} {
		plain.saslHandshake(c, "GSSAPI")
		plain.saslAuthenticated(c, []byte(fmt.Sprintf("AP-REQ %d", i)), []byte("AP-REP"))
	}
	if x, y := plain.identOf(a), plain.identOf(b); x == "" || x == y || strings.HasPrefix(x, "User:") {
		t.Fatalf("GSSAPI without gssapi_principal: %q %q, want two token identities", x, y)
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
	count := func() float64 { return e.Stats().EpochErrors }
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
