package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/internal/syncbuf"
)

// running is a server under Run.
type running struct {
	s         *Server
	out       *syncbuf.Buffer
	cancel    context.CancelFunc
	done      chan error
	listening chan struct{}
	ready     chan struct{}
}

// startRun builds a server for seeds (none: an embedded cluster) and runs
// it until the test ends.
func startRun(t *testing.T, seeds []string, mod func(*configs.Config)) *running {
	t.Helper()
	return startRunWith(t, seeds, mod, nil)
}

// startRunWith is startRun serving the filter newFilter builds.
func startRunWith(t *testing.T, seeds []string, mod func(*configs.Config), newFilter NewFilter) *running {
	t.Helper()
	cfg := configs.Default()
	cfg.Listen.Bootstrap = "127.0.0.1:0"
	cfg.Listen.BrokerPortBase = 0
	cfg.Metrics.Address = "127.0.0.1:0"
	cfg.Upstream.BootstrapServers = seeds
	cfg.Upstream.DialTimeout = 2 * time.Second
	cfg.Embedded.DataDir = t.TempDir()
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, newFilter)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, out: &syncbuf.Buffer{}, cancel: cancel, done: make(chan error, 1),
		listening: make(chan struct{}), ready: make(chan struct{})}
	// What Run serves at metrics.address is the caller's (cmd/sharetx has
	// /metrics, /healthz and /readyz); here, readiness.
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := s.Ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, why)
		}
	})
	go func() {
		r.done <- s.Run(ctx, RunOptions{
			Out:       r.out,
			HTTP:      mux,
			Listening: func() { close(r.listening) },
			Ready:     func() { close(r.ready) },
			Backoff:   func(int) time.Duration { return 50 * time.Millisecond },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return")
		}
	})
	return r
}

// stop ends Run and returns its result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
		return nil
	}
}

func (r *running) await(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case err := <-r.done:
		t.Fatalf("Run returned before %s: %v\n%s", what, err, r.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("not %s after 30 s\n%s", what, r.out.String())
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Run in front of a cluster: it listens, serves its HTTP handler at
// metrics.address, gets ready, serves clients, says so on Out, and shuts
// down when its context ends, closing its listeners.
func TestRunServesAndStops(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	r := startRun(t, fake.ListenAddrs(), nil)
	r.await(t, r.ready, "ready")
	if ok, why := r.s.Ready(); !ok {
		t.Fatalf("Ready after the Ready callback: %s", why)
	}
	if code, body := httpGet(t, "http://"+r.s.MetricsAddr()+"/ready"); code != 200 {
		t.Fatalf("/ready: %d %q", code, body)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.s.BootstrapAddr()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("a client through the proxy: %v", err)
	}
	cl.Close()
	addr := r.s.BootstrapAddr()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := r.out.String()
	for _, want := range []string{"bootstrap.servers=" + addr, "metrics at http://", "is served at", "sharetx: ready", "sharetx: shutting down", "sharetx: stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("Out lacks %q:\n%s", want, out)
		}
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the bootstrap listener is open after Run returned")
	}
}

// With no upstream configured, Run starts an embedded cluster and serves
// it.
func TestRunEmbedded(t *testing.T) {
	r := startRun(t, nil, func(c *configs.Config) { c.Metrics.Address = "" })
	r.await(t, r.ready, "ready")
	if !strings.Contains(r.out.String(), "embedded cluster") || r.s.MetricsAddr() != "" {
		t.Fatalf("Out:\n%s", r.out.String())
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// While the cluster is down Run listens and serves, is not ready and says
// why, retries, and still stops cleanly.
func TestRunUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := ln.Addr().String()
	ln.Close()
	r := startRun(t, []string{seed}, nil)
	r.await(t, r.listening, "listening")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(r.out.String(), "(attempt 2)") {
		if time.Now().After(deadline) {
			t.Fatalf("no retries:\n%s", r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := httpGet(t, "http://"+r.s.MetricsAddr()+"/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "has not answered") {
		t.Fatalf("readiness while the cluster is down: %d %q", code, body)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(r.out.String(), "sharetx: stopped") {
		t.Fatalf("Out:\n%s", r.out.String())
	}
}

// A metrics address that cannot be bound is a configuration error, and the
// listener Run opened before it is closed again.
func TestRunMetricsAddressInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	r := startRun(t, fake.ListenAddrs(), func(c *configs.Config) { c.Metrics.Address = busy.Addr().String() })
	var cfgErr *configs.Error
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.As(err, &cfgErr) || cfgErr.Key != "metrics.address" {
			t.Fatalf("Run: %v, want a metrics.address configuration error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not fail")
	}
	if addr := r.s.BootstrapAddr(); addr != "" {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Error("the bootstrap listener is open after Run failed")
		}
	}
}

// keyFilter serves key, which the cluster must not use (CheckUpstream).
type keyFilter struct{ *fakeFilter }

func (f keyFilter) CheckUpstream(resp *kmsg.ApiVersionsResponse) error {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == f.key {
			return fmt.Errorf("the cluster uses key %d", f.key)
		}
	}
	return nil
}

// A cluster that uses the key the filter serves can never be served (the
// filter's CheckUpstream fails): Run returns a *FatalError.
func TestRunFatal(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	f := keyFilter{newFakeFilter(3)} // Metadata
	r := startRunWith(t, fake.ListenAddrs(), nil, func(FilterContext) (Filter, error) { return f, nil })
	select {
	case err := <-r.done:
		r.done <- err
		var fatal *FatalError
		if !errors.As(err, &fatal) {
			t.Fatalf("Run: %v, want a *FatalError", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not fail")
	}
}
