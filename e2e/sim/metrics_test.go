package sim

import (
	"bufio"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ParseMetrics keys every series as the exposition prints it: what a real
// registry serves (counters and gauges with labels, a histogram with labels,
// a summary, a label value that needs escaping) parses to exactly its
// printed lines.
func TestParseMetricsMatchesTheExposition(t *testing.T) {
	r := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sharetx_calls_total", Help: "h"}, []string{"api", "result"})
	c.WithLabelValues("Produce", "ok").Add(3)
	c.WithLabelValues("Fetch", `a "quoted"\ value`).Inc()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sharetx_pending", Help: "h"})
	g.Set(-2.5)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sharetx_wait_seconds", Help: "h", Buckets: []float64{.00001, .001, 1}}, []string{"api"})
	for _, v := range []float64{.000005, .0005, .5, 7} {
		h.WithLabelValues("Produce").Observe(v)
	}
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "other_latency", Help: "h", Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}})
	s.Observe(4)
	r.MustRegister(c, g, h, s)
	srv := httptest.NewServer(promhttp.HandlerFor(r, promhttp.HandlerOpts{}))
	defer srv.Close()
	text := func() string {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return b.String()
	}()

	want := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("exposition line %q: %v", line, err)
		}
		want[line[:i]] = v
	}
	got, err := ParseMetrics(strings.NewReader(text), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d series parsed, the exposition prints %d:\n%s\nparsed: %v", len(got), len(want), text, got)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("series %s: parsed %v (present %v), printed %v", k, g, ok, v)
		}
	}
	if n := got[`sharetx_wait_seconds_bucket{api="Produce",le="+Inf"}`]; n != 4 {
		t.Errorf("+Inf bucket %v, want 4", n)
	}

	only, err := ParseMetrics(strings.NewReader(text), "sharetx_wait")
	if err != nil {
		t.Fatal(err)
	}
	for k := range only {
		if !strings.HasPrefix(k, "sharetx_wait_seconds") {
			t.Errorf("prefix sharetx_wait: got %s", k)
		}
	}
	if len(only) != 4+2 {
		t.Errorf("prefix sharetx_wait: %d series, want 6 (4 buckets, sum, count): %v", len(only), only)
	}
	if _, err := ParseMetrics(strings.NewReader("sharetx_x{a=\"1\" 3\n"), ""); err == nil {
		t.Error("a malformed line parsed without an error")
	}
}
