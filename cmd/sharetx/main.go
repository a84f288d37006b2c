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
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/intercept"
	"github.com/sharetx/sharetx/proxy"
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
	checkOnly := fs.Bool("check-config", false, "validate the configuration, print it as YAML (upstream.sasl.password redacted), and exit")
	showVersion := fs.Bool("version", false, "print the version of sharetx and of Go it was built with, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionLine())
		return 0
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
		b, err := yaml.Marshal(shown)
		if err != nil {
			fmt.Fprintf(stderr, "sharetx: printing the configuration: %v\n", err)
			return 1
		}
		// The YAML alone on stdout, so that it can be saved and loaded
		// back with --config; the verdict on stderr.
		stdout.Write(b)
		fmt.Fprintln(stderr, "sharetx: configuration OK")
		return 0
	}
	log := newLogger(cfg.Log, stderr)
	procs, from := setMaxProcs(cfg.Limits.MaxProcs, os.Getenv("GOMAXPROCS"))
	log.Info("sharetx: CPUs for Go code", "gomaxprocs", procs, "from", from, "cpus", runtime.NumCPU())

	srv, err := proxy.New(cfg, log, nil, intercept.NewFilter)
	if err != nil {
		fmt.Fprintf(stderr, "sharetx: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = srv.Run(ctx, proxy.RunOptions{Out: stdout, HTTP: httpHandler(srv, cfg.Metrics.Pprof)})
	var cfgErr *configs.Error
	var fatal *proxy.FatalError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &cfgErr):
		fmt.Fprintf(stderr, "sharetx: configuration: %v\n", err)
		return 2
	case errors.As(err, &fatal):
		fmt.Fprintf(stderr, "sharetx: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "sharetx: %v\n", err)
		return 1
	}
}

// setMaxProcs applies limits.max_procs (n) to Go's runtime unless the
// GOMAXPROCS environment variable (env) is set, which Go applied itself and
// which wins; it returns the number in effect and where it came from.
func setMaxProcs(n int, env string) (int, string) {
	switch {
	case env != "":
		return runtime.GOMAXPROCS(0), "the GOMAXPROCS environment variable"
	case n > 0:
		runtime.GOMAXPROCS(n)
		return n, "limits.max_procs"
	default:
		return runtime.GOMAXPROCS(0), "Go's default (limits.max_procs 0)"
	}
}

// versionLine is what --version prints: the module version (a release tag,
// or (devel) for a build from a work tree), the commit and its time when the
// build recorded them (go build -buildvcs), and the Go version.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "sharetx (no build information)"
	}
	v := "sharetx " + bi.Main.Version
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (commit %s, %s%s)", rev, at, modified)
	}
	return v + " " + bi.GoVersion
}

// httpHandler is what sharetx serves at metrics.address (and, with
// metrics.pprof, Go's profiles).
func httpHandler(srv *proxy.Server, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
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
