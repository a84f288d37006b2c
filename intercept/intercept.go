// Package intercept holds the per-API handlers of the proxy, one file per
// API key (named like franz-go's kfake: 03_metadata.go is key 3).
//
// Each file registers what the proxy must know of its key in one registry
// (Handler; Registry adds the KIP-1289 engine's own key), which the proxy's
// connections ask instead of comparing keys. What every proxy does (broker
// addresses in 00, 01, 03, 10, 60; versions in 18) is kept apart from the
// KIP-1289 engine (Feature, *KIP1289, and the engine's files).
//
// The contract: the proxy passes every request and response through byte
// for byte unless a handler is registered for its key. A registered
// response rewriter receives the decoded response and reports whether it
// changed it; only then is the response re-encoded. Rewriters must not block:
// they run on the connection's response path. (One exception: a ShareFetch
// response with redelivered records waits for the shadow topic to be read to
// its end, see markers/recovery.go; that delays only its own connection.)
package intercept

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Addresses is the proxy's map of upstream brokers to its own listeners.
type Addresses interface {
	// Advertise records that upstream node nodeID lives at host:port and
	// returns the address clients must use for it instead. A negative node
	// id names no broker (e.g. a FindCoordinator error) and is returned
	// unchanged by the rewriters without calling Advertise.
	Advertise(nodeID int32, host string, port int32) (string, int32)
}

// Env is what a handler may use.
type Env struct {
	Addrs Addresses
	Log   *slog.Logger
	// UpstreamKeys, if set, is told every ApiVersions response the
	// upstream sent, before the proxy caps it.
	UpstreamKeys *UpstreamKeys
	// KIP is the transactional-acknowledgement engine (always set).
	KIP *KIP1289
}

// UpstreamKeys is the union of the API keys the upstream brokers advertised:
// a key outside it is never forwarded. The zero value has heard of no
// broker yet and allows every key.
type UpstreamKeys struct {
	keys atomic.Pointer[[kmsg.MaxKey + 1]bool]
}

// Note adds the keys of an ApiVersions response (an error response adds
// none).
func (u *UpstreamKeys) Note(resp *kmsg.ApiVersionsResponse) {
	if resp.ErrorCode != 0 {
		return
	}
	for {
		old := u.keys.Load()
		var next [kmsg.MaxKey + 1]bool
		if old != nil {
			next = *old
		}
		changed := old == nil
		for _, k := range resp.ApiKeys {
			if k.ApiKey >= 0 && k.ApiKey <= kmsg.MaxKey && !next[k.ApiKey] {
				next[k.ApiKey] = true
				changed = true
			}
		}
		if !changed || u.keys.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Allows reports whether a broker advertised key, or none was heard yet.
func (u *UpstreamKeys) Allows(key int16) bool {
	ks := u.keys.Load()
	if ks == nil {
		return true
	}
	return key >= 0 && key <= kmsg.MaxKey && ks[key]
}

// Conn is the client connection a request arrived on, as a hook sees it.
type Conn interface {
	// Node is the upstream broker's node id, -1 when unknown.
	Node() int32
	// StartInject writes req upstream on this connection, after everything
	// written so far, and returns a function that waits for the response
	// (which the client never sees).
	StartInject(req kmsg.Request) (wait func(context.Context) (kmsg.Response, error), err error)
	// Done is closed when the connection pair has closed.
	Done() <-chan struct{}
}

// Authenticated is implemented by a Conn that wants to know the principal
// the broker accepted its client's SASL authentication as (the proxy counts
// connections per principal). It is called once, when the principal
// becomes known (a re-authentication keeps it, as the broker does).
type Authenticated interface {
	Authenticated(principal string)
}

// Request is a client request as a hook sees it.
type Request struct {
	Conn       Conn
	Key        int16
	Version    int16
	Frame      []byte // the whole frame, size prefix included
	BodyOffset int
}

// Body is the request body.
func (r *Request) Body() []byte { return r.Frame[r.BodyOffset:] }

// Action is what a request hook decides. The zero Action forwards the
// request unchanged.
type Action struct {
	// Body replaces the request body (the header is kept).
	Body []byte
	// Local answers the request now; nothing is forwarded.
	Local kmsg.Response
	// Async answers the request later, off the connection's read loop;
	// nothing is forwarded. Responses still reach the client in order.
	Async func() kmsg.Response
	// After runs once the request was written upstream, or was not.
	After func()
	// State is handed to the response rewriter of this request; set by
	// on (the registration), from what the hook returned, never by a hook.
	State any
	// Close closes the connection, with this reason, after the responses
	// owed to earlier requests.
	Close string
}

// RequestHook decides what happens to a client request of its key.
type RequestHook func(env *Env, r *Request) Action

// ResponseRewriter may change a decoded response of its key; it returns true
// if it did. state is what the request hook returned, or nil.
type ResponseRewriter func(env *Env, state any, resp kmsg.Response) bool

// Handler is everything the proxy knows of one API key: how to read its
// frames and what, if anything, it does with its requests and responses. The
// proxy's connection code asks a Handler and never compares keys. Handlers
// are shared: read them, never change them.
type Handler struct {
	// Name names the key in logs and metrics.
	Name string
	// Known: kmsg knows the key, so the proxy can read its request header
	// and may forward it. A key kmsg does not know is never forwarded (a
	// broker closes the connection on it).
	Known bool
	// FlexibleFrom is the first version whose request header is flexible
	// (v2: tagged fields follow the client id); math.MaxInt16 for none.
	// Versions newer than kmsg's stay flexible.
	FlexibleFrom int16
	// MaxVersion is the newest version kmsg decodes; -1 for unknown keys.
	MaxVersion int16
	// ResponseHeaderV0: responses use header v0 at every version (no tagged
	// fields after the correlation id), as ApiVersions' do.
	ResponseHeaderV0 bool

	// Served: the proxy answers every request of the key itself (the
	// feature's own key); Hook always decides Local, Async or Close and
	// nothing goes upstream, which need not know the key.
	Served bool
	// Hook decides about each request; nil forwards it unchanged.
	Hook RequestHook
	// HookKeepsNothing: Hook reads a few fields and keeps no part of the
	// frame (it copies what it keeps). Otherwise the request is decoded
	// whole, so it must be within limits.max_decoded_request_bytes, and its
	// frame's buffer is not reused.
	HookKeepsNothing bool
	// Rewrite may change each response; nil passes responses through byte
	// for byte (apart from the correlation id).
	Rewrite ResponseRewriter
	// Responds reports whether the broker answers the request at all
	// (Produce with acks=0 gets no response); nil: it always does. An error
	// means the request is malformed.
	Responds func(r *Request) (bool, error)
	// TooNew, if set, answers locally a request at a version above
	// MaxVersion, which the proxy could not rewrite the response of.
	TooNew func(version int16) kmsg.Response
	// ResponseVersion, if set, is the version a response to a request at
	// version is encoded at, from its body; otherwise the request's.
	ResponseVersion func(version int16, body []byte) int16
}

// Decoded reports whether the proxy reads requests or responses of the key
// beyond their headers; ApiVersions caps such keys to the versions kmsg
// knows.
func (h *Handler) Decoded() bool { return h.Rewrite != nil || h.Hook != nil || h.Responds != nil }

// FlexibleRequest reports whether a request header at version is flexible.
func (h *Handler) FlexibleRequest(version int16) bool { return version >= h.FlexibleFrom }

// handlers is the registry of the keys kmsg knows, filled in by the files
// of this package (one per key, registering in init).
var handlers = func() (t [kmsg.MaxKey + 1]Handler) {
	for k := range t {
		t[k] = unknownHandler
		req := kmsg.RequestForKey(int16(k))
		if req == nil {
			continue
		}
		h := &t[k]
		h.Name, h.Known, h.MaxVersion = kmsg.NameForKey(int16(k)), true, req.MaxVersion()
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			if req.IsFlexible() {
				h.FlexibleFrom = v
				break
			}
		}
	}
	return t
}()

// unknownHandler is the Handler of a key kmsg does not know.
var unknownHandler = Handler{Name: "Unknown", FlexibleFrom: math.MaxInt16, MaxVersion: -1}

// lookup returns the registered Handler of key.
func lookup(key int16) *Handler {
	if key < 0 || int(key) >= len(handlers) {
		return &unknownHandler
	}
	return &handlers[key]
}

// describe sets what a file knows of its key.
func describe(key kmsg.Key, fn func(h *Handler)) { fn(&handlers[key]) }

// The files of this package register their key's handlers in init, as
// named functions (kfake's handleX style), through one of the two below.
// Both assert here, once for every key, the response's kmsg type and the
// state a request hook left for its response: a handler sees only its own
// types, never an any.

// onResponse registers fn as key's response rewriter, for a key whose
// responses need nothing of their request.
func onResponse[R kmsg.Response](key kmsg.Key, fn func(env *Env, resp R) bool) {
	handlers[key].Rewrite = func(env *Env, _ any, resp kmsg.Response) bool { return fn(env, resp.(R)) }
}

// on registers key's request hook and the response rewriter that reads
// what the hook left for the response: the same *S, or nil when the hook
// left none (a request it did not decode, one answered locally).
func on[S any, R kmsg.Response](key kmsg.Key, hook func(env *Env, r *Request) (Action, *S), rewrite func(env *Env, st *S, resp R) bool) {
	handlers[key].Hook = func(env *Env, r *Request) Action {
		act, st := hook(env, r)
		if st != nil {
			act.State = st
		}
		return act
	}
	handlers[key].Rewrite = func(env *Env, state any, resp kmsg.Response) bool {
		st, _ := state.(*S)
		return rewrite(env, st, resp.(R))
	}
}

// Hook returns the request hook of key, or nil.
func Hook(key int16) RequestHook { return lookup(key).Hook }

// Rewriter returns the response rewriter of key, or nil when responses of
// that key pass through untouched.
func Rewriter(key int16) ResponseRewriter { return lookup(key).Rewrite }

// Decoded reports whether the proxy decodes requests or responses of key.
func Decoded(key int16) bool { return lookup(key).Decoded() }

// FlexibleRequest reports whether a request of key at version has a
// flexible header; false for keys kmsg does not know.
func FlexibleRequest(key, version int16) bool { return lookup(key).FlexibleRequest(version) }

// ResponseHeaderFlexible reports whether a response of key to a request
// with a flexible header has a flexible header too.
func ResponseHeaderFlexible(key int16, flexibleRequest bool) bool {
	return flexibleRequest && !lookup(key).ResponseHeaderV0
}

// Feature is what the proxy knows of the KIP-1289 engine (*KIP1289), apart
// from its start-up (proxy/kip.go): the key it answers itself, the upstream
// connections it keeps open after their client left, and its readiness.
// Forwarding, broker addresses and versions do not depend on it.
type Feature interface {
	// Serves reports whether the proxy answers requests of key itself.
	Serves(key int16) bool
	// TxnHook answers a request of the served key.
	TxnHook(r *Request) Action
	// HoldsSessionsOn reports whether the upstream connection of c must
	// stay open after its client went away.
	HoldsSessionsOn(c Conn) bool
	// WaitSessionsDrained waits until it need not any more, or d passes;
	// false if d passed.
	WaitSessionsDrained(c Conn, d time.Duration) bool
	// CheckUpstream fails when the cluster's ApiVersions conflict with the
	// feature (it uses the served key itself).
	CheckUpstream(resp *kmsg.ApiVersionsResponse) error
	// Start starts the feature's own work once the cluster answers; a
	// failed Start is retried.
	Start(ctx context.Context, env StartEnv) error
	// Recovered reports whether the feature is ready to serve.
	Recovered() bool
	// Close stops its background work.
	Close()
}

var _ Feature = (*KIP1289)(nil)

// Registry is the one place the proxy asks what to do with a key: the
// feature's Handler for the key it serves, else the key's own.
type Registry struct {
	feature Feature
	served  Handler
}

// NewRegistry returns the registry of a proxy serving f (nil: none).
func NewRegistry(f Feature) *Registry {
	r := &Registry{feature: f}
	if f != nil {
		// TxnShareAcknowledge is flexible from v0 (request header v2) and
		// decoded whole.
		r.served = Handler{
			Name:         "TxnShareAcknowledge",
			FlexibleFrom: 0,
			MaxVersion:   -1,
			Served:       true,
			Hook:         func(_ *Env, req *Request) Action { return f.TxnHook(req) },
		}
	}
	return r
}

// For returns the Handler of key; never nil.
func (r *Registry) For(key int16) *Handler {
	if r.feature != nil && r.feature.Serves(key) {
		return &r.served
	}
	return lookup(key)
}
