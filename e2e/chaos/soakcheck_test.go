package main

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// series makes samples of one sidecar incarnation: one a minute, figure key
// = f(minute), all under load.
func series(proxy, start int, from, n int, key string, f func(i int) float64) []soakSample {
	var ss []soakSample
	for i := 0; i < n; i++ {
		ss = append(ss, soakSample{At: time.Duration(from+i) * time.Minute, Proxy: proxy, Start: start, Load: true, V: map[string]float64{key: f(i)}})
	}
	return ss
}

func rowOf(t *testing.T, rows []growthRow, proxy, start int, key string) growthRow {
	t.Helper()
	for _, r := range rows {
		if r.Proxy == proxy && r.Start == start && r.Metric == key {
			return r
		}
	}
	t.Fatalf("no row for sidecar %d start %d %s", proxy, start, key)
	return growthRow{}
}

// TestJudgeGrowth: a leak is found, noise and a level are not, the warm-up
// is left out, a short incarnation is not judged, and a spike at the end
// alone does not fail.
func TestJudgeGrowth(t *testing.T) {
	var ss []soakSample
	// RSS: 100 MiB, a leak of 3 MiB a minute after a warm-up ramp.
	ss = append(ss, series(1, 1, 0, 25, "rss_mib", func(i int) float64 {
		if i < 5 {
			return float64(20 * i)
		}
		return 100 + 3*float64(i-5)
	})...)
	// Goroutines: flat with noise, after a ramp in the warm-up.
	ss = append(ss, series(2, 1, 0, 25, "goroutines", func(i int) float64 {
		if i < 5 {
			return float64(40 * i)
		}
		return 200 + float64((i*7)%11) - 5
	})...)
	// Held offsets: flat, one spike in the last sample.
	ss = append(ss, series(2, 1, 0, 25, "held", func(i int) float64 {
		if i == 24 {
			return 60000
		}
		return 3000
	})...)
	// A restarted sidecar's incarnation of 4 minutes.
	ss = append(ss, series(2, 2, 25, 4, "rss_mib", func(i int) float64 { return float64(100 * i) })...)

	rows := judgeGrowth(ss, 5*time.Minute, false)
	if r := rowOf(t, rows, 1, 1, "rss_mib"); !r.Growing || r.Samples != 20 || math.Abs(r.Slope-3) > 1e-9 {
		t.Errorf("the leak: %+v, want growing, 20 samples, slope 3/min", r)
	}
	if r := rowOf(t, rows, 2, 1, "goroutines"); r.Growing || r.Samples != 20 {
		t.Errorf("flat goroutines with noise (the warm-up ramp left out): %+v, want flat", r)
	}
	if r := rowOf(t, rows, 2, 1, "held"); r.Growing {
		t.Errorf("a spike at the end alone: %+v, want flat", r)
	}
	if r := rowOf(t, rows, 2, 2, "rss_mib"); r.NotJudgedWhy == "" || r.Growing {
		t.Errorf("a 4-minute incarnation: %+v, want not judged", r)
	}
	var b strings.Builder
	if n := writeGrowth(&b, rows); n != 1 || !strings.Contains(b.String(), "GROWING") || !strings.Contains(b.String(), "not judged: sidecar 2 start 2") {
		t.Errorf("table (%d growing):\n%s", n, b.String())
	}
}

// TestHistQuantile: the p99 of the observations between two scrapes of a
// histogram, from the bucket deltas.
func TestHistQuantile(t *testing.T) {
	name := "sharetx_commit_to_applied_seconds"
	b := func(le string) string { return name + `_bucket{le="` + le + `"}` }
	prev := map[string]float64{b("0.001"): 10, b("0.01"): 10, b("0.1"): 10, b("+Inf"): 10}
	cur := map[string]float64{b("0.001"): 10, b("0.01"): 108, b("0.1"): 110, b("+Inf"): 110}
	if q := histQuantile(cur, prev, name, 0.99); q != 0.1 {
		t.Errorf("p99 of 98 at <=10ms and 2 at <=100ms: %v, want 0.1", q)
	}
	if q := histQuantile(cur, prev, name, 0.5); q != 0.01 {
		t.Errorf("p50: %v, want 0.01", q)
	}
	if q := histQuantile(prev, prev, name, 0.99); !math.IsNaN(q) {
		t.Errorf("nothing observed: %v, want NaN", q)
	}
	if q := histQuantile(cur, nil, name, 0.99); !math.IsNaN(q) {
		t.Errorf("no previous scrape: %v, want NaN", q)
	}
}

// TestSoakPlot: the plot of a few samples is a PNG.
func TestSoakPlot(t *testing.T) {
	ss := series(1, 1, 0, 6, "rss_mib", func(i int) float64 { return float64(20 + i) })
	ss = append(ss, series(2, 2, 3, 3, "rss_mib", func(i int) float64 { return float64(10 + i) })...)
	path := t.TempDir() + "/soak.png"
	if err := writeSoakPlot(path, ss, time.Minute); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("plot %s: %d bytes, err %v", path, len(b), err)
	}
	if err := writeSoakPlot(path, nil, time.Minute); err == nil {
		t.Error("a plot of no samples must be refused")
	}
}
