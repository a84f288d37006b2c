package main

import (
	"fmt"
	"math"
	"slices"
)

// spread is the median of repeated measurements and their range.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// spreadOf summarises xs (NaN values ignored); N is 0 when there is none.
func spreadOf(xs []float64) spread {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{Median: m, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// String is "median [min–max]" with f formatting each, or "n/a".
func (s spread) format(f func(float64) string) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N == 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", f(s.Median), f(s.Min), f(s.Max))
}

// straddles reports whether the goal lies inside the spread: the rounds
// disagree on whether it is met, so this run cannot judge it.
func (s spread) straddles(goal float64) bool { return s.N > 1 && s.Min < goal && goal < s.Max }

func pct0(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", x*100)
}

func times1(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", x)
}

// runKey picks the runs of one configuration.
type runKey struct {
	Mode                string
	Batch, Workers, Par int // 0: any
}

func (k runKey) matches(r *pipelineResult) bool {
	return r.Mode == k.Mode && (k.Batch == 0 || r.Batch == k.Batch) && (k.Workers == 0 || r.Workers == k.Workers) && (k.Par == 0 || r.Partitions == k.Par)
}

// rates are the records/s of every round of k, by round.
func rates(runs []*pipelineResult, k runKey) map[int]float64 {
	return byRound(runs, k, func(r *pipelineResult) float64 { return r.RecordsSec })
}

// byRound is f of every round of k, by round.
func byRound(runs []*pipelineResult, k runKey, f func(*pipelineResult) float64) map[int]float64 {
	m := map[int]float64{}
	for _, r := range runs {
		if k.matches(r) {
			m[r.Round] = f(r)
		}
	}
	return m
}

// rateSpread is the spread of k's records/s over its rounds.
func rateSpread(runs []*pipelineResult, k runKey) spread {
	var xs []float64
	for _, v := range rates(runs, k) {
		xs = append(xs, v)
	}
	return spreadOf(xs)
}

// ratioSpread is the spread of a/b over the rounds where both ran: each
// ratio from one round, so that both sides of it ran minutes apart at most.
func ratioSpread(runs []*pipelineResult, a, b runKey) spread {
	return ratioSpread2(runs, a, b, func(r *pipelineResult) float64 { return r.RecordsSec })
}

// ratioSpread2 is ratioSpread of another figure f of the runs.
func ratioSpread2(runs []*pipelineResult, a, b runKey, f func(*pipelineResult) float64) spread {
	ra, rb := byRound(runs, a, f), byRound(runs, b, f)
	var xs []float64
	for round, x := range ra {
		if y, ok := rb[round]; ok && y > 0 {
			xs = append(xs, x/y)
		}
	}
	return spreadOf(xs)
}

// fieldSpread is the spread of f over k's runs.
func fieldSpread(runs []*pipelineResult, k runKey, f func(*pipelineResult) float64) spread {
	var xs []float64
	for _, r := range runs {
		if k.matches(r) {
			xs = append(xs, f(r))
		}
	}
	return spreadOf(xs)
}

// pairSpread is the spread of f(a[i], b[i]) over paired runs (a side's
// i-th run against the other's, as sides runs them in rounds).
func pairSpread[T any](a, b []T, f func(T, T) float64) spread {
	var xs []float64
	for i := range min(len(a), len(b)) {
		xs = append(xs, f(a[i], b[i]))
	}
	return spreadOf(xs)
}

// medianOf is the median of f over runs (NaN when there are none).
func medianOf[T any](runs []T, f func(T) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return spreadOf(xs).Median
}
