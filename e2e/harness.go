// Package e2e holds the end-to-end tests and their harness: the same test
// runs against franz-go's in-process kfake and against a real Apache Kafka
// broker started by e2e/kafka/kafka.sh, chosen from the environment:
//
//	E2E_KAFKA_SEEDS=127.0.0.1:19092   a running real cluster (make kafka-up)
//	E2E_REQUIRE_KAFKA=1               fail, rather than skip, the real-broker
//	                                  half when E2E_KAFKA_SEEDS is not set
//
// No broker is mocked: the proxy under test runs in-process in front of a
// real backend.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/e2e/sim"
	"github.com/sharetx/sharetx/intercept"
	"github.com/sharetx/sharetx/internal/syncbuf"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/upstream"
)

// Backend is a cluster the proxy runs in front of.
type Backend struct {
	Name  string
	Seeds []string
	Fake  *kfake.Cluster // nil for a real broker
	Nodes int
}

// Backends runs fn once against kfake (with nodes brokers) and once against
// the real broker named by E2E_KAFKA_SEEDS. nodes is what the test needs:
// make test's passes (E2E_PASS) run its real half where that is.
func Backends(t *testing.T, nodes int, fn func(t *testing.T, b *Backend), fakeOpts ...kfake.Opt) {
	t.Run("kfake", func(t *testing.T) {
		fn(t, FakeBackend(t, nodes, fakeOpts...))
	})
	t.Run("kafka", func(t *testing.T) {
		SkipForPass(t, nodes)
		fn(t, RealBackend(t))
	})
}

// SkipForPass skips a real-broker test on the make test pass where it
// proves nothing more. make test runs the real-broker halves on a one-node
// cluster (E2E_PASS=one-node) and again on three (E2E_PASS=three-node): a
// test that needs three brokers (nodes >= 3: leaders on several nodes, a
// node failing) runs only on three, every other test (the protocol, the
// KIP's semantics, authorisation: what a single broker already proves) only
// on one. Without E2E_PASS every test runs on whatever cluster there is.
func SkipForPass(t testing.TB, nodes int) {
	t.Helper()
	switch os.Getenv("E2E_PASS") {
	case "one-node":
		if nodes >= 3 {
			t.Skip("needs three brokers: runs on make test's three-node pass (E2E_PASS=three-node)")
		}
	case "three-node":
		if nodes < 3 {
			t.Skip("needs one broker: proved on make test's one-node pass (E2E_PASS=one-node)")
		}
	}
}

// FakeBackend starts an in-process kfake cluster for the test (it skips
// under E2E_HALVES=kafka: make test runs the kfake halves in a pass of their
// own, under the race detector).
func FakeBackend(t testing.TB, nodes int, opts ...kfake.Opt) *Backend {
	t.Helper()
	if os.Getenv("E2E_HALVES") == "kafka" {
		t.Skip("E2E_HALVES=kafka: the kfake halves run in make test's race pass")
	}
	all := append([]kfake.Opt{kfake.NumBrokers(nodes), kfake.DefaultNumPartitions(3)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	for _, a := range c.ListenAddrs() {
		fakeSeeds.Store(a, true)
	}
	return &Backend{Name: "kfake", Seeds: c.ListenAddrs(), Fake: c, Nodes: nodes}
}

// fakeSeeds holds the addresses of the kfake clusters FakeBackend started:
// a proxy in front of one is configured as sharetx configures itself in
// front of its embedded cluster (kfake does not authorise the
// transactional id on Produce: kip1289.learn_owner_from_produce false).
var fakeSeeds sync.Map

// RealBackend returns the real cluster of E2E_KAFKA_SEEDS, skipping (or with
// E2E_REQUIRE_KAFKA=1 failing) when it is not set.
func RealBackend(t testing.TB) *Backend {
	t.Helper()
	s := sim.RealSeeds(t, false)
	return &Backend{Name: "kafka", Seeds: s, Nodes: len(s)}
}

// Proxy is a sharetx proxy running in the test process (proxy.Server.Run,
// as the sharetx command runs it).
type Proxy struct {
	*proxy.Server
	kip  *intercept.KIP1289 // the proxy's filter
	Addr string
	// Client is a client of the upstream cluster for the test's own calls
	// (the proxy's Run has one of its own).
	Client *upstream.Client
	Logs   *LogBuffer

	ready chan struct{} // closed once Run says it is ready
	done  chan error    // Run's result
}

// KIP is the proxy's transactional-acknowledgement engine, its filter.
func (p *Proxy) KIP() *intercept.KIP1289 { return p.kip }

// ProxyOpt adjusts the proxy's configuration before it starts.
type ProxyOpt func(*configs.Config)

// StartProxy runs a proxy in front of seeds on free loopback ports and waits
// until it is ready: it has discovered the cluster and prepared the KIP-1289
// path.
func StartProxy(t testing.TB, seeds []string, opts ...ProxyOpt) *Proxy {
	t.Helper()
	p := startProxyNoWait(t, seeds, opts...)
	select {
	case <-p.ready:
	case err := <-p.done:
		p.done <- err // for the cleanup
		t.Fatalf("proxy stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		_, why := p.Ready()
		t.Fatalf("proxy not ready after 30 s: %s", why)
	}
	return p
}

// startProxyNoWait starts a proxy without waiting for the upstream: it
// returns once the proxy listens.
func startProxyNoWait(t testing.TB, seeds []string, opts ...ProxyOpt) *Proxy {
	t.Helper()
	cfg := configs.Default()
	cfg.Listen.Bootstrap = "127.0.0.1:0"
	cfg.Listen.BrokerPortBase = 0
	cfg.Metrics.Address = ""
	cfg.Upstream.BootstrapServers = seeds
	cfg.Upstream.DialTimeout = 5 * time.Second
	cfg.Timeouts.ShutdownGrace = 5 * time.Second
	if len(seeds) > 0 {
		if _, fake := fakeSeeds.Load(seeds[0]); fake {
			cfg.KIP1289.LearnOwnerFromProduce = false
		}
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("proxy config: %v", err)
	}
	logs := &LogBuffer{}
	level := slog.LevelInfo
	if os.Getenv("E2E_PROXY_LOG") == "debug" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	var kip *intercept.KIP1289
	srv, err := proxy.New(cfg, log, nil, func(fc proxy.FilterContext) (proxy.Filter, error) {
		k, err := intercept.New(fc)
		kip = k
		return k, err
	})
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	d, err := upstream.NewDialer(cfg.Upstream)
	if err != nil {
		t.Fatalf("dialer: %v", err)
	}
	cl, err := upstream.NewClient(seeds, d, cfg.Upstream.SASL)
	if err != nil {
		t.Fatalf("test upstream client: %v", err)
	}
	p := &Proxy{Server: srv, kip: kip, Client: cl, Logs: logs, ready: make(chan struct{}), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan struct{})
	go func() {
		p.done <- srv.Run(ctx, proxy.RunOptions{
			Out:       logs,
			Listening: func() { close(listening) },
			Ready:     func() { close(p.ready) },
			Backoff:   func(int) time.Duration { return 200 * time.Millisecond },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("proxy: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("proxy still running 30 s after its shutdown began")
		}
		cl.Close()
		if t.Failed() {
			t.Logf("proxy log:\n%s", logs.String())
		}
	})
	select {
	case <-listening:
	case err := <-p.done:
		p.done <- err // for the cleanup
		t.Fatalf("proxy start: %v", err)
	}
	p.Addr = srv.BootstrapAddr()
	return p
}

// ProxyAddrs is the set of addresses a client may legitimately dial: the
// bootstrap listener and every broker listener.
func (p *Proxy) ProxyAddrs() map[string]bool {
	m := map[string]bool{p.Addr: true}
	for _, b := range p.Brokers() {
		m[b.Proxy] = true
	}
	return m
}

// DialRecorder is a kgo dialer that remembers every address dialed.
type DialRecorder struct {
	mu    sync.Mutex
	addrs map[string]int
}

// Dial implements kgo.Dialer.
func (r *DialRecorder) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	r.mu.Lock()
	if r.addrs == nil {
		r.addrs = map[string]int{}
	}
	r.addrs[host]++
	r.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, host)
}

// Addrs returns the addresses dialed so far.
func (r *DialRecorder) Addrs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.addrs))
	for k, v := range r.addrs {
		out[k] = v
	}
	return out
}

// AssertOnlyProxy fails the test if a client dialed anything but the proxy.
func (r *DialRecorder) AssertOnlyProxy(t testing.TB, p *Proxy) {
	t.Helper()
	allowed := p.ProxyAddrs()
	dialed := r.Addrs()
	if len(dialed) == 0 {
		t.Fatal("the client dialed nothing")
	}
	for a := range dialed {
		if !allowed[a] {
			t.Errorf("client dialed %s, which is not a proxy address (proxy: %v)", a, allowed)
		}
	}
}

// Client returns a franz-go client through the proxy, dialing via rec.
func (p *Proxy) NewClient(t testing.TB, rec *DialRecorder, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(p.Addr), kgo.Dialer(rec.Dial), kgo.MetadataMinAge(250 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// LogBuffer collects the proxy's log lines for assertions (Write and String
// from syncbuf.Buffer).
type LogBuffer struct {
	syncbuf.Buffer
}

// Contains reports whether a logged line contains s.
func (l *LogBuffer) Contains(s string) bool {
	return strings.Contains(l.String(), s)
}

// Wait polls cond until it holds or d passes.
func Wait(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Unique returns a name unique to this test run, for topics and groups on a
// shared real broker.
func Unique(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// KillableDialer dials like DialRecorder and can sever every connection it
// made and refuse new ones: a client that dies without closing anything.
type KillableDialer struct {
	DialRecorder
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

// Dial implements kgo.Dialer.
func (k *KillableDialer) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	dead := k.killed
	k.mu.Unlock()
	if dead {
		return nil, fmt.Errorf("client killed")
	}
	c, err := k.DialRecorder.Dial(ctx, network, host)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.conns = append(k.conns, c)
	k.mu.Unlock()
	return c, nil
}

// Kill closes every connection and refuses new ones.
func (k *KillableDialer) Kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for _, c := range k.conns {
		c.Close()
	}
}
