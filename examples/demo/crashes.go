package main

// The crash plan and its injection: which worker is killed with kill -9,
// where in its batch, and when.

import (
	"context"
	"fmt"
	"math/rand"
	"time"
)

// Crash kinds: where in a batch the worker is killed.
const (
	crashProduced  = "produced"  // outputs produced, inputs not committed/acknowledged
	crashCommitted = "committed" // right after the commit/acknowledgement
	crashRandom    = "random"    // wherever it is
)

func crashWhere(kind, mode string) string {
	switch {
	case kind == crashProduced && mode == modeEOS:
		return "after producing, before committing"
	case kind == crashProduced:
		return "after producing, before acknowledging"
	case kind == crashCommitted && mode == modeEOS:
		return "right after committing"
	case kind == crashCommitted:
		return "right after acknowledging"
	}
	return "at a random moment"
}

// crash is one planned kill -9; the same plan runs in every mode.
type crash struct {
	worker int // 0-based slot
	kind   string
	at     float64 // fire once this fraction of the inputs is in the output
}

func makePlan(o Options, rng *rand.Rand) []crash {
	plan := make([]crash, o.Crashes)
	// The worst moments most often: produced, committed, produced, random, ...
	cycle := []string{crashProduced, crashCommitted, crashProduced, crashRandom}
	kinds := make([]string, o.Crashes)
	for i := range kinds {
		kinds[i] = cycle[i%len(cycle)]
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i := range plan {
		plan[i] = crash{worker: rng.Intn(o.Workers), kind: kinds[i], at: float64(i+1) / float64(o.Crashes+1)}
	}
	return plan
}

// injectCrashes runs the plan: each crash once its share of the inputs is
// in the output (at least a second after the previous one), the worker
// killed with SIGKILL at the planned point and restarted right away.
func (m *modeRun) injectCrashes(ctx context.Context) {
	o := m.d.o
	last := time.Now()
	for i, c := range m.d.plan {
		for ctx.Err() == nil {
			distinct, _, _ := m.watch.Snapshot()
			if float64(distinct) >= c.at*float64(o.Records) && time.Since(last) >= time.Second {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		m.crash(i, c)
		last = time.Now()
	}
}

func (m *modeRun) crash(i int, c crash) {
	s := m.slots[c.worker]
	kind := c.kind
	note := ""
	if distinct, _, _ := m.watch.Snapshot(); distinct >= m.d.o.Records && kind != crashRandom {
		note = fmt.Sprintf(" (planned %q, but no input is left to process)", crashWhere(kind, m.mode))
		kind = crashRandom
	}
	if kind != crashRandom {
		for len(s.at) > 0 {
			<-s.at
		}
		reached := false
		if err := s.cur.Send("crash-at " + kind); err == nil {
			select {
			case got := <-s.at:
				reached = got == kind
			case <-time.After(3 * time.Second):
			case <-s.cur.Done():
			}
		}
		if !reached {
			note = fmt.Sprintf(" (planned %q, but it got no records within 3s)", crashWhere(kind, m.mode))
			kind = crashRandom
		}
	}
	inc := s.cur
	inc.Ending()
	pid := inc.Pid()
	inc.Kill9() // returns once its output is read: the state below is final
	inc.mu.Lock()
	openTxn, produced := inc.openTxn, inc.produced
	inc.mu.Unlock()
	m.mu.Lock()
	m.crashes++
	m.res.CrashKinds[kind]++
	if openTxn {
		m.res.KilledOpenTxns++
	}
	m.res.KilledProduced += produced
	m.mu.Unlock()
	if err := m.startWorker(s); err != nil {
		m.fail("restart worker %d: %v", s.idx, err)
		return
	}
	m.say("crash %d/%d: kill -9 worker %d (pid %d) %s%s; restarted (pid %d)", i+1, len(m.d.plan), s.idx, pid,
		crashWhere(kind, m.mode), note, s.cur.Pid())
	if err := m.waitReady(s); err != nil {
		m.fail("restart worker %d: %v", s.idx, err)
	}
}
