package main

// The soak (make soak, `chaos soak`): one long phase under a steady load
// and every fault in turn, sampling the sidecars as it goes, then the same
// exactly-once verdict as every phase, and a test that nothing the sidecars
// hold keeps growing.
//
// Sidecar 1 is never restarted: its samples span the whole soak. The last
// sidecar is the one restarted (kill -9) by the proxy-restart fault; its
// incarnations are judged each on its own when long enough.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/e2e/sim"
)

// SoakOptions configure a soak (Options give the cluster, the proxies, the
// lock, the transaction timeout, the abort rate and the rest).
type SoakOptions struct {
	Duration    time.Duration // how long inputs are produced and faults injected
	Sample      time.Duration // how often each sidecar is sampled
	WarmUp      time.Duration // per sidecar incarnation, not judged for growth
	Rate        int           // inputs per second at most
	Backlog     int           // inputs produced and not yet in the output, at most
	GoWorkers   int
	JavaWorkers int
	FaultEvery  time.Duration // one fault (worker-kill, proxy-restart, broker-restart in turn) per interval
	RecordsGoal int           // fewer inputs processed fail the soak (0: no goal)
	Drain       time.Duration // after the load: how long the workers may take to finish the inputs
	Plot        string        // PNG of the samples (default: soak.png in the work directory)
	ChurnEvery  time.Duration // one churn cycle (a new group, member and transactional id through sidecar 1) per interval at most; 0: none
}

func (so *SoakOptions) defaults() {
	if so.Duration <= 0 {
		so.Duration = 25 * time.Minute
	}
	if so.Sample <= 0 {
		so.Sample = 30 * time.Second
	}
	if so.WarmUp <= 0 {
		so.WarmUp = max(2*so.Sample, so.Duration/5)
	}
	if so.Rate <= 0 {
		so.Rate = 1000
	}
	if so.Backlog <= 0 {
		so.Backlog = 20000
	}
	if so.FaultEvery <= 0 {
		so.FaultEvery = 3 * time.Minute
	}
	if so.Drain <= 0 {
		so.Drain = 4 * time.Minute
	}
}

// SoakResult is what a soak found.
type SoakResult struct {
	PhaseResult
	Records  int          `json:"records"` // inputs produced (and so to be processed)
	Samples  []soakSample `json:"samples"`
	Growing  []string     `json:"growing,omitempty"` // "sidecar N start S: figure"
	Faults   []string     `json:"faults"`            // what was injected, when
	Plot     string       `json:"plot,omitempty"`
	Churn    *ChurnResult `json:"churn,omitempty"`
	SoakPass bool         `json:"soak_pass"`
}

type soak struct {
	p  *phase
	so SoakOptions
	t0 time.Time

	produced atomic.Int64
	feedMu   sync.Mutex
	ids      []string
	where    map[poKey]string

	smu     sync.Mutex
	samples []soakSample
	prev    map[[2]int]map[string]float64 // (proxy, start) → its previous scrape
	loading atomic.Bool
	faults  []string
}

// Soak runs a soak and returns its result.
func Soak(ctx context.Context, o Options, so SoakOptions) (SoakResult, error) {
	so.defaults()
	o.Workers = so.GoWorkers + so.JavaWorkers
	if o.Workers < 1 {
		return SoakResult{}, fmt.Errorf("a soak needs at least one worker")
	}
	if o.Proxies < 2 {
		o.Proxies = 2
	}
	r, err := newRunner(ctx, o, so.JavaWorkers > 0, fmt.Sprintf("soak for %s: %d Go and %d Java workers over %d sidecars, up to %d inputs/s, a fault every %s",
		so.Duration, so.GoWorkers, so.JavaWorkers, o.Proxies, so.Rate, so.FaultEvery))
	if err != nil {
		return SoakResult{}, err
	}
	defer r.close()
	p := r.newPhase("soak")
	p.n = 1 << 30 // unknown until the load ends: the faults never find the work done
	p.t0 = time.Now()
	p.res.WorkDir = p.dir
	if so.JavaWorkers > 0 {
		p.res.WorkerLang = "go+java"
	}
	if so.Plot == "" {
		so.Plot = filepath.Join(r.o.WorkDir, "soak.png")
	}
	sk := &soak{p: p, so: so, t0: p.t0, where: map[poKey]string{}, prev: map[[2]int]map[string]float64{}}
	res := sk.run(ctx)
	return res, nil
}

func (sk *soak) run(ctx context.Context) SoakResult {
	p, so, o := sk.p, sk.so, sk.p.r.o
	res := SoakResult{}
	finish := func() SoakResult {
		res.PhaseResult = p.res
		res.Samples = sk.samples
		res.Faults = sk.faults
		return res
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := p.setupTopics(sctx)
	cancel()
	if err == nil {
		err = p.startProxies()
	}
	var ch *churner
	if err == nil && so.ChurnEvery > 0 {
		ch = newChurner(p, so.ChurnEvery)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = ch.setup(sctx)
		cancel()
	}
	if err == nil {
		for i := 0; i < o.Workers; i++ {
			lang := "go"
			if i >= so.GoWorkers {
				lang = "java"
			}
			p.slots = append(p.slots, &workerSlot{idx: i + 1, lang: lang, proxy: p.proxy[i%len(p.proxy)], txnTimeout: o.TxnTimeout, holds: make(chan string, 16)})
		}
		err = p.startWorkers()
	}
	if err != nil {
		p.fail("set-up: %v", err)
		p.teardown()
		p.res.Judge()
		return finish()
	}
	p.say("soak starts: input %s, output %s, group %s; sampling every %s; logs %s", p.in, p.out, p.group, so.Sample, p.dir)
	sk.printHeader()

	loadCtx, endLoad := context.WithTimeout(ctx, so.Duration)
	defer endLoad()
	sk.loading.Store(true)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sk.feed(loadCtx) }()
	go func() { defer wg.Done(); sk.injectFaults(loadCtx) }()
	if ch != nil {
		p.say("churn: a new share group, member and transactional id through sidecar 1 every %s at most (topics %s, %s)", so.ChurnEvery, ch.in, ch.out)
		wg.Add(1)
		go func() { defer wg.Done(); ch.run(loadCtx) }()
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); sk.sampleLoop(sampleCtx) }()

	<-loadCtx.Done()
	wg.Wait()
	sk.loading.Store(false)
	n := int(sk.produced.Load())
	res.Records = n
	p.say("load over after %s: %d inputs produced; draining (up to %s)", time.Since(sk.t0).Round(time.Second), n, so.Drain)
	deadline := time.Now().Add(so.Drain)
	for {
		distinct, _, _ := p.watch.Snapshot()
		if distinct >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.fail("drain: %d of %d inputs in the output after %s", distinct, n, so.Drain)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopSampling()
	<-sampled
	time.Sleep(2 * time.Second) // a late duplicate shows up here
	p.teardown()
	p.res.Seconds = p.since().Seconds()
	sk.feedMu.Lock()
	p.ids, p.where = sk.ids, sk.where
	sk.feedMu.Unlock()
	p.res = p.verify()

	fmt.Fprintln(o.Out)
	rows := judgeGrowth(sk.samples, so.WarmUp, ch != nil)
	sk.p.r.outMu.Lock()
	fmt.Fprintf(o.Out, "growth after a warm-up of %s per sidecar incarnation (a figure grows when its least-squares slope over the window exceeds the threshold, max(relative × median, absolute), and its last third's median is above its first third's by half that):\n", so.WarmUp)
	writeGrowth(o.Out, rows)
	sk.p.r.outMu.Unlock()
	for _, r := range rows {
		if r.Growing {
			res.Growing = append(res.Growing, fmt.Sprintf("sidecar %d start %d: %s grew %s over %s (threshold %s)", r.Proxy, r.Start, r.Metric, num(r.Growth), r.Span.Round(time.Second), num(r.Threshold)))
		}
	}
	if err := writeSoakPlot(so.Plot, sk.samples, so.WarmUp); err != nil {
		p.say("plot: %v", err)
	} else {
		res.Plot = so.Plot
		p.say("plot: %s", so.Plot)
	}
	if so.RecordsGoal > 0 && n < so.RecordsGoal {
		p.res.Errors = append(p.res.Errors, fmt.Sprintf("%d inputs processed, fewer than the goal of %d (raise --rate or --duration)", n, so.RecordsGoal))
	}
	for _, g := range res.Growing {
		p.res.Errors = append(p.res.Errors, "growing: "+g)
	}
	if ch != nil {
		cr := ch.result()
		res.Churn = &cr
		// A fault (a broker restart) may fail a cycle or two; most must
		// commit, or the churn tested nothing.
		if cr.Committed == 0 || cr.Failed > cr.Cycles/4 {
			p.res.Errors = append(p.res.Errors, fmt.Sprintf("churn: %d of %d cycles committed, %d failed: %s", cr.Committed, cr.Cycles, cr.Failed, strings.Join(cr.Errors, "; ")))
		}
	}
	p.res.Judge()
	res.SoakPass = p.res.Pass
	return finish()
}

// feed produces inputs with unique ids until ctx ends: at most so.Rate per
// second and so.Backlog ahead of the output; during every second half of a
// fault interval in transactions (the input then holds control records).
func (sk *soak) feed(ctx context.Context) {
	p, so := sk.p, sk.so
	base := []kgo.Opt{kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(5 * time.Millisecond)}
	plain, err := direct(p.r.o.Seeds, base...)
	if err != nil {
		p.fail("feeder: %v", err)
		return
	}
	defer plain.Close()
	txn, err := direct(p.r.o.Seeds, append(base, kgo.TransactionalID(p.group+"-feeder"))...)
	if err != nil {
		p.fail("feeder: %v", err)
		return
	}
	defer txn.Close()
	const batch = 100
	start := time.Now()
	wasTxn := false
	for ctx.Err() == nil {
		n := int(sk.produced.Load())
		if wait := time.Duration(float64(n)/float64(so.Rate)*float64(time.Second)) - time.Since(start); wait > 0 {
			sleepCtx(ctx, wait)
			continue
		}
		if distinct, _, _ := p.watch.Snapshot(); n-distinct >= so.Backlog {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		inTxn := int(time.Since(start)/(so.FaultEvery/2))%2 == 1
		if inTxn != wasTxn {
			p.note("feeder: inputs now written %s", map[bool]string{true: "in transactions (control records in the input)", false: "plainly"}[inTxn])
			wasTxn = inTxn
		}
		recs := make([]*kgo.Record, batch)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: p.in, Value: []byte(fmt.Sprintf("s-%09d", n+i))}
		}
		cl := plain
		if inTxn {
			cl = txn
			if err := cl.BeginTransaction(); err != nil {
				p.fail("feeder: begin: %v", err)
				return
			}
		}
		// The produce context is not the load's: a batch begun is finished.
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := cl.ProduceSync(pctx, recs...).FirstErr()
		if err == nil && inTxn {
			err = cl.EndTransaction(pctx, kgo.TryCommit)
		}
		cancel()
		if err != nil {
			// Not counted: a failed batch's records may or may not be in the
			// input, so the run cannot be judged any more.
			p.fail("feeder: producing inputs %d..%d: %v", n, n+batch-1, err)
			return
		}
		sk.feedMu.Lock()
		for _, r := range recs {
			sk.ids = append(sk.ids, string(r.Value))
			sk.where[poKey{Partition: r.Partition, Offset: r.Offset}] = string(r.Value)
		}
		sk.feedMu.Unlock()
		sk.produced.Add(batch)
	}
}

// injectFaults injects one fault per so.FaultEvery, in turn: worker-kill
// (a different worker each time, at a different point), proxy-restart (the
// last sidecar, kill -9), broker-restart (when the cluster has three nodes
// and --kafka-script is given).
func (sk *soak) injectFaults(ctx context.Context) {
	p := sk.p
	points := []string{"staged", "committed", "polled"}
	kinds := []string{"worker-kill", "proxy-restart", "broker-restart"}
	for i := 0; ; i++ {
		if !sleepCtx(ctx, sk.so.FaultEvery) {
			return
		}
		kind := kinds[i%len(kinds)]
		at := time.Since(sk.t0).Round(time.Second)
		switch kind {
		case "worker-kill":
			s := p.slots[(i/len(kinds))%len(p.slots)]
			point := points[(i/len(kinds))%len(points)]
			if p.killWorkerAt(s, point, i%2 == 1, i+1) {
				sk.addFault("%s worker-kill %s (%s) at %q", at, s.label, s.lang, point)
			}
		case "proxy-restart":
			pp := p.proxy[len(p.proxy)-1]
			p.proxyKillOf(pp)
			sk.addFault("%s proxy-restart %s (now start %d)", at, pp.id, pp.starts)
		case "broker-restart":
			p.fault = "broker-restart"
			skip := p.skipReason()
			p.fault = "soak"
			if skip != "" {
				p.note("broker-restart skipped: %s", skip)
				continue
			}
			p.brokerRestart(context.Background())
			sk.addFault("%s broker-restart node %d", at, p.r.o.RestartNode)
		}
	}
}

func (sk *soak) addFault(format string, args ...any) {
	sk.smu.Lock()
	defer sk.smu.Unlock()
	sk.faults = append(sk.faults, fmt.Sprintf(format, args...))
}

func (sk *soak) sampleLoop(ctx context.Context) {
	t := time.NewTicker(sk.so.Sample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sk.sampleAll()
		}
	}
}

// sampleAll scrapes every live sidecar once and prints a line for each.
func (sk *soak) sampleAll() {
	p := sk.p
	distinct, _, _ := p.watch.Snapshot()
	in := sk.produced.Load()
	for _, pp := range p.proxy {
		if pp.p == nil || pp.p.Exited() {
			continue
		}
		m, err := sim.Scrape(pp.metrics, "")
		if err != nil {
			continue // restarting, or stopped: the next sample
		}
		k := [2]int{pp.idx, pp.starts}
		sk.smu.Lock()
		prev := sk.prev[k]
		sk.prev[k] = m
		s := soakSample{At: time.Since(sk.t0), Proxy: pp.idx, Start: pp.starts, Load: sk.loading.Load(), V: map[string]float64{}}
		for _, sm := range soakMetrics {
			s.V[sm.Key] = sm.of(m, prev)
		}
		sk.samples = append(sk.samples, s)
		sk.smu.Unlock()
		sk.printSample(s, in, int64(distinct))
	}
}

var soakColumns = []string{"rss_mib", "heap_mib", "goroutines", "conns", "fds", "held", "ranges", "known", "members", "groups", "txns", "sessions", "calls", "tail_lag", "applied_p99_ms"}

func (sk *soak) printHeader() {
	sk.p.r.say("soak samples: %s", "at  sidecar#start  in  out  "+strings.Join(soakColumns, "  "))
}

func (sk *soak) printSample(s soakSample, in, out int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s  %d#%d  in=%d out=%d", s.At.Round(time.Second), s.Proxy, s.Start, in, out)
	for _, c := range soakColumns {
		v := s.V[c]
		if math.IsNaN(v) {
			fmt.Fprintf(&b, " %s=-", c)
		} else {
			fmt.Fprintf(&b, " %s=%s", c, num(v))
		}
	}
	if !s.Load {
		b.WriteString(" (draining)")
	}
	sk.p.r.say("soak: %s", b.String())
}

// sleepCtx sleeps d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// WriteSoakJSON writes a soak's result to path (figures not known at a
// sample are left out of it).
func WriteSoakJSON(path string, res SoakResult) error {
	clean := make([]soakSample, len(res.Samples))
	for i, s := range res.Samples {
		s.V = maps.Clone(s.V)
		maps.DeleteFunc(s.V, func(_ string, v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
		clean[i] = s
	}
	res.Samples = clean
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSoakSummary prints the soak's verdict: the exactly-once counts, the
// faults injected, what grew, and PASS or FAIL.
func WriteSoakSummary(w io.Writer, res SoakResult, goal int) {
	fmt.Fprintln(w)
	WriteTable(w, []PhaseResult{res.PhaseResult})
	fmt.Fprintf(w, "inputs processed: %d (goal %d); samples: %d; faults injected: %d\n", res.Records, goal, len(res.Samples), len(res.Faults))
	for _, f := range res.Faults {
		fmt.Fprintf(w, "  fault at %s\n", f)
	}
	if c := res.Churn; c != nil {
		fmt.Fprintf(w, "churn: %d cycles (a new group, member and transactional id each), %d committed, %d failed\n", c.Cycles, c.Committed, c.Failed)
		for _, e := range c.Errors {
			fmt.Fprintf(w, "  churn failure at %s\n", e)
		}
	}
	if len(res.Growing) == 0 {
		fmt.Fprintln(w, "nothing kept growing")
	}
	for _, g := range res.Growing {
		fmt.Fprintf(w, "  GROWING %s\n", g)
	}
	word := "PASS"
	if !res.SoakPass {
		word = "FAIL"
	}
	fmt.Fprintf(w, "soak: %s\n", word)
}
