package proxy

import (
	"context"
	"encoding/binary"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/intercept"
	"github.com/sharetx/sharetx/kip1289"
)

// The registry's Handler of every key agrees with kmsg (known, name, newest
// version, which versions have a flexible request header, also one past
// kmsg's newest), and a key kmsg does not know is never forwarded.
func TestRegistryMatchesKmsg(t *testing.T) {
	reg := intercept.NewRegistry(nil)
	for k := int16(-1); k <= kmsg.MaxKey+1; k++ {
		h := reg.For(k)
		req := kmsg.RequestForKey(k)
		if h.Known != (req != nil) {
			t.Fatalf("key %d: known %v", k, h.Known)
		}
		if req == nil {
			if h.FlexibleRequest(0) || intercept.FlexibleRequest(k, 0) || h.Decoded() {
				t.Fatalf("unknown key %d flexible or decoded", k)
			}
			continue
		}
		if h.Name != kmsg.NameForKey(k) || h.MaxVersion != req.MaxVersion() {
			t.Fatalf("key %d: name %q, max version %d", k, h.Name, h.MaxVersion)
		}
		for v := int16(0); v <= req.MaxVersion()+1; v++ {
			req.SetVersion(v)
			if got, want := h.FlexibleRequest(v), req.IsFlexible(); got != want || intercept.FlexibleRequest(k, v) != want {
				t.Fatalf("key %d v%d: flexible %v, kmsg says %v", k, v, got, want)
			}
		}
	}
}

// Every key the proxy decodes (a hook, a rewriter or a reader of whether a
// response comes) is capped in ApiVersions to what kmsg decodes; other keys
// pass at the broker's versions.
func TestRegistryDecodedKeysCapped(t *testing.T) {
	reg := intercept.NewRegistry(nil)
	resp := kmsg.NewPtrApiVersionsResponse()
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if req := kmsg.RequestForKey(k); req != nil {
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MaxVersion = k, req.MaxVersion()+3
			resp.ApiKeys = append(resp.ApiKeys, ak)
		}
	}
	intercept.CapApiVersions(resp)
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
	reg := intercept.NewRegistry(nil)
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

// fakeFeature serves one key.
type fakeFeature struct {
	key   int16
	calls int
}

func (f *fakeFeature) Serves(key int16) bool { return key == f.key }
func (f *fakeFeature) TxnHook(*intercept.Request) intercept.Action {
	f.calls++
	return intercept.Action{Close: "test"}
}
func (*fakeFeature) HoldsSessionsOn(intercept.Conn) bool                    { return false }
func (*fakeFeature) WaitSessionsDrained(intercept.Conn, time.Duration) bool { return true }
func (*fakeFeature) CheckUpstream(*kmsg.ApiVersionsResponse) error          { return nil }
func (*fakeFeature) Start(context.Context, intercept.StartEnv) error        { return nil }
func (*fakeFeature) Recovered() bool                                        { return true }
func (*fakeFeature) Close()                                                 {}

// The feature's key gets the feature's Handler: served locally, header v2
// from v0, decoded whole, its hook the feature's. Once the feature stops
// serving it (the cluster uses the key), the key is the registry's own again.
func TestRegistryServedKey(t *testing.T) {
	f := &fakeFeature{key: 95}
	reg := intercept.NewRegistry(f)
	h := reg.For(95)
	if !h.Served || h.Hook == nil || h.HookKeepsNothing || !h.FlexibleRequest(0) || h.Known || h.Name != "TxnShareAcknowledge" {
		t.Fatalf("served handler %+v", h)
	}
	if act := h.Hook(nil, &intercept.Request{}); act.Close != "test" || f.calls != 1 {
		t.Fatalf("hook: %+v, %d calls", act, f.calls)
	}
	if reg.For(kmsg.Metadata.Int16()).Served {
		t.Fatal("Metadata served")
	}
	f.key = -5
	if h := reg.For(95); h.Served || h.Known {
		t.Fatalf("after the feature let go of the key: %+v", h)
	}
}

// Produce with acks=0 gets no response; the acks field is found at every
// version with and without a transactional id.
func TestProduceResponds(t *testing.T) {
	h := intercept.NewRegistry(nil).For(kmsg.Produce.Int16())
	if h.Responds == nil || !h.HookKeepsNothing {
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
				got, err := h.Responds(&intercept.Request{Key: hdr.Key, Version: hdr.Version, Frame: f, BodyOffset: hdr.BodyOffset})
				if err != nil || got != (acks != 0) {
					t.Fatalf("v%d acks=%d txn %v: responds %v, %v", v, acks, txn != nil, got, err)
				}
			}
		}
	}
	if _, err := h.Responds(&intercept.Request{Version: 9, Frame: []byte{0, 0, 0, 0, 5}, BodyOffset: 4}); err == nil {
		t.Fatal("a truncated Produce reads")
	}
}

// ApiVersions: a version newer than kmsg's is answered locally with
// UNSUPPORTED_VERSION at v0; an UNSUPPORTED_VERSION response from the broker
// is read at v0; its responses use header v0.
func TestApiVersionsHandler(t *testing.T) {
	h := intercept.NewRegistry(nil).For(kmsg.ApiVersions.Int16())
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
	if intercept.ResponseHeaderFlexible(kmsg.ApiVersions.Int16(), true) || !intercept.ResponseHeaderFlexible(kmsg.Metadata.Int16(), true) {
		t.Fatal("response header flexibility")
	}
}

// The proxy's code names no API key: what it must know of a key, it asks
// the registry. proxy/kip.go, the KIP-1289 engine's start-up, is the one
// file left out.
func TestProxyNamesNoAPIKey(t *testing.T) {
	var keys []string
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if kmsg.RequestForKey(k) != nil {
			keys = append(keys, kmsg.NameForKey(k))
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "kip.go" {
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
	s, _ := startTestProxy(t, nil)
	c, err := net.Dial("tcp", s.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))

	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 7, 0, 1000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pp := kmsg.NewProduceRequestTopicPartition()
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)

	txn := &kip1289.TxnShareAcknowledgeRequest{APIKey: int16(s.cfg.KIP1289.APIKey), Version: 1}
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
