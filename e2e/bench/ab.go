package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// runAB is `bench ab`: the same bench run with two sharetx binaries, A and
// B, alternately (A B, then B A, ...), each run in-process with its own
// JSON, then one table of the figures through the proxy: the median of
// every figure over A's runs and over B's, and B/A. What a restructure
// must show (issue 25: "an A/B run of the old and new binaries,
// interleaved"). The direct figures of the same runs are listed as the
// control: they move with the machine, not with the binary.
func runAB(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := fs.String("a", "", "sharetx binary A (the baseline, e.g. built from main before the change)")
	b := fs.String("b", "", "sharetx binary B (the change)")
	runs := fs.Int("runs", 2, "runs of each binary, alternating")
	dir := fs.String("dir", "", "where each run's JSON and output go (default: a temporary directory)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bench ab --a OLD --b NEW [--runs N] [--dir D] [-- bench flags...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *a == "" || *b == "" || *runs < 1 {
		fs.Usage()
		return 2
	}
	for _, bin := range []string{*a, *b} {
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			fmt.Fprintf(stderr, "bench ab: %s is not a sharetx binary (build one with go build -o %s ./cmd/sharetx)\n", bin, bin)
			return 2
		}
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "sharetx-bench-ab-")
		if err != nil {
			fmt.Fprintln(stderr, "bench ab:", err)
			return 1
		}
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "bench ab:", err)
		return 1
	}
	res := map[string][]*Results{}
	for i := 0; i < *runs; i++ {
		order := []string{"A", "B"}
		if i%2 == 1 {
			order = []string{"B", "A"}
		}
		for _, side := range order {
			bin := map[string]string{"A": *a, "B": *b}[side]
			js := filepath.Join(*dir, fmt.Sprintf("%s-%d.json", side, i+1))
			out, err := os.Create(filepath.Join(*dir, fmt.Sprintf("%s-%d.txt", side, i+1)))
			if err != nil {
				fmt.Fprintln(stderr, "bench ab:", err)
				return 1
			}
			fmt.Fprintf(stderr, "bench ab: run %d of %s (%s), output in %s\n", i+1, side, bin, out.Name())
			rc := mainRun(append(slices.Clone(fs.Args()), "--sharetx-bin", bin, "--json", js), out, stderr)
			out.Close()
			if rc != 0 {
				fmt.Fprintf(stderr, "bench ab: run %d of %s failed (exit %d): see %s\n", i+1, side, rc, out.Name())
				return rc
			}
			r, err := readResults(js)
			if err != nil {
				fmt.Fprintln(stderr, "bench ab:", err)
				return 1
			}
			res[side] = append(res[side], r)
		}
	}
	writeAB(stdout, res["A"], res["B"], *a, *b)
	return 0
}

func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// abFigure is one figure of a bench run, NaN when the run lacks it.
type abFigure struct {
	name, unit string
	proxied    bool // through the proxy (what the binary changes); else a control
	higher     bool // higher is better
	of         func(*Results) float64
}

// abFigures are the figures compared: pass-through, the pipelines by mode
// and transaction size, the proxy's CPU, the Java comparison.
func abFigures(rs []*Results) []abFigure {
	pick := func(xs []throughput) float64 { return medianOf(xs, func(t throughput) float64 { return t.RecordsSec }) }
	fs := []abFigure{
		{"franz produce, direct", "records/s", false, true, func(r *Results) float64 { return pick(r.FranzProduce.Direct) }},
		{"franz produce, proxy", "records/s", true, true, func(r *Results) float64 { return pick(r.FranzProduce.Proxy) }},
		{"franz share consume, direct", "records/s", false, true, func(r *Results) float64 { return pick(r.FranzConsume.Direct) }},
		{"franz share consume, proxy", "records/s", true, true, func(r *Results) float64 { return pick(r.FranzConsume.Proxy) }},
		{"proxy CPU, pass-through", "millicores per MB/s", true, false, func(r *Results) float64 { return nanIfZero(r.ProxyCostTotal.MillicoresMB) }},
	}
	type mb struct {
		mode  string
		batch int
	}
	var seen []mb
	for _, r := range rs {
		for _, p := range append(append(slices.Clone(r.Pipeline), r.JavaEOS...), r.PythonEOS...) {
			if k := (mb{p.Mode, p.Batch}); !slices.Contains(seen, k) {
				seen = append(seen, k)
			}
		}
	}
	for _, k := range seen {
		fs = append(fs, abFigure{fmt.Sprintf("%s, transactions of %d", k.mode, k.batch), "records/s", !strings.HasSuffix(k.mode, "direct") && k.mode != modeGroupEOS && k.mode != modeJavaGroupEOS && k.mode != modePyGroupEOS, true,
			func(r *Results) float64 {
				var xs []*pipelineResult
				for _, p := range append(append(slices.Clone(r.Pipeline), r.JavaEOS...), r.PythonEOS...) {
					if p.Mode == k.mode && p.Batch == k.batch {
						xs = append(xs, p)
					}
				}
				return medianOf(xs, func(p *pipelineResult) float64 { return p.RecordsSec })
			}})
	}
	return fs
}

func nanIfZero(x float64) float64 {
	if x == 0 {
		return math.NaN()
	}
	return x
}

// writeAB prints, per figure, every run's value of A and of B, their
// medians and B/A.
func writeAB(w io.Writer, as, bs []*Results, a, b string) {
	fmt.Fprintf(w, "A/B: A = %s, B = %s; %d and %d run(s), alternating; medians per figure, each run's own value in brackets\n", a, b, len(as), len(bs))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tunit\tA\tB\tB/A\t\t")
	for _, f := range abFigures(append(slices.Clone(as), bs...)) {
		va, vb := abValues(as, f), abValues(bs, f)
		ma, mb := spreadOf(va).Median, spreadOf(vb).Median
		if math.IsNaN(ma) && math.IsNaN(mb) {
			continue
		}
		note := ""
		if !f.proxied {
			note = "control (not through the proxy)"
		} else if !f.higher {
			note = "lower is better"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s %s\t%s\t%s\t\n", f.name, f.unit, f1(ma), abRuns(va), f1(mb), abRuns(vb), pct0(mb/ma), note)
	}
	tw.Flush()
	fmt.Fprintln(w, "(one figure per run is that run's median over its own rounds; on a shared machine compare B/A of the proxied figures with the spread of the controls)")
}

func abValues(rs []*Results, f abFigure) []float64 {
	var xs []float64
	for _, r := range rs {
		if v := f.of(r); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return xs
}

func abRuns(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		if s[i] = f0(x); x < 100 {
			s[i] = f2(x)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}
