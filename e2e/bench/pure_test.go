package main

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The proxy's CPU and memory come from prometheus/procfs: for this very
// process they are there, consistent with the kernel's own accounting
// (getrusage). The test spins until getrusage says 100 ms of CPU were used,
// however long a loaded machine takes to give them, so it does not depend on
// timing.
func TestReadProcOfSelf(t *testing.T) {
	cpu := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	for deadline := time.Now().Add(time.Minute); cpu() < 0.1; {
		if time.Now().After(deadline) {
			t.Skip("no 100 ms of CPU within a minute: the machine is starved")
		}
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	c, err := readProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in clock ticks (10 ms); getrusage more finely.
	if c.User < 0 || c.System < 0 || c.Total() < 0.1-0.03 || c.Total() > cpu()+0.03 {
		t.Errorf("CPU from /proc %+v, getrusage %.3f s", c, cpu())
	}
	m, err := readProcMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var rt runtime.MemStats
	runtime.ReadMemStats(&rt)
	if m.RSS <= 0 || m.HWM < m.RSS || uint64(m.RSS) < rt.HeapInuse/2 {
		t.Errorf("memory %+v, heap in use %d", m, rt.HeapInuse)
	}
	if _, err := readProcCPU(-1); err == nil {
		t.Error("pid -1: no error")
	}
}

const histText = `# HELP sharetx_commit_to_applied_seconds x
# TYPE sharetx_commit_to_applied_seconds histogram
sharetx_commit_to_applied_seconds_bucket{le="0.001"} %d
sharetx_commit_to_applied_seconds_bucket{le="0.01"} %d
sharetx_commit_to_applied_seconds_bucket{le="0.1"} %d
sharetx_commit_to_applied_seconds_bucket{le="+Inf"} %d
sharetx_commit_to_applied_seconds_sum 1.5
sharetx_commit_to_applied_seconds_count %d
sharetx_request_bytes_total{api="Produce"} 100
sharetx_request_bytes_total{api="Fetch"} 23
`

func scrapeOf(t *testing.T, a, b, c, d int) metrics {
	t.Helper()
	vals := []int{a, b, c, d, d}
	var sb strings.Builder
	i := 0
	for _, line := range strings.SplitAfter(histText, "\n") {
		if strings.Contains(line, "%d") {
			line = strings.Replace(line, "%d", strconv.Itoa(vals[i]), 1)
			i++
		}
		sb.WriteString(line)
	}
	m, err := parseMetrics(strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHistogramQuantiles(t *testing.T) {
	before := scrapeOf(t, 10, 10, 10, 10) // 10 observations ≤ 1ms before the run
	after := scrapeOf(t, 10, 60, 109, 110)
	if got := after.sum("sharetx_request_bytes_total"); got != 123 {
		t.Fatalf("sum = %v", got)
	}
	d := deltaBuckets(before.histogram("sharetx_commit_to_applied_seconds"), after.histogram("sharetx_commit_to_applied_seconds"))
	// delta: 0 ≤ 1ms, 50 in (1ms,10ms], 49 in (10ms,100ms], 1 above.
	want := []bucket{{0.001, 0}, {0.01, 50}, {0.1, 99}, {math.Inf(1), 100}}
	if len(d) != len(want) {
		t.Fatalf("delta = %v", d)
	}
	for i := range want {
		if d[i] != want[i] {
			t.Fatalf("delta = %v, want %v", d, want)
		}
	}
	cases := []struct{ q, want float64 }{
		{0.5, 0.01},                      // rank 50: top of the second bucket
		{0.25, 0.001 + 0.009*25/50},      // halfway into (1ms,10ms]
		{0.99, 0.1},                      // rank 99: top of the third bucket
		{0.995, 0.1},                     // in +Inf: the largest finite bound
		{0.75, 0.01 + 0.09*(75-50)/49.0}, // inside (10ms,100ms]
	}
	for _, c := range cases {
		if got := bucketQuantile(c.q, d); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%.3f = %v, want %v", c.q, got, c.want)
		}
	}
	// First bucket interpolates from 0.
	first := []bucket{{0.001, 10}, {math.Inf(1), 10}}
	if got := bucketQuantile(0.5, first); math.Abs(got-0.0005) > 1e-12 {
		t.Errorf("first bucket q50 = %v", got)
	}
	if !math.IsNaN(bucketQuantile(0.5, deltaBuckets(after.histogram("sharetx_commit_to_applied_seconds"), after.histogram("sharetx_commit_to_applied_seconds")))) {
		t.Error("no observations: want NaN")
	}
	if !math.IsNaN(bucketQuantile(0.5, nil)) {
		t.Error("no buckets: want NaN")
	}
}

func TestSampleQuantile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1, unsorted
	}
	if got := sampleQuantile(0.5, xs); got != 50 {
		t.Errorf("p50 = %v", got)
	}
	if got := sampleQuantile(0.99, xs); got != 99 {
		t.Errorf("p99 = %v", got)
	}
	if xs[0] != 100 {
		t.Error("input was sorted in place")
	}
	if !math.IsNaN(sampleQuantile(0.5, nil)) {
		t.Error("empty: want NaN")
	}
}

func TestPlotDecodes(t *testing.T) {
	var buf bytes.Buffer
	groups := []barGroup{
		{Label: "produce", A: 50000, B: 48000, ALabel: "direct", BLabel: "proxy"},
		{Label: "txn 1000", A: 9000, B: 0, ALabel: "alo", BLabel: "txn"},
	}
	if err := writePlot(&buf, "sharetx bench", groups); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 300 || b.Dy() < 300 {
		t.Fatalf("image is %v", b)
	}
	// Some pixels have each bar's colour.
	for _, c := range []color.RGBA{colA, colB} {
		found := false
		for y := b.Min.Y; y < b.Max.Y && !found; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("no bar of colour %v drawn", c)
		}
	}
	if err := writePlot(&buf, "nothing", nil); err == nil {
		t.Error("no groups: no error")
	}
}

func TestWriteJSONWithoutNaN(t *testing.T) {
	r := &Results{ProxyCost: map[string]proxyCost{"x": {CPUSeconds: math.NaN()}},
		Pipeline: []*pipelineResult{{Mode: "txn", TxnAckP99Ms: math.NaN()}}}
	r.Goals = computeGoals(r) // nothing measured: every goal invalid
	path := t.TempDir() + "/b.json"
	if err := WriteJSON(path, r); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.Goals {
		if g.Valid || !strings.Contains(g.Line(), "measured=n/a") {
			t.Errorf("goal %s: %s", g.Name, g.Line())
		}
	}
}

func TestCountRanges(t *testing.T) {
	rec := func(p int32, off int64) *kgo.Record { return &kgo.Record{Topic: "t", Partition: p, Offset: off} }
	recs := []*kgo.Record{rec(0, 5), rec(0, 3), rec(0, 4), rec(1, 10), rec(0, 7), rec(1, 11), rec(2, 0)}
	// partition 0: 3-5, 7; partition 1: 10-11; partition 2: 0
	if got := countRanges(recs); got != 4 {
		t.Fatalf("countRanges = %d, want 4", got)
	}
}

// The ride misses the proxy counted become count lines of the budget, one
// per reason it scraped, per transaction of the run.
func TestProxyBudgetRideMisses(t *testing.T) {
	before := metrics{`sharetx_ride_misses_total{reason="no_produce"}`: 2}
	after := metrics{`sharetx_ride_misses_total{reason="no_produce"}`: 6, `sharetx_ride_misses_total{reason="produce_first"}`: 1}
	b := map[string]budgetItem{}
	proxyBudget(b, before, after, 8)
	if got := b["proxy: ride missed: no_produce"].PerTxn; got != 0.5 {
		t.Errorf("no_produce: %v per transaction, want 0.5 (%v)", got, b)
	}
	if got := b["proxy: ride missed: produce_first"].PerTxn; got != 0.125 {
		t.Errorf("produce_first: %v per transaction, want 0.125 (%v)", got, b)
	}
	if !countRow("proxy: ride missed: no_produce") {
		t.Error("a ride-miss line is not printed as a count")
	}
}

// The proxy's part-batch holds become count lines of the budget, per
// outcome it counted during the run.
func TestProxyBudgetBatchHolds(t *testing.T) {
	before := metrics{`sharetx_batch_holds_total{outcome="completed"}`: 10}
	after := metrics{`sharetx_batch_holds_total{outcome="completed"}`: 18, `sharetx_batch_holds_total{outcome="expired"}`: 2}
	b := map[string]budgetItem{}
	proxyBudget(b, before, after, 8)
	if got := b["proxy: part-batch holds completed"].PerTxn; got != 1 {
		t.Errorf("completed: %v per transaction, want 1 (%v)", got, b)
	}
	if got := b["proxy: part-batch holds expired"].PerTxn; got != 0.25 {
		t.Errorf("expired: %v per transaction, want 0.25 (%v)", got, b)
	}
	if _, ok := b["proxy: part-batch holds aborted"]; ok || !countRow("proxy: part-batch holds expired") {
		t.Errorf("an outcome never counted has a line, or the lines are not counts (%v)", b)
	}
}

// TestCPUBudget: each process's CPU over a run, per record and per
// transaction; a process read before but not after (or going backwards)
// gets no line; the table prints both figures.
func TestCPUBudget(t *testing.T) {
	before := map[string]float64{"broker": 10, "proxy": 2, "bench process (clients)": 5}
	after := map[string]float64{"broker": 12, "proxy": 1}
	b := map[string]budgetItem{}
	cpuBudget(b, before, after, 100, 400000)
	if it := b["cpu: broker"]; it.PerTxn != 20 || it.PerRecordUs != 5 {
		t.Errorf("broker: %+v, want 20 ms/txn and 5 µs/record", it)
	}
	if _, ok := b["cpu: proxy"]; ok {
		t.Error("a process whose CPU went backwards (another pid) got a line")
	}
	if _, ok := b["cpu: bench process (clients)"]; ok {
		t.Error("a process not read after the run got a line")
	}
	var out strings.Builder
	writeBudget(&out, []*pipelineResult{{Mode: modeTxn, Batch: 1000, Budget: b}}, []int{1000}, []string{modeTxn})
	if !strings.Contains(out.String(), "5.00 µs/rec, 20.00 ms/txn") {
		t.Errorf("the table does not print the CPU line:\n%s", out.String())
	}
}
