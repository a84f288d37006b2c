// Command bench measures what sharetx costs: pass-through overhead against
// a direct connection to the same broker (franz-go and Java's perf tools),
// the proxy process's CPU and memory, transactional acknowledgements
// against at-least-once in a consume-transform-produce pipeline, and the
// latencies of TxnShareAcknowledge and commit→applied.
//
//	go run ./e2e/bench                       # starts (or reuses) a 1-node Kafka with e2e/kafka/kafka.sh
//	go run ./e2e/bench --seeds 127.0.0.1:19092 --records 20000 --skip-java
//
// It builds ./cmd/sharetx once and runs it as a separate process with
// --upstream, scraping its /metrics and reading /proc/<pid>. It prints a
// table, writes JSON (--json) and a PNG bar chart next to it, and ends with
// one line per goal: GOAL <name> measured=<x> goal=<y> met|missed. Goals
// are reported, never asserted: the exit status is 0 when every
// measurement ran, 1 when one failed, 2 for bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/sharetx/sharetx/e2e/sim"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// allParts are the sections of a run, in the order they run.
var allParts = []string{"passthrough", "pipelines", "latency", "staged"}

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
	PacedRate       int           `json:"paced_rate"`
	PacedDur        time.Duration `json:"paced_duration_ns"`
	SharetxBin      string        `json:"-"`
	WorkDir         string        `json:"work_dir"`
	ProxyLog        string        `json:"-"`
	Perf            bool          `json:"perf"`
	Parts           []string      `json:"parts"`
	Out             io.Writer     `json:"-"`
}

func main() { os.Exit(mainRun(os.Args[1:], os.Stdout, os.Stderr)) }

func mainRun(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "relay" { // the reference relay process (relay.go)
		return runRelay(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	seeds := fs.String("seeds", "", "bootstrap list of a running cluster; empty: `kafka.sh up` (KAFKA_* variables pass through)")
	fs.StringVar(&o.KafkaScript, "kafka-script", "", "path to e2e/kafka/kafka.sh (default: from the module root)")
	fs.IntVar(&o.Records, "records", 300000, "records per franz-go produce and share-consume run")
	fs.IntVar(&o.RecordSize, "record-size", 1024, "bytes per record value")
	fs.IntVar(&o.Repeat, "repeat", 2, "runs of each pass-through measurement per side (interleaved; the best is compared)")
	fs.IntVar(&o.Partitions, "partitions", 3, "partitions of every topic")
	fs.IntVar(&o.LatencyRate, "latency-rate", 1000, "records/s of the produce-latency runs (moderate load)")
	fs.DurationVar(&o.LatencyDur, "latency-duration", 8*time.Second, "duration of each produce-latency run")
	fs.IntVar(&o.JavaRecords, "java-records", 150000, "records per ProducerPerformance / ShareConsumerPerformance run")
	fs.BoolVar(&o.SkipJava, "skip-java", false, "skip the Java perf tools")
	fs.IntVar(&o.PipelineRecords, "pipeline-records", 100000, "input records of the consume-transform-produce runs (each run stops there or at --pipeline-duration)")
	fs.DurationVar(&o.PipelineDur, "pipeline-duration", 12*time.Second, "time limit of each consume-transform-produce run")
	batches := fs.String("batches", "10,100,1000", "records per transaction (and per at-least-once poll)")
	fs.IntVar(&o.PacedRate, "paced-rate", 200, "records/s fed to the latency pipeline (the consumer is caught up: long-poll ShareFetch in flight)")
	fs.DurationVar(&o.PacedDur, "paced-duration", 12*time.Second, "duration of the latency pipeline")
	jsonPath := fs.String("json", "bench-results/bench.json", "write the results as JSON here (the PNG goes next to it, .png)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "where the sharetx binary and its log go (default: a new directory under $TMPDIR)")
	fs.StringVar(&o.SharetxBin, "sharetx-bin", "", "a sharetx binary to use instead of building ./cmd/sharetx")
	fs.StringVar(&o.ProxyLog, "proxy-log", "info", "the proxy's log level (in its log file)")
	parts := fs.String("parts", strings.Join(allParts, ","), "the sections to run (a subset of "+strings.Join(allParts, ",")+"); goals of the others are reported as not measured")
	fs.BoolVar(&o.Perf, "perf", false, "sample the proxy process with Linux perf for the whole run and print its heaviest functions")
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
	for _, s := range strings.Split(*batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "bench: --batches: bad %q\n", s)
			return 2
		}
		o.Batches = append(o.Batches, n)
	}
	if o.Records < 1 || o.RecordSize < 1 || o.Repeat < 1 || o.Partitions < 1 || o.LatencyRate < 1 || o.PipelineRecords < 1 || o.PacedRate < 1 {
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
			png := strings.TrimSuffix(*jsonPath, filepath.Ext(*jsonPath)) + ".png"
			if err := writePlotFile(png, "sharetx bench: direct vs proxy, alo vs txn (each pair scaled to its larger bar)", res.plotGroups()); err != nil {
				fmt.Fprintf(stderr, "bench: plot: %v\n", err)
				failed = true
			}
			fmt.Fprintf(stdout, "wrote %s and %s\n", *jsonPath, png)
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
