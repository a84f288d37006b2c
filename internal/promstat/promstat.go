// Package promstat reads Prometheus metrics back in-process, for the
// engine's Stats snapshot (tests, benchmarks, logs).
package promstat

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds up the series of c; with label set, only those having a label of
// that value.
func Sum(c *prometheus.CounterVec, label string) float64 {
	var total float64
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	for mt := range ch {
		var d dto.Metric
		if mt.Write(&d) != nil {
			continue
		}
		if label == "" {
			total += d.Counter.GetValue()
			continue
		}
		for _, l := range d.Label {
			if l.GetValue() == label {
				total += d.Counter.GetValue()
				break
			}
		}
	}
	return total
}

// Value is the value of a counter or gauge.
func Value(m prometheus.Metric) float64 {
	var d dto.Metric
	if m.Write(&d) != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}

// Histogram is a histogram's count, mean and bucket-bound quantiles.
type Histogram struct {
	Count          uint64
	Mean, P50, P99 float64 // seconds; quantiles are bucket upper bounds
}

// ReadHistogram reads h.
func ReadHistogram(h prometheus.Histogram) Histogram {
	var m dto.Metric
	var out Histogram
	if h.Write(&m) != nil || m.Histogram == nil {
		return out
	}
	hist := m.Histogram
	out.Count = hist.GetSampleCount()
	if out.Count == 0 {
		return out
	}
	out.Mean = hist.GetSampleSum() / float64(out.Count)
	q := func(f float64) float64 {
		for _, b := range hist.Bucket {
			if float64(b.GetCumulativeCount()) >= f*float64(out.Count) {
				return b.GetUpperBound()
			}
		}
		return math.Inf(1)
	}
	out.P50, out.P99 = q(0.5), q(0.99)
	return out
}
