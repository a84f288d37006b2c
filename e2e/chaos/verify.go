package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sharetx/sharetx/e2e/sim"
)

// PhaseResult is one row of the final table (and of --json).
type PhaseResult struct {
	Round      int    `json:"round,omitempty"` // of --repeat, from 1
	Fault      string `json:"fault"`
	WorkerLang string `json:"worker_lang"` // go, java or python
	sim.Counts
	// Unacked: distinct input records a fresh member of the share group was
	// handed after the phase, within a quiet period longer than the
	// acquisition lock: records the share group never acknowledged.
	Unacked          int      `json:"unacked"`
	UnackedIDs       []string `json:"unacked_ids,omitempty"`
	UnackedCommitted int      `json:"unacked_committed"` // of those, ids that are in the output (committed, ack never applied)
	ShareLag         int64    `json:"share_lag"`         // the group's lag on the input after the check (-1: unknown)
	TxnsCommitted    int      `json:"txns_committed"`    // as reported by the workers
	TxnsAborted      int      `json:"txns_aborted"`
	Seconds          float64  `json:"seconds"`
	Skipped          string   `json:"skipped,omitempty"` // why the phase did not run
	Errors           []string `json:"errors,omitempty"`  // what went wrong besides the counts
	Notes            []string `json:"notes,omitempty"`   // fault injection, diagnosis
	WorkDir          string   `json:"work_dir,omitempty"`
	Pass             bool     `json:"pass"`
}

// Judge sets Pass: nothing duplicated, lost, unexpected or left
// unacknowledged, and the phase ran to its verification.
func (r *PhaseResult) Judge() {
	r.Pass = r.Skipped == "" && len(r.Errors) == 0 && r.Duplicates == 0 && r.Lost == 0 && r.Unexpected == 0 && r.Unacked == 0
}

// Result is the word in the table's last column.
func (r *PhaseResult) Result() string {
	switch {
	case r.Skipped != "":
		return "SKIP"
	case r.Pass:
		return "PASS"
	default:
		return "FAIL"
	}
}

// WriteTable prints the final table.
func WriteTable(w io.Writer, results []PhaseResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tworkers\tin\tout\tduplicates\tlost\tunacked\ttxns committed\taborted\tsecs\tresult\t")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t\n", r.Fault, r.WorkerLang, r.Result())
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%s\t\n", r.Fault, r.WorkerLang, r.In, r.Out, r.Duplicates, r.Lost,
			r.Unacked, r.TxnsCommitted, r.TxnsAborted, r.Seconds, r.Result())
	}
	tw.Flush()
	for _, r := range results {
		var why []string
		if r.Skipped != "" {
			why = append(why, "skipped: "+r.Skipped)
		}
		why = append(why, r.Errors...)
		if r.Unexpected > 0 {
			why = append(why, fmt.Sprintf("%d output records carry no input id", r.Unexpected))
		}
		if len(r.DuplicateIDs) > 0 {
			why = append(why, "duplicated: "+sample(r.DuplicateIDs, 10))
		}
		if len(r.LostIDs) > 0 {
			why = append(why, "lost: "+sample(r.LostIDs, 10))
		}
		if len(r.UnackedIDs) > 0 {
			why = append(why, fmt.Sprintf("unacked (%d of them committed in the output): %s", r.UnackedCommitted, sample(r.UnackedIDs, 10)))
		}
		for _, s := range why {
			fmt.Fprintf(w, "  %s: %s\n", r.Fault, s)
		}
	}
}

func sample(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, " ")
	}
	return strings.Join(ids[:n], " ") + fmt.Sprintf(" ... (%d in all)", len(ids))
}

// WriteSummary prints, per fault and worker language, in how many rounds of
// a --repeat run the phase passed, failed or was skipped, and the rounds
// that failed.
func WriteSummary(w io.Writer, results []PhaseResult) {
	type key struct{ fault, lang string }
	type tally struct {
		pass, fail, skip int
		failed           []string
	}
	var order []key
	by := map[key]*tally{}
	for _, r := range results {
		k := key{r.Fault, r.WorkerLang}
		t := by[k]
		if t == nil {
			t = &tally{}
			by[k] = t
			order = append(order, k)
		}
		switch r.Result() {
		case "PASS":
			t.pass++
		case "SKIP":
			t.skip++
		default:
			t.fail++
			t.failed = append(t.failed, fmt.Sprint(r.Round))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tworkers\tpassed\tfailed\tskipped\tfailed in rounds\t")
	for _, k := range order {
		t := by[k]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", k.fault, k.lang, t.pass, t.fail, t.skip, strings.Join(t.failed, ","))
	}
	tw.Flush()
}

// WriteJSON writes the results to path.
func WriteJSON(path string, results []PhaseResult) error {
	b, err := json.MarshalIndent(struct {
		Phases []PhaseResult `json:"phases"`
		Pass   bool          `json:"pass"`
	}{results, AllPass(results)}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// AllPass: every phase that ran passed (skipped phases do not fail a run).
func AllPass(results []PhaseResult) bool {
	for _, r := range results {
		if r.Skipped == "" && !r.Pass {
			return false
		}
	}
	return true
}
