// Command sharetx runs the sharetx proxy.
//
//	sharetx                                  # embedded single-node cluster + proxy on 127.0.0.1:9092
//	sharetx --upstream host:port[,host:port] # in front of a real cluster
//	sharetx --config configs/sharetx.yaml
//
// Every configuration key can also be set by a SHARETX_* environment
// variable; flags win over both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/upstream"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sharetx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration file (see configs/sharetx.yaml)")
	upstreamFlag := fs.String("upstream", "", "upstream bootstrap servers, host:port[,host:port]; empty starts an embedded cluster")
	bootstrap := fs.String("bootstrap", "", "address of the bootstrap listener (listen.bootstrap), e.g. 127.0.0.1:9092")
	metricsAddr := fs.String("metrics", "", "address of /metrics, /healthz and /readyz (metrics.address)")
	checkOnly := fs.Bool("check-config", false, "validate the configuration, print it, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sharetx: unexpected argument %q (flags start with --)\n", fs.Arg(0))
		return 2
	}

	cfg, err := configs.Load(*configPath, os.Environ())
	if err == nil {
		if *upstreamFlag != "" {
			cfg.Upstream.BootstrapServers = strings.Split(*upstreamFlag, ",")
		}
		if *bootstrap != "" {
			cfg.Listen.Bootstrap = *bootstrap
		}
		if *metricsAddr != "" {
			cfg.Metrics.Address = *metricsAddr
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "sharetx: configuration: %v\n", err)
		return 2
	}
	if *checkOnly {
		shown := cfg
		if shown.Upstream.SASL.Password != "" {
			shown.Upstream.SASL.Password = "(redacted)"
		}
		fmt.Fprintf(stdout, "configuration OK: %+v\n", shown)
		return 0
	}
	log := newLogger(cfg.Log, stderr)

	var embedded *upstream.Embedded
	if len(cfg.Upstream.BootstrapServers) == 0 {
		embedded, err = upstream.StartEmbedded(cfg.Embedded.DataDir, cfg.Embedded.Brokers)
		if err != nil {
			fmt.Fprintf(stderr, "sharetx: %v\n", err)
			return 1
		}
		defer embedded.Close()
		cfg.Upstream.BootstrapServers = embedded.Seeds()
		fmt.Fprintf(stdout, "embedded cluster (franz-go kfake, %d broker(s)) started; its data is kept in %s\n", cfg.Embedded.Brokers, embedded.DataDir)
	}

	srv, err := proxy.New(cfg, log, nil)
	if err != nil {
		fmt.Fprintf(stderr, "sharetx: %v\n", err)
		return 2
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintf(stderr, "sharetx: %v\n", err)
		return 1
	}

	var metricsSrv *http.Server
	if cfg.Metrics.Address != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Address)
		if err != nil {
			fmt.Fprintf(stderr, "sharetx: configuration: config key metrics.address: cannot listen on %s: %v\n", cfg.Metrics.Address, err)
			return 2
		}
		metricsSrv = &http.Server{Handler: httpHandler(srv), ReadHeaderTimeout: 5 * time.Second}
		go metricsSrv.Serve(ln)
		cfg.Metrics.Address = ln.Addr().String()
	}

	dialer, err := upstream.NewDialer(cfg.Upstream)
	if err != nil {
		fmt.Fprintf(stderr, "sharetx: configuration: %v\n", err)
		return 2
	}
	cl, err := upstream.NewClient(cfg.Upstream.BootstrapServers, dialer, cfg.Upstream.SASL)
	if err != nil {
		fmt.Fprintf(stderr, "sharetx: upstream client: %v\n", err)
		return 1
	}
	defer cl.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(stdout, "sharetx: clients connect with bootstrap.servers=%s\n", srv.BootstrapAddr())
	if cfg.Metrics.Address != "" {
		fmt.Fprintf(stdout, "sharetx: metrics at http://%s/metrics (health: /healthz, readiness: /readyz)\n", cfg.Metrics.Address)
	}
	// Find the brokers before announcing them; keep serving (and retrying)
	// while the upstream is down: /readyz says so.
	for attempt := 1; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, cfg.Upstream.DialTimeout)
		_, err := srv.Discover(dctx, cl)
		cancel()
		if err == nil {
			break
		}
		var fatal *proxy.FatalError
		if errors.As(err, &fatal) {
			fmt.Fprintf(stderr, "sharetx: %v\n", err)
			srv.Shutdown(context.Background())
			return 2
		}
		if ctx.Err() != nil {
			return shutdown(srv, cfg, stdout, log)
		}
		fmt.Fprintf(stdout, "sharetx: upstream %s not reachable yet (attempt %d): %v; retrying\n",
			strings.Join(cfg.Upstream.BootstrapServers, ","), attempt, err)
		select {
		case <-ctx.Done():
			return shutdown(srv, cfg, stdout, log)
		case <-time.After(min(time.Duration(attempt)*time.Second, 10*time.Second)):
		}
	}
	for attempt := 1; ; attempt++ {
		err := srv.StartKIP(ctx, cl)
		if err == nil {
			fmt.Fprintf(stdout, "sharetx: TxnShareAcknowledge served on API key %d; shadow topic %s\n", cfg.KIP1289.APIKey, cfg.KIP1289.ShadowTopic)
			break
		}
		if ctx.Err() != nil {
			return shutdown(srv, cfg, stdout, log)
		}
		fmt.Fprintf(stdout, "sharetx: preparing transactional acknowledgements failed (attempt %d): %v; retrying\n", attempt, err)
		select {
		case <-ctx.Done():
			return shutdown(srv, cfg, stdout, log)
		case <-time.After(min(time.Duration(attempt)*time.Second, 10*time.Second)):
		}
	}
	for _, b := range srv.Brokers() {
		fmt.Fprintf(stdout, "sharetx: upstream broker %d at %s is served at %s\n", b.NodeID, b.Upstream, b.Proxy)
	}
	fmt.Fprintln(stdout, "sharetx: ready")
	go srv.RunDiscovery(ctx, cl)

	<-ctx.Done()
	rc := shutdown(srv, cfg, stdout, log)
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	return rc
}

func shutdown(srv *proxy.Server, cfg configs.Config, stdout io.Writer, log *slog.Logger) int {
	fmt.Fprintf(stdout, "sharetx: shutting down: no new connections; finishing in-flight requests (up to %s)\n", cfg.Timeouts.ShutdownGrace)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeouts.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	fmt.Fprintln(stdout, "sharetx: stopped")
	return 0
}

func httpHandler(srv *proxy.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(srv.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := srv.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

func newLogger(c configs.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Level)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
