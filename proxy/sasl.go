package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Who a connection is, as the broker authenticated it.
//
// The proxy passes SASL through: the client authenticates to the broker
// itself, on its own upstream connection, and every request it forwards is
// authorised by the broker as that principal. TxnShareAcknowledge is the one
// request the proxy answers itself, and its shadow write goes out with the
// proxy's own credentials; so the proxy must decide, as the reference broker
// would, whether the caller may use the transaction and the group. It does
// not copy the cluster's ACLs: it binds each transaction and each
// acquisition to the principal of the connection the broker accepted it on
// (an InitProducerId, transactional Produce or EndTxn needs WRITE on the
// transactional id; a ShareGroupHeartbeat or ShareFetch needs READ on the
// group and topic), and serves a TxnShareAcknowledge only for the
// transactions and acquisitions of the caller's own principal.
//
// The principal is read from the SASL exchange the broker accepted: PLAIN's
// authentication id and SCRAM's user name are the user name Kafka's default
// principal builder turns into User:<name>, so "User:alice" through PLAIN
// and through SCRAM is one identity; OAUTHBEARER's is the token's subject
// claim (Kafka's default principal for it; kip1289.oauthbearer_sub_claim
// names another), User:<sub> too. GSSAPI carries the principal in a form
// the proxy does not read: with kip1289.gssapi_principal set, every GSSAPI
// connection is that principal (the sidecar case); otherwise, as for any
// other mechanism, a connection is identified by its mechanism and its
// first authentication token, so only connections that presented the same
// token share an identity (with Kerberos, none do: see docs/operations.md).
// A connection that did not authenticate is "" (the broker's ANONYMOUS).

// saslProgress is a connection's SASL progress (conn.sasl, under
// conn.saslMu).
type saslProgress struct {
	mech    string
	steps   int    // SaslAuthenticate round trips the broker accepted
	ident   string // set once authentication completed
	first   []byte // the first token, for mechanisms identified by it
	started bool   // a SaslHandshake was accepted
}

// Principal implements Conn: "" until the client authenticated.
func (c *conn) Principal() string {
	c.saslMu.Lock()
	defer c.saslMu.Unlock()
	return c.sasl.ident
}

// Authenticating implements Conn: a SASL exchange started on c and has not
// completed.
func (c *conn) Authenticating() bool {
	c.saslMu.Lock()
	defer c.saslMu.Unlock()
	return c.sasl.started && c.sasl.ident == ""
}

// saslHandshake records the mechanism the broker accepted on c.
func (c *conn) saslHandshake(mech string) {
	c.saslMu.Lock()
	defer c.saslMu.Unlock()
	// A re-authentication (KIP-368) starts over; the broker keeps the
	// principal, and so does the proxy once the exchange completes.
	c.sasl.mech, c.sasl.steps, c.sasl.first, c.sasl.started = mech, 0, nil, true
}

// saslAuthenticated records one SaslAuthenticate round trip the broker
// accepted on c, with the token the client sent and the broker's reply.
func (c *conn) saslAuthenticated(token, reply []byte) {
	var known string // the principal, once it became known: admitted after saslMu is released
	defer func() {
		if known != "" {
			c.Authenticated(known)
		}
	}()
	c.saslMu.Lock()
	defer c.saslMu.Unlock()
	ci := &c.sasl
	ci.started = true
	kcfg := c.s.cfg.KIP1289
	ci.steps++
	if ci.steps == 1 {
		ci.first = append([]byte(nil), token...)
	}
	id := ""
	switch m := strings.ToUpper(ci.mech); {
	case m == "PLAIN":
		// [authzid] NUL authcid NUL passwd; Kafka requires authzid to be
		// empty or the authcid.
		if parts := bytes.Split(token, []byte{0}); len(parts) == 3 && len(parts[1]) > 0 {
			id = "User:" + string(parts[1])
		}
	case strings.HasPrefix(m, "SCRAM-"):
		// Complete after the client-final message (the second round
		// trip); the user is in the client-first message.
		if ci.steps >= 2 {
			if u, ok := scramUser(ci.first); ok {
				id = "User:" + u
			}
		}
	case m == "OAUTHBEARER":
		// The broker validated the token; its principal is the token's
		// claim the cluster names (sasl.oauthbearer.sub.claim.name).
		if sub, ok := oauthSubject(ci.first, kcfg.OAuthBearerSubClaim); ok {
			id = "User:" + sub
		} else {
			id = tokenIdent(m, ci.first)
		}
	case m == "GSSAPI" && kcfg.GSSAPIPrincipal != "":
		// The operator vouches that every Kerberos connection to this
		// sidecar is one principal (kip1289.gssapi_principal). Complete
		// once the broker accepted the client's answer to its
		// security-layer offer (RFC 4752: the context token, the offer,
		// then an empty final reply): until then the connection stays
		// authenticating, and TxnShareAcknowledge refuses it.
		if ci.steps >= 2 && len(reply) == 0 {
			id = kcfg.GSSAPIPrincipal
		}
	default:
		id = tokenIdent(m, ci.first)
	}
	if id != "" && ci.ident == "" {
		ci.ident, known = id, id
	}
}

// tokenIdent identifies a connection of a mechanism whose principal the
// proxy does not read by its first token.
func tokenIdent(mech string, first []byte) string {
	sum := sha256.Sum256(first)
	return mech + ":" + hex.EncodeToString(sum[:12])
}

// oauthSubject reads claim (a string) of the JWT in an OAUTHBEARER initial
// client response (RFC 7628: gs2-header, then "auth=Bearer <token>" between
// 0x01 separators). The signature is not checked: the broker did that, and
// accepted the exchange. An unsecured JWS (alg none, an empty signature, as
// Kafka's unsecured login handler makes) reads the same.
func oauthSubject(first []byte, claim string) (string, bool) {
	for _, kv := range strings.Split(string(first), "\x01") {
		tok, ok := strings.CutPrefix(kv, "auth=Bearer ")
		if !ok {
			continue
		}
		parts := strings.Split(strings.TrimSpace(tok), ".")
		if len(parts) != 3 {
			return "", false
		}
		payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
		if err != nil {
			return "", false
		}
		var claims map[string]json.RawMessage
		var sub string
		if json.Unmarshal(payload, &claims) != nil || json.Unmarshal(claims[claim], &sub) != nil || sub == "" {
			return "", false
		}
		return sub, true
	}
	return "", false
}

// scramUser reads the user name of a SCRAM client-first message
// (RFC 5802: gs2-header "n,," or "n,a=authzid," then "n=user,r=nonce").
func scramUser(first []byte) (string, bool) {
	s := string(first)
	i := strings.Index(s, ",")
	if i < 0 {
		return "", false
	}
	j := strings.Index(s[i+1:], ",")
	if j < 0 {
		return "", false
	}
	bare := s[i+1+j+1:]
	if !strings.HasPrefix(bare, "n=") {
		return "", false
	}
	u := bare[2:]
	if k := strings.Index(u, ","); k >= 0 {
		u = u[:k]
	}
	if u == "" {
		return "", false
	}
	u = strings.ReplaceAll(strings.ReplaceAll(u, "=2C", ","), "=3D", "=")
	return u, true
}

// SaslHandshake and SaslAuthenticate: the transport follows, without
// changing a byte, which principal the broker authenticated on each
// connection (transportHooks).

func saslHandshakeRequest(r *Request) (Action, *saslState) {
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return Action{}, nil
	}
	return Action{}, &saslState{conn: r.Conn.(*conn), mech: req.Mechanism}
}

func (s *Server) saslHandshakeResponse(st *saslState, resp *kmsg.SASLHandshakeResponse) bool {
	if st != nil && resp.ErrorCode == 0 {
		st.conn.saslHandshake(st.mech)
	}
	return false
}

func saslAuthenticateRequest(r *Request) (Action, *saslState) {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil {
		return Action{}, nil
	}
	return Action{}, &saslState{conn: r.Conn.(*conn), token: req.SASLAuthBytes}
}

func (s *Server) saslAuthenticateResponse(st *saslState, resp *kmsg.SASLAuthenticateResponse) bool {
	if st != nil && resp.ErrorCode == 0 {
		st.conn.saslAuthenticated(st.token, resp.SASLAuthBytes)
	}
	return false
}

type saslState struct {
	conn  *conn
	mech  string
	token []byte
}
