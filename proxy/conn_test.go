package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
)

func startTestProxy(t *testing.T, mod func(*configs.Config)) (*Server, *kfake.Cluster) {
	t.Helper()
	return startTestProxyWith(t, mod, nil)
}

// startTestProxyWith is startTestProxy serving the filter newFilter builds.
func startTestProxyWith(t *testing.T, mod func(*configs.Config), newFilter NewFilter) (*Server, *kfake.Cluster) {
	t.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	return startTestServerWith(t, fake.ListenAddrs(), mod, newFilter), fake
}

// startTestServer starts a proxy in front of seeds on a free port, shut
// down when the test ends.
func startTestServer(t *testing.T, seeds []string, mod func(*configs.Config)) *Server {
	t.Helper()
	return startTestServerWith(t, seeds, mod, nil)
}

// startTestServerWith is startTestServer serving the filter newFilter builds.
func startTestServerWith(t *testing.T, seeds []string, mod func(*configs.Config), newFilter NewFilter) *Server {
	t.Helper()
	cfg := configs.Default()
	cfg.Listen.Bootstrap = "127.0.0.1:0"
	cfg.Listen.BrokerPortBase = 0
	cfg.Upstream.BootstrapServers = seeds
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, newFilter)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// TestPipelinedOrderUnderBackPressure: a client that pipelines far more
// requests than max_in_flight gets every response, in order, with its own
// correlation ids, and the proxy never deadlocks on its buffered writes.
func TestPipelinedOrderUnderBackPressure(t *testing.T) {
	s, _ := startTestProxy(t, func(c *configs.Config) { c.Limits.MaxInFlight = 2 })
	c, err := net.Dial("tcp", s.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 200
	var burst []byte
	for i := 0; i < n; i++ {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 9
		burst = append(burst, EncodeRequestFrame(int32(1000+i*7), "pipeliner", req)...)
	}
	go c.Write(burst)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < n; i++ {
		f, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("response %d of %d: %v", i, n, err)
		}
		if got := int32(binary.BigEndian.Uint32(f[4:])); got != int32(1000+i*7) {
			t.Fatalf("response %d has correlation id %d, want %d", i, got, 1000+i*7)
		}
	}
}

// TestInjectBetweenClientRequests: the proxy's own requests share the
// client's upstream connection; their responses reach the proxy and never
// the client, whose requests keep succeeding.
func TestInjectBetweenClientRequests(t *testing.T) {
	s, _ := startTestProxy(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.BootstrapAddr()), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("warm-up")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	var conns []*conn
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("no client connection")
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 200; i++ {
			if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < 100; i++ {
		for _, c := range conns {
			req := kmsg.NewPtrApiVersionsRequest()
			req.Version = 3
			req.ClientSoftwareName, req.ClientSoftwareVersion = "sharetx", "0"
			resp, err := c.Inject(ctx, req)
			if err != nil {
				t.Fatalf("inject %d: %v", i, err)
			}
			if av := resp.(*kmsg.ApiVersionsResponse); av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
				t.Fatalf("injected ApiVersions answered %+v", av)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("client request failed while the proxy injected: %v", err)
	}
}

// A finished response goes to the client at once, even while the client's
// next request (here a Fetch long poll of 20 s) is still waiting upstream.
// The proxy used to flush only when no request was queued at all, so with
// pipelined requests every answer waited for the next one.
func TestResponseNotHeldBehindPendingRequest(t *testing.T) {
	s, fake := startTestProxy(t, nil)
	admin, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	md := kmsg.NewPtrMetadataRequest()
	mdt := kmsg.NewMetadataRequestTopic()
	mdt.Topic = kmsg.StringPtr("t")
	md.Topics = append(md.Topics, mdt)
	mresp, err := md.RequestWith(ctx, admin)
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatalf("metadata: %v", err)
	}

	c, err := net.Dial("tcp", s.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(0)
	first := EncodeRequestFrame(1, "c", av)
	// Metadata v12 then a Fetch v13 that long-polls an empty partition.
	m := kmsg.NewPtrMetadataRequest()
	m.SetVersion(12)
	second := EncodeRequestFrame(2, "c", m)
	f := kmsg.NewPtrFetchRequest()
	f.SetVersion(13)
	f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 20000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.TopicID = mresp.Topics[0].TopicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	fp.CurrentLeaderEpoch = -1
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	third := EncodeRequestFrame(3, "c", f)
	if _, err := c.Write(append(append(first, second...), third...)); err != nil {
		t.Fatal(err)
	}
	// The first two answers must arrive long before the fetch's 20 s.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for want := int32(1); want <= 2; want++ {
		resp, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("response %d while the fetch waits upstream: %v", want, err)
		}
		if corr := int32(binary.BigEndian.Uint32(resp[4:])); corr != want {
			t.Fatalf("correlation id %d, want %d", corr, want)
		}
	}
}
