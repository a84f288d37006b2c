package proxy

// Start-up and shutdown, written once for every way the proxy runs: the
// sharetx command and the end-to-end tests' harness.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/upstream"
)

// RunOptions are what a caller of Run may add; the zero value is fine.
type RunOptions struct {
	// Out receives the lines an operator reads: where clients connect, the
	// metrics address, each retry, the brokers served, "sharetx: ready",
	// and the shutdown. Nil discards them.
	Out io.Writer
	// HTTP is served at metrics.address (cmd/sharetx serves /metrics,
	// /healthz and /readyz there); nil opens nothing there.
	HTTP http.Handler
	// Listening, if set, is called once the bootstrap listener and the
	// metrics endpoint are open (BootstrapAddr and MetricsAddr answer).
	Listening func()
	// Ready, if set, is called once the cluster answered and the KIP-1289
	// path is prepared.
	Ready func()
	// Backoff is the wait before retry number attempt (from 1) of finding
	// the cluster or of preparing the KIP-1289 path; nil: attempt seconds,
	// at most 10.
	Backoff func(attempt int) time.Duration
}

// Run serves until ctx ends, then shuts down gracefully (waiting up to
// timeouts.shutdown_grace for the requests in flight). It starts an embedded
// cluster first when no upstream broker is configured, opens the bootstrap
// listener and the metrics endpoint (opts.HTTP at metrics.address), finds
// the cluster's brokers (retrying while the cluster cannot be reached; the
// proxy serves meanwhile and Ready says why it is not ready), prepares the
// filter, the KIP-1289 feature (startFilter, retried), then refreshes the brokers every
// upstream.metadata_refresh.
//
// It returns nil after a shutdown that ctx asked for; a *configs.Error when
// a listener cannot open; a *FatalError when the cluster can never be
// served; another error when the embedded cluster or the upstream client
// cannot start. Run is called once.
func (s *Server) Run(ctx context.Context, opts RunOptions) error {
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	backoff := opts.Backoff
	if backoff == nil {
		backoff = func(attempt int) time.Duration { return min(time.Duration(attempt)*time.Second, 10*time.Second) }
	}
	wait := func(attempt int) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff(attempt)):
			return true
		}
	}

	if len(s.cfg.Upstream.BootstrapServers) == 0 {
		embedded, err := upstream.StartEmbedded(s.cfg.Embedded.DataDir, s.cfg.Embedded.Brokers)
		if err != nil {
			return err
		}
		defer embedded.Close()
		s.cfg.Upstream.BootstrapServers = embedded.Seeds() // nothing runs yet to read it
		fmt.Fprintf(out, "embedded cluster (franz-go kfake, %d broker(s)) started; its data is kept in %s\n", s.cfg.Embedded.Brokers, embedded.DataDir)
	}
	if err := s.Start(); err != nil {
		return err
	}
	if addr := s.cfg.Metrics.Address; addr != "" && opts.HTTP != nil {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			s.Shutdown(context.Background())
			return &configs.Error{Key: "metrics.address", Msg: fmt.Sprintf("cannot listen on %s: %v", addr, err)}
		}
		hs := &http.Server{Handler: opts.HTTP, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		s.mu.Lock()
		s.metricsAddr = ln.Addr().String()
		s.mu.Unlock()
	}
	cl, err := upstream.NewClient(s.cfg.Upstream.BootstrapServers, s.dialer, s.cfg.Upstream.SASL, upstream.Logger(s.log, "upstream"))
	if err != nil {
		s.Shutdown(context.Background())
		return fmt.Errorf("upstream client: %w", err)
	}
	defer cl.Close()

	fmt.Fprintf(out, "sharetx: clients connect with bootstrap.servers=%s\n", s.BootstrapAddr())
	if addr := s.MetricsAddr(); addr != "" {
		fmt.Fprintf(out, "sharetx: metrics at http://%s/metrics (health: /healthz, readiness: /readyz)\n", addr)
	}
	if opts.Listening != nil {
		opts.Listening()
	}

	// Find the brokers before announcing them; keep serving (and retrying)
	// while the upstream is down: /readyz says so.
	for attempt := 1; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Upstream.DialTimeout)
		_, err := s.Discover(dctx, cl)
		cancel()
		if err == nil {
			break
		}
		var fatal *FatalError
		if errors.As(err, &fatal) {
			s.Shutdown(context.Background())
			return err
		}
		if ctx.Err() != nil {
			return s.stop(out)
		}
		fmt.Fprintf(out, "sharetx: upstream %s not reachable yet (attempt %d): %v; retrying\n",
			strings.Join(s.cfg.Upstream.BootstrapServers, ","), attempt, err)
		if !wait(attempt) {
			return s.stop(out)
		}
	}
	for attempt := 1; ; attempt++ {
		err := s.startFilter(ctx, cl)
		if err == nil {
			if line := s.filter.Started(); line != "" {
				fmt.Fprintf(out, "sharetx: %s\n", line)
			}
			break
		}
		if ctx.Err() != nil {
			return s.stop(out)
		}
		fmt.Fprintf(out, "sharetx: the cluster answers, but the proxy's feature did not start (attempt %d): %v; retrying\n", attempt, err)
		if !wait(attempt) {
			return s.stop(out)
		}
	}
	for _, b := range s.Brokers() {
		fmt.Fprintf(out, "sharetx: upstream broker %d at %s is served at %s\n", b.NodeID, b.Upstream, b.Proxy)
	}
	fmt.Fprintln(out, "sharetx: ready")
	if opts.Ready != nil {
		opts.Ready()
	}

	var discovery sync.WaitGroup
	discovery.Add(1)
	go func() { defer discovery.Done(); s.RunDiscovery(ctx, cl) }()
	defer discovery.Wait() // before cl closes
	<-ctx.Done()
	return s.stop(out)
}

// stop shuts the server down gracefully, saying so on out.
func (s *Server) stop(out io.Writer) error {
	fmt.Fprintf(out, "sharetx: shutting down: no new connections; finishing in-flight requests (up to %s)\n", s.cfg.Timeouts.ShutdownGrace)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeouts.ShutdownGrace)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		s.log.Warn("shutdown", "err", err)
	}
	fmt.Fprintln(out, "sharetx: stopped")
	return nil
}

// MetricsAddr is the address the metrics endpoint is bound to, empty when
// Run has not opened one.
func (s *Server) MetricsAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metricsAddr
}
