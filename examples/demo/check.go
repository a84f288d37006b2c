package main

// Reading the output and asking the share group what is left, through
// sharetx (the reading itself: e2e/sim), and what sharetx says it did.

import (
	"fmt"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// verifier is the demo's own checking clients' view of sharetx.
func verifier(bootstrap string) sim.Cluster {
	return sim.Cluster{Seeds: []string{bootstrap}, ClientID: "demo-verifier"}
}

// leftover joins the share group with a fresh member through sharetx and
// polls for quiet: it returns how many records it was handed (records the
// group never acknowledged) and then the group's lag on the topic (records
// neither acknowledged nor archived, including any still locked by someone;
// -1 if unknown). It never accepts: what it gets it releases, and leaves.
func leftover(bootstrap, group, topic string, quiet time.Duration) (int, int64, error) {
	got, lag, err := verifier(bootstrap).Unacked(group, topic, quiet, 0)
	return len(got), lag, err
}

// verify reads the whole output (read_committed) and asks the share group
// what is left.
func (m *modeRun) verify() {
	var (
		wg       sync.WaitGroup
		outputs  map[string]int
		readErr  error
		left     int
		lag      int64
		leftErr  error
		bootstrp = m.d.stx.bootstrap
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		outputs, readErr = verifier(bootstrp).ReadAllCommitted(m.out, time.Minute)
	}()
	go func() {
		defer wg.Done()
		left, lag, leftErr = leftover(bootstrp, m.group, m.in, m.d.o.Quiet)
	}()
	wg.Wait()
	if readErr != nil {
		m.fail("%v", readErr)
	}
	if leftErr != nil {
		m.fail("share group check: %v", leftErr)
	}
	in := m.res.In
	m.res.Counts = sim.Count(m.ids, outputs)
	m.res.In = in
	m.res.Leftover, m.res.Lag = left, lag
	drained := "the share group acknowledged every input"
	if !m.res.Drained() {
		drained = fmt.Sprintf("the share group did NOT acknowledge every input: a fresh member got %d, lag %d", left, lag)
	}
	m.say("verified (output read read_committed, counted per id): in %d, out %d, duplicates %d, lost %d; %s",
		m.res.In, m.res.Out, m.res.Duplicates, m.res.Lost, drained)
}

// proxyCounters prints what sharetx did for the exactly-once mode, from its
// metrics (the at-least-once mode sends it nothing of the kind).
func (m *modeRun) proxyCounters() {
	get := func(name string, labels ...string) int {
		v, err := m.d.stx.metric(name, labels...)
		if err != nil {
			return -1
		}
		return int(v)
	}
	calls := get("sharetx_txn_share_acknowledge_total", `result="ok"`)
	commits := get("sharetx_markers_total", `type="commit"`)
	aborts := get("sharetx_markers_total", `type="abort"`)
	absorbed := get("sharetx_client_acks_absorbed_total")
	if calls < 0 || commits < 0 || absorbed < 0 {
		return // another version of sharetx
	}
	own := "franz-go's implicit acknowledgement at the next poll"
	switch m.d.o.WorkerLang {
	case langJava:
		own = "ShareTransactions.acknowledgeHandedOver after a commit, releaseForRedelivery after an abort"
	case langPython:
		own = "sharetx.acknowledge_handed_over after a commit, release_for_redelivery after an abort"
	}
	m.say("sharetx's metrics: %d TxnShareAcknowledge calls staged acknowledgements; %d commits and %d aborts resolved them; "+
		"%d offsets the share consumer acknowledged itself while they were staged or committed (%s) were absorbed, never forwarded",
		calls, commits, max(aborts, 0), absorbed, own)
}
