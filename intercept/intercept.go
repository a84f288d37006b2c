// Package intercept holds the per-API handlers of the proxy, one file per
// API key (named like franz-go's kfake: 03_metadata.go is key 3).
//
// The contract: the proxy passes every request and response through byte
// for byte unless a handler is registered for its key. A registered
// response rewriter receives the decoded response and reports whether it
// changed it; only then is the response re-encoded. Rewriters must not block:
// they run on the connection's response path. (One exception: a ShareFetch
// response with redelivered records waits for the shadow topic to be read to
// its end, see recovery.go; that delays only its own connection.)
package intercept

import (
	"context"
	"log/slog"

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
	// UpstreamVersions, if set, is told every ApiVersions response the
	// upstream sent, before the proxy caps it.
	UpstreamVersions func(*kmsg.ApiVersionsResponse)
	// KIP is the transactional-acknowledgement engine; nil disables it.
	KIP *KIP1289
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
	// State is handed to the response rewriter of this request.
	State any
	// Close closes the connection, with this reason, after the responses
	// owed to earlier requests.
	Close string
}

// RequestHook decides what happens to a client request of its key.
type RequestHook func(env *Env, r *Request) Action

var hooks [kmsg.MaxKey + 1]RequestHook

func registerHook(key kmsg.Key, fn RequestHook) { hooks[key] = fn }

// Hook returns the request hook of key, or nil.
func Hook(key int16) RequestHook {
	if key < 0 || int(key) >= len(hooks) {
		return nil
	}
	return hooks[key]
}

// ResponseRewriter may change a decoded response of its key; it returns true
// if it did. state is what the request hook returned, or nil.
type ResponseRewriter func(env *Env, state any, resp kmsg.Response) bool

var rewriters [kmsg.MaxKey + 1]ResponseRewriter

func register(key kmsg.Key, fn ResponseRewriter) { rewriters[key] = fn }

// Rewriter returns the response rewriter of key, or nil when responses of
// that key pass through untouched.
func Rewriter(key int16) ResponseRewriter {
	if key < 0 || int(key) >= len(rewriters) {
		return nil
	}
	return rewriters[key]
}

// Decoded reports whether the proxy decodes requests or responses of key;
// ApiVersions caps such keys to the versions kmsg knows.
func Decoded(key int16) bool {
	return Rewriter(key) != nil || key == kmsg.Produce.Int16() // Produce: acks is read from the request
}

// advertise rewrites one broker address in place; it reports whether the
// address changed.
func advertise(env *Env, node int32, host *string, port *int32) bool {
	if node < 0 {
		return false
	}
	h, p := env.Addrs.Advertise(node, *host, *port)
	if h == *host && p == *port {
		return false
	}
	*host, *port = h, p
	return true
}
