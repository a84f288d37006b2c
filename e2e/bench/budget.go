package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The per-transaction time budget of a pipeline run: where a transaction's
// time goes, so that the gap between two modes is explained by numbers.
//
//   - the loop's own phases, timed in the worker: waiting for records (the
//     poll that returned them), producing the outputs (first Produce to the
//     end of Flush), staging (the TxnShareAcknowledge call; the consumer
//     group stages its offsets inside End), committing (EndTxn; the
//     consumer group's whole End: flush, AddOffsetsToTxn, TxnOffsetCommit,
//     EndTxn);
//   - every request the run's clients sent, by API key, from kgo's
//     HookBrokerE2E (write to response read): how many per transaction and
//     how long. An EndTxn retried on CONCURRENT_TRANSACTIONS shows as more
//     than one EndTxn per transaction; a transactional Produce that met the
//     broker's own 20 ms CONCURRENT_TRANSACTIONS retry (transaction version
//     2 adds partitions inside the Produce) cannot be told apart on the
//     client, so produces of 20 ms or more are counted;
//   - on the proxy's side (modes through it): client ShareFetch and
//     ShareAcknowledge requests waiting for their share session while the
//     proxy's own request held it, the proxy's work on ShareFetch and
//     ShareAcknowledge requests (the client-ack filter) and on ShareFetch
//     responses (learning acquisitions, screening), and commit → applied.

// budgetItem is one line of a budget: per transaction, how many (1 for a
// phase) and the p50 / p99 of one.
type budgetItem struct {
	PerTxn float64 `json:"per_txn"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// A CPU line ("cpu: …"): the process's CPU per input record, in
	// microseconds; PerTxn is then its CPU per transaction, in ms.
	PerRecordUs float64 `json:"per_record_us,omitempty"`
}

// cpuPrefix starts the budget lines of the CPU the run took, per process.
const cpuPrefix = "cpu: "

// cpuBudget adds to b the CPU each process took between before and after
// (seconds, by process name), per transaction and per input record.
func cpuBudget(b map[string]budgetItem, before, after map[string]float64, txns, records int64) {
	if txns == 0 || records == 0 {
		return
	}
	for name, t1 := range after {
		t0, ok := before[name]
		if !ok || t1 < t0 {
			continue
		}
		d := t1 - t0
		b[cpuPrefix+name] = budgetItem{PerTxn: d * 1000 / float64(txns), PerRecordUs: d * 1e6 / float64(records)}
	}
}

// reqTimer collects the round trips of a run's clients by API key.
type reqTimer struct {
	mu sync.Mutex
	d  map[int16][]float64 // seconds
}

var _ kgo.HookBrokerE2E = (*reqTimer)(nil)

func newReqTimer() *reqTimer { return &reqTimer{d: map[int16][]float64{}} }

func (t *reqTimer) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if e.WriteErr != nil || e.ReadErr != nil {
		return
	}
	t.mu.Lock()
	t.d[key] = append(t.d[key], e.DurationE2E().Seconds())
	t.mu.Unlock()
}

// budgetKeys are the API keys a budget lists, in its order (the
// TxnShareAcknowledge key is added by name).
var budgetKeys = []kmsg.Key{kmsg.ShareFetch, kmsg.ShareAcknowledge, kmsg.Fetch, kmsg.Produce,
	kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.EndTxn}

// slowProduce is the bound from which a Produce counts as slow: the broker's
// own CONCURRENT_TRANSACTIONS retry waits 20 ms.
const slowProduce = 20 * time.Millisecond

func itemOf(xs []float64, txns int64) budgetItem {
	if len(xs) == 0 || txns == 0 {
		return budgetItem{}
	}
	return budgetItem{PerTxn: float64(len(xs)) / float64(txns),
		P50Ms: sampleQuantile(0.5, xs) * 1000, P99Ms: sampleQuantile(0.99, xs) * 1000}
}

// clientBudget is the run's client side: the loop's phases and the requests.
func (p *pipeRun) clientBudget(txnKey int16) map[string]budgetItem {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.txns.Load()
	b := map[string]budgetItem{}
	set := func(name string, xs []float64) {
		if it := itemOf(xs, n); it.PerTxn > 0 {
			b[name] = it
		}
	}
	set("wait for records", p.pollLat)
	set("produce outputs", p.produceLat)
	set("stage (TxnShareAcknowledge)", p.ackLat)
	if p.o.mode == modeGroupEOS {
		set("End (flush, offsets, EndTxn)", p.end)
	} else {
		set("EndTxn", p.end)
	}
	p.reqs.mu.Lock()
	defer p.reqs.mu.Unlock()
	for _, k := range budgetKeys {
		set("req "+kmsg.NameForKey(int16(k)), p.reqs.d[int16(k)])
	}
	set("req TxnShareAcknowledge", p.reqs.d[txnKey])
	var slow []float64
	for _, d := range p.reqs.d[int16(kmsg.Produce)] {
		if d >= slowProduce.Seconds() {
			slow = append(slow, d)
		}
	}
	set(fmt.Sprintf("req Produce ≥ %d ms", slowProduce.Milliseconds()), slow)
	return b
}

// proxyBudget adds the proxy's side of a run to b: the deltas of its
// histograms between two scrapes, per transaction of the run.
func proxyBudget(b map[string]budgetItem, before, after metrics, txns int64) {
	if txns == 0 {
		return
	}
	add := func(name, hist string, labels ...string) {
		d := deltaBuckets(before.histogramWhere(hist, labels...), after.histogramWhere(hist, labels...))
		if len(d) == 0 || d[len(d)-1].Count == 0 {
			return
		}
		it := budgetItem{PerTxn: d[len(d)-1].Count / float64(txns), P50Ms: bucketQuantile(0.5, d) * 1000, P99Ms: bucketQuantile(0.99, d) * 1000}
		b[name] = it
	}
	add("proxy: share-session wait", "sharetx_share_session_wait_seconds")
	add("proxy: ShareFetch request work", "sharetx_intercept_seconds", `api="ShareFetch"`, `direction="request"`)
	add("proxy: ShareFetch response work", "sharetx_intercept_seconds", `api="ShareFetch"`, `direction="response"`)
	add("proxy: ShareAcknowledge request work", "sharetx_intercept_seconds", `api="ShareAcknowledge"`, `direction="request"`)
	add("proxy: Produce request work", "sharetx_intercept_seconds", `api="Produce"`, `direction="request"`)
	add("proxy: commit → applied", "sharetx_commit_to_applied_seconds")
	add("proxy: stage: validate", "sharetx_stage_seconds", `phase="validate"`)
	add("proxy: stage: wait for the outputs' Produce", "sharetx_stage_seconds", `phase="wait_produce"`)
	add("proxy: stage: the Produce it rode in", "sharetx_stage_seconds", `phase="write_rode"`)
	add("proxy: stage: shadow write of its own", "sharetx_stage_seconds", `phase="write_own"`)
	for _, path := range []string{"rode", "own"} {
		series := `sharetx_shadow_writes_total{path="` + path + `"}`
		if n := after[series] - before[series]; n > 0 {
			b["proxy: shadow records "+map[string]string{"rode": "riding the outputs' Produce", "own": "written on their own"}[path]] = budgetItem{PerTxn: n / float64(txns)}
		}
	}
	const missPrefix = `sharetx_ride_misses_total{reason="`
	for series := range after { // every reason the proxy counted (staging's Miss constants)
		reason, ok := strings.CutPrefix(series, missPrefix)
		if !ok {
			continue
		}
		if n := after[series] - before[series]; n > 0 {
			b["proxy: ride missed: "+strings.TrimSuffix(reason, `"}`)] = budgetItem{PerTxn: n / float64(txns)}
		}
	}
	for _, outcome := range []string{"completed", "expired", "aborted"} {
		series := `sharetx_batch_holds_total{outcome="` + outcome + `"}`
		if n := after[series] - before[series]; n > 0 {
			b["proxy: part-batch holds "+outcome] = budgetItem{PerTxn: n / float64(txns)}
		}
	}
	for _, path := range []string{"fetch", "request"} {
		series := `sharetx_own_acknowledgements_total{path="` + path + `"}`
		if n := after[series] - before[series]; n > 0 {
			b["proxy: own acks "+map[string]string{"fetch": "riding the member's ShareFetch", "request": "in a ShareAcknowledge of their own"}[path]] = budgetItem{PerTxn: n / float64(txns)}
		}
	}
}

// countRow: a budget line that counts per transaction and times nothing.
func countRow(name string) bool {
	return strings.HasPrefix(name, "proxy: shadow records") || strings.HasPrefix(name, "proxy: own acks") || strings.HasPrefix(name, "proxy: ride missed") ||
		strings.HasPrefix(name, "proxy: part-batch holds")
}

// histogramWhere is histogram for the series of name whose labels include
// every one of labels (`api="ShareFetch"`), summed bucket by bucket.
func (m metrics) histogramWhere(name string, labels ...string) []bucket {
	sub := metrics{}
	for k, v := range m {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if !ok {
			continue
		}
		j := strings.Index(k, `le="`)
		if j < 0 {
			continue
		}
		le := k[j:]
		if e := strings.IndexByte(le[4:], '"'); e >= 0 {
			le = le[:4+e+1]
		}
		sub[name+"_bucket{"+le+"}"] += v
	}
	return sub.histogram(name)
}

// budgetModes are the modes a budget table lists, in its columns' order.
var budgetModes = []string{modeGroupEOS, modeKafkaTxnDirect, modeKafkaTxn, modeTxn, modeTxnSeq}

// budgetModesOf are the budget's columns among the modes run.
func budgetModesOf(run []string) []string {
	var out []string
	for _, m := range budgetModes {
		if slices.Contains(run, m) {
			out = append(out, m)
		}
	}
	return out
}

// writeBudget prints, per transaction size, the median over the rounds of
// every budget line, p50 / p99 in ms and (for requests) how many per
// transaction, one column per mode.
func writeBudget(w io.Writer, runs []*pipelineResult, batches []int, modes []string) {
	var names []string
	for _, r := range runs {
		for n := range r.Budget {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	slices.SortFunc(names, func(a, b string) int { // by rank, then by name: the same order every run
		if d := budgetRank(a) - budgetRank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintln(w, "\nper-transaction time budget: p50 / p99 ms (× per transaction, for requests), medians of the rounds")
	for _, batch := range batches {
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "transactions of %d\t%s\t\n", batch, strings.Join(modes, "\t"))
		for _, n := range names {
			line := n
			any := false
			for _, m := range modes {
				it, ok := medianItem(runs, m, batch, n)
				cell := "–"
				if ok {
					any = true
					switch {
					case strings.HasPrefix(n, cpuPrefix):
						cell = fmt.Sprintf("%s µs/rec, %s ms/txn", f2(it.PerRecordUs), f2(it.PerTxn))
					case countRow(n):
						cell = fmt.Sprintf("×%s", f2(it.PerTxn)) // a count, no time
					case strings.HasPrefix(n, "req ") || strings.HasPrefix(n, "proxy:"):
						cell = fmt.Sprintf("%s / %s ×%s", f2(it.P50Ms), f2(it.P99Ms), f2(it.PerTxn))
					default:
						cell = fmt.Sprintf("%s / %s", f2(it.P50Ms), f2(it.P99Ms))
					}
				}
				line += "\t" + cell
			}
			if any {
				fmt.Fprintln(tw, line+"\t")
			}
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "(the loop's phases are timed in the worker; req: every request of the run's clients, write to response, kgo's HookBrokerE2E — an EndTxn retried on CONCURRENT_TRANSACTIONS counts twice, a Produce ≥ 20 ms met the broker's 20 ms AddPartitionsToTxn retry or a busy broker (docs/benchmarks.md: on 2 cores a 2 ms retry left their share unchanged); proxy: its histograms' deltas over the run; cpu: each process's user+system CPU over the run from /proc, per input record and per transaction — the bench process holds the Go pipelines' clients, a java or python process line is that program's whole run, its start-up included, its loop line the program's own count from the first record to the last commit; on a saturated machine the modes' throughputs follow the sum of these lines)")
}

// budgetRank orders a budget's lines: the phases in a transaction's
// order, the requests, the proxy.
func budgetRank(name string) int {
	switch {
	case strings.HasPrefix(name, "req "):
		return 10
	case strings.HasPrefix(name, "proxy:"):
		return 11
	case strings.HasPrefix(name, cpuPrefix):
		return 12
	}
	for i, p := range []string{"wait for records", "send outputs", "produce outputs", "stage", "End"} {
		if strings.HasPrefix(name, p) {
			return i
		}
	}
	return 5
}

// medianItem is the median over the rounds of mode at batch of one line.
func medianItem(runs []*pipelineResult, mode string, batch int, name string) (budgetItem, bool) {
	var its []budgetItem
	for _, r := range runs {
		if r.Mode == mode && r.Batch == batch {
			if it, ok := r.Budget[name]; ok {
				its = append(its, it)
			}
		}
	}
	if len(its) == 0 {
		return budgetItem{}, false
	}
	med := func(f func(budgetItem) float64) float64 {
		xs := make([]float64, len(its))
		for i, it := range its {
			xs[i] = f(it)
		}
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	it := budgetItem{PerTxn: med(func(i budgetItem) float64 { return i.PerTxn }),
		P50Ms: med(func(i budgetItem) float64 { return i.P50Ms }), P99Ms: med(func(i budgetItem) float64 { return i.P99Ms }),
		PerRecordUs: med(func(i budgetItem) float64 { return i.PerRecordUs })}
	if math.IsNaN(it.P50Ms) || it.PerTxn == 0 {
		return budgetItem{}, false
	}
	return it, true
}
