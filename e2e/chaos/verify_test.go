package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/e2e/sim"
)

func ids(s ...string) []string { return s }

func TestJudge(t *testing.T) {
	ok := PhaseResult{Fault: "none", Counts: sim.Counts{In: 3, Out: 3, Distinct: 3}, TxnsCommitted: 2}
	for _, tc := range []struct {
		name string
		mod  func(*PhaseResult)
		pass bool
		word string
	}{
		{"clean", func(*PhaseResult) {}, true, "PASS"},
		{"duplicate", func(r *PhaseResult) { r.Duplicates = 1 }, false, "FAIL"},
		{"lost", func(r *PhaseResult) { r.Lost = 1 }, false, "FAIL"},
		{"unacked", func(r *PhaseResult) { r.Unacked = 1 }, false, "FAIL"},
		{"unexpected", func(r *PhaseResult) { r.Unexpected = 1 }, false, "FAIL"},
		{"error", func(r *PhaseResult) { r.Errors = []string{"phase timeout"} }, false, "FAIL"},
		{"skipped", func(r *PhaseResult) { r.Skipped = "no script" }, false, "SKIP"},
	} {
		r := ok
		tc.mod(&r)
		r.Judge()
		if r.Pass != tc.pass || r.Result() != tc.word {
			t.Errorf("%s: pass %v result %s, want %v %s", tc.name, r.Pass, r.Result(), tc.pass, tc.word)
		}
	}
	skipped := PhaseResult{Fault: "broker-restart", Skipped: "needs 3 nodes"}
	passed := ok
	passed.Judge()
	if !AllPass([]PhaseResult{passed, skipped}) {
		t.Error("a skipped phase failed the run")
	}
	failed := ok
	failed.Lost = 2
	failed.Judge()
	if AllPass([]PhaseResult{passed, failed}) {
		t.Error("a failed phase did not fail the run")
	}
}

func TestTableAndJSON(t *testing.T) {
	a := PhaseResult{Fault: "none", Counts: sim.Count(ids("x", "y"), map[string]int{"x": 1, "y": 1}), TxnsCommitted: 4, TxnsAborted: 1}
	a.Judge()
	b := PhaseResult{Fault: "proxy-kill", WorkerLang: "java", Counts: sim.Count(ids("x", "y"), map[string]int{"x": 2}), Unacked: 1, UnackedIDs: ids("x"), UnackedCommitted: 1}
	b.Judge()
	var buf bytes.Buffer
	WriteTable(&buf, []PhaseResult{a, b})
	out := buf.String()
	for _, want := range []string{"fault", "workers", "java", "duplicates", "unacked", "txns committed", "PASS", "FAIL", "duplicated: x", "lost: y", "unacked (1 of them committed in the output): x"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := WriteJSON(path, []PhaseResult{a, b}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pass   bool
		Phases []map[string]any
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Pass || len(doc.Phases) != 2 || doc.Phases[1]["duplicates"].(float64) != 1 || doc.Phases[1]["lost"].(float64) != 1 ||
		doc.Phases[1]["unacked"].(float64) != 1 || doc.Phases[0]["txns_committed"].(float64) != 4 || doc.Phases[1]["worker_lang"] != "java" {
		t.Fatalf("json: %s", raw)
	}
}

func TestParseFaults(t *testing.T) {
	if f, err := ParseFaults("all"); err != nil || !reflect.DeepEqual(f, allFaults) {
		t.Fatalf("all: %v %v", f, err)
	}
	if f, err := ParseFaults("none, proxy-kill"); err != nil || !reflect.DeepEqual(f, ids("none", "proxy-kill")) {
		t.Fatalf("list: %v %v", f, err)
	}
	if _, err := ParseFaults("none,typo"); err == nil {
		t.Fatal("unknown fault accepted")
	}
}

func TestWorkerLineFields(t *testing.T) {
	m := fields("TXN abort n=5 commits=2 aborts=3 ms=1/2/3/4 recs=0:1:1,0:2:1 reason=commit: x commits=9")
	if m["commits"] != "2" || m["aborts"] != "3" || m["recs"] != "0:1:1,0:2:1" || m["n"] != "5" {
		t.Fatalf("%v", m)
	}
}

// TestSummary: a --repeat run's summary counts each phase's results over
// the rounds and names the rounds that failed.
func TestSummary(t *testing.T) {
	pass := PhaseResult{Fault: "worker-kill", WorkerLang: "go", Pass: true}
	fail := PhaseResult{Fault: "worker-kill", WorkerLang: "go", Round: 2, Counts: sim.Counts{Lost: 1}}
	skip := PhaseResult{Fault: "broker-restart", WorkerLang: "go", Round: 1, Skipped: "needs 3 nodes"}
	p1, p3 := pass, pass
	p1.Round, p3.Round = 1, 3
	var b bytes.Buffer
	WriteSummary(&b, []PhaseResult{p1, skip, fail, p3})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("summary:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); !reflect.DeepEqual(f, []string{"worker-kill", "go", "2", "1", "0", "2"}) {
		t.Errorf("worker-kill row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); !reflect.DeepEqual(f, []string{"broker-restart", "go", "0", "0", "1"}) {
		t.Errorf("broker-restart row %q", lines[2])
	}
	if AllPass([]PhaseResult{p1, skip, fail, p3}) {
		t.Error("a run with a failed round must not pass")
	}
}
