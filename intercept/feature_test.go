package intercept

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/proxy"
)

// The feature's tests see it as the transport does: built by New from a
// filter context (fakeContext: no broker behind its side channel), its
// hooks declared by Register and composed by proxy.NewRegistry with no
// transport hooks of the transport's own (feature).

// fakeConn is a client connection as a hook sees it.
type fakeConn struct {
	done      chan struct{}
	principal string
}

func (c *fakeConn) Node() int32 { return 0 }

func (c *fakeConn) StartInject(kmsg.Request) (func(context.Context) (kmsg.Response, error), error) {
	return nil, errors.New("fakeConn: no upstream")
}

func (c *fakeConn) StartInjectAs(req kmsg.Request, _ string) (func(context.Context) (kmsg.Response, error), error) {
	return c.StartInject(req)
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }
func (c *fakeConn) Principal() string     { return c.principal }
func (c *fakeConn) Authenticating() bool  { return false }
func (c *fakeConn) FlushUpstream()        {}

// fakeContext is a filter context whose side channel has no cluster behind
// it yet (upstream.ErrNoSideChannel, as before the transport's Start).
func fakeContext(kcfg configs.KIP1289) proxy.FilterContext {
	cfg := configs.Default()
	cfg.KIP1289 = kcfg
	return proxy.FilterContext{Config: cfg, Log: slog.New(slog.DiscardHandler),
		Send: func(context.Context, int32, kmsg.Request) (kmsg.Response, error) { return nil, errNoCluster }}
}

var errNoCluster = errors.New("fake filter context: no cluster")

// engineWith builds the feature from kcfg, closed when the test ends.
func engineWith(t testing.TB, kcfg configs.KIP1289) *KIP1289 {
	e, err := New(fakeContext(kcfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// testEngine is the feature with the default configuration (closed by its
// caller, or never: it holds no connection).
func testEngine() *KIP1289 {
	e, _ := New(fakeContext(configs.Default().KIP1289))
	return e
}

// feature is e's hooks as the transport composes them.
func feature(e *KIP1289) *proxy.Registry {
	h := &proxy.Hooks{}
	e.Register(h)
	return proxy.NewRegistry(&proxy.Hooks{}, h)
}

// kip1289Request is a well-formed call of one record.
func kip1289Request() *kip1289.TxnShareAcknowledgeRequest {
	txn := "t"
	return &kip1289.TxnShareAcknowledgeRequest{TransactionalID: &txn, GroupID: "g", ProducerID: 1, MemberID: "m",
		Topics: []kip1289.TxnShareAcknowledgeTopic{{TopicID: [16]byte{1}, Partitions: []kip1289.TxnShareAcknowledgePartition{{
			Partition: 0, AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: 0, LastOffset: 0, AcknowledgeTypes: []int8{1}}}}}}}}
}

// topCode is a TxnShareAcknowledge answer's error: the top-level one, else
// its first partition's.
func topCode(r kmsg.Response) int16 {
	resp := r.(*kip1289.TxnShareAcknowledgeResponse)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode != 0 {
				return p.ErrorCode
			}
		}
	}
	return 0
}

// TestRegisterDeclaresTheFeature: the feature serves its key (decoded
// whole, header v2 from v0), hooks the keys it takes part in, and keeps the
// Produce frame's buffer reusable; keys it has no part in stay untouched.
func TestRegisterDeclaresTheFeature(t *testing.T) {
	e := engineWith(t, configs.Default().KIP1289)
	reg := feature(e)
	if h := reg.For(e.Key()); !h.Served || h.Hook == nil || !h.FlexibleRequest(0) || h.Name != "TxnShareAcknowledge" {
		t.Fatalf("served key %d: %+v", e.Key(), h)
	}
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.InitProducerID, kmsg.EndTxn, kmsg.AddPartitionsToTxn, kmsg.ShareGroupHeartbeat, kmsg.ShareFetch, kmsg.ShareAcknowledge} {
		if h := reg.For(k.Int16()); h.Hook == nil || h.Rewrite == nil {
			t.Errorf("%s: hook %v, rewriter %v", kmsg.NameForKey(k.Int16()), h.Hook != nil, h.Rewrite != nil)
		}
	}
	if h := reg.For(kmsg.ApiVersions.Int16()); h.Rewrite == nil || h.Hook != nil {
		t.Errorf("ApiVersions: the feature adds its key to answers, and needs nothing of the request")
	}
	if !reg.For(kmsg.Produce.Int16()).HookKeepsNothing {
		t.Error("Produce: the feature's hook keeps nothing of the frame, but the frame is not reused")
	}
	for _, k := range []kmsg.Key{kmsg.Metadata, kmsg.Fetch, kmsg.JoinGroup, kmsg.SASLHandshake} {
		if h := reg.For(k.Int16()); h.Hook != nil || h.Rewrite != nil {
			t.Errorf("%s: hooked by the feature", kmsg.NameForKey(k.Int16()))
		}
	}
}

// TestTxnShareAcknowledgeThroughRegistry: the served key, asked through the
// hooks the transport composed, answers a request that does not decode
// with INVALID_REQUEST and an unknown version with UNSUPPORTED_VERSION,
// locally; a well-formed one is answered off the read loop (Async), here
// COORDINATOR_NOT_AVAILABLE: the fake context's shadow topic is never
// ready.
func TestTxnShareAcknowledgeThroughRegistry(t *testing.T) {
	e := engineWith(t, configs.Default().KIP1289)
	h := feature(e).For(e.Key())
	c := &fakeConn{done: make(chan struct{}), principal: "User:alice"}
	bad := h.Hook(&proxy.Request{Conn: c, Key: e.Key(), Version: 0, Frame: []byte{0, 0, 0, 1, 0xff}, BodyOffset: 4})
	if bad.Local == nil || topCode(bad.Local) != kerr.InvalidRequest.Code {
		t.Fatalf("malformed request: %+v", bad)
	}
	v1 := h.Hook(&proxy.Request{Conn: c, Key: e.Key(), Version: 1, Frame: []byte{0, 0, 0, 0}, BodyOffset: 4})
	if v1.Local == nil || topCode(v1.Local) != kerr.UnsupportedVersion.Code {
		t.Fatalf("version 1: %+v", v1)
	}
	req := kip1289Request()
	frame := append([]byte{0, 0, 0, 0}, req.AppendTo(nil)...)
	act := h.Hook(&proxy.Request{Conn: c, Key: e.Key(), Version: 0, Frame: frame, BodyOffset: 4})
	if act.Async == nil {
		t.Fatalf("a well-formed call: %+v, want an answer off the read loop", act)
	}
	if code := topCode(act.Async()); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("before the shadow topic is ready: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(code))
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
		act := e.onSession(&proxy.Request{Conn: c, Key: req.Key(), Version: 1}, st, &req.ShareSessionEpoch, false, req, nil)
		if act.Written != nil {
			act.Written()
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

// TestHeldPartitionHasRecords: a ShareFetch partition the proxy adds to the
// broker's answer (its acknowledgements were all held back) carries empty
// Records, not null: from v1 on Kafka's schema does not allow a null there
// (kmsg does), and kafka-clients fails the whole response on one.
func TestHeldPartitionHasRecords(t *testing.T) {
	for _, v := range []int16{1, 2} {
		e := testEngine()
		h := feature(e)
		st := &shareState{node: 1, group: "g", member: "m"}
		topic := [16]byte{1}
		st.hold(topic, 3)
		resp := kmsg.NewPtrShareFetchResponse()
		resp.Version = v
		if !h.For(kmsg.ShareFetch.Int16()).Rewrite(st, resp) {
			t.Fatalf("v%d: the held partition was not added", v)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("v%d: topics %+v", v, resp.Topics)
		}
		if p := resp.Topics[0].Partitions[0]; p.Partition != 3 || p.Records == nil {
			t.Errorf("v%d: added partition %d with Records nil=%v", v, p.Partition, p.Records == nil)
		}
	}
}

// FuzzRewriters: any bytes, decoded as a response of any key the feature
// rewrites at any version, rewrite and re-encode without panicking, and
// re-decode (proxy's FuzzRewriters does the same for the transport's).
func FuzzRewriters(f *testing.F) {
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.ApiVersions, kmsg.InitProducerID, kmsg.EndTxn, kmsg.AddPartitionsToTxn, kmsg.ShareGroupHeartbeat, kmsg.ShareFetch, kmsg.ShareAcknowledge} {
		r := kmsg.ResponseForKey(k.Int16())
		r.SetVersion(r.MaxVersion())
		f.Add(int16(k), r.MaxVersion(), r.AppendTo(nil))
	}
	e := testEngine()
	defer e.Close()
	reg := feature(e)
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		fn := reg.For(key).Rewrite
		if fn == nil {
			return
		}
		resp := kmsg.ResponseForKey(key)
		if resp == nil || version < 0 || version > resp.MaxVersion() {
			return
		}
		resp.SetVersion(version)
		if err := resp.ReadFrom(body); err != nil {
			return
		}
		fn(nil, resp)
		out := resp.AppendTo(nil)
		back := kmsg.ResponseForKey(key)
		back.SetVersion(version)
		if err := back.ReadFrom(out); err != nil {
			t.Fatalf("%s v%d: re-encoded response does not decode: %v", kmsg.NameForKey(key), version, err)
		}
	})
}
