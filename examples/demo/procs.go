package main

// The sharetx process of the demo (the child processes themselves:
// e2e/sim).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// buildSharetx builds ./cmd/sharetx into dir.
func buildSharetx(ctx context.Context, dir string) (string, error) {
	if _, err := sim.ModuleRoot(); err != nil {
		return "", fmt.Errorf("%v (run the demo from the repository, or pass --sharetx-bin)", err)
	}
	return sim.BuildSharetx(ctx, dir)
}

// sharetxProc is the one sharetx process of the demo: no upstream, so it
// starts its embedded cluster, with its data in a fresh directory.
type sharetxProc struct {
	bootstrap string // where clients connect
	metrics   string
	p         *sim.Proc
}

// startSharetx starts bin on free ports and waits until it says ready.
func startSharetx(bin, dir string, t0 time.Time, timeout time.Duration) (*sharetxProc, error) {
	base, err := sim.FreePortBlock(3, func(n int) int { return int(time.Now().UnixNano() / 7 % int64(n)) })
	if err != nil {
		return nil, err
	}
	s := &sharetxProc{bootstrap: fmt.Sprintf("127.0.0.1:%d", base), metrics: fmt.Sprintf("127.0.0.1:%d", base+2)}
	// The user's own SHARETX_* settings (an upstream, say) must not leak in.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHARETX_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"SHARETX_LISTEN_ADVERTISED_HOST=127.0.0.1",
		"SHARETX_LISTEN_BROKER_PORT_BASE="+strconv.Itoa(base+1), // the embedded broker is node 0
		"SHARETX_EMBEDDED_DATA_DIR="+filepath.Join(dir, "embedded-cluster"),
	)
	p, err := sim.StartSharetx("sharetx", bin, []string{"--bootstrap", s.bootstrap, "--metrics", s.metrics}, env,
		filepath.Join(dir, "sharetx.log"), t0, timeout)
	if err != nil {
		return nil, err
	}
	s.p = p
	return s, nil
}

// stop sends SIGTERM and waits for the exit.
func (s *sharetxProc) stop() {
	s.p.Signal(syscall.SIGTERM)
	s.p.Wait(20 * time.Second)
}

// metric sums the series of one metric on the proxy's /metrics whose
// labels contain every one of labels (e.g. `type="commit"`).
func (s *sharetxProc) metric(name string, labels ...string) (float64, error) {
	m, err := sim.Scrape(s.metrics, name)
	if err != nil {
		return 0, err
	}
	sum, found := sim.Sum(m, name, labels...)
	if !found {
		return 0, fmt.Errorf("metric %s%v not found", name, labels)
	}
	return sum, nil
}
