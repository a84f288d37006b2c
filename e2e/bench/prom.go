package main

import (
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sharetx/sharetx/e2e/sim"
)

// metrics is a scrape of a Prometheus text exposition: series (name with
// its labels, as printed) → value.
type metrics map[string]float64

func parseMetrics(r io.Reader) (metrics, error) {
	m, err := sim.ParseMetrics(r, "")
	return metrics(m), err
}

// sum adds every series of the metric name, whatever its labels.
func (m metrics) sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// bucket is one cumulative histogram bucket: Count observations ≤ LE.
type bucket struct {
	LE    float64
	Count float64
}

// histogram returns the cumulative buckets of histogram name (a histogram
// without labels other than le), sorted by bound, +Inf last.
func (m metrics) histogram(name string) []bucket {
	var bs []bucket
	prefix := name + "_bucket{"
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		j := strings.Index(k, `le="`)
		if j < 0 {
			continue
		}
		rest := k[j+4:]
		end := strings.IndexByte(rest, '"')
		if end < 0 {
			continue
		}
		le, err := strconv.ParseFloat(rest[:end], 64) // ParseFloat accepts "+Inf"
		if err != nil {
			continue
		}
		bs = append(bs, bucket{LE: le, Count: v})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].LE < bs[j].LE })
	return bs
}

// deltaBuckets is after − before, bucket by bucket (matched by bound; a
// bucket missing from before counts as 0).
func deltaBuckets(before, after []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.LE] = b.Count
	}
	out := make([]bucket, len(after))
	for i, b := range after {
		out[i] = bucket{LE: b.LE, Count: b.Count - prev[b.LE]}
	}
	return out
}

// bucketQuantile is Prometheus's histogram_quantile: the q-quantile
// (0 < q < 1) of cumulative buckets sorted by bound, interpolated linearly
// inside the bucket it falls in (the first bucket from 0). A quantile in the
// +Inf bucket is the largest finite bound. It returns NaN when there are no
// observations.
func bucketQuantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].Count
	if !math.IsInf(bs[len(bs)-1].LE, 1) {
		return math.NaN() // not a complete histogram
	}
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(bs), func(i int) bool { return bs[i].Count >= rank })
	if i == len(bs)-1 {
		if len(bs) < 2 {
			return math.NaN()
		}
		return bs[len(bs)-2].LE
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = bs[i-1].LE, bs[i-1].Count
	}
	in := bs[i].Count - below
	if in <= 0 {
		return bs[i].LE
	}
	return lo + (bs[i].LE-lo)*(rank-below)/in
}

// sampleQuantile is the q-quantile of raw samples (nearest rank).
func sampleQuantile(q float64, xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}
