package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/e2e/sim"
)

// allFaults, in the order phases run.
var allFaults = []string{"none", "txn-input", "worker-kill", "proxy-kill", "proxy-kill-deferred", "broker-restart", "worker-stall", "txn-timeout"}

// Options configure a chaos run.
type Options struct {
	Seeds       []string
	Records     int
	Workers     int
	Proxies     int
	Faults      []string
	KafkaScript string        // e2e/kafka/kafka.sh, for broker-restart
	RestartNode int           // the node broker-restart restarts
	Timeout     time.Duration // per phase, from the first input to the last output
	WorkDir     string        // logs; empty: a new directory under os.TempDir
	SharetxBin  string        // empty: go build ./cmd/sharetx
	Lock        time.Duration // share.record.lock.duration.ms of every phase's group
	TxnTimeout  time.Duration // the workers' transaction timeout
	AbortRate   float64       // fraction of transactions aborted on purpose (0: none; the command's default is 0.15)
	MaxPoll     int
	Seed        int64
	KgoLog      string // the workers' kgo log level
	ProxyLog    string // the proxies' log.level
	// WorkerLang: "go" (default: this binary re-executed as `chaos worker`)
	// "java" (e2e/chaos/java's ChaosWorker, built by java/apps.sh) or
	// "python" (e2e/chaos/python/chaos_worker.py, in python/venv.sh's venv).
	WorkerLang string
	Out        io.Writer
}

func (o *Options) defaults() {
	if o.Records <= 0 {
		o.Records = 2000
	}
	if o.Workers <= 0 {
		o.Workers = 3
	}
	if o.Proxies <= 0 {
		o.Proxies = 2
	}
	if len(o.Faults) == 0 {
		o.Faults = allFaults
	}
	if o.RestartNode == 0 {
		o.RestartNode = 2
	}
	if o.Timeout <= 0 {
		o.Timeout = 4 * time.Minute
	}
	if o.Lock <= 0 {
		o.Lock = 15 * time.Second
	}
	if o.TxnTimeout <= 0 {
		o.TxnTimeout = 20 * time.Second
	}
	if o.MaxPoll <= 0 {
		o.MaxPoll = 50
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	if o.KgoLog == "" {
		o.KgoLog = "warn"
	}
	if o.ProxyLog == "" {
		o.ProxyLog = "info"
	}
	if o.WorkerLang == "" {
		o.WorkerLang = "go"
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// ParseFaults turns "all" or a comma list into fault names.
func ParseFaults(s string) ([]string, error) {
	if s == "" || s == "all" {
		return allFaults, nil
	}
	known := map[string]bool{}
	for _, f := range allFaults {
		known[f] = true
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !known[f] {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(allFaults, ","))
		}
		out = append(out, f)
	}
	return out, nil
}

// runner holds what the phases share.
type runner struct {
	o          Options
	t0         time.Time
	runID      string
	rnd        *rand.Rand
	rndMu      sync.Mutex
	sharetxBin string
	selfBin    string
	admin      *kgo.Client
	adm        *kadm.Client
	brokers    []int32
	rf         int16
	portBase   int
	portBlock  int
	outMu      sync.Mutex

	// The Java worker's JVM and classpath (WorkerLang java).
	javaBin, javaClasspath string
	// The Python worker's interpreter and script (WorkerLang python).
	pythonBin, pythonWorker string
}

func (r *runner) say(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.o.Out, "[%6.1fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (r *runner) intn(n int) int {
	r.rndMu.Lock()
	defer r.rndMu.Unlock()
	return r.rnd.Intn(n)
}

func (r *runner) float() float64 {
	r.rndMu.Lock()
	defer r.rndMu.Unlock()
	return r.rnd.Float64()
}

// Run runs one phase per fault and returns their results. Verification of a
// phase overlaps the next phase (its groups and topics are its own).
func Run(ctx context.Context, o Options) ([]PhaseResult, error) {
	o.defaults()
	r, err := newRunner(ctx, o, o.WorkerLang == "java", fmt.Sprintf("%d records, %d %s workers over %d proxies; faults %s",
		o.Records, o.Workers, o.WorkerLang, o.Proxies, strings.Join(o.Faults, ",")))
	if err != nil {
		return nil, err
	}
	defer r.close()
	o = r.o
	results := make([]PhaseResult, len(o.Faults))
	var verifying sync.WaitGroup
	for i, fault := range o.Faults {
		if ctx.Err() != nil {
			results[i] = PhaseResult{Fault: fault, Skipped: "interrupted"}
			continue
		}
		ph := r.newPhase(fault)
		finish := ph.run(ctx)
		verifying.Add(1)
		go func() {
			defer verifying.Done()
			results[i] = finish()
		}()
	}
	verifying.Wait()
	return results, nil
}

// newRunner prepares what a run's phases share: the work directory, the
// sharetx binary, the Java worker (when java), the orchestrator's client of
// the cluster and a block of free ports per proxy. what says what the run
// does, for its first line.
func newRunner(ctx context.Context, o Options, java bool, what string) (*runner, error) {
	o.defaults()
	if len(o.Seeds) == 0 {
		return nil, errors.New("--seeds is required")
	}
	if !slices.Contains(workerLangs, o.WorkerLang) {
		return nil, fmt.Errorf("worker language %q: want one of %s", o.WorkerLang, strings.Join(workerLangs, ", "))
	}
	r := &runner{o: o, t0: time.Now(), rnd: rand.New(rand.NewSource(o.Seed))}
	r.runID = fmt.Sprintf("%s-%04d", time.Now().Format("150405"), r.intn(10000))
	if r.o.WorkDir == "" {
		d, err := os.MkdirTemp("", "sharetx-chaos-"+r.runID+"-")
		if err != nil {
			return nil, err
		}
		r.o.WorkDir = d
	} else if err := os.MkdirAll(r.o.WorkDir, 0o755); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r.selfBin = self
	r.sharetxBin = o.SharetxBin
	if r.sharetxBin == "" {
		r.say("building ./cmd/sharetx into %s", r.o.WorkDir)
		if r.sharetxBin, err = sim.BuildSharetx(ctx, r.o.WorkDir); err != nil {
			return nil, err
		}
	}
	if java {
		logPath := filepath.Join(r.o.WorkDir, "java-apps.log")
		r.say("building the Java worker (java/apps.sh, log %s)", logPath)
		if r.javaBin, r.javaClasspath, err = buildJavaWorker(ctx, logPath); err != nil {
			return nil, err
		}
	}
	if o.WorkerLang == "python" {
		logPath := filepath.Join(r.o.WorkDir, "python-venv.log")
		r.say("making the Python worker's virtual environment (python/venv.sh, log %s)", logPath)
		if r.pythonBin, r.pythonWorker, err = buildPythonWorker(ctx, logPath); err != nil {
			return nil, err
		}
	}
	if r.admin, err = direct(o.Seeds); err != nil {
		return nil, err
	}
	r.adm = kadm.NewClient(r.admin)
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	r.brokers, err = brokerIDs(mctx, r.adm)
	cancel()
	if err != nil {
		r.admin.Close()
		return nil, fmt.Errorf("cluster %s: %w", strings.Join(o.Seeds, ","), err)
	}
	r.rf = int16(min(3, len(r.brokers)))
	maxID := int32(0)
	for _, id := range r.brokers {
		maxID = max(maxID, id)
	}
	// Per proxy: bootstrap at base, broker node N at base+N, metrics after.
	r.portBlock = int(maxID) + 2
	r.portBase, err = sim.FreePortBlock(r.portBlock*o.Proxies, r.intn)
	if err != nil {
		r.admin.Close()
		return nil, err
	}
	r.say("run %s (seed %d): %d brokers %v, RF %d; %s; logs in %s", r.runID, o.Seed, len(r.brokers), r.brokers, r.rf, what, r.o.WorkDir)
	return r, nil
}

func (r *runner) close() { r.admin.Close() }

// phaseDir is where a phase keeps its logs.
func (r *runner) phaseDir(fault string) string {
	d := filepath.Join(r.o.WorkDir, fault)
	os.MkdirAll(d, 0o755)
	return d
}
