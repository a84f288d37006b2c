package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
)

// The registry's Handler of every key agrees with kmsg (known, name, newest
// version, which versions have a flexible request header, also one past
// kmsg's newest), and a key kmsg does not know is never forwarded.
func TestRegistryMatchesKmsg(t *testing.T) {
	reg := transportOnly(&fakeAddrs{}).handlers
	for k := int16(-1); k <= kmsg.MaxKey+1; k++ {
		h := reg.For(k)
		req := kmsg.RequestForKey(k)
		if h.Known != (req != nil) {
			t.Fatalf("key %d: known %v", k, h.Known)
		}
		if req == nil {
			if h.FlexibleRequest(0) || FlexibleRequest(k, 0) || h.Decoded() {
				t.Fatalf("unknown key %d flexible or decoded", k)
			}
			continue
		}
		if h.Name != kmsg.NameForKey(k) || h.MaxVersion != req.MaxVersion() {
			t.Fatalf("key %d: name %q, max version %d", k, h.Name, h.MaxVersion)
		}
		for v := int16(0); v <= req.MaxVersion()+1; v++ {
			req.SetVersion(v)
			if got, want := h.FlexibleRequest(v), req.IsFlexible(); got != want || FlexibleRequest(k, v) != want {
				t.Fatalf("key %d v%d: flexible %v, kmsg says %v", k, v, got, want)
			}
		}
	}
}

// Every key the proxy decodes (a hook, a rewriter or a reader of whether a
// response comes) is capped in ApiVersions to what kmsg decodes; other keys
// pass at the broker's versions.
func TestRegistryDecodedKeysCapped(t *testing.T) {
	reg := transportOnly(&fakeAddrs{}).handlers
	resp := kmsg.NewPtrApiVersionsResponse()
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if req := kmsg.RequestForKey(k); req != nil {
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MaxVersion = k, req.MaxVersion()+3
			resp.ApiKeys = append(resp.ApiKeys, ak)
		}
	}
	capApiVersions(resp, reg.Decoded)
	decoded := 0
	for _, ak := range resp.ApiKeys {
		h := reg.For(ak.ApiKey)
		want := h.MaxVersion + 3
		if h.Decoded() {
			decoded++
			want = h.MaxVersion
		}
		if ak.MaxVersion != want {
			t.Errorf("%s: max version %d, want %d (decoded %v)", h.Name, ak.MaxVersion, want, h.Decoded())
		}
	}
	if decoded == 0 {
		t.Fatal("no key is decoded")
	}
}

// Every response kmsg knows that names hosts and ports a client may dial has
// a rewriter (broker addresses must name proxy listeners). The exceptions
// name no broker a client dials through the proxy.
func TestRegistryRewritesEveryBrokerAddress(t *testing.T) {
	notBrokers := map[string]string{
		"Vote": "KRaft controllers", "BeginQuorumEpoch": "KRaft controllers", "EndQuorumEpoch": "KRaft controllers",
		"DescribeQuorum": "KRaft controllers", "FetchSnapshot": "KRaft controllers", "UpdateRaftVoter": "KRaft controllers",
		"StreamsGroupHeartbeat": "application endpoints", "StreamsGroupDescribe": "application endpoints",
	}
	reg := transportOnly(&fakeAddrs{}).handlers
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		resp := kmsg.ResponseForKey(k)
		if resp == nil || !namesAddresses(reflect.TypeOf(resp), map[reflect.Type]bool{}) {
			continue
		}
		h := reg.For(k)
		if _, ok := notBrokers[h.Name]; !ok && h.Rewrite == nil {
			t.Errorf("%s responses name hosts and ports but have no rewriter", h.Name)
		}
	}
}

// namesAddresses reports whether t holds, anywhere, a struct with Host and
// Port fields.
func namesAddresses(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	_, host := t.FieldByName("Host")
	_, port := t.FieldByName("Port")
	if host && port {
		return true
	}
	for i := 0; i < t.NumField(); i++ {
		if namesAddresses(t.Field(i).Type, seen) {
			return true
		}
	}
	return false
}

// fakeFilter is a filter that serves one key (answering every request of
// it with UNSUPPORTED_VERSION), hooks ShareFetch, and records what it saw.
type fakeFilter struct {
	key       int16
	calls     int
	requests  int           // ShareFetch requests its hook saw
	responses []string      // the host of the first NodeEndpoint each ShareFetch rewrite saw
	state     map[*int]bool // the states its hook left, for its rewriter
}

func newFakeFilter(key int16) *fakeFilter { return &fakeFilter{key: key, state: map[*int]bool{}} }

func (f *fakeFilter) Register(h *Hooks) {
	h.Serve(f.key, "TxnShareAcknowledge", 0, func(*Request) Action {
		f.calls++
		return Action{Local: &kip1289.TxnShareAcknowledgeResponse{APIKey: f.key, ErrorCode: kerr.UnsupportedVersion.Code}}
	})
	On(h, kmsg.ShareFetch, func(*Request) (Action, *int) {
		f.requests++
		st := new(int)
		f.state[st] = true
		return Action{}, st
	}, func(st *int, resp *kmsg.ShareFetchResponse) bool {
		if st == nil || !f.state[st] {
			f.responses = append(f.responses, "state lost")
			return false
		}
		if len(resp.NodeEndpoints) > 0 {
			f.responses = append(f.responses, resp.NodeEndpoints[0].Host)
		}
		return false
	})
}
func (*fakeFilter) HoldsSessionsOn(Conn) bool                     { return false }
func (*fakeFilter) WaitSessionsDrained(Conn)                      {}
func (*fakeFilter) Started() string                               { return "fake filter started" }
func (*fakeFilter) CheckUpstream(*kmsg.ApiVersionsResponse) error { return nil }
func (*fakeFilter) Start(context.Context, StartEnv) error         { return nil }
func (*fakeFilter) Ready() (bool, string)                         { return true, "" }
func (*fakeFilter) Close()                                        {}

// withFilter is a server with the transport's hooks and f's.
func withFilter(a *fakeAddrs, f Filter) *Registry {
	s := &Server{advertise: a.Advertise}
	fh := &Hooks{}
	f.Register(fh)
	s.handlers = NewRegistry(s.transportHooks(), fh)
	return s.handlers
}

// The filter's key gets the filter's Handler: served locally, header v2
// from v0, decoded whole, its hook the filter's. A key both the transport
// and the filter hook gets both: the filter's request hook and its state,
// and on the response the transport's rewrite (the proxy's addresses)
// before the filter's, which sees it.
func TestRegistryServedKey(t *testing.T) {
	f := newFakeFilter(95)
	reg := withFilter(&fakeAddrs{}, f)
	h := reg.For(95)
	if !h.Served || h.Hook == nil || h.HookKeepsNothing || !h.FlexibleRequest(0) || h.Known || h.Name != "TxnShareAcknowledge" {
		t.Fatalf("served handler %+v", h)
	}
	if act := h.Hook(&Request{}); act.Local == nil || f.calls != 1 {
		t.Fatalf("hook: %+v, %d calls", act, f.calls)
	}
	if reg.For(kmsg.Metadata.Int16()).Served {
		t.Fatal("Metadata served")
	}
	if h := transportOnly(&fakeAddrs{}).handlers.For(95); h.Served || h.Known {
		t.Fatalf("without the filter: %+v", h)
	}

	sf := reg.For(kmsg.ShareFetch.Int16())
	act := sf.Hook(&Request{})
	if f.requests != 1 || act.state == nil {
		t.Fatalf("ShareFetch hook: %d requests, state %v", f.requests, act.state)
	}
	resp := kmsg.NewPtrShareFetchResponse()
	ep := kmsg.NewShareFetchResponseNodeEndpoint()
	ep.NodeID, ep.Host, ep.Port = 2, "b2", 9092
	resp.NodeEndpoints = append(resp.NodeEndpoints, ep)
	if !sf.Rewrite(act.state, resp) {
		t.Fatal("the transport's address rewrite was not reported")
	}
	if len(f.responses) != 1 || f.responses[0] != "proxy" {
		t.Fatalf("the filter's rewriter saw %v, want the proxy's address after the transport's rewrite", f.responses)
	}
	// A response whose request the filter's hook did not see (state nil).
	sf.Rewrite(nil, kmsg.NewPtrShareFetchResponse())
	if len(f.responses) != 2 || f.responses[1] != "state lost" {
		t.Fatalf("a nil state reached the filter as %v", f.responses)
	}
}

// Produce with acks=0 gets no response; the acks field is found at every
// version with and without a transactional id.
func TestProduceResponds(t *testing.T) {
	h := transportOnly(&fakeAddrs{}).handlers.For(kmsg.Produce.Int16())
	if h.Responds == nil {
		t.Fatalf("Produce handler %+v", h)
	}
	for _, v := range []int16{2, 3, 8, 9, 12} {
		for _, acks := range []int16{0, 1, -1} {
			for _, txn := range []*string{nil, kmsg.StringPtr("my-txn")} {
				req := kmsg.NewPtrProduceRequest()
				req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = v, acks, 1000, txn
				f := frameOf(req, 1, "c")
				hdr, err := ParseRequestHeader(f)
				if err != nil {
					t.Fatal(err)
				}
				got, err := h.Responds(&Request{Key: hdr.Key, Version: hdr.Version, Frame: f, BodyOffset: hdr.BodyOffset})
				if err != nil || got != (acks != 0) {
					t.Fatalf("v%d acks=%d txn %v: responds %v, %v", v, acks, txn != nil, got, err)
				}
			}
		}
	}
	if _, err := h.Responds(&Request{Version: 9, Frame: []byte{0, 0, 0, 0, 5}, BodyOffset: 4}); err == nil {
		t.Fatal("a truncated Produce reads")
	}
}

// ApiVersions: a version newer than kmsg's is answered locally with
// UNSUPPORTED_VERSION at v0; an UNSUPPORTED_VERSION response from the broker
// is read at v0; its responses use header v0.
func TestApiVersionsHandler(t *testing.T) {
	h := transportOnly(&fakeAddrs{}).handlers.For(kmsg.ApiVersions.Int16())
	resp, ok := h.TooNew(h.MaxVersion + 1).(*kmsg.ApiVersionsResponse)
	if !ok || resp.ErrorCode != kerr.UnsupportedVersion.Code || resp.Version != 0 || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].MaxVersion != h.MaxVersion {
		t.Fatalf("too new: %+v", resp)
	}
	unsupported := binary.BigEndian.AppendUint16(nil, uint16(kerr.UnsupportedVersion.Code))
	if v := h.ResponseVersion(3, unsupported); v != 0 {
		t.Fatalf("an UNSUPPORTED_VERSION answer read at v%d", v)
	}
	if v := h.ResponseVersion(3, []byte{0, 0}); v != 3 {
		t.Fatalf("a good answer read at v%d", v)
	}
	if ResponseHeaderFlexible(kmsg.ApiVersions.Int16(), true) || !ResponseHeaderFlexible(kmsg.Metadata.Int16(), true) {
		t.Fatal("response header flexibility")
	}
}

// The proxy's connection code names no API key: what it must know of a key,
// it asks the registry. The files that declare what the transport does per
// key (its hooks and the keys' descriptions) are left out.
func TestProxyNamesNoAPIKey(t *testing.T) {
	var keys []string
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if kmsg.RequestForKey(k) != nil {
			keys = append(keys, kmsg.NameForKey(k))
		}
	}
	perKey := map[string]bool{"keys.go": true, "addresses.go": true, "api_versions.go": true, "sasl.go": true, "filter.go": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || perKey[name] {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		isKey := func(e ast.Expr) bool {
			if call, ok := e.(*ast.CallExpr); ok {
				e = call.Fun
			}
			sel, ok := e.(*ast.SelectorExpr)
			return ok && sel.Sel.Name == "Key"
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if pkg, ok := n.X.(*ast.Ident); ok && pkg.Name == "kmsg" {
					for _, k := range keys {
						if strings.Contains(n.Sel.Name, k) {
							t.Errorf("%s: names kmsg.%s", fset.Position(n.Pos()), n.Sel.Name)
							break
						}
					}
				}
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isKey(n.X) || isKey(n.Y)) {
					t.Errorf("%s: compares an API key", fset.Position(n.Pos()))
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && isKey(n.Tag) {
					t.Errorf("%s: switches on an API key", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked %d files", checked)
	}
}

// Through a proxy: a Produce with acks=0 gets no response (the next
// request's answer comes first); the feature's key is answered by the proxy
// and never forwarded (kfake would close the connection on it); an
// ApiVersions too new is answered at v0.
func TestDispatchThroughProxy(t *testing.T) {
	f := newFakeFilter(95)
	c := dialFiltered(t, nil, f, 20*time.Second)

	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 7, 0, 1000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pp := kmsg.NewProduceRequestTopicPartition()
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)

	txn := &kip1289.TxnShareAcknowledgeRequest{APIKey: f.key, Version: 1}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	var burst []byte
	burst = append(burst, frameOf(produce, 1, "c")...)
	burst = append(burst, frameOf(txn, 2, "c")...)
	burst = append(burst, frameOf(md, 3, "c")...)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3 // a flexible header, as v99's
	tooNew := frameOf(av, 4, "c")
	binary.BigEndian.PutUint16(tooNew[6:], 99)
	burst = append(burst, tooNew...)
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int32{2, 3, 4} {
		f, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("waiting for the response to %d: %v", want, err)
		}
		if got := int32(binary.BigEndian.Uint32(f[4:])); got != want {
			t.Fatalf("response with correlation id %d, want %d", got, want)
		}
		switch want {
		case 2:
			resp := &kip1289.TxnShareAcknowledgeResponse{APIKey: txn.APIKey}
			if err := resp.ReadFrom(f[9:]); err != nil || resp.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("TxnShareAcknowledge v1: %+v, %v", resp, err)
			}
		case 4:
			resp := kmsg.NewPtrApiVersionsResponse()
			if err := resp.ReadFrom(f[8:]); err != nil || resp.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("ApiVersions v99: %+v, %v", resp, err)
			}
		}
	}
}

// parkFilter answers Metadata itself, later, when release is closed, and
// records when its ApiVersions hook runs.
type parkFilter struct {
	fakeFilter
	release  chan struct{}
	versions chan struct{} // closed by the ApiVersions hook
}

func (f *parkFilter) Register(h *Hooks) {
	On(h, kmsg.Metadata, func(r *Request) (Action, *int) {
		return Action{Async: func() kmsg.Response {
			<-f.release
			resp := kmsg.NewPtrMetadataResponse()
			resp.Version = r.Version
			return resp
		}}, nil
	}, func(*int, *kmsg.MetadataResponse) bool { return false })
	On(h, kmsg.ApiVersions, func(*Request) (Action, *int) {
		close(f.versions)
		return Action{}, nil
	}, func(*int, *kmsg.ApiVersionsResponse) bool { return false })
}

// TestHookRunsAfterItsPlaceInOrder: a request's hook runs only once the
// request has its place in the client's order, never while the read loop
// waits for one (limits.max_in_flight responses owed): a hook may hold a
// lock of its filter's until its request is written (a share session's),
// and that must not span the wait. Two Metadata requests answered only
// later fill the order (max_in_flight 1: one waiting in writeClient, one
// queued); the ApiVersions behind them waits for its place without its
// hook having run, and is hooked and answered once they are.
func TestHookRunsAfterItsPlaceInOrder(t *testing.T) {
	f := &parkFilter{release: make(chan struct{}), versions: make(chan struct{})}
	c := dialFiltered(t, func(c *configs.Config) { c.Limits.MaxInFlight = 1 }, f, 30*time.Second)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	var burst []byte
	burst = append(burst, frameOf(md, 1, "c")...)
	burst = append(burst, frameOf(md, 2, "c")...)
	burst = append(burst, frameOf(av, 3, "c")...)
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.versions:
		t.Fatal("the ApiVersions hook ran while its request waited for a place in the client's order")
	case <-time.After(300 * time.Millisecond):
	}
	close(f.release)
	select {
	case <-f.versions:
	case <-time.After(20 * time.Second):
		t.Fatal("the ApiVersions hook never ran once the order had room")
	}
	for _, want := range []int32{1, 2, 3} {
		fr, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("waiting for the response to %d: %v", want, err)
		}
		if got := int32(binary.BigEndian.Uint32(fr[4:])); got != want {
			t.Fatalf("response with correlation id %d, want %d", got, want)
		}
	}
}

// renameFilter rewrites every Metadata request's topic names ("a-N" to
// "b-N") into a body of the frame pool (Action.BodyPooled), keeping
// nothing of the frame: the transport copies the body into a pooled frame
// and returns both the body and the old frame to the pool.
type renameFilter struct{ fakeFilter }

func (f *renameFilter) Register(h *Hooks) {
	On(h, kmsg.Metadata, func(r *Request) (Action, *int) {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = r.Version
		if err := req.ReadFrom(r.Body()); err != nil {
			return Action{}, nil
		}
		for i := range req.Topics {
			if n := req.Topics[i].Topic; n != nil {
				s := "b" + strings.TrimPrefix(*n, "a")
				req.Topics[i].Topic = &s
			}
		}
		return Action{Body: req.AppendTo(NewBuffer(len(r.Body()) + 16)), BodyPooled: true}, nil
	}, func(*int, *kmsg.MetadataResponse) bool { return false })
	h.KeepsNothing(kmsg.Metadata)
}

// TestPooledBodyReachesUpstream: a hook's new body built in a pooled
// buffer reaches the broker as it was built, request after request, while
// the transport recycles those buffers and the frames they replace (each
// answer names its own request's renamed topics, of growing sizes, so a
// buffer reused too early would show).
func TestPooledBodyReachesUpstream(t *testing.T) {
	f := &renameFilter{fakeFilter: *newFakeFilter(95)}
	c := dialFiltered(t, nil, f, 20*time.Second)
	for i := 0; i < 200; i++ {
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 9
		var want []string
		for j := 0; j < 1+i%40; j++ {
			name := fmt.Sprintf("a-%d-%d-%s", i, j, strings.Repeat("x", 100*(i%7)))
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &name
			md.Topics = append(md.Topics, rt)
			want = append(want, "b"+strings.TrimPrefix(name, "a"))
		}
		if _, err := c.Write(frameOf(md, int32(i), "c")); err != nil {
			t.Fatal(err)
		}
		fr, err := ReadFrame(c, 1<<24)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = 9
		if err := resp.ReadFrom(fr[9:]); err != nil { // size, correlation id, tagged fields (flexible header)
			t.Fatalf("request %d: %v", i, err)
		}
		var got []string
		for _, rt := range resp.Topics {
			if rt.Topic != nil {
				got = append(got, *rt.Topic)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("request %d: the broker answered for %v, want %v", i, got, want)
		}
	}
}

// dialFiltered starts a proxy (configured by mod) with filter f in front of
// kfake and returns a raw connection to it, with a deadline of d; closed at
// the test's end.
func dialFiltered(t *testing.T, mod func(*configs.Config), f Filter, d time.Duration) net.Conn {
	t.Helper()
	s, _ := startTestProxyWith(t, mod, func(FilterContext) (Filter, error) { return f, nil })
	c, err := net.Dial("tcp", s.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	return c
}
