// Command demo shows sharetx at work: exactly-once consume-transform-produce
// with a share group (KIP-932) and transactional acknowledgements
// (KIP-1289), while worker processes are killed with kill -9, next to the
// same application acknowledging without transactions.
//
//	go run ./examples/demo                        # both modes, side by side (make demo)
//	go run ./examples/demo --mode at-least-once   # one mode
//	go run ./examples/demo --worker-lang java     # the workers in Java (java/apps.sh builds them)
//	go run ./examples/demo --worker-lang python   # the workers in Python (python/venv.sh installs them)
//
// It builds ./cmd/sharetx and starts it with no upstream, so sharetx runs
// its embedded single-node cluster (a fresh data directory, free ports).
// Then, per mode: an input topic of N records whose values are unique ids,
// one share group, W worker processes (this binary, `demo worker`) that
// copy every input to an output topic, and a crash plan — a random worker
// killed with SIGKILL every few seconds, most often at the worst moments
// (right after producing, before committing; right after committing) and
// restarted at once. At the end the output topic is read read_committed and
// counted per id, and a fresh member of the share group must be handed
// nothing.
//
// Exit status: 0 when the exactly-once mode delivered every input exactly
// once and its share group acknowledged every input; 1 otherwise; 2 for
// bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// roleEnv makes a re-executed binary (this command, or the test binary) a
// worker.
const roleEnv = "DEMO_ROLE"

func main() {
	sim.Main(workerMain, mainRun)
}

func mainRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := defaultOptions()
	mode := fs.String("mode", "both", "exactly-once, at-least-once, or both (side by side)")
	fs.IntVar(&o.Records, "records", o.Records, "input records per mode")
	fs.IntVar(&o.Workers, "workers", o.Workers, "worker processes")
	fs.IntVar(&o.Crashes, "crashes", o.Crashes, "kill -9 of a worker per mode")
	fs.IntVar(&o.MaxPoll, "max-poll", o.MaxPoll, "records per poll (and transaction) at most")
	fs.DurationVar(&o.RecordTime, "record-time", o.RecordTime, "simulated processing time per record (paces the run)")
	fs.Float64Var(&o.AbortRate, "abort-rate", o.AbortRate, "exactly-once: fraction of transactions aborted on purpose")
	fs.Int64Var(&o.Seed, "seed", 0, "random seed of the crash plan (0: from the clock)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "where logs go (default: a new directory under $TMPDIR)")
	fs.StringVar(&o.SharetxBin, "sharetx-bin", "", "a sharetx binary to use instead of building ./cmd/sharetx")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "per mode: how long the workers may take to get every input into the output")
	fs.StringVar(&o.WorkerLang, "worker-lang", langGo, "the workers' language: go (client/, this binary), java (java/: io.sharetx.demo.DemoWorker, built by java/apps.sh) or python (python/: examples/demo/python/demo_worker.py, in python/venv.sh's virtual environment)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch *mode {
	case "both":
		o.Modes = []string{modeEOS, modeALO}
	case modeEOS, modeALO:
		o.Modes = []string{*mode}
	default:
		fmt.Fprintf(stderr, "demo: --mode %q: want exactly-once, at-least-once or both\n", *mode)
		return 2
	}
	if o.WorkerLang != langGo && o.WorkerLang != langJava && o.WorkerLang != langPython {
		fmt.Fprintf(stderr, "demo: --worker-lang %q: want go, java or python\n", o.WorkerLang)
		return 2
	}
	if fs.NArg() > 0 || o.Records < 1 || o.Workers < 1 || o.Crashes < 0 || o.MaxPoll < 1 || o.AbortRate < 0 || o.AbortRate >= 1 {
		fmt.Fprintln(stderr, "demo: --records, --workers and --max-poll must be >= 1, --crashes >= 0, --abort-rate in [0,1)")
		return 2
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000
	}
	o.Out = stdout
	lang := "Go"
	if o.WorkerLang == langJava {
		lang = "Java"
	}
	if o.WorkerLang == langPython {
		lang = "Python"
	}
	fmt.Fprintf(stdout, "sharetx demo: %d records, %d %s workers, %d crashes per mode, seed %d (repeat with --seed %d)\n",
		o.Records, o.Workers, lang, o.Crashes, o.Seed, o.Seed)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	results, logDir, err := Run(ctx, o)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		WriteSummary(stdout, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
	}
	fmt.Fprintf(stdout, "\ntook %.0fs; logs (demo.log, sharetx.log, <mode>/worker-N.log): %s\n", time.Since(t0).Seconds(), logDir)
	if err != nil {
		return 1
	}
	for _, r := range results {
		if r.Mode == modeEOS && !r.ExactlyOnce() {
			return 1
		}
	}
	return 0
}

func defaultOptions() Options {
	return Options{
		Records:    3000,
		Workers:    3,
		Crashes:    12,
		MaxPoll:    20,
		RecordTime: 30 * time.Millisecond,
		AbortRate:  0.1,
		Timeout:    2 * time.Minute,
		Quiet:      4 * time.Second,
	}
}

// WriteSummary prints the modes side by side, one column each.
func WriteSummary(w io.Writer, results []Result) {
	head := map[string]string{modeEOS: "exactly-once via sharetx", modeALO: "at-least-once"}
	var rows [][]string
	row := func(label string, cell func(r *Result) string) {
		cells := []string{label}
		for i := range results {
			cells = append(cells, cell(&results[i]))
		}
		rows = append(rows, cells)
	}
	num := func(f func(r *Result) int) func(r *Result) string {
		return func(r *Result) string { return fmt.Sprint(f(r)) }
	}
	eos := func(f func(r *Result) int) func(r *Result) string {
		return func(r *Result) string {
			if r.Mode != modeEOS {
				return "-"
			}
			return fmt.Sprint(f(r))
		}
	}
	row("", func(r *Result) string { return head[r.Mode] })
	row("records in", num(func(r *Result) int { return r.In }))
	row("records out (read_committed)", num(func(r *Result) int { return r.Out }))
	row("duplicates", num(func(r *Result) int { return r.Duplicates }))
	row("lost", num(func(r *Result) int { return r.Lost }))
	row("crashes injected (kill -9)", num(func(r *Result) int { return r.Crashes }))
	row("  after producing, before commit/ack", num(func(r *Result) int { return r.CrashKinds[crashProduced] }))
	row("  right after commit/ack", num(func(r *Result) int { return r.CrashKinds[crashCommitted] }))
	row("  at a random moment", num(func(r *Result) int { return r.CrashKinds[crashRandom] }))
	row("outputs produced by killed workers before commit/ack", num(func(r *Result) int { return r.KilledProduced }))
	row("transactions committed", eos(func(r *Result) int { return r.TxnCommitted }))
	row("transactions aborted (random aborts)", eos(func(r *Result) int { return r.TxnAborted }))
	row("transactions left open by kill -9 (aborted)", eos(func(r *Result) int { return r.KilledOpenTxns }))
	row("batches acknowledged", func(r *Result) string {
		if r.Mode == modeEOS {
			return "-"
		}
		return fmt.Sprint(r.AckBatches)
	})
	row("share group acknowledged all input", func(r *Result) string {
		if r.Drained() {
			return "yes"
		}
		return fmt.Sprintf("NO (%d left, lag %d)", r.Leftover, r.Lag)
	})
	row("time", func(r *Result) string { return fmt.Sprintf("%.0fs", r.Seconds) })
	row("verdict", func(r *Result) string {
		switch {
		case r.ExactlyOnce():
			return "EXACTLY ONCE"
		case r.Mode == modeALO && r.Lost == 0 && len(r.Errors) == 0 && r.Drained():
			return fmt.Sprintf("%d DUPLICATES", r.Duplicates)
		default:
			var bad []string
			if r.Duplicates > 0 {
				bad = append(bad, fmt.Sprintf("%d duplicates", r.Duplicates))
			}
			if r.Lost > 0 {
				bad = append(bad, fmt.Sprintf("%d lost", r.Lost))
			}
			if !r.Drained() {
				bad = append(bad, "not drained")
			}
			if len(r.Errors) > 0 {
				bad = append(bad, "errors")
			}
			return "FAILED: " + strings.Join(bad, ", ")
		}
	})
	// The label column left-aligned, the modes' columns right-aligned,
	// separated by " | ".
	width := make([]int, len(results)+1)
	for _, cells := range rows {
		for i, c := range cells {
			width[i] = max(width[i], len(c))
		}
	}
	for _, cells := range rows {
		fmt.Fprintf(w, "%-*s", width[0], cells[0])
		for i, c := range cells[1:] {
			fmt.Fprintf(w, " | %*s", width[i+1], c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, `
Outputs produced by a worker killed before its commit/ack: at-least-once, their
inputs were never acknowledged, so they were redelivered and processed again:
duplicates. Exactly-once, they belong to a transaction that never committed
(read_committed never shows them) and the inputs' acknowledgements were bound
to it, so the inputs were redelivered and their outputs committed once.`)
	for _, r := range results {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s: %s\n", r.Mode, e)
		}
		if len(r.DuplicateIDs) > 0 {
			fmt.Fprintf(w, "  %s: duplicated ids: %s\n", r.Mode, sample(r.DuplicateIDs, 8))
		}
		if len(r.LostIDs) > 0 {
			fmt.Fprintf(w, "  %s: lost ids: %s\n", r.Mode, sample(r.LostIDs, 8))
		}
	}
}

func sample(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, " ")
	}
	return strings.Join(ids[:n], " ") + fmt.Sprintf(" ... (%d in all)", len(ids))
}
