package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

// Options of one demo run.
type Options struct {
	Records    int           // inputs per mode
	Workers    int           // worker processes
	Crashes    int           // kill -9 per mode
	Modes      []string      // modeEOS, modeALO, in order
	MaxPoll    int           // records per poll (and transaction) at most
	RecordTime time.Duration // simulated processing time per record
	AbortRate  float64       // exactly-once: transactions aborted on purpose
	Seed       int64
	WorkDir    string        // logs; "" = a new temporary directory
	SharetxBin string        // "" = go build ./cmd/sharetx
	WorkerLang string        // langGo ("" too), langJava or langPython
	Timeout    time.Duration // per mode, for every input to reach the output
	Quiet      time.Duration // the drained check: how long a fresh member polls
	Out        io.Writer     // progress
}

// Result of one mode.
type Result struct {
	Mode string
	// In, Out, Distinct, Duplicates, Lost, Unexpected and the duplicated
	// and lost ids: the output counted per input id.
	sim.Counts
	TxnCommitted int // exactly-once: as reported by the workers
	TxnAborted   int
	AckBatches   int // at-least-once: polls acknowledged
	Crashes      int // kill -9 injected
	// KilledOpenTxns: exactly-once, transactions open when their worker was
	// killed (aborted when the restart fenced them).
	KilledOpenTxns int
	// KilledProduced: outputs produced by workers killed before committing
	// or acknowledging their inputs.
	KilledProduced int
	CrashKinds     map[string]int // by where the worker was when killed
	Leftover       int            // records a fresh member of the share group was handed afterwards
	Lag            int64          // the share group's lag afterwards (-1: unknown)
	Seconds        float64
	Errors         []string
	LogDir         string
}

// Drained: the share group acknowledged every input.
func (r *Result) Drained() bool { return r.Leftover == 0 && r.Lag == 0 }

// ExactlyOnce: every input exactly once in the output, the group drained.
func (r *Result) ExactlyOnce() bool {
	return r.Duplicates == 0 && r.Lost == 0 && r.Unexpected == 0 && r.Drained() && len(r.Errors) == 0
}

type demo struct {
	o     Options
	log   io.Writer // demo.log in the work dir
	dir   string
	t0    time.Time
	self  string
	java  *javaWorker // --worker-lang java
	stx   *sharetxProc
	admin *kgo.Client
	plan  []crash
	rng   *rand.Rand
	outMu sync.Mutex
}

func (d *demo) say(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	line := fmt.Sprintf(format, args...)
	fmt.Fprintln(d.o.Out, line)
	if d.log != nil {
		fmt.Fprintf(d.log, "%8.3f %s\n", time.Since(d.t0).Seconds(), line)
	}
}

// Run runs the demo: sharetx with its embedded cluster, then every mode.
// Its error is about the set-up; what went wrong in a mode is in its
// Result.
func Run(ctx context.Context, o Options) (results []Result, logDir string, err error) {
	d := &demo{o: o, t0: time.Now(), rng: rand.New(rand.NewSource(o.Seed))}
	d.dir = o.WorkDir
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "sharetx-demo-"); err != nil {
			return nil, "", err
		}
	} else if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, "", err
	}
	if lf, err := os.Create(filepath.Join(d.dir, "demo.log")); err == nil {
		d.log = lf
		defer lf.Close()
	}
	if d.self, err = os.Executable(); err != nil {
		return nil, d.dir, err
	}
	d.say("logs: %s", d.dir)
	if o.WorkerLang == langJava {
		d.say("building the Java worker (java/apps.sh) ...")
		if d.java, err = buildJavaWorker(ctx); err != nil {
			return nil, d.dir, err
		}
	}
	if o.WorkerLang == langPython {
		d.say("making the Python worker's virtual environment (python/venv.sh) ...")
		if d.java, err = buildPythonWorker(ctx); err != nil {
			return nil, d.dir, err
		}
	}
	bin := o.SharetxBin
	if bin == "" {
		d.say("building ./cmd/sharetx ...")
		if bin, err = buildSharetx(ctx, d.dir); err != nil {
			return nil, d.dir, err
		}
		defer os.Remove(bin) // after sharetx stopped (deferred below); 20+ MB
	}
	if d.stx, err = startSharetx(bin, d.dir, d.t0, time.Minute); err != nil {
		return nil, d.dir, err
	}
	defer d.stx.stop()
	d.say("sharetx is up with its embedded cluster (data in %s): bootstrap.servers=%s, metrics http://%s/metrics",
		filepath.Join(d.dir, "embedded-cluster"), d.stx.bootstrap, d.stx.metrics)
	if d.admin, err = kgo.NewClient(kgo.SeedBrokers(d.stx.bootstrap), kgo.ClientID("demo"), kgo.ProducerLinger(0)); err != nil {
		return nil, d.dir, err
	}
	defer d.admin.Close()
	// The embedded cluster is the demo's own: a delivery limit that
	// aborts and crashes cannot reach (so nothing is archived
	// unprocessed), and expired locks swept every second.
	if err := d.alterConfigs(ctx, kmsg.ConfigResourceTypeBroker, "", map[string]string{
		"group.share.delivery.count.limit":    "10",
		"share.record.lock.sweep.interval.ms": "1000",
	}); err != nil {
		return nil, d.dir, err
	}
	d.plan = makePlan(o, d.rng)
	var kinds []string
	for _, c := range d.plan {
		kinds = append(kinds, fmt.Sprintf("w%d %s", c.worker+1, c.kind))
	}
	d.say("crash plan, the same in every mode (kill -9, spread over the run): %s", strings.Join(kinds, ", "))
	for _, mode := range o.Modes {
		if ctx.Err() != nil {
			break
		}
		results = append(results, d.runMode(ctx, mode))
	}
	return results, d.dir, ctx.Err()
}

func (d *demo) alterConfigs(ctx context.Context, ty kmsg.ConfigResourceType, name string, kv map[string]string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return sim.AlterConfigs(actx, d.admin, ty, name, kv)
}
