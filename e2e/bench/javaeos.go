package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// javaEOSOpts is one run of e2e/bench/java's EosBench.
type javaEOSOpts struct {
	Mode                             string // share (through sharetx), group or share-txn (direct)
	Bootstrap, In, Out, Group, TxnID string
	Batch                            int
	Target                           int64
	MaxDur                           time.Duration
}

// javaEOSResult is EosBench's RESULT line.
type javaEOSResult struct {
	Mode                          string
	Records, Transactions, Aborts int64
	Seconds, RecordsSec           float64
	CommitP50Ms, CommitP99Ms      float64
	// Budget: the poll that returned the records, the outputs' sends,
	// staging, commitTransaction (p50 / p99 each).
	Budget map[string]budgetItem
	// CPUSeconds is the client process's user + system CPU, its start-up
	// included (the same for every mode of one program).
	CPUSeconds float64
	// LoopCPUSeconds is the program's own count of its CPU from the first
	// record to the last commit (cpu_s): the measured loop, without the
	// start-up that CPUSeconds includes (a JVM's takes about 2 s of both
	// cores here, spread over fewer records in a slower mode). 0 when the
	// program did not say.
	LoopCPUSeconds float64
}

// processCPU is the user + system CPU of a process that exited.
func processCPU(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// The JVM options of a bench run: the JIT's full tiers (the workers' fast
// start-up options would measure the interpreter), the same for both modes.
var javaBenchOpts = []string{"-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Xshare:auto"}

var javaApps struct {
	once          sync.Once
	java, cp, err string
}

// runJavaEOS builds the Java applications once (java/apps.sh) and runs
// EosBench, killing the JVM when ctx ends.
func runJavaEOS(ctx context.Context, o javaEOSOpts) (javaEOSResult, error) {
	javaApps.once.Do(func() {
		var log bytes.Buffer
		java, cp, err := sim.JavaApps(ctx, &log)
		javaApps.java, javaApps.cp = java, cp
		if err != nil {
			javaApps.err = fmt.Sprintf("%v\n%s", err, log.String())
		}
	})
	if javaApps.err != "" {
		return javaEOSResult{}, fmt.Errorf("building the Java applications: %s", javaApps.err)
	}
	args := append(append([]string{}, javaBenchOpts...), "-cp", javaApps.cp, "io.sharetx.bench.EosBench",
		"--mode", o.Mode, "--bootstrap", o.Bootstrap, "--in", o.In, "--out", o.Out, "--group", o.Group,
		"--transactional-id", o.TxnID, "--batch", strconv.Itoa(o.Batch), "--target", strconv.FormatInt(o.Target, 10),
		"--max-seconds", strconv.FormatFloat(o.MaxDur.Seconds(), 'f', 3, 64))
	ctx, cancel := context.WithTimeout(ctx, o.MaxDur+3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, javaApps.java, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r, perr := parseEosResult(stdout.String())
	if err != nil || perr != nil {
		return javaEOSResult{}, fmt.Errorf("EosBench --mode %s: %v %v\nstdout: %s\nstderr (last lines): %s", o.Mode, err, perr,
			strings.TrimSpace(stdout.String()), sim.LastLines(stderr.String(), 15))
	}
	r.CPUSeconds = processCPU(cmd)
	return r, nil
}

// javaPhases name EosBench's budget fields (poll_p50_ms, ...) in a budget.
var javaPhases = map[string]string{"poll": "wait for records", "send": "send outputs (to the producer)",
	"stage": "stage (acks or offsets)", "commit": "commitTransaction"}

// budget takes a budget field (poll_p50_ms=1.2) into r.Budget; false when
// k is none.
func (r *javaEOSResult) budget(k, v string) bool {
	phase, q, ok := strings.Cut(strings.TrimSuffix(k, "_ms"), "_p")
	name := javaPhases[phase]
	if !ok || (q != "50" && q != "99") || name == "" {
		return false
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return false
	}
	if r.Budget == nil {
		r.Budget = map[string]budgetItem{}
	}
	it := r.Budget[name]
	it.PerTxn = 1
	if q == "50" {
		it.P50Ms = x
	} else {
		it.P99Ms = x
	}
	r.Budget[name] = it
	return true
}

// parseEosResult reads the RESULT line (an ERROR line is the run's error).
func parseEosResult(out string) (javaEOSResult, error) {
	var r javaEOSResult
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "ERROR "); ok {
			return r, fmt.Errorf("EosBench: %s", rest)
		}
		rest, ok := strings.CutPrefix(line, "RESULT ")
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, f := range strings.Fields(rest) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return r, fmt.Errorf("RESULT: bad field %q", f)
			}
			var err error
			switch k {
			case "mode":
				r.Mode = v
			case "records":
				r.Records, err = strconv.ParseInt(v, 10, 64)
			case "transactions":
				r.Transactions, err = strconv.ParseInt(v, 10, 64)
			case "aborts":
				r.Aborts, err = strconv.ParseInt(v, 10, 64)
			case "seconds":
				r.Seconds, err = strconv.ParseFloat(v, 64)
			case "records_per_s":
				r.RecordsSec, err = strconv.ParseFloat(v, 64)
			case "cpu_s":
				r.LoopCPUSeconds, err = strconv.ParseFloat(v, 64)
			case "commit_p50_ms":
				r.CommitP50Ms, err = strconv.ParseFloat(v, 64)
				r.budget(k, v)
			case "commit_p99_ms":
				r.CommitP99Ms, err = strconv.ParseFloat(v, 64)
				r.budget(k, v)
			default:
				if !r.budget(k, v) {
					continue // a later field: ignored
				}
				continue // a later field: ignored
			}
			if err != nil {
				return r, fmt.Errorf("RESULT: %s: %w", k, err)
			}
			seen[k] = true
		}
		for _, k := range []string{"mode", "records", "transactions", "seconds", "records_per_s"} {
			if !seen[k] {
				return r, fmt.Errorf("RESULT: no %s in %q", k, line)
			}
		}
		return r, nil
	}
	return r, fmt.Errorf("no RESULT line")
}

// javaCommitP99 is a Java run's commitTransaction p99.
func javaCommitP99(p *pipelineResult) float64 { return p.Budget["commitTransaction"].P99Ms }

// eosClient is one language's exactly-once bench program: its modes, its
// time limit and how it is run.
type eosClient struct {
	language string
	modes    map[string]eosMode
	maxDur   func(o *Options) time.Duration
	run      func(context.Context, javaEOSOpts) (javaEOSResult, error)
}

// eosMode is one mode of an eosClient: the program's --mode, and whether it
// runs through the proxy or direct.
type eosMode struct {
	arg     string
	through bool
}

var (
	javaEOSClient = eosClient{language: "java",
		modes: map[string]eosMode{modeJavaShareEOS: {"share", true}, modeJavaGroupEOS: {"group", false},
			modeJavaShareTxn: {"share-txn", true}, modeJavaShareTxnDirect: {"share-txn", false}},
		maxDur: func(o *Options) time.Duration { return o.JavaEOSDur }, run: runJavaEOS}
	pythonEOSClient = eosClient{language: "python",
		modes: map[string]eosMode{modePyShareEOS: {"share", true}, modePyGroupEOS: {"group", false},
			modePyShareTxn: {"share-txn", true}, modePyShareTxnDirect: {"share-txn", false}},
		maxDur: func(o *Options) time.Duration { return o.PythonEOSDur }, run: runPythonEOS}
)

// clientEOSRun runs one mode of c's program on a new output topic: the
// proxy's side of its budget when through it, its outputs checked per
// input id when the mode promises exactly-once.
func (b *bench) clientEOSRun(ctx context.Context, c eosClient, mode, in string, batch, round int) (*pipelineResult, error) {
	n, out, err := b.runOutput(ctx)
	if err != nil {
		return nil, err
	}
	defer b.dropTopic(out)
	m, ok := c.modes[mode]
	if !ok {
		return nil, fmt.Errorf("no %s mode %q", c.language, mode)
	}
	jo := javaEOSOpts{Mode: m.arg, Bootstrap: b.direct, In: in, Out: out,
		Group: fmt.Sprintf("bench-%s-%s-%d", mode, b.suffix, n), TxnID: fmt.Sprintf("bench-%s-%s-%d", mode, b.suffix, n),
		Batch: batch, Target: int64(b.o.PipelineRecords), MaxDur: c.maxDur(&b.o)}
	if m.through {
		jo.Bootstrap = b.proxy.bootstrap
	}
	if jo.Mode != "group" {
		if err := shareFromEarliest(ctx, b.admin, jo.Group); err != nil {
			return nil, err
		}
	}
	var before metrics
	if m.through {
		if before, err = b.proxy.scrape(); err != nil {
			return nil, err
		}
	}
	cpu0 := b.cpuNow()
	jr, err := c.run(ctx, jo)
	if err != nil {
		return nil, err
	}
	cpu1 := b.cpuNow()
	// The clients are the program's process, not this one.
	delete(cpu0, cpuBenchProcess)
	delete(cpu1, cpuBenchProcess)
	if jr.CPUSeconds > 0 {
		cpu0[c.language+" process (client)"], cpu1[c.language+" process (client)"] = 0, jr.CPUSeconds
	}
	if jr.LoopCPUSeconds > 0 {
		cpu0[c.language+" loop (client)"], cpu1[c.language+" loop (client)"] = 0, jr.LoopCPUSeconds
	}
	r := &pipelineResult{Mode: mode, Batch: jo.Batch, Workers: 1, Partitions: b.o.Partitions, Round: round, Language: c.language,
		Records: jr.Records, Transactions: jr.Transactions, Aborts: jr.Aborts, Seconds: jr.Seconds, RecordsSec: jr.RecordsSec, EndTxnP50Ms: jr.CommitP50Ms, Budget: jr.Budget}
	if r.Budget == nil {
		r.Budget = map[string]budgetItem{}
	}
	cpuBudget(r.Budget, cpu0, cpu1, r.Transactions, r.Records)
	if m.through {
		if after, err := b.proxy.scrape(); err == nil {
			proxyBudget(r.Budget, before, after, r.Transactions)
		}
	}
	if r.Transactions > 0 {
		r.AvgBatch = float64(r.Records) / float64(r.Transactions)
	}
	if !exactlyOnce(mode) {
		return r, nil
	}
	return r, verify(ctx, b.direct, jo.Out, r)
}
