package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The scale-out section (issue 23, goal 4): N sidecars — separate sharetx
// processes, each with its own proxy id — in front of one cluster, each
// with one share-group exactly-once worker (txn mode) of one share group,
// at a fixed load per sidecar: the worker waits --scale-processing per
// record, so its rate does not depend on N. Over a measured window each
// sidecar's CPU, the bytes it moved for its worker, the TxnShareAcknowledge
// calls it staged and the records and bytes it read from the shadow topic
// are taken from its /proc and /metrics. A sidecar's cost should follow its
// own traffic, not the fleet's.

// scaleOutRun is one run of N sidecars.
type scaleOutRun struct {
	Sidecars int     `json:"sidecars"`
	Round    int     `json:"round"`
	Seconds  float64 `json:"seconds"` // the measured window
	// GroupStagedSec: TxnShareAcknowledge calls staged per second by the
	// whole fleet (the sum of the sidecars').
	GroupStagedSec float64         `json:"group_staged_calls_per_s"`
	PerSidecar     []sidecarCost   `json:"per_sidecar"`
	Pipeline       *pipelineResult `json:"pipeline"` // the workers together, checked exactly-once
}

// sidecarCost is what one sidecar did and spent over the measured window.
type sidecarCost struct {
	CPUMillicores  float64 `json:"cpu_millicores"`
	MBSec          float64 `json:"mb_per_s"` // request + response bytes it moved for its worker
	StagedSec      float64 `json:"staged_calls_per_s"`
	ShadowRecsSec  float64 `json:"shadow_read_records_per_s"`
	ShadowBytesSec float64 `json:"shadow_read_bytes_per_s"`
}

// MillicoresPerMBs is the sidecar's CPU per unit of its own traffic.
func (c sidecarCost) MillicoresPerMBs() float64 { return c.CPUMillicores / c.MBSec }

// ShadowBytesPerCall is what the sidecar read of the shadow topic per call
// it staged itself: 1 call's record and marker when it reads only its own.
func (c sidecarCost) ShadowBytesPerCall() float64 { return c.ShadowBytesSec / c.StagedSec }

func costOver(a, b usage) sidecarCost {
	d := b.at.Sub(a.at).Seconds()
	per := func(name string) float64 { return (b.scrape.sum(name) - a.scrape.sum(name)) / d }
	ok := `sharetx_txn_share_acknowledge_total{result="ok"}`
	return sidecarCost{
		CPUMillicores:  (b.cpu.Total() - a.cpu.Total()) / d * 1000,
		MBSec:          (b.bytes - a.bytes) / d / 1e6,
		StagedSec:      (b.scrape[ok] - a.scrape[ok]) / d,
		ShadowRecsSec:  per("sharetx_shadow_read_records_total"),
		ShadowBytesSec: per("sharetx_shadow_read_bytes_total"),
	}
}

// scaleOutInput is the section's input topic: enough records for the
// largest fleet's workers over a whole run, read from the start by every
// run's new group.
func (b *bench) scaleOutInput(ctx context.Context) (string, error) {
	o := b.o
	largest := slices.Max(o.ScaleOutSidecars)
	perWorker := float64(time.Second) / float64(max(o.ScaleProc, 100*time.Microsecond)) // records/s at most
	n := int(float64(largest)*perWorker*(o.ScaleOutWarm+o.ScaleOutDur+10*time.Second).Seconds()) + 1000
	in := b.topic("scaleout-in")
	if err := b.createTopic(ctx, in); err != nil {
		return "", err
	}
	b.progress("scale-out input: %d records of %d B into %s (%d partitions)", n, o.RecordSize, in, o.Partitions)
	if _, err := franzProduce(ctx, b.direct, in, n, o.RecordSize); err != nil {
		return "", err
	}
	return in, nil
}

func (b *bench) scaleOut(ctx context.Context) {
	o := b.o
	in, err := b.scaleOutInput(ctx)
	if err != nil {
		b.fail("scale-out input", err)
		return
	}
	b.progress("scale-out: %d round(s) of %v sidecars (one sharetx process each, one txn worker each, one share group); %s of waiting per record, transactions of %d; %s measured after %s of warm-up",
		o.ScaleOutRounds, o.ScaleOutSidecars, o.ScaleProc, o.ScaleBatch, o.ScaleOutDur, o.ScaleOutWarm)
	for round := 0; round < o.ScaleOutRounds; round++ {
		for _, n := range rotated(o.ScaleOutSidecars, round) {
			if ctx.Err() != nil {
				return
			}
			r, err := b.scaleOutRun(ctx, in, n, round)
			if err != nil {
				b.fail(fmt.Sprintf("scale-out %d sidecars round %d", n, round+1), err)
				continue
			}
			b.res.ScaleOut = append(b.res.ScaleOut, r)
			b.progress("scale-out round %d: %s", round+1, describeScaleOut(r))
		}
	}
}

// scaleOutRun starts n sidecars, runs one worker through each until the
// measured window is over, takes every sidecar's cost over the window,
// checks the outputs exactly-once and stops the sidecars.
func (b *bench) scaleOutRun(ctx context.Context, in string, n, round int) (*scaleOutRun, error) {
	o := b.o
	runN, out, err := b.runOutput(ctx)
	if err != nil {
		return nil, err
	}
	defer b.dropTopic(out)
	group := fmt.Sprintf("bench-scaleout-%s-%d", b.suffix, runN)
	if err := shareFromEarliest(ctx, b.admin, group); err != nil {
		return nil, err
	}
	sidecars := make([]*proxyProc, n)
	defer func() {
		var wg sync.WaitGroup
		for _, sc := range sidecars {
			if sc != nil {
				wg.Add(1)
				go func() { defer wg.Done(); sc.stop() }()
			}
		}
		wg.Wait()
	}()
	bss := make([]string, n)
	for i := range sidecars {
		name := fmt.Sprintf("scaleout-%d-of-%d-r%d", i+1, n, runN)
		if sidecars[i], err = startProxy(b.bin, o.Seeds, b.dir, name, o.ProxyLog, time.Minute); err != nil {
			return nil, fmt.Errorf("sidecar %d: %w (log %s)", i+1, err, filepath.Join(b.dir, name+".log"))
		}
		if b.pin != nil {
			if err := taskset(sidecars[i].pid(), b.pin.proxyCPUs); err != nil {
				return nil, err
			}
		}
		bss[i] = sidecars[i].bootstrap
	}

	var over atomic.Bool
	type window struct {
		before, after []usage
		err           error
	}
	measured := make(chan window, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer over.Store(true)
		w := window{}
		// The window opens once every sidecar staged a call (every worker
		// joined and committed) and the warm-up passed.
		for {
			all := true
			for _, sc := range sidecars {
				m, err := sc.scrape()
				if err != nil || m[`sharetx_txn_share_acknowledge_total{result="ok"}`] == 0 {
					all = false
					break
				}
			}
			if all {
				break
			}
			select {
			case <-wctx.Done():
				w.err = fmt.Errorf("not every sidecar staged a call: %w", wctx.Err())
				measured <- w
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		snap := func() ([]usage, error) {
			us := make([]usage, n)
			for i, sc := range sidecars {
				var err error
				if us[i], err = sc.usage(); err != nil {
					return nil, fmt.Errorf("sidecar %d: %w", i+1, err)
				}
			}
			return us, nil
		}
		for _, step := range []struct {
			wait time.Duration
			to   *[]usage
		}{{o.ScaleOutWarm, &w.before}, {o.ScaleOutDur, &w.after}} {
			select {
			case <-wctx.Done():
				w.err = wctx.Err()
				measured <- w
				return
			case <-time.After(step.wait):
			}
			if *step.to, w.err = snap(); w.err != nil {
				measured <- w
				return
			}
		}
		measured <- w
	}()
	limit := o.ScaleOutWarm + o.ScaleOutDur + time.Minute
	pr, err := runPipeline(ctx, pipelineOpts{mode: modeTxn, in: in, out: out, group: group, batch: o.ScaleBatch, workers: n, partitions: o.Partitions,
		proc: o.ScaleProc, target: math.MaxInt64, maxDur: limit, strict: true, workerBS: bss, stop: over.Load})
	cancel()
	w := <-measured
	if err != nil {
		return nil, err
	}
	if w.err != nil {
		return nil, fmt.Errorf("measuring: %w", w.err)
	}
	pr.Partitions, pr.Round = o.Partitions, round
	r := &scaleOutRun{Sidecars: n, Round: round, Seconds: w.after[0].at.Sub(w.before[0].at).Seconds(), Pipeline: pr}
	for i := range sidecars {
		c := costOver(w.before[i], w.after[i])
		r.PerSidecar = append(r.PerSidecar, c)
		r.GroupStagedSec += c.StagedSec
		if !sidecars[i].alive() {
			return r, fmt.Errorf("sidecar %d exited: %v (see %s)", i+1, sidecars[i].Err(), sidecars[i].logPath)
		}
	}
	return r, verify(ctx, b.direct, out, pr)
}

// perSidecar is the median over a run's sidecars of f.
func (r *scaleOutRun) perSidecar(f func(sidecarCost) float64) spread {
	xs := make([]float64, len(r.PerSidecar))
	for i, c := range r.PerSidecar {
		xs[i] = f(c)
	}
	return spreadOf(xs)
}

func describeScaleOut(r *scaleOutRun) string {
	s := fmt.Sprintf("%d sidecar(s), %.1fs measured: group %.1f staged calls/s; per sidecar (median [min–max]) CPU %s millicores, %s MB/s moved, %s staged calls/s, shadow read %s records/s and %s kB/s (%s B per own call)",
		r.Sidecars, r.Seconds, r.GroupStagedSec,
		r.perSidecar(func(c sidecarCost) float64 { return c.CPUMillicores }).format(f0),
		r.perSidecar(func(c sidecarCost) float64 { return c.MBSec }).format(f2),
		r.perSidecar(func(c sidecarCost) float64 { return c.StagedSec }).format(f1),
		r.perSidecar(func(c sidecarCost) float64 { return c.ShadowRecsSec }).format(f1),
		r.perSidecar(func(c sidecarCost) float64 { return c.ShadowBytesSec / 1e3 }).format(f1),
		r.perSidecar(sidecarCost.ShadowBytesPerCall).format(f0))
	if p := r.Pipeline; p != nil && p.Verified {
		s += fmt.Sprintf("; exactly-once: %d outputs for %d inputs, 0 duplicates, 0 lost", p.Outputs, p.Records)
	}
	return s
}

// scaleOutGrowth is, per round, the median sidecar's f at the largest fleet
// over the median sidecar's f at the smallest, and the spread of that over
// the rounds.
func scaleOutGrowth(runs []*scaleOutRun, f func(sidecarCost) float64) (spread, int, int) {
	if len(runs) == 0 {
		return spreadOf(nil), 0, 0
	}
	lo, hi := runs[0].Sidecars, runs[0].Sidecars
	for _, r := range runs {
		lo, hi = min(lo, r.Sidecars), max(hi, r.Sidecars)
	}
	if lo == hi {
		return spreadOf(nil), lo, hi
	}
	at := func(round, n int) float64 {
		for _, r := range runs {
			if r.Round == round && r.Sidecars == n {
				return r.perSidecar(f).Median
			}
		}
		return math.NaN()
	}
	var xs []float64
	for round := 0; ; round++ {
		if !slices.ContainsFunc(runs, func(r *scaleOutRun) bool { return r.Round == round }) {
			break
		}
		xs = append(xs, at(round, hi)/at(round, lo))
	}
	return spreadOf(xs), lo, hi
}

// scaleOutGoals are goal 4 of issue 23: a sidecar's CPU per unit of its own
// traffic, and what it reads of the shadow topic per call of its own, grow
// by at most 10 % from the smallest fleet to the largest.
func scaleOutGoals(r *Results) []goal {
	var gs []goal
	for _, m := range []struct {
		name, what string
		f          func(sidecarCost) float64
	}{
		{"scaleout_cpu_per_own_MBps_growth", "CPU millicores per MB/s of the sidecar's own traffic", sidecarCost.MillicoresPerMBs},
		{"scaleout_shadow_bytes_per_own_call_growth", "shadow-topic bytes read per TxnShareAcknowledge call the sidecar staged itself", sidecarCost.ShadowBytesPerCall},
	} {
		s, lo, hi := scaleOutGrowth(r.ScaleOut, m.f)
		g := mkGoal(m.name, s.Median, 1.1, "x", false, "no scale-out runs of two fleet sizes")
		if s.N > 0 {
			addContext(&g, "%s, median sidecar at %d sidecars over at %d, per round, median of %d rounds: %s", m.what, hi, lo, s.N, s.format(times1))
			judged(&g, s, 1)
		}
		gs = append(gs, g)
	}
	return gs
}

// writeScaleOutTable prints the scale-out runs, medians over rounds of the
// per-run medians over sidecars.
func writeScaleOutTable(w io.Writer, r *Results) {
	if len(r.ScaleOut) == 0 {
		return
	}
	o := r.Options
	fmt.Fprintf(w, "\nscale-out: N sidecars (one sharetx process each) with one txn worker each, one share group, %.0f ms of waiting per record, transactions of %d; per sidecar: the median sidecar, median of %d round(s)\n",
		float64(o.ScaleProc)/float64(time.Millisecond), o.ScaleBatch, o.ScaleOutRounds)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sidecars\tgroup staged calls/s\tCPU millicores\tMB/s moved\tmillicores per MB/s\tstaged calls/s\tshadow records read/s\tshadow kB read/s\tshadow B read per own call\t")
	sizes := slices.Clone(o.ScaleOutSidecars)
	slices.Sort(sizes)
	for _, n := range slices.Compact(sizes) {
		var runs []*scaleOutRun
		for _, x := range r.ScaleOut {
			if x.Sidecars == n {
				runs = append(runs, x)
			}
		}
		if len(runs) == 0 {
			continue
		}
		med := func(f func(sidecarCost) float64) float64 {
			xs := make([]float64, len(runs))
			for i, x := range runs {
				xs[i] = x.perSidecar(f).Median
			}
			return spreadOf(xs).Median
		}
		gs := make([]float64, len(runs))
		for i, x := range runs {
			gs[i] = x.GroupStagedSec
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, f1(spreadOf(gs).Median),
			f0(med(func(c sidecarCost) float64 { return c.CPUMillicores })), f2(med(func(c sidecarCost) float64 { return c.MBSec })),
			f1(med(sidecarCost.MillicoresPerMBs)), f1(med(func(c sidecarCost) float64 { return c.StagedSec })),
			f1(med(func(c sidecarCost) float64 { return c.ShadowRecsSec })), f1(med(func(c sidecarCost) float64 { return c.ShadowBytesSec / 1e3 })),
			f0(med(sidecarCost.ShadowBytesPerCall)))
	}
	tw.Flush()
	fmt.Fprintln(w, eosChecked(pipelinesOf(r.ScaleOut), func(*pipelineResult) bool { return true }))
}

func pipelinesOf(runs []*scaleOutRun) []*pipelineResult {
	var ps []*pipelineResult
	for _, r := range runs {
		if r.Pipeline != nil {
			ps = append(ps, r.Pipeline)
		}
	}
	return ps
}
