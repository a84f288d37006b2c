package main

// One mode of the demo: its topics and share group, its workers, the run
// until every input is in the output, and the teardown.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

type modeRun struct {
	d       *demo
	mode    string
	dir     string
	in, out string
	group   string
	ids     []string
	slots   []*slot
	watch   *sim.OutputWatcher
	res     Result
	mu      sync.Mutex
	crashes int
}

func (m *modeRun) say(format string, args ...any) {
	m.d.say("[%s] %s", m.mode, fmt.Sprintf(format, args...))
}

func (m *modeRun) fail(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	m.say("ERROR %s", s)
	m.mu.Lock()
	m.res.Errors = append(m.res.Errors, s)
	m.mu.Unlock()
}

func (d *demo) runMode(ctx context.Context, mode string) Result {
	o := d.o
	m := &modeRun{d: d, mode: mode, dir: filepath.Join(d.dir, mode), in: "demo-" + mode + "-in", out: "demo-" + mode + "-out",
		group: "demo-" + mode, res: Result{Mode: mode, Counts: sim.Counts{In: o.Records}, CrashKinds: map[string]int{}, Lag: -1}}
	m.res.LogDir = m.dir
	start := time.Now()
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		m.fail("%v", err)
		return m.res
	}
	how := "transactional producer per worker incarnation; ACCEPT acknowledgements bound to each transaction; commit (and a few random aborts)"
	if mode == modeALO {
		how = "plain producer; produce, then ACCEPT the inputs (no transactions)"
	}
	m.say("%d inputs, %d workers, one share group; %s", o.Records, o.Workers, how)
	if err := m.setup(ctx); err != nil {
		m.fail("set-up: %v", err)
		m.teardown()
		m.res.Seconds = time.Since(start).Seconds()
		return m.res
	}

	crashesDone := make(chan struct{})
	go func() { defer close(crashesDone); m.injectCrashes(ctx) }()
	deadline := time.Now().Add(o.Timeout)
	lastProgress := time.Now()
	for {
		distinct, _, _ := m.watch.Snapshot()
		done := distinct >= o.Records && sim.Closed(crashesDone)
		if time.Since(lastProgress) >= 2*time.Second || done {
			m.progress(start)
			lastProgress = time.Now()
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			m.fail("interrupted with %d of %d inputs in the output", distinct, o.Records)
			break
		}
		if time.Now().After(deadline) {
			m.fail("only %d of %d inputs in the output after %s", distinct, o.Records, o.Timeout)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	<-crashesDone
	m.teardown()
	m.verify()
	if mode == modeEOS {
		m.proxyCounters()
	}
	m.res.Seconds = time.Since(start).Seconds()
	return m.res
}

func (m *modeRun) progress(start time.Time) {
	distinct, total, _ := m.watch.Snapshot()
	var c, a, b int
	for _, s := range m.slots {
		sc, sa, sb := s.counts()
		c, a, b = c+sc, a+sa, b+sb
	}
	m.mu.Lock()
	crashes := m.crashes
	m.mu.Unlock()
	work := fmt.Sprintf("transactions %d committed, %d aborted", c, a)
	if m.mode == modeALO {
		work = fmt.Sprintf("batches acknowledged %d", b)
	}
	m.say("%3.0fs  output: %d/%d inputs (%d records)  %s  crashes %d/%d",
		time.Since(start).Seconds(), distinct, m.d.o.Records, total, work, crashes, len(m.d.plan))
}

func (m *modeRun) setup(ctx context.Context) error {
	o := m.d.o
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	adm := kadm.NewClient(m.d.admin)
	// One input partition: every member of the share group shares it, so a
	// restarted worker gets records at once (with more partitions than
	// members, a killed member's partitions wait for its session timeout).
	for _, t := range []string{m.in, m.out} {
		if err := sim.CreateTopic(sctx, adm, t, 1, 1); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
	}
	// earliest: the inputs are produced before the group first reads.
	if err := m.d.alterConfigs(sctx, kmsg.ConfigResourceTypeGroupConfig, m.group, map[string]string{
		"share.auto.offset.reset": "earliest",
	}); err != nil {
		return err
	}
	// Small batches: a share fetch acquires whole batches.
	m.ids = make([]string, o.Records)
	const chunk = 10
	for start := 0; start < o.Records; start += chunk {
		var recs []*kgo.Record
		for i := start; i < min(o.Records, start+chunk); i++ {
			m.ids[i] = fmt.Sprintf("id-%06d", i)
			recs = append(recs, &kgo.Record{Topic: m.in, Value: []byte(m.ids[i])})
		}
		if err := m.d.admin.ProduceSync(sctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce the inputs: %w", err)
		}
	}
	var err error
	if m.watch, err = verifier(m.d.stx.bootstrap).WatchOutput(m.out); err != nil {
		return err
	}
	for i := 0; i < o.Workers; i++ {
		s := &slot{idx: i + 1, at: make(chan string, 4), cfg: workerConfig{mode: m.mode, recordTime: o.RecordTime,
			WorkerConfig: sim.WorkerConfig{Bootstrap: m.d.stx.bootstrap, Group: m.group, In: m.in, Out: m.out,
				TxnID: fmt.Sprintf("demo-%s-w%d", m.mode, i+1), MaxPoll: o.MaxPoll, AbortRate: o.AbortRate}}}
		if err := m.startWorker(s); err != nil {
			return err
		}
		m.slots = append(m.slots, s)
	}
	for _, s := range m.slots {
		if err := m.waitReady(s); err != nil {
			return err
		}
	}
	return nil
}

// teardown stops the workers (each finishes its batch) and waits until
// sharetx applied every committed acknowledgement.
func (m *modeRun) teardown() {
	for _, s := range m.slots {
		if s.cur != nil && !s.cur.Exited() {
			s.cur.Stop()
		}
	}
	for _, s := range m.slots {
		if s.cur != nil && !s.cur.Wait(30*time.Second) {
			m.fail("worker %d did not stop within 30s: killed", s.idx)
		}
	}
	for _, s := range m.slots {
		c, a, b := s.counts()
		m.res.TxnCommitted += c
		m.res.TxnAborted += a
		m.res.AckBatches += b
	}
	m.res.Crashes = m.crashes
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := m.d.stx.metric("sharetx_tx_pending_records")
		if err != nil || v == 0 {
			break
		}
		if time.Now().After(deadline) {
			m.say("sharetx still holds %v acknowledgements staged or committed-not-applied after 30s", v)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if m.watch != nil {
		m.watch.Close()
	}
}
