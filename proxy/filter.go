package proxy

// The filter API: what a feature of the proxy (today one, the KIP-1289
// engine in intercept/) sees of the transport. Modelled on Kroxylicious's
// filters: a filter is built complete by its constructor from a
// FilterContext the transport hands it, declares per-key request hooks and
// response rewriters with typed per-request state (On, OnResponse), may
// answer a key of its own (Serve), and sends requests of its own through
// its context (FilterContext.Send) or on a client's connection
// (Conn.StartInject). The transport owns framing, correlation ids, the
// order of responses, broker addresses (addresses.go), version capping
// (api_versions.go) and SASL identity (sasl.go); a filter does none of
// that.
//
// The contract: a request or response passes through byte for byte unless
// a hook is declared for its key. A response rewriter receives the decoded
// response and reports whether it changed it; only then is it re-encoded.
// Hooks and rewriters must not block: they run on the connection's read and
// response paths (one exception: a ShareFetch response with redelivered
// records waits for the shadow topic to be read to its end, see
// markers/recovery.go; that delays only its own connection).

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/upstream"
)

// Conn is the client connection a request arrived on, as a filter sees it.
type Conn interface {
	// Node is the upstream broker's node id, -1 when unknown.
	Node() int32
	// StartInject writes req upstream on this connection, after everything
	// written so far, and returns a function that waits for the response
	// (which the client never sees).
	StartInject(req kmsg.Request) (wait func(context.Context) (kmsg.Response, error), err error)
	// StartInjectAs is StartInject with the request header's client id
	// set to clientID instead of the proxy's: for a client's own request
	// that the filter sends again, which the broker should see as the
	// client's (its request log, client-id quotas).
	StartInjectAs(req kmsg.Request, clientID string) (wait func(context.Context) (kmsg.Response, error), err error)
	// Done is closed when the connection pair has closed.
	Done() <-chan struct{}
	// Principal is who the broker authenticated the client as (sasl.go:
	// "User:alice"); "" until it authenticated, and on a connection that
	// did not.
	Principal() string
	// Authenticating reports whether a SASL exchange started on the
	// connection and has not completed.
	Authenticating() bool
	// FlushUpstream writes out the client's earlier requests, which the
	// transport may hold back while more of a pipelined burst is read: a
	// hook that waits for their answers calls it first.
	FlushUpstream()
}

// Request is a client request as a hook sees it.
type Request struct {
	Conn       Conn
	Key        int16
	Version    int16
	Frame      []byte // the whole frame, size prefix included
	BodyOffset int
	ClientID   *string // the header's client id, as the transport parsed it
}

// Body is the request body.
func (r *Request) Body() []byte { return r.Frame[r.BodyOffset:] }

// Action is what a request hook decides. The zero Action forwards the
// request unchanged.
type Action struct {
	// Body replaces the request body (the header is kept).
	Body []byte
	// BodyPooled: Body came from NewBuffer and nothing else refers to it;
	// the transport returns it to the pool once it copied it, and the
	// request's frame too when the key's hooks keep nothing of it
	// (Hooks.KeepsNothing).
	BodyPooled bool
	// Local answers the request now; nothing is forwarded.
	Local kmsg.Response
	// Async answers the request later, off the connection's read loop;
	// nothing is forwarded. Responses still reach the client in order.
	Async func() kmsg.Response
	// Written runs once the request was written upstream, or will not be
	// (the connection closed first, or the hook answered it): the hook's
	// package releases there what it held until the request was on the
	// wire (upstream.Step.Written). It runs on the read loop, once.
	Written func()
	// Close closes the connection, with this reason, after the responses
	// owed to earlier requests.
	Close string

	state any // what the hook left for its response's rewriter (On)
}

// RequestHook decides what happens to a client request of its key.
type RequestHook func(r *Request) Action

// ResponseRewriter may change a decoded response of its key; it returns true
// if it did. state is what the request hook left, or nil.
type ResponseRewriter func(state any, resp kmsg.Response) bool

// Filter is a feature of the proxy: its hooks, and what the transport asks
// of it about connections and its life.
type Filter interface {
	// Register declares the filter's hooks; the transport calls it once,
	// before the first connection.
	Register(h *Hooks)
	// HoldsSessionsOn reports whether the upstream connection of c must
	// stay open after its client went away.
	HoldsSessionsOn(c Conn) bool
	// WaitSessionsDrained waits until it need not any more, or until the
	// filter gives up on it (saying so in its log); then the transport
	// closes the upstream connection.
	WaitSessionsDrained(c Conn)
	// CheckUpstream fails when the cluster's ApiVersions conflict with the
	// filter (a broker serves a key the filter serves itself).
	CheckUpstream(resp *kmsg.ApiVersionsResponse) error
	// Start starts the filter's own work once the cluster answers; a
	// failed Start is retried. Started is the line the transport prints
	// once it succeeded ("" for none).
	Start(ctx context.Context, env StartEnv) error
	Started() string
	// Ready reports whether the filter is ready to serve, or why not.
	Ready() (ready bool, why string)
	// Close stops its background work.
	Close()
}

// FilterContext is what the transport hands a filter's constructor.
type FilterContext struct {
	// Config is the proxy's configuration, as the transport runs it.
	Config configs.Config
	Log    *slog.Logger
	// Registry is where the filter registers its metrics (nil: nowhere).
	Registry prometheus.Registerer
	// Send sends the filter's own request to broker node on the proxy's
	// own connection (the side channel); it fails with
	// upstream.ErrNoSideChannel until the cluster answered (Start).
	Send upstream.SideChannel
	// RequireAuth: the upstream listener requires SASL, so a client
	// connection that did not authenticate is refused by the broker.
	RequireAuth bool
}

// NewFilter builds a filter from its context (nil: a proxy with no
// feature, a plain pass-through).
type NewFilter func(FilterContext) (Filter, error)

// StartEnv is what the transport hands a filter once the cluster answers:
// its own client of the brokers (the side channel from now on), and the
// options for a client of the filter's own (the transport's seeds, dialer
// and SASL).
type StartEnv struct {
	Client     *upstream.Client
	ClientOpts []kgo.Opt
}

// Hooks is what one layer (the transport's own, or a filter) declares per
// API key. On and OnResponse assert, once for every key, the response's
// kmsg type and the state a request hook left for its response: a hook
// sees only its own types, never an any.
type Hooks struct {
	keys   [kmsg.MaxKey + 1]layer
	served *servedKey
}

// layer is one layer's hooks of one key.
type layer struct {
	hook         RequestHook
	keepsNothing bool
	rewrite      ResponseRewriter
}

// servedKey is a key a filter answers itself.
type servedKey struct {
	key          int16
	name         string
	flexibleFrom int16
	hook         RequestHook
}

// OnResponse declares fn key's response rewriter, for a key whose responses
// need nothing of their request.
func OnResponse[R kmsg.Response](h *Hooks, key kmsg.Key, fn func(resp R) bool) {
	h.keys[key].rewrite = func(_ any, resp kmsg.Response) bool { return fn(resp.(R)) }
}

// On declares key's request hook and the response rewriter that reads what
// the hook left for the response: the same *S, or nil when the hook left
// none (a request it did not decode, one answered locally).
func On[S any, R kmsg.Response](h *Hooks, key kmsg.Key, hook func(r *Request) (Action, *S), rewrite func(st *S, resp R) bool) {
	h.keys[key].hook = func(r *Request) Action {
		act, st := hook(r)
		if st != nil {
			act.state = st
		}
		return act
	}
	h.keys[key].rewrite = func(state any, resp kmsg.Response) bool {
		st, _ := state.(*S)
		return rewrite(st, resp.(R))
	}
}

// KeepsNothing says key's request hook reads a few fields and keeps no
// part of the frame (it copies what it keeps): the request need not be
// within limits.max_decoded_request_bytes, and its frame's buffer is reused.
func (h *Hooks) KeepsNothing(key kmsg.Key) { h.keys[key].keepsNothing = true }

// Serve declares a key the filter answers itself, one kmsg does not know:
// hook always decides Local, Async or Close, and nothing goes upstream,
// which need not know the key. Its request header is flexible (v2) from
// version flexibleFrom; it is decoded whole. One key per filter.
func (h *Hooks) Serve(key int16, name string, flexibleFrom int16, hook RequestHook) {
	h.served = &servedKey{key: key, name: name, flexibleFrom: flexibleFrom, hook: hook}
}

// noFilter is the filter of a proxy that serves no feature.
type noFilter struct{}

func (noFilter) Register(*Hooks)                               {}
func (noFilter) HoldsSessionsOn(Conn) bool                     { return false }
func (noFilter) WaitSessionsDrained(Conn)                      {}
func (noFilter) CheckUpstream(*kmsg.ApiVersionsResponse) error { return nil }
func (noFilter) Start(context.Context, StartEnv) error         { return nil }
func (noFilter) Started() string                               { return "" }
func (noFilter) Ready() (bool, string)                         { return true, "" }
func (noFilter) Close()                                        {}
