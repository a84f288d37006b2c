package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The soak's figures and the test that none of them keeps growing.

// soakSample is one scrape of one sidecar.
type soakSample struct {
	At    time.Duration      `json:"at"`    // since the soak started
	Proxy int                `json:"proxy"` // 1-based
	Start int                `json:"start"` // the sidecar's incarnation (1: never restarted)
	Load  bool               `json:"load"`  // taken while the inputs were being produced (not while draining)
	V     map[string]float64 `json:"v"`     // soakMetric.Key → value (NaN: not known at this sample)
}

// soakMetric is one watched figure and how much it may grow: the projected
// growth over the judged window must stay within max(Rel × its median, Abs).
type soakMetric struct {
	Key, Title string
	Rel, Abs   float64
	// of computes the figure from a scrape (prev: the same incarnation's
	// previous scrape, nil for its first).
	of func(m, prev map[string]float64) float64
}

const mib = 1 << 20

func gauge(name string) func(m, _ map[string]float64) float64 {
	return func(m, _ map[string]float64) float64 {
		if v, ok := m[name]; ok {
			return v
		}
		return math.NaN()
	}
}

func entries(kind string) func(m, _ map[string]float64) float64 {
	return gauge(`sharetx_ledger_entries{kind="` + kind + `"}`)
}

// soakMetrics are the figures make soak samples, in the order of its table.
var soakMetrics = []soakMetric{
	{"rss_mib", "RSS (MiB)", 0.25, 32, func(m, _ map[string]float64) float64 { return gauge("process_resident_memory_bytes")(m, nil) / mib }},
	{"heap_mib", "Go heap in use (MiB)", 0.25, 16, func(m, _ map[string]float64) float64 { return gauge("go_memstats_heap_inuse_bytes")(m, nil) / mib }},
	{"goroutines", "goroutines", 0.25, 40, gauge("go_goroutines")},
	{"conns", "client connections", 0.5, 20, func(m, _ map[string]float64) float64 { return sumPrefix(m, "sharetx_client_connections_active") }},
	{"fds", "open fds", 0.25, 40, gauge("process_open_fds")},
	{"held", "held offsets", 0.5, 5000, entries("held_offsets")},
	{"ranges", "acquired ranges", 0.5, 2000, entries("acquired_ranges")},
	{"owed", "owed acks", 0.5, 2000, entries("owed_acks")},
	{"known", "known shadow records", 0.5, 2000, entries("known_records")},
	{"members", "members", 0.5, 10, entries("members")},
	{"groups", "groups", 0.5, 10, entries("groups")},
	{"txns", "transactions", 0.5, 10, entries("transactions")},
	{"sessions", "share sessions", 0.5, 10, gauge("sharetx_share_sessions")},
	{"calls", "open staged calls", 0.5, 50, gauge("sharetx_staged_calls_open")},
	{"pending", "TX_PENDING records", 0.5, 5000, gauge("sharetx_tx_pending_records")},
	{"tail_lag", "shadow tail lag (records)", 1, 20000, gauge("sharetx_shadow_tail_lag_records")},
	{"applied_p99_ms", "commit→applied p99 (ms)", 1, 1000, func(m, prev map[string]float64) float64 {
		return histQuantile(m, prev, "sharetx_commit_to_applied_seconds", 0.99) * 1000
	}},
}

// keptFor: when owners churn (the soak's churner), how long a sidecar keeps
// what it learned of one after it is gone (staging/learn.go: a member 3
// minutes after its last heartbeat, its group's readers with it, a
// transactional id 16 minutes after its last use, pruned every 30 s), with a
// margin; such a figure grows until the first owners are forgotten, so it is
// judged only after that.
var keptFor = map[string]time.Duration{
	"members": 5 * time.Minute,
	"groups":  5 * time.Minute,
	"txns":    18 * time.Minute,
}

// sumPrefix sums the series of one metric (every label set).
func sumPrefix(m map[string]float64, name string) float64 {
	sum, found := 0.0, false
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum, found = sum+v, true
		}
	}
	if !found {
		return math.NaN()
	}
	return sum
}

// histQuantile is the q-quantile of histogram name over the interval from
// prev to m (the upper bound of the first bucket that holds it); NaN when
// nothing was observed in it or prev is nil.
func histQuantile(m, prev map[string]float64, name string, q float64) float64 {
	if prev == nil {
		return math.NaN()
	}
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range m {
		rest, ok := strings.CutPrefix(k, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v - prev[k]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n <= 0 {
		return math.NaN()
	}
	want := q * bs[len(bs)-1].n
	for _, b := range bs {
		if b.n >= want {
			return b.le
		}
	}
	return math.Inf(1)
}

// growthRow is the verdict on one figure of one sidecar incarnation.
type growthRow struct {
	Proxy, Start  int
	Metric        string
	Samples       int
	Span          time.Duration
	First, Last   float64 // medians of the first and last third of the samples
	Slope         float64 // per minute, least squares
	Growth        float64 // projected over the span: Slope × span
	Threshold     float64
	Growing       bool
	NotJudgedWhy  string
	MinSamplesFor int
}

// minGrowthSamples is how many samples (after the warm-up) an incarnation
// needs to be judged.
const minGrowthSamples = 6

// judgeGrowth tests every figure of every sidecar incarnation: after warmUp
// (counted from that incarnation's first sample; when churn, after the
// figure's keptFor if longer), over the samples taken
// under load, a figure grows when its least-squares slope projected over the
// window exceeds max(Rel × median, Abs) and the median of the last third is
// above the first third's by more than half that. Incarnations with fewer
// than minGrowthSamples samples are listed, not judged.
func judgeGrowth(samples []soakSample, warmUp time.Duration, churn bool) []growthRow {
	type inc struct{ proxy, start int }
	var order []inc
	by := map[inc][]soakSample{}
	for _, s := range samples {
		k := inc{s.Proxy, s.Start}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], s)
	}
	var rows []growthRow
	for _, k := range order {
		ss := by[k]
		first := ss[0].At
		for _, m := range soakMetrics {
			row := growthRow{Proxy: k.proxy, Start: k.start, Metric: m.Key, MinSamplesFor: minGrowthSamples}
			skip, what := warmUp, "the warm-up"
			if kept := keptFor[m.Key]; churn && kept > skip {
				skip, what = kept, "the time churned owners are kept ("+kept.String()+")"
			}
			var xs, ys []float64
			for _, s := range ss {
				if v, ok := s.V[m.Key]; ok && s.Load && s.At-first >= skip && !math.IsNaN(v) && !math.IsInf(v, 0) {
					xs, ys = append(xs, s.At.Minutes()), append(ys, v)
				}
			}
			row.Samples = len(ys)
			if len(ys) < minGrowthSamples {
				row.NotJudgedWhy = fmt.Sprintf("%d samples after %s, %d needed", len(ys), what, minGrowthSamples)
				rows = append(rows, row)
				continue
			}
			row.Span = time.Duration((xs[len(xs)-1] - xs[0]) * float64(time.Minute))
			third := max(1, len(ys)/3)
			row.First, row.Last = median(ys[:third]), median(ys[len(ys)-third:])
			row.Slope = slope(xs, ys)
			row.Growth = row.Slope * row.Span.Minutes()
			row.Threshold = max(m.Rel*median(ys), m.Abs)
			row.Growing = row.Growth > row.Threshold && row.Last-row.First > row.Threshold/2
			rows = append(rows, row)
		}
	}
	return rows
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// slope is the least-squares slope of ys against xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// writeGrowth prints the growth test's table: every judged figure with its
// threshold, then the incarnations too short to judge.
func writeGrowth(w io.Writer, rows []growthRow) (growing int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sidecar\tstart\tfigure\tsamples\tspan\tfirst third\tlast third\tslope/min\tgrowth\tthreshold\tverdict\t")
	var short []string
	figures := map[string][]string{}
	for _, r := range rows {
		if r.NotJudgedWhy != "" {
			// One line per incarnation and reason, naming its figures.
			k := fmt.Sprintf("sidecar %d start %d: %s", r.Proxy, r.Start, r.NotJudgedWhy)
			if _, ok := figures[k]; !ok {
				short = append(short, k)
			}
			figures[k] = append(figures[k], r.Metric)
			continue
		}
		verdict := "flat"
		if r.Growing {
			verdict = "GROWING"
			growing++
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Proxy, r.Start, r.Metric, r.Samples, r.Span.Round(time.Second),
			num(r.First), num(r.Last), num(r.Slope), num(r.Growth), num(r.Threshold), verdict)
	}
	tw.Flush()
	for _, s := range short {
		what := strings.Join(figures[s], ", ")
		if len(figures[s]) == len(soakMetrics) {
			what = "every figure"
		}
		fmt.Fprintf(w, "  not judged: %s (%s)\n", s, what)
	}
	return growing
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}
