package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func ids(s ...string) []string { return s }

func TestCount(t *testing.T) {
	in := ids("a", "b", "c", "d")
	for _, tc := range []struct {
		name string
		out  map[string]int
		want Counts
	}{
		{"exactly once", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1},
			Counts{In: 4, Out: 4, Distinct: 4}},
		{"nothing", map[string]int{},
			Counts{In: 4, Lost: 4, LostIDs: ids("a", "b", "c", "d")}},
		{"nil output", nil,
			Counts{In: 4, Lost: 4, LostIDs: ids("a", "b", "c", "d")}},
		{"duplicates count records beyond the first", map[string]int{"a": 3, "b": 1, "c": 2, "d": 1},
			Counts{In: 4, Out: 7, Distinct: 4, Duplicates: 3, DuplicateIDs: ids("a", "c")}},
		{"lost and duplicated together", map[string]int{"a": 2, "c": 1},
			Counts{In: 4, Out: 3, Distinct: 2, Duplicates: 1, Lost: 2, DuplicateIDs: ids("a"), LostIDs: ids("b", "d")}},
		{"unexpected values are counted, not mistaken for inputs", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "zz": 2},
			Counts{In: 4, Out: 6, Distinct: 4, Unexpected: 2}},
		{"zero entries are no records", map[string]int{"a": 1, "b": 1, "c": 1, "d": 0, "x": 0},
			Counts{In: 4, Out: 3, Distinct: 3, Lost: 1, LostIDs: ids("d")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Count(in, tc.out)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Count = %+v\nwant    %+v", got, tc.want)
			}
			if got.Out != got.Distinct+got.Duplicates+got.Unexpected {
				t.Fatalf("out %d != distinct %d + duplicates %d + unexpected %d", got.Out, got.Distinct, got.Duplicates, got.Unexpected)
			}
			if got.Distinct+got.Lost != got.In {
				t.Fatalf("distinct %d + lost %d != in %d", got.Distinct, got.Lost, got.In)
			}
		})
	}
}

func TestCountRepeatedInputIDs(t *testing.T) {
	// An id listed twice among the inputs is one input.
	got := Count(ids("a", "a", "b"), map[string]int{"a": 1, "b": 1})
	if got.Lost != 0 || got.Duplicates != 0 || got.Distinct != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestJudge(t *testing.T) {
	ok := PhaseResult{Fault: "none", Counts: Counts{In: 3, Out: 3, Distinct: 3}, TxnsCommitted: 2}
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
	a := PhaseResult{Fault: "none", Counts: Count(ids("x", "y"), map[string]int{"x": 1, "y": 1}), TxnsCommitted: 4, TxnsAborted: 1}
	a.Judge()
	b := PhaseResult{Fault: "proxy-kill", Counts: Count(ids("x", "y"), map[string]int{"x": 2}), Unacked: 1, UnackedIDs: ids("x"), UnackedCommitted: 1}
	b.Judge()
	var buf bytes.Buffer
	WriteTable(&buf, []PhaseResult{a, b})
	out := buf.String()
	for _, want := range []string{"fault", "duplicates", "unacked", "txns committed", "PASS", "FAIL", "duplicated: x", "lost: y", "unacked (1 of them committed in the output): x"} {
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
		doc.Phases[1]["unacked"].(float64) != 1 || doc.Phases[0]["txns_committed"].(float64) != 4 {
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
