package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary be the worker too: the orchestrator
// re-executes its own binary as `<binary> worker ...` with CHAOS_ROLE=worker.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "worker" && len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// testLog forwards the orchestrator's progress lines to t.Log until closed.
type testLog struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// TestChaosShort: a short chaos run against the real cluster of
// E2E_KAFKA_SEEDS (make test): 300 inputs, 2 worker processes over 2
// sharetx processes, phases none, worker-kill and proxy-kill. Every input
// must be in the output exactly once (read_committed) and acknowledged in
// the share group.
func TestChaosShort(t *testing.T) {
	seeds := os.Getenv("E2E_KAFKA_SEEDS")
	if seeds == "" {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatal("E2E_REQUIRE_KAFKA is set but E2E_KAFKA_SEEDS is not: start a cluster with `make kafka-up`")
		}
		t.Skip("real cluster not configured: set E2E_KAFKA_SEEDS (make test does)")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	dir, err := os.MkdirTemp("", "sharetx-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	log := &testLog{t: t}
	defer log.close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	results, err := Run(ctx, Options{
		Seeds:   strings.Split(seeds, ","),
		Records: 300,
		Workers: 2,
		Proxies: 2,
		Faults:  []string{"none", "worker-kill", "proxy-kill"},
		Timeout: 2 * time.Minute,
		WorkDir: dir,
		Out:     log,
	})
	if err != nil {
		t.Fatalf("chaos run: %v (logs in %s)", err, dir)
	}
	var table strings.Builder
	WriteTable(&table, results)
	t.Logf("chaos run took %s:\n%s", time.Since(start).Round(time.Second), table.String())
	failed := false
	for _, r := range results {
		if r.Skipped != "" || !r.Pass {
			failed = true
			t.Errorf("%s: %s: in %d, out %d, duplicates %d, lost %d, unacked %d, unexpected %d, errors %v",
				r.Fault, r.Result(), r.In, r.Out, r.Duplicates, r.Lost, r.Unacked, r.Unexpected, r.Errors)
			for _, n := range r.Notes {
				t.Logf("%s: %s", r.Fault, n)
			}
		}
	}
	if failed {
		t.Logf("logs kept in %s", dir)
		return
	}
	os.RemoveAll(dir)
}
