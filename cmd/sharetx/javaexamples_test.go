package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// TestJavaExamplesZeroConfig runs the Java examples (java/examples,
// compiled by java/apps.sh against the Java library) against the
// zero-config start and checks them (checkExamples). It needs Java 17 and
// Maven (java/apps.sh downloads kafka-clients the first time); without them
// it skips, unless E2E_REQUIRE_KAFKA is set (make test).
func TestJavaExamplesZeroConfig(t *testing.T) {
	sim.NeedJava(t)
	if testing.Short() {
		t.Skip("-short: no Java run")
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	java, cp, err := sim.JavaApps(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := startZeroConfig(t)
	t.Logf("sharetx ready at %s after %.1fs (java/apps.sh and the build included)", addr, time.Since(t0).Seconds())
	checkExamples(ctx, t, addr,
		func(args ...string) []string {
			return append([]string{java, "-cp", cp, "io.sharetx.examples.ConsumeTransformProduce"}, args...)
		},
		func(args ...string) []string {
			return append([]string{java, "-cp", cp, "io.sharetx.examples.CheckpointAcknowledger"}, args...)
		})
	t.Logf("took %.1fs", time.Since(t0).Seconds())
}

// checkExamples runs one language's two examples (ctp, sink: their command
// lines for the given options) against the sidecar at addr, with failures on
// purpose, and checks what they did: the consume-transform-produce example
// (aborting every 4th transaction) must have put every input exactly once
// into its output topic (read read_committed, counted per id), the
// checkpointing one (failing every 3rd checkpoint) every input exactly once
// into its sink file, and a fresh member of either share group must be
// handed nothing (the group's lag 0). Both languages' examples take the same
// options and print the same summary line.
func checkExamples(ctx context.Context, t *testing.T, addr string, ctp, sink func(args ...string) []string) {
	cluster := sim.Cluster{Seeds: []string{addr}, ClientID: "examples-check"}
	const n = 300

	t.Run("ConsumeTransformProduce", func(t *testing.T) {
		sum := runExample(ctx, t, ctp("--bootstrap", addr,
			"--group", "ctp", "--input", "ctp-in", "--output", "ctp-out", "--txn-id", "ctp-1",
			"--seed", fmt.Sprint(n), "--max-records", fmt.Sprint(n), "--max-poll", "20", "--abort-every", "4", "--max-seconds", "60"))
		if sum["out"] != n || sum["commits"] == 0 || sum["aborts"] == 0 || sum["in"] < n+sum["aborts"] {
			t.Errorf("summary %v: want out=%d, commits and aborts, in >= out + the aborted ones", sum, n)
		}
		outputs, err := cluster.ReadAllCommitted("ctp-out", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, fmt.Sprintf("ORDER-%d", i)) // the inputs order-i, upper-cased
		}
		checkOnce(t, "output topic ctp-out (read_committed)", sim.Count(ids, outputs))
		checkDrained(t, cluster, "ctp", "ctp-in")
	})

	t.Run("CheckpointAcknowledger", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sink.txt")
		sum := runExample(ctx, t, sink("--bootstrap", addr,
			"--group", "sink", "--input", "sink-in", "--txn-id", "sink-1", "--sink", path,
			"--seed", fmt.Sprint(n), "--max-records", fmt.Sprint(n), "--max-poll", "25", "--fail-every", "3", "--max-seconds", "60"))
		if sum["acked"] != n || sum["written"] != n || sum["checkpoints"] == 0 || sum["failed"] == 0 {
			t.Errorf("summary %v: want acked=%d written=%d, checkpoints and failed ones", sum, n, n)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		values := map[string]int{}
		positions := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
			pos, v, ok := strings.Cut(l, "\t")
			if !ok || positions[pos] {
				t.Errorf("sink line %q: malformed or a record written twice", l)
			}
			positions[pos] = true
			values[v]++
		}
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, fmt.Sprintf("event-%d", i))
		}
		checkOnce(t, "sink file", sim.Count(ids, values))
		checkDrained(t, cluster, "sink", "sink-in")
	})
}

// runExample runs one example (its command line) to its end and returns the
// numbers of its "summary:" line (key=value).
func runExample(ctx context.Context, t *testing.T, argv []string) map[string]int {
	t.Helper()
	start := time.Now()
	class := argv[len(argv)-1]
	for i, a := range argv {
		if strings.HasPrefix(a, "--") {
			class = filepath.Base(argv[i-1])
			break
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var summary string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "summary: ") {
			summary = sc.Text()
		}
	}
	t.Logf("%s (%.1fs): %s", class, time.Since(start).Seconds(), summary)
	// A check of the run that fails later shows what the example printed
	// (its progress lines, the checkpoints and commits that failed).
	t.Cleanup(func() {
		if t.Failed() && err == nil && summary != "" {
			t.Logf("%s's output, its last lines:\n%s\nstderr:\n%s", class, lastLines(string(out), 40), lastLines(stderr.String(), 20))
		}
	})
	if err != nil || summary == "" {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", class, err, lastLines(string(out), 30), lastLines(stderr.String(), 30))
	}
	sum := map[string]int{}
	for _, f := range strings.Fields(strings.TrimPrefix(summary, "summary: ")) {
		if k, v, ok := strings.Cut(f, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("summary %q: %s", summary, f)
			}
			sum[k] = n
		}
	}
	return sum
}

func checkOnce(t *testing.T, what string, c sim.Counts) {
	t.Helper()
	if c.Duplicates != 0 || c.Lost != 0 || c.Unexpected != 0 || c.Distinct != c.In {
		t.Errorf("%s: %d of %d inputs, %d duplicates %v, %d lost %v, %d unexpected; want each input exactly once",
			what, c.Distinct, c.In, c.Duplicates, c.DuplicateIDs, c.Lost, c.LostIDs, c.Unexpected)
	}
}

// checkDrained: a fresh member of the share group is handed nothing, and
// the group's lag on the topic is 0.
func checkDrained(t *testing.T, cluster sim.Cluster, group, topic string) {
	t.Helper()
	left, lag, err := cluster.Unacked(group, topic, 5*time.Second, 0)
	if err != nil {
		t.Fatalf("share group %s: %v", group, err)
	}
	if len(left) != 0 || lag != 0 {
		t.Errorf("share group %s: a fresh member was handed %d records (%v), lag %d; want nothing left", group, len(left), left, lag)
	}
}

// TestGoExamplesZeroConfig runs the Go examples (examples/consume-transform-produce,
// examples/checkpoint-sink, built here) against the zero-config start and
// checks them as the Java ones (checkExamples).
func TestGoExamplesZeroConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no example run")
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", dir, "../../examples/consume-transform-produce", "../../examples/checkpoint-sink")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the examples: %v\n%s", err, out)
	}
	addr := startZeroConfig(t)
	t.Logf("sharetx ready at %s after %.1fs (the builds included)", addr, time.Since(t0).Seconds())
	checkExamples(ctx, t, addr,
		func(args ...string) []string {
			return append([]string{filepath.Join(dir, "consume-transform-produce")}, args...)
		},
		func(args ...string) []string { return append([]string{filepath.Join(dir, "checkpoint-sink")}, args...) })
	t.Logf("took %.1fs", time.Since(t0).Seconds())
}
