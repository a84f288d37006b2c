// Command chaos is a fault-injection test of sharetx's transactional
// share-group acknowledgements (KIP-1289), after Apache Kafka's
// transactions system test but for share groups.
//
//	go run ./e2e/chaos --seeds 127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292 --kafka-script e2e/kafka/kafka.sh
//
// Each fault is a phase: fresh input and output topics and share group, N
// inputs with unique ids, P sharetx proxy processes in front of the real
// cluster and W worker processes (this binary, `chaos worker`) doing
// consume-transform-produce through them with transactional
// acknowledgements and random aborts. While they work, the fault is
// injected: none, txn-input (no fault; the input is written transactionally,
// so it holds control records and every poll has gaps), worker-kill,
// proxy-kill, broker-restart, worker-stall, txn-timeout. The phase ends once every input is in the output (read
// committed) or at --timeout; then the output must hold every input exactly
// once and the share group must have acknowledged every input (a fresh
// member is handed nothing within a quiet period longer than the
// acquisition lock).
//
// Exit status: 0 when every phase passed, 1 when one failed, 2 for bad
// usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// roleEnv makes a re-executed binary (this command, or the test binary) a
// worker.
const roleEnv = "CHAOS_ROLE"

func main() {
	sim.Main(workerMain, mainRun)
}

func mainRun(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "soak" {
		return soakMain(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	seeds := fs.String("seeds", "", "bootstrap list of the real cluster, host:port[,host:port] (required)")
	fs.IntVar(&o.Records, "records", 2000, "inputs per phase")
	fs.IntVar(&o.Workers, "workers", 3, "worker processes per phase")
	fs.IntVar(&o.Proxies, "proxies", 2, "sharetx proxy processes per phase (workers are spread over them)")
	faults := fs.String("faults", "all", "comma list of phases: "+strings.Join(allFaults, ",")+" (all: every one)")
	fs.DurationVar(&o.Timeout, "timeout", 4*time.Minute, "per phase: how long the workers may take to get every input into the output")
	jsonPath := fs.String("json", "", "also write the results to this file as JSON")
	runFlags(fs, &o, 0.15, 50)
	fs.StringVar(&o.KgoLog, "kgo-log", "warn", "the workers' kgo log level (in their logs)")
	repeat := fs.Int("repeat", 1, "run the whole matrix this many times (seeds --seed, --seed+1, ...); a summary says how often each phase passed")
	fs.StringVar(&o.WorkerLang, "worker-lang", "go", "the workers: go (this binary), java (e2e/chaos/java, built with java/apps.sh; needs java, javac, mvn) or python (e2e/chaos/python, in python/venv.sh's virtual environment; needs python3)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *seeds == "" {
		fmt.Fprintln(stderr, "chaos: --seeds is required")
		return 2
	}
	o.Seeds = strings.Split(*seeds, ",")
	var err error
	if o.Faults, err = ParseFaults(*faults); err != nil {
		fmt.Fprintf(stderr, "chaos: --faults: %v\n", err)
		return 2
	}
	if *repeat < 1 {
		fmt.Fprintln(stderr, "chaos: --repeat must be >= 1")
		return 2
	}
	if o.Records < 1 || o.Workers < 1 || o.Proxies < 1 || o.AbortRate < 0 || o.AbortRate >= 1 {
		fmt.Fprintln(stderr, "chaos: --records, --workers and --proxies must be >= 1, --abort-rate in [0,1)")
		return 2
	}
	if !slices.Contains(workerLangs, o.WorkerLang) {
		fmt.Fprintf(stderr, "chaos: --worker-lang %q: want one of %s\n", o.WorkerLang, strings.Join(workerLangs, ", "))
		return 2
	}
	o.Out = stdout

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	baseDir := o.WorkDir
	var all []PhaseResult
	for round := 1; round <= *repeat; round++ {
		ro := o
		ro.Seed = o.Seed + int64(round-1)
		if *repeat > 1 {
			fmt.Fprintf(stdout, "== round %d of %d (seed %d)\n", round, *repeat, ro.Seed)
			if baseDir != "" {
				ro.WorkDir = fmt.Sprintf("%s/round-%d", baseDir, round)
			}
		}
		results, err := Run(ctx, ro)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 1
		}
		for i := range results {
			results[i].Round = round
		}
		fmt.Fprintln(stdout)
		WriteTable(stdout, results)
		all = append(all, results...)
		if ctx.Err() != nil {
			break
		}
	}
	if *repeat > 1 {
		fmt.Fprintln(stdout)
		WriteSummary(stdout, all)
	}
	fmt.Fprintf(stdout, "total %.0fs\n", time.Since(t0).Seconds())
	if *jsonPath != "" {
		if err := WriteJSON(*jsonPath, all); err != nil {
			fmt.Fprintf(stderr, "chaos: --json: %v\n", err)
			return 1
		}
	}
	if !AllPass(all) {
		return 1
	}
	return 0
}

// soakMain is `chaos soak`: one long phase (soak.go).
func soakMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var so SoakOptions
	seeds := fs.String("seeds", "", "bootstrap list of the real cluster, host:port[,host:port] (required)")
	fs.DurationVar(&so.Duration, "duration", 25*time.Minute, "how long inputs are produced and faults injected (hours: e.g. 6h)")
	fs.DurationVar(&so.Sample, "sample", 30*time.Second, "how often each sidecar is sampled")
	fs.DurationVar(&so.WarmUp, "warm-up", 0, "per sidecar incarnation, not judged for growth (0: a fifth of --duration, at least two samples)")
	fs.IntVar(&so.Rate, "rate", 1000, "inputs per second at most")
	fs.IntVar(&so.Backlog, "backlog", 20000, "inputs produced and not yet in the output, at most")
	fs.IntVar(&so.GoWorkers, "go-workers", 2, "Go worker processes")
	fs.IntVar(&so.JavaWorkers, "java-workers", 1, "Java worker processes (e2e/chaos/java; needs java, javac, mvn)")
	fs.DurationVar(&so.FaultEvery, "fault-every", 3*time.Minute, "one fault per interval, in turn: worker-kill, proxy-restart, broker-restart")
	fs.IntVar(&so.RecordsGoal, "records-goal", 1_000_000, "fewer inputs processed fail the soak (0: no goal)")
	fs.DurationVar(&so.Drain, "drain", 4*time.Minute, "after the load: how long the workers may take to finish")
	fs.StringVar(&so.Plot, "plot", "", "PNG of the samples (default: soak.png in the work directory)")
	fs.DurationVar(&so.ChurnEvery, "churn-every", 2*time.Second, "one churn cycle per interval at most: a new share group, member and transactional id through sidecar 1, which must forget them once gone (0: no churn)")
	jsonPath := fs.String("json", "", "also write the result (every sample) to this file as JSON")
	fs.IntVar(&o.Proxies, "proxies", 2, "sharetx sidecars (at least 2: sidecar 1 is never restarted, the last one is)")
	runFlags(fs, &o, 0.1, 100)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *seeds == "" {
		fmt.Fprintln(stderr, "chaos soak: --seeds is required")
		return 2
	}
	if so.GoWorkers < 0 || so.JavaWorkers < 0 || so.GoWorkers+so.JavaWorkers < 1 || o.Proxies < 2 {
		fmt.Fprintln(stderr, "chaos soak: at least one worker and two sidecars")
		return 2
	}
	o.Seeds = strings.Split(*seeds, ",")
	o.Out = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	res, err := Soak(ctx, o, so)
	if err != nil {
		fmt.Fprintf(stderr, "chaos soak: %v\n", err)
		return 1
	}
	WriteSoakSummary(stdout, res, so.RecordsGoal)
	fmt.Fprintf(stdout, "total %.0fs\n", time.Since(t0).Seconds())
	if *jsonPath != "" {
		if err := WriteSoakJSON(*jsonPath, res); err != nil {
			fmt.Fprintf(stderr, "chaos soak: --json: %v\n", err)
			return 1
		}
	}
	if !res.SoakPass {
		return 1
	}
	return 0
}

// runFlags registers the flags the fault matrix and the soak share, with
// their own defaults for the abort rate and the records per poll.
func runFlags(fs *flag.FlagSet, o *Options, abortRate float64, maxPoll int) {
	fs.StringVar(&o.KafkaScript, "kafka-script", "", "path to e2e/kafka/kafka.sh, for broker-restart (KAFKA_E2E_DIR and KAFKA_BASE_PORT pass through)")
	fs.IntVar(&o.RestartNode, "restart-node", 2, "the node broker-restart restarts")
	fs.StringVar(&o.WorkDir, "work-dir", "", "where logs go (default: a new directory under $TMPDIR)")
	fs.StringVar(&o.SharetxBin, "sharetx-bin", "", "a sharetx binary to use instead of building ./cmd/sharetx")
	fs.DurationVar(&o.Lock, "lock", 15*time.Second, "share.record.lock.duration.ms of each share group (broker minimum: 15s by default)")
	fs.DurationVar(&o.TxnTimeout, "txn-timeout", 20*time.Second, "the workers' transaction timeout")
	fs.Float64Var(&o.AbortRate, "abort-rate", abortRate, "fraction of transactions the workers abort on purpose")
	fs.IntVar(&o.MaxPoll, "max-poll", maxPoll, "records per poll (and transaction) at most")
	fs.Int64Var(&o.Seed, "seed", 0, "random seed (0: from the clock)")
	fs.StringVar(&o.ProxyLog, "proxy-log", "info", "the sidecars' log level (in their logs): debug, info, warn, error")
}
