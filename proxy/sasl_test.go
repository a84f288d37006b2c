package proxy

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/configs"
)

// saslConns makes connections of a server configured with kcfg, as the
// SASL hooks see them (no socket: the principal's share is never full
// here).
func saslConns(kcfg configs.KIP1289) func() *conn {
	cfg := configs.Default()
	cfg.KIP1289 = kcfg
	s := &Server{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	return func() *conn { return &conn{s: s, log: s.log} }
}

// TestSASLIdentity: PLAIN and SCRAM exchanges the broker accepted name the
// connection User:<name> (the same identity through either mechanism);
// SCRAM only after its second round trip; another mechanism is identified
// by its first token; nothing before the broker accepted.
func TestSASLIdentity(t *testing.T) {
	newConn := saslConns(configs.Default().KIP1289)
	plain := newConn()
	plain.saslHandshake("PLAIN")
	if !plain.Authenticating() || plain.Principal() != "" {
		t.Fatal("identified before the broker accepted the credentials")
	}
	plain.saslAuthenticated([]byte("\x00alice\x00alice-secret"), nil)
	if got := plain.Principal(); got != "User:alice" {
		t.Fatalf("PLAIN: %q", got)
	}
	scram := newConn()
	scram.saslHandshake("SCRAM-SHA-256")
	scram.saslAuthenticated([]byte("n,,n=alice,r=abcdef"), nil)
	if scram.Principal() != "" || !scram.Authenticating() {
		t.Fatal("SCRAM identified after its first round trip")
	}
	scram.saslAuthenticated([]byte("c=biws,r=abcdefxyz,p=proof"), nil)
	if got := scram.Principal(); got != "User:alice" {
		t.Fatalf("SCRAM: %q", got)
	}
	// OAUTHBEARER: two tokens of one subject are one identity, the
	// subject's; a token that is not a JWT identifies its connection only.
	jwt := func(sub string, n int) string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":%q,"iat":%d}`, sub, n)))
		return h + "." + p + ".c2ln"
	}
	conns := make([]*conn, 4)
	for i := range conns {
		conns[i] = newConn()
		conns[i].saslHandshake("OAUTHBEARER")
	}
	conns[0].saslAuthenticated([]byte("n,,\x01auth=Bearer "+jwt("alice", 1)+"\x01\x01"), nil)
	conns[1].saslAuthenticated([]byte("n,,\x01auth=Bearer "+jwt("alice", 2)+"\x01\x01"), nil)
	conns[2].saslAuthenticated([]byte("n,,\x01auth=Bearer opaque-1\x01\x01"), nil)
	conns[3].saslAuthenticated([]byte("n,,\x01auth=Bearer opaque-2\x01\x01"), nil)
	if a, b := conns[0].Principal(), conns[1].Principal(); a != "User:alice" || b != "User:alice" {
		t.Fatalf("OAUTHBEARER JWTs of alice: %q %q, want User:alice", a, b)
	}
	if a, b := conns[2].Principal(), conns[3].Principal(); a == "" || b == "" || a == b || strings.HasPrefix(a, "User:") {
		t.Fatalf("opaque OAUTHBEARER tokens: %q %q: want distinct token identities", a, b)
	}
	if u, ok := scramUser([]byte("n,a=x,n=we=2Cird=3Dname,r=1")); !ok || u != "we,ird=name" {
		t.Fatalf("escaped SCRAM user: %q %v", u, ok)
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
	newConn := saslConns(cfg)
	token := func(payload string) []byte {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(payload))
		return []byte("n,,\x01auth=Bearer " + h + "." + p + ".\x01\x01")
	}
	oauth := func(payload string) string {
		c := newConn()
		c.saslHandshake("OAUTHBEARER")
		c.saslAuthenticated(token(payload), nil)
		return c.Principal()
	}
	if got := oauth(`{"sub":"svc-7f3a","preferred_username":"alice"}`); got != "User:alice" {
		t.Errorf("claim preferred_username: %q, want User:alice", got)
	}
	for _, payload := range []string{`{"sub":"alice"}`, `{"preferred_username":["alice"]}`, `{"preferred_username":""}`} {
		if got := oauth(payload); got == "" || strings.HasPrefix(got, "User:") {
			t.Errorf("token %s without a string preferred_username: %q, want a token identity", payload, got)
		}
	}

	krb := newConn()
	krb.saslHandshake("GSSAPI")
	krb.saslAuthenticated([]byte("AP-REQ"), []byte("AP-REP"))
	krb.saslAuthenticated(nil, []byte("wrapped security-layer offer"))
	if krb.Principal() != "" || !krb.Authenticating() {
		t.Fatalf("GSSAPI identified before its exchange completed: %q", krb.Principal())
	}
	krb.saslAuthenticated([]byte("wrapped choice"), nil)
	if got := krb.Principal(); got != "User:app" {
		t.Fatalf("GSSAPI with gssapi_principal: %q, want User:app", got)
	}
	// A first step the broker answered with nothing is not the end.
	krb2 := newConn()
	krb2.saslHandshake("GSSAPI")
	krb2.saslAuthenticated([]byte("AP-REQ"), nil)
	if krb2.Principal() != "" {
		t.Fatalf("GSSAPI identified after one round trip: %q", krb2.Principal())
	}

	plain := saslConns(configs.Default().KIP1289) // gssapi_principal unset
	a, b := plain(), plain()
	for i, c := range []*conn{a, b} {
		c.saslHandshake("GSSAPI")
		c.saslAuthenticated([]byte(fmt.Sprintf("AP-REQ %d", i)), []byte("AP-REP"))
	}
	if x, y := a.Principal(), b.Principal(); x == "" || x == y || strings.HasPrefix(x, "User:") {
		t.Fatalf("GSSAPI without gssapi_principal: %q %q, want two token identities", x, y)
	}
}
