package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteAB: per figure, the median of A's runs and of B's, each run's
// value, B/A, and the direct figures marked as the control; a figure no run
// measured is left out.
func TestWriteAB(t *testing.T) {
	run := func(direct, proxy, txn float64) *Results {
		r := &Results{}
		r.FranzProduce.Direct = []throughput{{RecordsSec: direct}}
		r.FranzProduce.Proxy = []throughput{{RecordsSec: proxy}}
		r.Pipeline = []*pipelineResult{{Mode: modeTxn, Batch: 100, RecordsSec: txn}, {Mode: modeTxn, Batch: 100, RecordsSec: txn + 2}}
		return r
	}
	as := []*Results{run(100, 90, 10), run(110, 80, 20)}
	bs := []*Results{run(100, 99, 30), run(100, 101, 40)}
	var w bytes.Buffer
	writeAB(&w, as, bs, "old", "new")
	out := w.String()
	for _, want := range []string{
		"franz produce, direct  records/s  105.0 [100 110]  100.0 [100 100]  95%  control (not through the proxy)",
		"franz produce, proxy  records/s  85.0 [90.00 80.00]  100.0 [99.00 101]  118%",
		"txn, transactions of 100  records/s  16.0 [11.00 21.00]  36.0 [31.00 41.00]  225%", // each run's own median of its rounds
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "share consume") || strings.Contains(out, "millicores") {
		t.Errorf("a figure no run measured is listed:\n%s", out)
	}
}

// The subcommand refuses what it cannot run, before running anything.
func TestABFlags(t *testing.T) {
	var out, errs bytes.Buffer
	if rc := mainRun([]string{"ab", "--a", "/nonexistent/sharetx", "--b", "/nonexistent/other"}, &out, &errs); rc != 2 || !strings.Contains(errs.String(), "is not a sharetx binary") {
		t.Fatalf("rc %d, stderr %q", rc, errs.String())
	}
	errs.Reset()
	if rc := mainRun([]string{"ab", "--a", "x"}, &out, &errs); rc != 2 || !strings.Contains(errs.String(), "usage: bench ab") {
		t.Fatalf("rc %d, stderr %q", rc, errs.String())
	}
}
