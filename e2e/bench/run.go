package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sidePair is one measurement direct against through the proxy, every run
// kept.
type sidePair[T any] struct {
	Direct []T `json:"direct"`
	Proxy  []T `json:"proxy"`
	// Relay: the same through the reference relay (relay.go), franz-go
	// runs only.
	Relay []T `json:"relay,omitempty"`
}

// Results is everything one run measured (the JSON output).
type Results struct {
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	Options   Options   `json:"options"`
	Bootstrap string    `json:"bootstrap_direct"`
	ProxyAddr string    `json:"bootstrap_proxy"`

	FranzProduce sidePair[throughput]       `json:"franz_produce"`
	FranzLatency sidePair[latencyResult]    `json:"franz_produce_latency"`
	FranzConsume sidePair[throughput]       `json:"franz_share_consume"`
	JavaProduce  sidePair[javaProduce]      `json:"java_producer_performance"`
	JavaConsume  sidePair[javaShareConsume] `json:"java_share_consumer_performance"`
	// The proxy process over each proxied pass-through phase, and all of
	// them together.
	ProxyCost      map[string]proxyCost `json:"proxy_cost"`
	ProxyCostTotal proxyCost            `json:"proxy_cost_pass_through"`
	// The reference relay process over each relayed phase.
	RelayCost     map[string]proxyCost `json:"relay_cost,omitempty"`
	ProxyRSSStart int64                `json:"proxy_rss_bytes_at_start"`
	ProxyRSSEnd   int64                `json:"proxy_rss_bytes_at_end"`
	ProxyHWM      int64                `json:"proxy_hwm_bytes_at_end"`

	// Every run of the pipeline comparisons, of every round.
	Pipeline []*pipelineResult `json:"pipeline"`
	// The scaling runs: workers against partitions, with processing time.
	Scaling []*pipelineResult `json:"scaling"`
	// The scale-out runs: N sidecars, a worker each, one share group.
	ScaleOut []*scaleOutRun `json:"scaleout"`
	// The Java exactly-once comparison (kafka-clients), every round.
	JavaEOS []*pipelineResult `json:"java_eos"`
	// The Python exactly-once comparison (confluent-kafka), every round.
	PythonEOS []*pipelineResult `json:"python_eos,omitempty"`
	// Pinned: what pin mode put where ("" when not pinned).
	Pinned string          `json:"pinned,omitempty"`
	Paced  *pipelineResult `json:"latency_pipeline"` // franz-go default share consumer settings, paced input
	Staged *stagedMemory   `json:"staged_memory"`

	PerfTop string `json:"perf_top,omitempty"`

	Goals  []goal   `json:"goals"`
	Errors []string `json:"errors"`
}

// bench carries one run's state.
type bench struct {
	o      Options
	res    *Results
	t0     time.Time
	direct string
	proxy  *proxyProc
	bin    string     // the sharetx binary
	dir    string     // the work directory (binary, logs)
	relay  *relayProc // nil: no relay runs (more than one broker, or it failed to start)
	admin  *kgo.Client
	adm    *kadm.Client
	suffix string
	perf   *perfRecorder
	pin    *pinning // pin mode; nil otherwise
	// brokers are the pids of the brokers listening on the seeds' ports on
	// this machine (none: the cluster is elsewhere; the budget then has no
	// broker CPU line).
	brokers []int
	pipeIn  string       // the pipelines' input topic, once filled
	runs    atomic.Int64 // pipeline runs so far (each its own group and output topic)
	topics  []string     // created by this run; deleted at the end
}

func (b *bench) createTopic(ctx context.Context, t string) error {
	b.topics = append(b.topics, t)
	return sim.CreateTopic(ctx, b.adm, t, int32(b.o.Partitions), -1)
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.o.Out, "[bench %6.1fs] %s\n", time.Since(b.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) fail(what string, err error) {
	b.progress("FAILED %s: %v", what, err)
	b.res.Errors = append(b.res.Errors, fmt.Sprintf("%s: %v", what, err))
}

func (b *bench) topic(name string) string { return fmt.Sprintf("bench-%s-%s", name, b.suffix) }

// Run runs every measurement; a failed one is recorded in Results.Errors
// and the others still run where they can.
// runs reports whether the section is to run (all of them when Parts is
// empty).
func (o Options) runs(part string) bool {
	return len(o.Parts) == 0 || slices.Contains(o.Parts, part)
}

func Run(ctx context.Context, o Options) *Results {
	res := &Results{Started: time.Now(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Options: o, ProxyCost: map[string]proxyCost{}, RelayCost: map[string]proxyCost{}}
	b := &bench{o: o, res: res, t0: time.Now(), suffix: fmt.Sprint(time.Now().Unix())}
	defer func() {
		res.Seconds = time.Since(b.t0).Seconds()
		res.Goals = computeGoals(res)
	}()
	if err := b.setup(ctx); err != nil {
		b.fail("setup", err)
		return res
	}
	defer b.teardown()

	if o.runs("passthrough") {
		b.passThrough(ctx)
		b.sumPassThrough()
	}
	if ctx.Err() == nil && o.runs("pipelines") {
		b.pipelines(ctx)
	}
	if ctx.Err() == nil && o.runs("scaling") {
		b.scaling(ctx)
	}
	if ctx.Err() == nil && o.runs("scaleout") {
		b.scaleOut(ctx)
	}
	if ctx.Err() == nil && o.runs("java-eos") && !o.SkipJava {
		b.javaEOS(ctx)
	}
	if ctx.Err() == nil && o.runs("python-eos") && !o.SkipPython {
		b.pythonEOS(ctx)
	}
	if ctx.Err() == nil && o.runs("latency") {
		b.pacedLatency(ctx)
	}
	if ctx.Err() == nil && o.runs("staged") {
		b.stagedMemory(ctx)
	}
	if u, err := b.proxy.usage(); err == nil {
		res.ProxyRSSEnd, res.ProxyHWM = u.mem.RSS, u.mem.HWM
	}
	if !b.proxy.alive() {
		b.fail("proxy", fmt.Errorf("the sharetx process exited during the run: %v (see %s)", b.proxy.Err(), b.proxy.logPath))
	}
	return res
}

func (b *bench) setup(ctx context.Context) error {
	o := b.o
	if len(o.Seeds) == 0 {
		b.progress("starting (or reusing) Kafka with %s up", o.KafkaScript)
		seeds, err := kafkaUp(ctx, o.KafkaScript)
		if err != nil {
			return err
		}
		b.o.Seeds, b.res.Options.Seeds = seeds, seeds
	}
	b.direct = b.o.Seeds[0]
	b.res.Bootstrap = b.direct
	dir := o.WorkDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sharetx-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b.res.Options.WorkDir = dir
	bin := o.SharetxBin
	if bin == "" {
		b.progress("building ./cmd/sharetx into %s", dir)
		var err error
		if bin, err = sim.BuildSharetx(ctx, dir); err != nil {
			return err
		}
	}
	b.bin, b.dir = bin, dir
	var err error
	b.admin, err = newClient(b.direct)
	if err != nil {
		return err
	}
	b.adm = kadm.NewClient(b.admin)
	if o.Pin {
		if b.pin, err = newPinning(); err != nil {
			return err
		}
		if err := b.pin.pinBrokersAndSelf(b.o.Seeds); err != nil {
			return err
		}
		b.res.Pinned = b.pin.String()
	}
	b.brokers = localBrokers(b.o.Seeds)
	b.progress("starting sharetx --upstream %s (log %s)", b.direct, dir+"/sharetx.log")
	if b.proxy, err = startProxy(bin, b.o.Seeds, dir, "sharetx", o.ProxyLog, time.Minute); err != nil {
		return err
	}
	b.res.ProxyAddr = b.proxy.bootstrap
	if b.pin != nil {
		if err := taskset(b.proxy.pid(), b.pin.proxyCPUs); err != nil {
			return err
		}
		b.progress("pin mode: %s", b.pin)
	}
	u, err := b.proxy.usage()
	if err != nil {
		return fmt.Errorf("reading the proxy's /proc and /metrics: %w", err)
	}
	b.res.ProxyRSSStart = u.mem.RSS
	if b.o.Perf {
		if b.perf, err = startPerf(b.proxy.pid(), dir); err != nil {
			return err
		}
	}
	b.progress("sharetx pid %d ready: clients at %s, metrics at %s, RSS %.1f MiB", b.proxy.pid(), b.proxy.bootstrap, b.proxy.metrics, float64(u.mem.RSS)/(1<<20))
	return nil
}

func (b *bench) teardown() {
	if b.pin != nil {
		defer b.pin.unpin()
	}
	if b.relay != nil {
		b.relay.stop()
	}
	if b.perf != nil {
		top, err := b.perf.stop(25)
		if err != nil {
			b.fail("perf", err)
		} else {
			b.res.PerfTop = top
			fmt.Fprintf(b.o.Out, "\nproxy CPU profile (perf, whole run; inclusive %% of the proxy's samples):\n%s", top)
		}
	}
	if b.proxy != nil {
		b.proxy.stop()
	}
	if b.admin != nil {
		// A default run writes about 2 GB; do not leave it on the broker.
		if len(b.topics) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := b.adm.DeleteTopics(ctx, b.topics...); err != nil {
				b.progress("deleting the bench topics: %v (they are named bench-*-%s)", err, b.suffix)
			}
			cancel()
		}
		b.admin.Close()
	}
}

// proxied runs fn through the proxy and charges the proxy's CPU and traffic
// over it to phase.
func (b *bench) proxied(phase string, fn func() error) error {
	return charge(b.proxy.usage, b.res.ProxyCost, phase, fn)
}

// charge runs fn and adds the CPU and traffic a process (read by usage)
// spent over it to costs[phase].
func charge(usage func() (usage, error), costs map[string]proxyCost, phase string, fn func() error) error {
	before, err := usage()
	if err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	after, err := usage()
	if err != nil {
		return err
	}
	c := costBetween(before, after)
	prev, ok := costs[phase]
	if ok { // repeated runs of a phase add up
		c = proxyCost{CPUSeconds: prev.CPUSeconds + c.CPUSeconds, BytesMoved: prev.BytesMoved + c.BytesMoved, RSSBytes: c.RSSBytes, HWMBytes: c.HWMBytes}
		if c.BytesMoved > 0 {
			c.CPUSecPerGB = c.CPUSeconds / (c.BytesMoved / 1e9)
			c.MillicoresMB = c.CPUSeconds * 1000 / (c.BytesMoved / 1e6)
		}
	}
	costs[phase] = c
	return nil
}

// sides runs direct and proxied (and, with relay, through the reference
// relay) alternately, repeat times each, rotating which goes first every
// round so none always runs on a warmer broker.
func sides[T any](b *bench, name string, relay bool, pair *sidePair[T], run func(bs string, side string, round int) (T, error)) {
	all := []string{"direct", "proxy"}
	if relay && b.relay != nil {
		all = append(all, "relay")
	}
	for round := 0; round < b.o.Repeat; round++ {
		order := append(all[round%len(all):len(all):len(all)], all[:round%len(all)]...)
		for _, side := range order {
			var r T
			var err error
			switch side {
			case "direct":
				r, err = run(b.direct, side, round)
			case "proxy":
				err = b.proxied(name, func() error {
					var e error
					r, e = run(b.proxy.bootstrap, side, round)
					return e
				})
			case "relay":
				err = charge(b.relay.usage, b.res.RelayCost, name, func() error {
					var e error
					r, e = run(b.relay.addr, side, round)
					return e
				})
			}
			if err != nil {
				b.fail(fmt.Sprintf("%s %s round %d", name, side, round+1), err)
				return
			}
			switch side {
			case "direct":
				pair.Direct = append(pair.Direct, r)
			case "proxy":
				pair.Proxy = append(pair.Proxy, r)
			case "relay":
				pair.Relay = append(pair.Relay, r)
			}
			b.progress("%s %s round %d: %s", name, side, round+1, summarize(r))
		}
	}
}

func summarize(v any) string {
	switch r := v.(type) {
	case throughput:
		return fmt.Sprintf("%d records in %.2fs: %.0f records/s, %.1f MB/s", r.Records, r.Seconds, r.RecordsSec, r.MBSec)
	case latencyResult:
		return fmt.Sprintf("%d records at %d/s: p50 %.2f ms, p99 %.2f ms, max %.2f ms", r.Records, r.Rate, r.P50Ms, r.P99Ms, r.MaxMs)
	case javaProduce:
		return fmt.Sprintf("%d records: %.0f records/s, %.1f MiB/s, p50 %.0f ms, p99 %.0f ms (wall %.1fs)", r.Records, r.RecordsSec, r.MiBSec, r.P50Ms, r.P99Ms, r.WallSeconds)
	case javaShareConsume:
		return fmt.Sprintf("%d records: %.0f records/s, %.1f MiB/s (wall %.1fs)", r.Records, r.RecordsSec, r.MiBSec, r.WallSeconds)
	}
	return fmt.Sprint(v)
}

// startRelay starts the reference relay (relay.go) for the franz-go
// pass-through runs when the cluster has one broker.
func (b *bench) startRelay(ctx context.Context) {
	bs, err := b.adm.ListBrokers(ctx)
	if err != nil || len(bs) != 1 {
		b.progress("no reference relay: it needs a one-broker cluster (brokers: %d, err: %v)", len(bs), err)
		return
	}
	r, err := startRelay(ctx, b.direct, filepath.Join(b.res.Options.WorkDir, "relay.log"))
	if err != nil {
		b.progress("no reference relay: %v", err)
		return
	}
	if b.pin != nil {
		if err := taskset(r.Pid(), b.pin.proxyCPUs); err != nil {
			b.progress("no reference relay: %v", err)
			r.stop()
			return
		}
	}
	b.relay = r
	dialVia.Store(r.addr, r.addr)
	b.progress("reference relay (user-space byte copy, no protocol logic) pid %d at %s -> %s", r.Pid(), r.addr, b.direct)
}

func (b *bench) passThrough(ctx context.Context) {
	o := b.o
	tput := b.topic("tput")
	lat := b.topic("latency")
	jtopic := b.topic("java")
	for _, t := range []string{tput, lat, jtopic, b.topic("warm-up")} {
		if err := b.createTopic(ctx, t); err != nil {
			b.fail("create topics", err)
			return
		}
	}
	// Warm-up, not measured: the broker's JIT, page cache and log segments.
	warm := min(o.Records, 20000)
	b.progress("warm-up: %d records directly and %d through the proxy (not measured)", warm, warm/4)
	if _, err := franzProduce(ctx, b.direct, b.topic("warm-up"), warm, o.RecordSize); err != nil {
		b.fail("warm-up", err)
	}
	if _, err := franzProduce(ctx, b.proxy.bootstrap, b.topic("warm-up"), warm/4, o.RecordSize); err != nil {
		b.fail("warm-up", err)
	}
	b.startRelay(ctx)
	b.progress("franz-go produce: %d records of %d B, direct vs proxy%s, %d round(s)", o.Records, o.RecordSize, map[bool]string{true: " vs relay", false: ""}[b.relay != nil], o.Repeat)
	sides(b, "franz_produce", true, &b.res.FranzProduce, func(bs, _ string, _ int) (throughput, error) {
		return franzProduce(ctx, bs, tput, o.Records, o.RecordSize)
	})
	b.progress("franz-go produce latency at %d records/s for %s", o.LatencyRate, o.LatencyDur)
	sides(b, "franz_latency", true, &b.res.FranzLatency, func(bs, _ string, _ int) (latencyResult, error) {
		return franzProduceLatency(ctx, bs, lat, o.LatencyRate, o.RecordSize, o.LatencyDur)
	})
	b.progress("franz-go share consume: %d records from %s, a new share group per run", o.Records, tput)
	sides(b, "franz_consume", true, &b.res.FranzConsume, func(bs, side string, round int) (throughput, error) {
		g := fmt.Sprintf("bench-consume-%s-%s-%d", b.suffix, side, round)
		if err := shareFromEarliest(ctx, b.admin, g); err != nil {
			return throughput{}, err
		}
		return franzShareConsume(ctx, bs, tput, g, o.Records)
	})
	if o.SkipJava {
		return
	}
	b.progress("Java ProducerPerformance: %d records of %d B", o.JavaRecords, o.RecordSize)
	sides(b, "java_produce", false, &b.res.JavaProduce, func(bs, _ string, _ int) (javaProduce, error) {
		return javaProducerPerf(ctx, o.KafkaScript, bs, jtopic, o.JavaRecords, o.RecordSize)
	})
	b.progress("Java ShareConsumerPerformance: %d records from %s", o.JavaRecords, jtopic)
	sides(b, "java_consume", false, &b.res.JavaConsume, func(bs, side string, round int) (javaShareConsume, error) {
		g := fmt.Sprintf("bench-java-%s-%s-%d", b.suffix, side, round)
		if err := shareFromEarliest(ctx, b.admin, g); err != nil {
			return javaShareConsume{}, err
		}
		return javaShareConsumerPerf(ctx, o.KafkaScript, bs, jtopic, g, o.JavaRecords)
	})
}

// pipelineModes are the modes of the pipeline comparisons, each run in
// every round at every batch size.
var pipelineModes = []string{modeGroupEOS, modeKafkaTxnDirect, modeKafkaTxn, modeTxn, modeALO}

// pipelineModes are the options' modes, the default ones when unset (a
// test's Options).
func (o Options) pipelineModes() []string {
	if len(o.PipelineModes) == 0 {
		return pipelineModes
	}
	return o.PipelineModes
}

// rotated is xs rotated left by n (each round starts elsewhere, so that no
// mode always runs first or last).
func rotated[T any](xs []T, n int) []T {
	n %= len(xs)
	return append(append([]T{}, xs[n:]...), xs[:n]...)
}

// pipelineRun is one run of the comparisons: a new group, a new output
// topic that is checked when the mode is exactly-once and then deleted.
func (b *bench) pipelineRun(ctx context.Context, o pipelineOpts, round int) (*pipelineResult, error) {
	n, out, err := b.runOutput(ctx)
	if err != nil {
		return nil, err
	}
	defer b.dropTopic(out)
	o.group, o.out = fmt.Sprintf("bench-%s-%s-%d-%d", o.mode, b.suffix, o.batch, n), out
	if o.mode != modeGroupEOS {
		if err := shareFromEarliest(ctx, b.admin, o.group); err != nil {
			return nil, err
		}
	}
	switch o.mode {
	case modeKafkaTxnDirect, modeGroupEOS:
		o.bs = b.direct
	default:
		o.bs = b.proxy.bootstrap
	}
	run := o
	if o.mode == modeKafkaTxnDirect {
		run.mode = modeKafkaTxn
	}
	var before metrics
	proxied := o.bs == b.proxy.bootstrap
	if proxied {
		if before, err = b.proxy.scrape(); err != nil {
			return nil, err
		}
	}
	cpu0 := b.cpuNow()
	r, err := runPipeline(ctx, run)
	if err != nil {
		return nil, err
	}
	cpuBudget(r.Budget, cpu0, b.cpuNow(), r.Transactions, r.Records)
	r.Mode, r.Round, r.Partitions = o.mode, round, o.partitions
	if o.mode == modeTxn || o.mode == modeTxnSeq {
		b.commitApplied(before, r)
	}
	if proxied {
		if after, err := b.proxy.scrape(); err == nil {
			proxyBudget(r.Budget, before, after, r.Transactions)
		}
	}
	if exactlyOnce(o.mode) {
		if err := verify(ctx, b.direct, o.out, r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// runOutput numbers a new run and creates its output topic.
func (b *bench) runOutput(ctx context.Context) (int64, string, error) {
	n := b.runs.Add(1)
	out := b.topic(fmt.Sprintf("out-%d", n))
	if err := sim.CreateTopic(ctx, b.adm, out, int32(b.o.Partitions), -1); err != nil {
		return 0, "", fmt.Errorf("output topic: %w", err)
	}
	return n, out, nil
}

// dropTopic deletes a run's topic at once (a full run would otherwise keep
// gigabytes of outputs on the broker until its end).
func (b *bench) dropTopic(t string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.adm.DeleteTopics(ctx, t); err == nil {
		b.topics = slices.DeleteFunc(b.topics, func(x string) bool { return x == t })
	}
}

// pipelineInput is the input topic of the pipeline comparisons (and the
// Java ones), filled the first time it is asked for.
func (b *bench) pipelineInput(ctx context.Context) (string, error) {
	if b.pipeIn != "" {
		return b.pipeIn, nil
	}
	in := b.topic("pipe-in")
	if err := b.createTopic(ctx, in); err != nil {
		return "", err
	}
	b.progress("pipeline input: %d records of %d B into %s (%d partitions)", b.o.PipelineRecords, b.o.RecordSize, in, b.o.Partitions)
	if _, err := franzProduce(ctx, b.direct, in, b.o.PipelineRecords, b.o.RecordSize); err != nil {
		return "", err
	}
	b.pipeIn = in
	return in, nil
}

func (b *bench) pipelines(ctx context.Context) {
	o := b.o
	in, err := b.pipelineInput(ctx)
	if err != nil {
		b.fail("pipeline input", err)
		return
	}
	fetching := "one fetch per poll"
	if o.Prefetch {
		fetching = "one fetch ahead"
	}
	b.progress("pipelines: %d round(s) of %v at transactions of %v, %d worker(s) each, up to %d records or %s per run, share consumers %s; exactly-once modes checked per input id",
		o.Rounds, o.pipelineModes(), o.Batches, o.PipelineWorkers, o.PipelineRecords, o.PipelineDur, fetching)
	for round := 0; round < o.Rounds; round++ {
		for bi, batch := range o.Batches {
			for _, mode := range rotated(o.pipelineModes(), round+bi) {
				if ctx.Err() != nil {
					return
				}
				// strict: transactions of batch records, as the consumer
				// group's (PollRecords(batch) caps its polls): without it
				// a share fetch acquires whole record batches and the
				// transactions at 1000 held ~524 records (docs/benchmarks.md).
				r, err := b.pipelineRun(ctx, pipelineOpts{mode: mode, in: in, batch: batch, workers: o.PipelineWorkers, partitions: o.Partitions,
					target: int64(o.PipelineRecords), maxDur: o.PipelineDur, strict: true, prefetch: o.Prefetch}, round)
				if err != nil {
					b.fail(fmt.Sprintf("pipeline %s batch %d round %d", mode, batch, round+1), err)
					continue
				}
				b.res.Pipeline = append(b.res.Pipeline, r)
				b.progress("round %d: %s", round+1, describeRun(r))
			}
		}
	}
}

// describeRun is a run's progress line.
func describeRun(r *pipelineResult) string {
	s := fmt.Sprintf("%s batch %d, %d worker(s) on %d partition(s)", r.Mode, r.Batch, r.Workers, r.Partitions)
	if r.ProcMs > 0 {
		s += fmt.Sprintf(", %.0f ms/record", r.ProcMs)
	}
	s += fmt.Sprintf(": %d records in %.1fs = %.0f records/s (%.0f per transaction, %d aborts; p50 ms: produce %.2f, TxnShareAck %.2f, EndTxn %.2f)",
		r.Records, r.Seconds, r.RecordsSec, r.AvgBatch, r.Aborts, r.ProduceP50Ms, r.TxnAckP50Ms, r.EndTxnP50Ms)
	if r.Verified {
		s += fmt.Sprintf("; exactly-once: %d outputs for %d inputs, 0 duplicates, 0 lost", r.Outputs, r.Records)
	}
	return s + txnDetail(r)
}

// The Java modes: KafkaShareConsumer + SharetxProducer through the proxy,
// KafkaConsumer + sendOffsetsToTransaction direct (the two exactly-once
// ones), and the same KafkaShareConsumer with Kafka transactions alone, its
// ACCEPTs after the commit (at-least-once), through the proxy (what
// pass-through costs the pattern) and direct (what the stock share consumer
// reaches with no sharetx in the path: the ceiling of the first).
const (
	modeJavaShareEOS       = "java-share-eos"
	modeJavaGroupEOS       = "java-group-eos"
	modeJavaShareTxn       = "java-share-txn"
	modeJavaShareTxnDirect = "java-share-txn-direct"
)

// javaEOS runs the Java consume-transform-produce through sharetx against
// Java's own consumer-group EOS, one JVM each, in interleaved rounds, both
// checked exactly-once.
func (b *bench) javaEOS(ctx context.Context) {
	o := b.o
	in, err := b.pipelineInput(ctx)
	if err != nil {
		b.fail("pipeline input", err)
		return
	}
	b.progress("java exactly-once: %d round(s) of KafkaShareConsumer + SharetxProducer (through sharetx), KafkaConsumer + sendOffsetsToTransaction (direct) and KafkaShareConsumer + Kafka transactions alone (through sharetx and direct, ACCEPTs after the commit), transactions of %v, one JVM each, up to %d records or %s",
		o.Rounds, o.JavaEOSBatches, o.PipelineRecords, o.JavaEOSDur)
	for round := 0; round < o.Rounds; round++ {
		for _, batch := range o.JavaEOSBatches {
			for _, mode := range rotated([]string{modeJavaShareEOS, modeJavaGroupEOS, modeJavaShareTxn, modeJavaShareTxnDirect}, round) {
				if ctx.Err() != nil {
					return
				}
				r, err := b.clientEOSRun(ctx, javaEOSClient, mode, in, batch, round)
				if err != nil {
					b.fail(fmt.Sprintf("java %s batch %d round %d", mode, batch, round+1), err)
					continue
				}
				b.res.JavaEOS = append(b.res.JavaEOS, r)
				b.progress("java round %d: %s", round+1, describeRun(r))
			}
		}
	}
}

// scaling runs share-group EOS through sharetx against consumer-group EOS
// with W workers on P input partitions, each record costing a wait.
func (b *bench) scaling(ctx context.Context) {
	o := b.o
	type input struct {
		topic string
		parts int
	}
	var ins []input
	for _, p := range o.ScalePartitions {
		t := b.topic(fmt.Sprintf("scale-in-p%d", p))
		b.topics = append(b.topics, t)
		if err := sim.CreateTopic(ctx, b.adm, t, int32(p), -1); err != nil {
			b.fail("create scaling topics", err)
			return
		}
		if _, err := franzProduce(ctx, b.direct, t, o.ScaleRecords, o.RecordSize); err != nil {
			b.fail("scaling input", err)
			return
		}
		ins = append(ins, input{t, p})
	}
	b.progress("scaling: %d round(s); workers %v on %v partition(s); %s of waiting per record, transactions of %d; %s measured after %s of warm-up (the joins and rebalances) per run",
		o.ScaleRounds, o.ScaleWorkers, o.ScalePartitions, o.ScaleProc, o.ScaleBatch, o.ScaleDur, o.ScaleWarm)
	modes := []string{modeTxn, modeGroupEOS}
	for round := 0; round < o.ScaleRounds; round++ {
		for _, in := range ins {
			for wi, w := range o.ScaleWorkers {
				for _, mode := range rotated(modes, round+wi) {
					if ctx.Err() != nil {
						return
					}
					r, err := b.pipelineRun(ctx, pipelineOpts{mode: mode, in: in.topic, batch: o.ScaleBatch, workers: w, partitions: in.parts, proc: o.ScaleProc,
						target: int64(o.ScaleRecords), maxDur: o.ScaleDur + o.ScaleWarm, warm: o.ScaleWarm, strict: true}, round)
					if err != nil {
						b.fail(fmt.Sprintf("scaling %s %d workers %d partitions round %d", mode, w, in.parts, round+1), err)
						continue
					}
					b.res.Scaling = append(b.res.Scaling, r)
					b.progress("scaling round %d: %s", round+1, describeRun(r))
				}
			}
		}
	}
}

func txnDetail(r *pipelineResult) string {
	if !strings.HasPrefix(r.Mode, "txn") {
		return ""
	}
	return fmt.Sprintf("; TxnShareAcknowledge p50 %.2f ms p99 %.2f ms; commit→applied p50 %.2f ms p99 %.2f ms (n=%.0f)",
		r.TxnAckP50Ms, r.TxnAckP99Ms, r.CommitAppliedP50Ms, r.CommitAppliedP99Ms, r.CommitAppliedN)
}

// commitApplied waits briefly for the last applications, then takes the
// commit→applied histogram's bucket deltas since before.
func (b *bench) commitApplied(before metrics, r *pipelineResult) {
	const h = "sharetx_commit_to_applied_seconds"
	var after metrics
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if after, err = b.proxy.scrape(); err != nil {
			b.fail("scrape", err)
			return
		}
		if after["sharetx_tx_pending_records"] == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d := deltaBuckets(before.histogram(h), after.histogram(h))
	if len(d) > 0 {
		r.CommitAppliedN = d[len(d)-1].Count
	}
	r.CommitAppliedP50Ms = bucketQuantile(0.5, d) * 1000
	r.CommitAppliedP99Ms = bucketQuantile(0.99, d) * 1000
}

// pacedLatency feeds a fresh input topic at a moderate rate (directly), so
// that the transactional pipeline through the proxy is caught up and its
// share consumer (franz-go's defaults) keeps a long-poll ShareFetch in
// flight, then measures TxnShareAcknowledge and commit→applied.
func (b *bench) pacedLatency(ctx context.Context) {
	o := b.o
	in, out := b.topic("paced-in"), b.topic("paced-out")
	for _, t := range []string{in, out} {
		if err := b.createTopic(ctx, t); err != nil {
			b.fail("create latency topics", err)
			return
		}
	}
	g := fmt.Sprintf("bench-paced-%s", b.suffix)
	if err := shareFromEarliest(ctx, b.admin, g); err != nil {
		b.fail("latency group", err)
		return
	}
	before, err := b.proxy.scrape()
	if err != nil {
		b.fail("scrape", err)
		return
	}
	b.progress("latency pipeline: %d records/s for %s, txn batches of <= 100, franz-go default share consumer settings", o.PacedRate, o.PacedDur)
	fed := make(chan error, 1)
	go func() {
		_, err := franzProduceLatency(ctx, b.direct, in, o.PacedRate, o.RecordSize, o.PacedDur)
		fed <- err
	}()
	total := int64(float64(o.PacedRate) * o.PacedDur.Seconds())
	// Sequential: the acks are sent once the outputs are acknowledged, so
	// the TxnShareAcknowledge is timed on its own, not against the
	// transaction's concurrent produce.
	r, err := runPipeline(ctx, pipelineOpts{mode: modeTxnSeq, bs: b.proxy.bootstrap, in: in, out: out, group: g, batch: 100,
		target: total, maxDur: o.PacedDur + 15*time.Second, defaults: true})
	if ferr := <-fed; ferr != nil {
		b.fail("latency pipeline input", ferr)
	}
	if err != nil {
		b.fail("latency pipeline", err)
		return
	}
	b.commitApplied(before, r)
	b.res.Paced = r
	b.progress("latency pipeline: %d records in %d transactions (%.1f per transaction)%s", r.Records, r.Transactions, r.AvgBatch, txnDetail(r))
}

// sumPassThrough totals the proxy's cost over the throughput phases.
func (b *bench) sumPassThrough() {
	// The goal is about throughput: the fixed-rate latency phase (1 MB/s,
	// dominated by per-request costs) is shown but not counted.
	var total proxyCost
	for name, c := range b.res.ProxyCost {
		if name == "franz_latency" {
			continue
		}
		total.CPUSeconds += c.CPUSeconds
		total.BytesMoved += c.BytesMoved
	}
	if total.BytesMoved > 0 {
		total.CPUSecPerGB = total.CPUSeconds / (total.BytesMoved / 1e9)
		total.MillicoresMB = total.CPUSeconds * 1000 / (total.BytesMoved / 1e6)
	}
	b.res.ProxyCostTotal = total
}
