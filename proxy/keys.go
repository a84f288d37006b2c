package proxy

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Handler is everything a connection knows of one API key: how to read its
// frames and what, if anything, the transport and the filter do with its
// requests and responses. The connection code asks a Handler and never
// compares keys. Handlers are built once per server (newRegistry) and
// shared: read them, never change them.
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

	// Served: the filter answers every request of the key itself (Serve);
	// Hook always decides Local, Async or Close and nothing goes upstream,
	// which need not know the key.
	Served bool
	// Hook decides about each request; nil forwards it unchanged.
	Hook RequestHook
	// HookKeepsNothing: Hook reads a few fields and keeps no part of the
	// frame (every layer's hook said so: Hooks.KeepsNothing). Otherwise the
	// request is decoded whole, so it must be within
	// limits.max_decoded_request_bytes, and its frame's buffer is not
	// reused.
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

// keys describes every key kmsg knows: how its frames are read, whatever
// the hooks. The transport's and the filter's hooks are added per server.
var keys = func() (t [kmsg.MaxKey + 1]Handler) {
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
	// A Produce with acks=0 gets no response.
	t[kmsg.Produce].Responds = func(r *Request) (bool, error) {
		h, err := WalkProduce(r.Body(), r.Version, nil, nil)
		return h.Acks != 0, err
	}
	av := &t[kmsg.ApiVersions]
	// Its responses use header v0 at every version, so a client can read
	// the answer to a version the broker does not support.
	av.ResponseHeaderV0 = true
	// A version newer than kmsg decodes: answer as a broker does, with
	// UNSUPPORTED_VERSION at v0 and the versions the proxy supports, so the
	// client retries with one it can rewrite.
	max := av.MaxVersion
	av.TooNew = func(int16) kmsg.Response {
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MaxVersion = kmsg.ApiVersions.Int16(), max
		resp.ApiKeys = append(resp.ApiKeys, k)
		return resp
	}
	// Brokers answer an unsupported ApiVersions version at v0.
	av.ResponseVersion = func(version int16, body []byte) int16 {
		if len(body) >= 2 && int16(binary.BigEndian.Uint16(body)) == kerr.UnsupportedVersion.Code {
			return 0
		}
		return version
	}
	return t
}()

// unknownHandler is the Handler of a key kmsg does not know.
var unknownHandler = Handler{Name: "Unknown", FlexibleFrom: math.MaxInt16, MaxVersion: -1}

// keyOf returns the static description of key.
func keyOf(key int16) *Handler {
	if key < 0 || int(key) >= len(keys) {
		return &unknownHandler
	}
	return &keys[key]
}

// FlexibleRequest reports whether a request of key at version has a
// flexible header; false for keys kmsg does not know.
func FlexibleRequest(key, version int16) bool { return keyOf(key).FlexibleRequest(version) }

// ResponseHeaderFlexible reports whether a response of key to a request
// with a flexible header has a flexible header too.
func ResponseHeaderFlexible(key int16, flexibleRequest bool) bool {
	return flexibleRequest && !keyOf(key).ResponseHeaderV0
}

// Registry is the one place a connection asks what to do with a key: the
// filter's Handler for the key it serves, else the key's own, with the
// transport's hooks and the filter's composed.
type Registry struct {
	handlers [kmsg.MaxKey + 1]Handler
	served   *Handler
	servedAt int16
}

// NewRegistry composes the transport's hooks (own) and a filter's (f,
// nil for none) over the keys' descriptions. On a key both hook, the
// transport's request hook runs first and may only observe (it returns no
// decision, only state); its response rewriter runs first too, so that a
// filter sees the transport's view (capped versions, the proxy's
// addresses) and may add to it.
func NewRegistry(own, f *Hooks) *Registry {
	r := &Registry{handlers: keys}
	for k := range r.handlers {
		var fl layer
		if f != nil {
			fl = f.keys[k]
		}
		compose(&r.handlers[k], own.keys[k], fl)
	}
	if f != nil && f.served != nil {
		sv := f.served
		r.served = &Handler{Name: sv.name, FlexibleFrom: sv.flexibleFrom, MaxVersion: -1, Served: true, Hook: sv.hook}
		r.servedAt = sv.key
	}
	return r
}

// both is the state of a request both layers hooked.
type both struct{ own, filter any }

// compose sets h's hooks from the transport's layer t and the filter's f.
func compose(h *Handler, t, f layer) {
	switch {
	case t.hook != nil && f.hook != nil:
		h.Hook = func(r *Request) Action {
			own := t.hook(r)
			act := f.hook(r)
			if own.state != nil {
				act.state = &both{own.state, act.state}
			}
			return act
		}
		h.HookKeepsNothing = t.keepsNothing && f.keepsNothing
	case t.hook != nil:
		h.Hook, h.HookKeepsNothing = t.hook, t.keepsNothing
	case f.hook != nil:
		h.Hook, h.HookKeepsNothing = f.hook, f.keepsNothing
	}
	// Which layer a request's state belongs to: the one that hooked it.
	split := func(state any) (own, filter any) {
		if b, ok := state.(*both); ok {
			return b.own, b.filter
		}
		if t.hook != nil && f.hook == nil {
			return state, nil
		}
		return nil, state
	}
	switch {
	case t.rewrite != nil && f.rewrite != nil:
		h.Rewrite = func(state any, resp kmsg.Response) bool {
			own, filter := split(state)
			changed := t.rewrite(own, resp)
			return f.rewrite(filter, resp) || changed
		}
	case t.rewrite != nil:
		h.Rewrite = func(state any, resp kmsg.Response) bool {
			own, _ := split(state)
			return t.rewrite(own, resp)
		}
	case f.rewrite != nil:
		h.Rewrite = func(state any, resp kmsg.Response) bool {
			_, filter := split(state)
			return f.rewrite(filter, resp)
		}
	}
}

// For returns the Handler of key; never nil.
func (r *Registry) For(key int16) *Handler {
	if r.served != nil && key == r.servedAt {
		return r.served
	}
	if key < 0 || int(key) >= len(r.handlers) {
		return &unknownHandler
	}
	return &r.handlers[key]
}

// Decoded reports whether the proxy decodes requests or responses of key.
func (r *Registry) Decoded(key int16) bool { return r.For(key).Decoded() }

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
