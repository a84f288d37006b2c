package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// TestMain lets the test binary be the worker too: the demo re-executes its
// own binary as `<binary> worker ...` with DEMO_ROLE=worker.
func TestMain(m *testing.M) {
	sim.TestMain(m, roleEnv, workerMain)
}

// TestDemoShort runs a short demo (600 records, both modes, 5 kill -9 each,
// no real Kafka: sharetx's embedded cluster): the exactly-once mode must
// deliver every input exactly once and leave its share group drained; the
// at-least-once mode must have run the same crashes (its duplicates depend
// on timing, so they are only printed).
func TestDemoShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sharetx and runs worker processes for about a minute")
	}
	runShortDemo(t, langGo)
}

// TestDemoShortJava is TestDemoShort with the Java workers (--worker-lang
// java: examples/demo/java, the Java library, built by java/apps.sh). It
// needs Java 17 and Maven; without them it skips, unless E2E_REQUIRE_KAFKA
// is set (make test).
func TestDemoShortJava(t *testing.T) {
	sim.NeedJava(t)
	if testing.Short() {
		t.Skip("builds sharetx and the Java workers and runs them for about a minute")
	}
	runShortDemo(t, langJava)
}

// TestDemoShortPython is TestDemoShort with the Python workers (--worker-lang
// python: examples/demo/python, the sharetx package for confluent-kafka, in
// python/venv.sh's virtual environment). It needs python3 with venv (and
// PyPI the first time); without python3 it skips, unless E2E_REQUIRE_KAFKA
// is set (make test).
func TestDemoShortPython(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatalf("python3 not found: the Python workers need it (E2E_REQUIRE_KAFKA is set)")
		}
		t.Skip("python3 not found: the Python workers need it")
	}
	if testing.Short() {
		t.Skip("builds sharetx, makes the Python workers' virtual environment and runs them for about a minute")
	}
	runShortDemo(t, langPython)
}

func runShortDemo(t *testing.T, lang string) {
	o := defaultOptions()
	o.Records = 600
	o.Crashes = 5
	o.RecordTime = 50 * time.Millisecond
	o.Modes = []string{modeEOS, modeALO}
	o.Seed = 7
	o.WorkerLang = lang
	o.Timeout = time.Minute
	o.Quiet = 3 * time.Second
	o.Out = &sim.LineLog{T: t}
	dir, err := os.MkdirTemp("", "sharetx-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	o.WorkDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	results, _, err := Run(ctx, o)
	var sum bytes.Buffer
	WriteSummary(&sum, results)
	t.Logf("summary (%.0fs):\n%s", time.Since(start).Seconds(), sum.String())
	if err != nil {
		t.Fatalf("demo: %v (logs in %s)", err, dir)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2 (logs in %s)", len(results), dir)
	}
	eos, alo := results[0], results[1]
	if eos.Duplicates != 0 || eos.Lost != 0 || eos.Unexpected != 0 || eos.Out != o.Records {
		t.Errorf("exactly-once: out %d, duplicates %d (%v), lost %d (%v), unexpected %d; want every one of %d inputs once",
			eos.Out, eos.Duplicates, eos.DuplicateIDs, eos.Lost, eos.LostIDs, eos.Unexpected, o.Records)
	}
	if !eos.Drained() {
		t.Errorf("exactly-once: the share group is not drained: a fresh member got %d records, lag %d", eos.Leftover, eos.Lag)
	}
	if eos.TxnCommitted == 0 {
		t.Error("exactly-once: no transaction committed")
	}
	for _, r := range results {
		if len(r.Errors) > 0 {
			t.Errorf("%s: %v", r.Mode, r.Errors)
		}
		if r.Crashes != o.Crashes {
			t.Errorf("%s: %d crashes injected, want %d", r.Mode, r.Crashes, o.Crashes)
		}
	}
	if alo.Lost != 0 {
		t.Errorf("at-least-once lost %d inputs: %v", alo.Lost, alo.LostIDs)
	}
	t.Logf("at-least-once under the same %d crashes: %d duplicates (%d of its crashes after producing, before acknowledging)",
		alo.Crashes, alo.Duplicates, alo.CrashKinds[crashProduced])
	if t.Failed() {
		t.Logf("logs kept in %s", dir)
		return
	}
	os.RemoveAll(dir)
}
