package proxy

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeAddrs maps node n to proxy:1000+n and records what it was told.
type fakeAddrs struct{ seen map[int32]string }

func (f *fakeAddrs) Advertise(id int32, host string, port int32) (string, int32) {
	if f.seen == nil {
		f.seen = map[int32]string{}
	}
	f.seen[id] = fmt.Sprintf("%s:%d", host, port)
	return "proxy", 1000 + id
}

// transportOnly is a server with the transport's hooks and no filter,
// whose broker addresses are a's.
func transportOnly(a *fakeAddrs) *Server {
	s := &Server{advertise: a.Advertise}
	s.handlers = NewRegistry(s.transportHooks(), nil)
	return s
}

// env is the transport's rewriters of a server whose addresses are the
// returned fake's.
func env() (*Registry, *fakeAddrs) {
	a := &fakeAddrs{}
	return transportOnly(a).handlers, a
}

// Rewriter returns the transport's response rewriter of key.
func (r *Registry) Rewriter(key int16) ResponseRewriter { return r.For(key).Rewrite }

func TestMetadataRewrite(t *testing.T) {
	e, a := env()
	resp := kmsg.NewPtrMetadataResponse()
	resp.Version = 12
	for i := int32(1); i <= 3; i++ {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = i, fmt.Sprintf("broker%d", i), 9092
		resp.Brokers = append(resp.Brokers, b)
	}
	if !e.Rewriter(kmsg.Metadata.Int16())(nil, resp) {
		t.Fatal("no change reported")
	}
	for _, b := range resp.Brokers {
		if b.Host != "proxy" || b.Port != 1000+b.NodeID {
			t.Errorf("broker %d still at %s:%d", b.NodeID, b.Host, b.Port)
		}
		if a.seen[b.NodeID] != fmt.Sprintf("broker%d:9092", b.NodeID) {
			t.Errorf("upstream address of %d recorded as %q", b.NodeID, a.seen[b.NodeID])
		}
	}
}

func TestFindCoordinatorRewrite(t *testing.T) {
	e, _ := env()
	old := kmsg.NewPtrFindCoordinatorResponse()
	old.Version = 3
	old.NodeID, old.Host, old.Port = 2, "b2", 9092
	e.Rewriter(kmsg.FindCoordinator.Int16())(nil, old)
	if old.Host != "proxy" || old.Port != 1002 {
		t.Errorf("v3 coordinator at %s:%d", old.Host, old.Port)
	}
	errResp := kmsg.NewPtrFindCoordinatorResponse()
	errResp.Version = 3
	errResp.ErrorCode, errResp.NodeID, errResp.Host, errResp.Port = 15, -1, "", -1
	if e.Rewriter(kmsg.FindCoordinator.Int16())(nil, errResp) {
		t.Error("an error response was rewritten")
	}
	batched := kmsg.NewPtrFindCoordinatorResponse()
	batched.Version = 6
	for i, node := range []int32{1, 3, -1} {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Host, c.Port = fmt.Sprint(i), node, "b", 9092
		if node < 0 {
			c.ErrorCode = 15
		}
		batched.Coordinators = append(batched.Coordinators, c)
	}
	e.Rewriter(kmsg.FindCoordinator.Int16())(nil, batched)
	for _, c := range batched.Coordinators {
		if c.NodeID >= 0 && (c.Host != "proxy" || c.Port != 1000+c.NodeID) {
			t.Errorf("batched coordinator %d at %s:%d", c.NodeID, c.Host, c.Port)
		}
		if c.NodeID < 0 && c.Host != "b" {
			t.Errorf("errored coordinator rewritten")
		}
	}
}

func TestNodeEndpointsRewrite(t *testing.T) {
	e, _ := env()
	p := kmsg.NewPtrProduceResponse()
	p.Version = 11
	pb := kmsg.NewProduceResponseBroker()
	pb.NodeID, pb.Host, pb.Port = 4, "b4", 9092
	p.Brokers = append(p.Brokers, pb)
	f := kmsg.NewPtrFetchResponse()
	f.Version = 17
	fb := kmsg.NewFetchResponseBroker()
	fb.NodeID, fb.Host, fb.Port = 5, "b5", 9092
	f.Brokers = append(f.Brokers, fb)
	sf := kmsg.NewPtrShareFetchResponse()
	sfb := kmsg.NewShareFetchResponseNodeEndpoint()
	sfb.NodeID, sfb.Host, sfb.Port = 6, "b6", 9092
	sf.NodeEndpoints = append(sf.NodeEndpoints, sfb)
	sa := kmsg.NewPtrShareAcknowledgeResponse()
	sab := kmsg.NewShareAcknowledgeResponseNodeEndpoint()
	sab.NodeID, sab.Host, sab.Port = 7, "b7", 9092
	sa.NodeEndpoints = append(sa.NodeEndpoints, sab)
	dc := kmsg.NewPtrDescribeClusterResponse()
	dcb := kmsg.NewDescribeClusterResponseBroker()
	dcb.NodeID, dcb.Host, dcb.Port = 8, "b8", 9092
	dc.Brokers = append(dc.Brokers, dcb)
	for _, r := range []kmsg.Response{p, f, sf, sa, dc} {
		if !e.Rewriter(r.Key())(nil, r) {
			t.Errorf("%s: no rewrite", kmsg.NameForKey(r.Key()))
		}
	}
	if p.Brokers[0].Host != "proxy" || f.Brokers[0].Port != 1005 || sf.NodeEndpoints[0].Port != 1006 ||
		sa.NodeEndpoints[0].Port != 1007 || dc.Brokers[0].Port != 1008 {
		t.Errorf("endpoints not rewritten: %+v %+v %+v %+v %+v", p.Brokers, f.Brokers, sf.NodeEndpoints, sa.NodeEndpoints, dc.Brokers)
	}
}

func TestCapApiVersions(t *testing.T) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	add := func(key, min, max int16) {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, min, max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	add(kmsg.Metadata.Int16(), 0, 999)
	add(kmsg.Produce.Int16(), 3, 999)
	add(kmsg.JoinGroup.Int16(), 0, 999) // not decoded: passes through
	add(500, 0, 1)                      // unknown to kmsg: removed
	ff := kmsg.NewApiVersionsResponseFinalizedFeature()
	ff.Name, ff.MaxVersionLevel, ff.MinVersionLevel = "transaction.version", 2, 2
	resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
	if !capApiVersions(resp, transportOnly(&fakeAddrs{}).handlers.Decoded) {
		t.Fatal("no change")
	}
	got := map[int16]int16{}
	for _, k := range resp.ApiKeys {
		got[k.ApiKey] = k.MaxVersion
	}
	if got[kmsg.Metadata.Int16()] != (&kmsg.MetadataRequest{}).MaxVersion() {
		t.Errorf("metadata max %d", got[kmsg.Metadata.Int16()])
	}
	if got[kmsg.JoinGroup.Int16()] != 999 {
		t.Errorf("JoinGroup, not decoded, was capped to %d", got[kmsg.JoinGroup.Int16()])
	}
	if _, ok := got[500]; ok {
		t.Error("unknown key 500 still advertised")
	}
	// The features survive a decode/encode round trip.
	b := resp.AppendTo(nil)
	back := kmsg.NewPtrApiVersionsResponse()
	back.Version = 3
	if err := back.ReadFrom(b); err != nil || len(back.FinalizedFeatures) != 1 || back.FinalizedFeatures[0].MaxVersionLevel != 2 {
		t.Fatalf("features lost: %v %+v", err, back.FinalizedFeatures)
	}
}

// FuzzRewriters: any bytes, decoded as a response of any key the transport
// rewrites at any version, rewrite and re-encode without panicking, and
// re-decode (intercept's FuzzRewriters does the same for the feature's).
func FuzzRewriters(f *testing.F) {
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.Metadata, kmsg.FindCoordinator, kmsg.ApiVersions, kmsg.DescribeCluster, kmsg.ShareFetch, kmsg.ShareAcknowledge} {
		r := kmsg.ResponseForKey(k.Int16())
		r.SetVersion(r.MaxVersion())
		f.Add(int16(k), r.MaxVersion(), r.AppendTo(nil))
	}
	e, _ := env()
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		fn := e.Rewriter(key)
		if fn == nil {
			return
		}
		resp := kmsg.ResponseForKey(key)
		if version < 0 || version > resp.MaxVersion() {
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
