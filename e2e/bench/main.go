// Command bench measures what sharetx costs against what a team would use
// instead: share-group exactly-once through sharetx against consumer-group
// exactly-once (sendOffsetsToTransaction), Kafka transactions alone and
// at-least-once in consume-transform-produce pipelines (Go, and Java through
// e2e/bench/java); workers past the partition count; pass-through against a
// direct connection to the same broker (franz-go and Java's perf tools; pin
// mode for a fair judge on few cores); the proxy process's CPU and memory;
// the latencies of TxnShareAcknowledge and commit→applied. Comparisons run
// in interleaved rounds and report medians with their spread; every
// exactly-once run is checked per input id.
//
//	go run ./e2e/bench                       # starts (or reuses) a 1-node Kafka with e2e/kafka/kafka.sh
//	go run ./e2e/bench --seeds 127.0.0.1:19092 --records 20000 --skip-java
//
// It builds ./cmd/sharetx once and runs it as a separate process with
// --upstream, scraping its /metrics and reading /proc/<pid>. It prints
// tables, writes JSON (--json), a PNG bar chart and the scaling plot next
// to it, and ends with
// one line per goal: GOAL <name> measured=<x> goal=<y> met|missed. Goals
// are reported, never asserted: the exit status is 0 when every
// measurement ran, 1 when one failed, 2 for bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// allParts are the sections of a run, in the order they run.
var allParts = []string{"passthrough", "pipelines", "scaling", "scaleout", "java-eos", "python-eos", "latency", "staged"}

// Options are the knobs of one run.
type Options struct {
	Seeds           []string      `json:"seeds"`
	KafkaScript     string        `json:"-"`
	Records         int           `json:"records"`
	RecordSize      int           `json:"record_size"`
	Repeat          int           `json:"repeat"`
	Partitions      int           `json:"partitions"`
	LatencyRate     int           `json:"latency_rate"`
	LatencyDur      time.Duration `json:"latency_duration_ns"`
	JavaRecords     int           `json:"java_records"`
	SkipJava        bool          `json:"skip_java"`
	PipelineRecords int           `json:"pipeline_records"`
	PipelineDur     time.Duration `json:"pipeline_duration_ns"`
	Batches         []int         `json:"batches"`
	Rounds          int           `json:"rounds"`
	PipelineWorkers int           `json:"pipeline_workers"`
	// Prefetch: the pipelines' share consumers fetch one fetch ahead
	// (kgo.MaxConcurrentFetches(1)) as a consumer group's do.
	Prefetch bool `json:"prefetch"`
	// PipelineModes are the pipeline comparisons' modes (default
	// pipelineModes; txn-seq may be added).
	PipelineModes   []string      `json:"pipeline_modes,omitempty"`
	ScaleWorkers    []int         `json:"scale_workers"`
	ScalePartitions []int         `json:"scale_partitions"`
	ScaleBatch      int           `json:"scale_batch"`
	ScaleProc       time.Duration `json:"scale_processing_ns"`
	ScaleDur        time.Duration `json:"scale_duration_ns"`
	ScaleWarm       time.Duration `json:"scale_warm_ns"`
	ScaleRounds     int           `json:"scale_rounds"`
	ScaleRecords    int           `json:"scale_records"`
	// The scale-out section: fleet sizes, its measured window and warm-up,
	// rounds (the workers use ScaleProc and ScaleBatch).
	ScaleOutSidecars []int         `json:"scaleout_sidecars"`
	ScaleOutDur      time.Duration `json:"scaleout_duration_ns"`
	ScaleOutWarm     time.Duration `json:"scaleout_warm_ns"`
	ScaleOutRounds   int           `json:"scaleout_rounds"`
	JavaEOSBatches   []int         `json:"java_eos_batches"`
	JavaEOSDur       time.Duration `json:"java_eos_duration_ns"`
	PythonEOSBatches []int         `json:"python_eos_batches,omitempty"`
	PythonEOSDur     time.Duration `json:"python_eos_duration_ns,omitempty"`
	SkipPython       bool          `json:"skip_python,omitempty"`
	Pin              bool          `json:"pin"`
	Quick            bool          `json:"quick"`
	PacedRate        int           `json:"paced_rate"`
	PacedDur         time.Duration `json:"paced_duration_ns"`
	SharetxBin       string        `json:"-"`
	WorkDir          string        `json:"work_dir"`
	ProxyLog         string        `json:"-"`
	Perf             bool          `json:"perf"`
	Parts            []string      `json:"parts"`
	Out              io.Writer     `json:"-"`
}

// quickDefaults are --quick's settings (about 5 minutes on 2 cores).
var quickDefaults = map[string]string{
	"records": "100000", "repeat": "2", "java-records": "50000", "latency-duration": "4s",
	"pipeline-records": "50000", "pipeline-duration": "3s", "batches": "100,1000", "rounds": "2",
	"scale-duration": "3s", "scale-rounds": "1", "scale-records": "20000",
	"scaleout-duration": "5s", "scaleout-rounds": "1",
	"java-eos-duration": "5s", "python-eos-duration": "5s", "paced-duration": "8s",
}

func main() { os.Exit(mainRun(os.Args[1:], os.Stdout, os.Stderr)) }

func mainRun(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "relay" { // the reference relay process (relay.go)
		return runRelay(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "ab" { // two binaries, alternately (ab.go)
		return runAB(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	seeds := fs.String("seeds", "", "bootstrap list of a running cluster; empty: `kafka.sh up` (KAFKA_* variables pass through)")
	fs.StringVar(&o.KafkaScript, "kafka-script", "", "path to e2e/kafka/kafka.sh (default: from the module root)")
	fs.BoolVar(&o.Quick, "quick", false, "the quick variant (about 5 minutes): fewer records, shorter runs, 2 rounds, transactions of 100 and 1000; flags given explicitly still apply")
	fs.IntVar(&o.Records, "records", 300000, "records per franz-go produce and share-consume run")
	fs.IntVar(&o.RecordSize, "record-size", 1024, "bytes per record value")
	fs.IntVar(&o.Repeat, "repeat", 3, "runs of each pass-through measurement per side (interleaved; medians compared)")
	fs.IntVar(&o.Partitions, "partitions", 3, "partitions of every topic")
	fs.IntVar(&o.LatencyRate, "latency-rate", 1000, "records/s of the produce-latency runs (moderate load)")
	fs.DurationVar(&o.LatencyDur, "latency-duration", 8*time.Second, "duration of each produce-latency run")
	fs.IntVar(&o.JavaRecords, "java-records", 150000, "records per ProducerPerformance / ShareConsumerPerformance run")
	fs.BoolVar(&o.SkipJava, "skip-java", false, "skip everything Java (the perf tools and the java-eos section)")
	fs.IntVar(&o.PipelineRecords, "pipeline-records", 100000, "input records of the consume-transform-produce runs (each run stops there or at --pipeline-duration)")
	fs.BoolVar(&o.Prefetch, "prefetch", true, "the pipelines' Go share consumers fetch one fetch ahead of their polls (kgo.MaxConcurrentFetches(1)), as a consumer group's fetches run ahead; false: one fetch per poll (the scaling and scale-out runs always fetch once per poll: record locks)")
	fs.DurationVar(&o.PipelineDur, "pipeline-duration", 5*time.Second, "time limit of each consume-transform-produce run")
	batches := fs.String("batches", "10,100,1000", "records per transaction (and per at-least-once poll)")
	fs.IntVar(&o.Rounds, "rounds", 3, "interleaved rounds of every pipeline comparison (medians and their spread are reported)")
	fs.IntVar(&o.PipelineWorkers, "pipeline-workers", 0, "workers of each pipeline run (default: --partitions, so that consumer-group EOS uses every partition)")
	pmodes := fs.String("pipeline-modes", strings.Join(pipelineModes, ","), "modes of the pipeline comparisons (of "+strings.Join(append(slices.Clone(pipelineModes), modeTxnSeq), ",")+")")
	scaleW := fs.String("scale-workers", "1,2,4,8", "workers of the scaling runs")
	scaleP := fs.String("scale-partitions", "1,2", "input partitions of the scaling runs")
	fs.IntVar(&o.ScaleBatch, "scale-batch", 100, "records per transaction of the scaling runs")
	fs.DurationVar(&o.ScaleProc, "scale-processing", 2*time.Millisecond, "processing time per record of the scaling runs (a wait, like a call to another service)")
	fs.DurationVar(&o.ScaleDur, "scale-duration", 6*time.Second, "measured time of each scaling run (after --scale-warm)")
	fs.DurationVar(&o.ScaleWarm, "scale-warm", 3*time.Second, "warm-up of each scaling run from its first record, not measured (the members' joins and the consumer group's rebalances)")
	fs.IntVar(&o.ScaleRounds, "scale-rounds", 2, "interleaved rounds of the scaling runs")
	fs.IntVar(&o.ScaleRecords, "scale-records", 50000, "input records of each scaling topic")
	scaleOut := fs.String("scaleout-sidecars", "1,2,4,8", "fleet sizes of the scale-out runs (each sidecar a sharetx process with one txn worker, one share group)")
	fs.DurationVar(&o.ScaleOutDur, "scaleout-duration", 10*time.Second, "measured window of each scale-out run")
	fs.DurationVar(&o.ScaleOutWarm, "scaleout-warm", 3*time.Second, "warm-up of each scale-out run, from the moment every sidecar staged a call")
	fs.IntVar(&o.ScaleOutRounds, "scaleout-rounds", 2, "interleaved rounds of the scale-out runs")
	javaBatches := fs.String("java-eos-batches", "100,1000", "records per transaction of the Java exactly-once comparison")
	fs.DurationVar(&o.JavaEOSDur, "java-eos-duration", 8*time.Second, "time limit of each Java exactly-once run")
	pyBatches := fs.String("python-eos-batches", "100,1000", "records per transaction of the Python exactly-once comparison")
	fs.DurationVar(&o.PythonEOSDur, "python-eos-duration", 8*time.Second, "time limit of each Python exactly-once run")
	fs.BoolVar(&o.SkipPython, "skip-python", false, "skip the python-eos section (confluent-kafka in python/venv.sh's environment)")
	fs.BoolVar(&o.Pin, "pin", false, "pin mode: the broker, this process and the clients it starts on all CPUs but the last, the proxy (and the relay) on the last one, for every side alike")
	fs.IntVar(&o.PacedRate, "paced-rate", 200, "records/s fed to the latency pipeline (the consumer is caught up: long-poll ShareFetch in flight)")
	fs.DurationVar(&o.PacedDur, "paced-duration", 12*time.Second, "duration of the latency pipeline")
	jsonPath := fs.String("json", "bench-results/bench.json", "write the results as JSON here (the PNGs go next to it: .png, -scaling.png)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "where the sharetx binary and its log go (default: a new directory under $TMPDIR)")
	fs.StringVar(&o.SharetxBin, "sharetx-bin", "", "a sharetx binary to use instead of building ./cmd/sharetx")
	fs.StringVar(&o.ProxyLog, "proxy-log", "info", "the proxy's log level (in its log file)")
	parts := fs.String("parts", strings.Join(allParts, ","), "the sections to run (a subset of "+strings.Join(allParts, ",")+"); goals of the others are reported as not measured")
	fs.BoolVar(&o.Perf, "perf", false, "sample the proxy process with Linux perf for the whole run and print its heaviest functions")
	// --quick sets other defaults: parse once to see it, then again over them.
	if slices.ContainsFunc(args, func(a string) bool {
		return a == "--quick" || a == "-quick" || a == "--quick=true" || a == "-quick=true"
	}) {
		for name, v := range quickDefaults {
			if err := fs.Set(name, v); err != nil {
				panic(err) // a name above is wrong: a programming error
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	for _, s := range strings.Split(*parts, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allParts, s) {
			fmt.Fprintf(stderr, "bench: --parts: unknown section %q (the sections are %s)\n", s, strings.Join(allParts, ","))
			return 2
		}
		o.Parts = append(o.Parts, s)
	}
	for _, l := range []struct {
		flag string
		s    *string
		to   *[]int
	}{{"batches", batches, &o.Batches}, {"scale-workers", scaleW, &o.ScaleWorkers}, {"scale-partitions", scaleP, &o.ScalePartitions}, {"scaleout-sidecars", scaleOut, &o.ScaleOutSidecars}, {"java-eos-batches", javaBatches, &o.JavaEOSBatches}, {"python-eos-batches", pyBatches, &o.PythonEOSBatches}} {
		for _, s := range strings.Split(*l.s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				fmt.Fprintf(stderr, "bench: --%s: bad %q (a comma-separated list of numbers >= 1)\n", l.flag, s)
				return 2
			}
			*l.to = append(*l.to, n)
		}
	}
	for _, m := range strings.Split(*pmodes, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(pipelineModes, m) && m != modeTxnSeq {
			fmt.Fprintf(stderr, "bench: --pipeline-modes: unknown mode %q\n", m)
			return 2
		}
		o.PipelineModes = append(o.PipelineModes, m)
	}
	if o.PipelineWorkers == 0 {
		o.PipelineWorkers = o.Partitions
	}
	if o.Records < 1 || o.RecordSize < 1 || o.Repeat < 1 || o.Partitions < 1 || o.LatencyRate < 1 || o.PipelineRecords < 1 || o.PacedRate < 1 ||
		o.Rounds < 1 || o.PipelineWorkers < 1 || o.ScaleBatch < 1 || o.ScaleRounds < 1 || o.ScaleRecords < 1 || o.ScaleOutRounds < 1 {
		fmt.Fprintln(stderr, "bench: counts, sizes and rates must be >= 1")
		return 2
	}
	if *seeds != "" {
		o.Seeds = strings.Split(*seeds, ",")
	}
	if o.KafkaScript == "" {
		root, err := sim.ModuleRoot()
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v (pass --kafka-script)\n", err)
			return 2
		}
		o.KafkaScript = filepath.Join(root, "e2e", "kafka", "kafka.sh")
	}
	o.Out = stdout

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res := Run(ctx, o)
	fmt.Fprintln(stdout)
	WriteTable(stdout, res)
	failed := len(res.Errors) > 0
	if *jsonPath != "" {
		if err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			failed = true
		} else {
			if err := WriteJSON(*jsonPath, res); err != nil {
				fmt.Fprintf(stderr, "bench: --json: %v\n", err)
				failed = true
			}
			written := []string{*jsonPath}
			// A run of sections without bars (--parts scaleout) draws none.
			if groups := res.plotGroups(); len(groups) > 0 {
				png := strings.TrimSuffix(*jsonPath, filepath.Ext(*jsonPath)) + ".png"
				if err := writePlotFile(png, "sharetx bench: direct vs proxy, consumer-group EOS vs sharetx txn (each pair on its own axis)", groups); err != nil {
					fmt.Fprintf(stderr, "bench: plot: %v\n", err)
					failed = true
				} else {
					written = append(written, png)
				}
			}
			if lines := res.scalingLines(); len(lines) > 0 {
				sp := strings.TrimSuffix(*jsonPath, filepath.Ext(*jsonPath)) + "-scaling.png"
				title := fmt.Sprintf("exactly-once past the partition count: records/s against workers (%.0f ms of waiting per record, transactions of %d)", float64(o.ScaleProc)/float64(time.Millisecond), o.ScaleBatch)
				if err := writeLinePlotFile(sp, title, "workers", "records/s", lines); err != nil {
					fmt.Fprintf(stderr, "bench: plot: %v\n", err)
					failed = true
				} else {
					written = append(written, sp)
				}
			}
			fmt.Fprintf(stdout, "wrote %s\n", strings.Join(written, ", "))
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(stdout, "MEASUREMENT FAILED: %s\n", e)
	}
	for _, g := range res.Goals {
		fmt.Fprintln(stdout, g.Line())
	}
	if failed {
		return 1
	}
	return 0
}
