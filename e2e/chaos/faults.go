package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The faults a phase injects, one function each.

// ---------------------------------------------------------------- faults

func (p *phase) inject(ctx context.Context) {
	switch p.fault {
	case "none", "txn-input":
	case "worker-kill":
		p.workerKill()
	case "proxy-kill":
		p.proxyKill()
	case "proxy-kill-deferred":
		p.proxyKillAt(p.proxy[0], "deferred")
	case "broker-restart":
		p.brokerRestart(ctx)
	case "worker-stall":
		p.workerStall()
	case "txn-timeout":
		p.txnTimeout()
	}
}

func (p *phase) stallFor() time.Duration { return p.lock + 10*time.Second }

// workerKill kills workers with kill -9 in the windows that matter, each
// pinned by a hold (the worker sleeps at the point; the kill lands during
// the sleep):
//
//  1. worker 1 with acknowledgements staged in its open transaction;
//     restarted with the same transactional id: its InitProducerId fences
//     the dead incarnation and aborts the transaction at once;
//  2. worker 2 just after a commit (acknowledgements committed, perhaps not
//     applied yet: the proxy must apply them although the client is gone);
//     restarted with a new transactional id;
//  3. worker 1 again with acknowledgements staged; restarted with a new
//     transactional id: nothing fences the dead transaction, the broker
//     aborts it when it times out.
//
// With one worker, worker 1 takes every kill.
func (p *phase) workerKill() {
	type kill struct {
		s     *workerSlot
		point string
		newID bool
	}
	second := p.slots[min(1, len(p.slots)-1)]
	plan := []kill{{p.slots[0], "staged", false}, {second, "committed", true}, {p.slots[0], "staged", true}}
	for i, k := range plan {
		if i > 0 {
			// Let the work go on a little between kills.
			d0, _, _ := p.watch.Snapshot()
			until := time.Now().Add(5 * time.Second)
			for time.Now().Before(until) {
				if d, _, _ := p.watch.Snapshot(); d >= min(p.n, d0+p.n/10) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		p.killWorkerAt(k.s, k.point, k.newID, i+1)
	}
}

// killWorkerAt kills worker s with kill -9 while it holds at point (the
// n-th kill of the phase) and restarts it, with a new transactional id when
// newID. It reports whether the kill happened.
func (p *phase) killWorkerAt(s *workerSlot, point string, newID bool, n int) bool {
	// Up to a minute: a restarted worker may be given no partition until
	// the dead members' sessions expire (45 s), and a JVM worker takes
	// seconds to restart, so the others may have taken all the work
	// meanwhile. holdAt gives up once every input is in the output.
	if !p.holdAt(s, point, "5s", time.Minute) {
		p.note("worker %s did not reach %q (no work left?): kill %d skipped", s.label, point, n)
		return false
	}
	pid := s.cur.Pid()
	s.cur.Kill9()
	old := p.txnID(s)
	if newID {
		s.incarnation++
	}
	if err := p.startWorker(s); err != nil {
		p.fail("restart worker %d: %v", s.idx, err)
		return false
	}
	how := "the same transactional id " + old + " (fences the dead incarnation)"
	if newID {
		how = "a new transactional id " + p.txnID(s)
		if point == "staged" {
			how += " (the dead one's open transaction must time out)"
		}
	}
	p.note("kill -9 worker %d (pid %d) at %q; restarted as %s with %s", s.idx, pid, point, s.label, how)
	return true
}

// holdAt asks worker s to sleep for d at point and waits (up to wait) until
// it is there.
// It gives up early once every input is in the output: no work is left.
func (p *phase) holdAt(s *workerSlot, point, d string, wait time.Duration) bool {
	drainHolds(s)
	if err := s.cur.Send("hold " + point + " " + d); err != nil {
		return false
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if waitHold(s, "HOLD "+point, 250*time.Millisecond) {
			return true
		}
		if d, _, _ := p.watch.Snapshot(); d >= p.n {
			return false
		}
	}
	return false
}

// proxyKill: kill -9 proxy 1 while one of its workers has acknowledgements
// staged in an open transaction (TX_PENDING in the proxy's memory and in
// the shadow topic; the broker releases the records when the proxy's
// upstream connections drop), restart it on the same ports after 2s; the
// worker then commits through the restarted proxy, and its other workers
// reconnect.
func (p *phase) proxyKill() { p.proxyKillOf(p.proxy[0]) }

// proxyKillOf is proxyKill of pp.
func (p *phase) proxyKillOf(pp *proxyProc) { p.proxyKillAt(pp, "staged") }

// proxyKillAt kills pp with kill -9 while one of its workers holds at
// point: "staged" (proxyKill), or "deferred" (proxy-kill-deferred: a
// Python worker between the answer to its deferred call and the call that
// stages it, design.md §4.5: nothing was written, and the proxy's memory
// of the deferred acknowledgements goes with it); a kill at a random moment
// when no worker gets there within 15 s (Go and Java workers never defer).
func (p *phase) proxyKillAt(pp *proxyProc, point string) {
	var target *workerSlot
	for _, s := range p.slots {
		if s.proxy == pp {
			target = s
			break
		}
	}
	where := "at a random moment"
	if target != nil {
		if p.holdAt(target, point, "3s", 15*time.Second) {
			where = fmt.Sprintf("while worker %s holds acknowledgements %s in an open transaction", target.label, point)
		} else {
			where = fmt.Sprintf("(worker %s did not reach %q within 15s)", target.label, point)
		}
	}
	pid := pp.p.Pid()
	pp.p.Kill9()
	p.note("kill -9 %s (pid %d) %s; its workers %s lose their connections", pp.id, pid, where, p.workersOf(pp))
	time.Sleep(2 * time.Second)
	t := time.Now()
	if err := p.startProxy(pp); err != nil {
		p.fail("restart %s: %v", pp.id, err)
		return
	}
	p.note("%s restarted on %s (ready in %.1fs)", pp.id, pp.bootstrap, time.Since(t).Seconds())
}

func (p *phase) workersOf(pp *proxyProc) string {
	var ws []string
	for _, s := range p.slots {
		if s.proxy == pp {
			ws = append(ws, s.label)
		}
	}
	return strings.Join(ws, ",")
}

// brokerRestart: kafka.sh restart-node (kill -9, start on its data, wait
// until it is back and caught up). KAFKA_E2E_DIR / KAFKA_BASE_PORT pass
// through from the environment, so it hits the cluster under test.
func (p *phase) brokerRestart(ctx context.Context) {
	node := strconv.Itoa(p.r.o.RestartNode)
	logPath := filepath.Join(p.dir, "kafka-restart-node.log")
	lf, err := os.Create(logPath)
	if err != nil {
		p.fail("%v", err)
		return
	}
	defer lf.Close()
	cmd := exec.CommandContext(ctx, p.r.o.KafkaScript, "restart-node", node)
	cmd.Stdout, cmd.Stderr = lf, lf
	p.note("%s restart-node %s (kill -9 and restart)", p.r.o.KafkaScript, node)
	t := time.Now()
	if err := cmd.Run(); err != nil {
		p.fail("restart-node %s: %v (see %s)", node, err, logPath)
		return
	}
	p.note("node %s back and caught up after %.1fs", node, time.Since(t).Seconds())
}

// workerStall: SIGSTOP workers longer than the acquisition lock, then
// SIGCONT. Worker 1 is stopped holding acquired records it has not staged
// yet: the lock expires, the records go to another member, and its late
// TxnShareAcknowledge must be refused (it aborts). Worker 2 (if any) is
// stopped with its acknowledgements staged in an open transaction: the
// proxy renews their locks, and its commit after the stall must count.
func (p *phase) workerStall() {
	targets := []struct {
		s     *workerSlot
		point string
	}{{p.slots[0], "polled"}}
	if len(p.slots) > 1 {
		targets = append(targets, struct {
			s     *workerSlot
			point string
		}{p.slots[1], "staged"})
	}
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := t.s
			if !p.holdAt(s, t.point, "5s", 30*time.Second) {
				p.note("worker %s never reached %q within 30s: not stalled", s.label, t.point)
				return
			}
			s.cur.Signal(syscall.SIGSTOP)
			p.note("SIGSTOP worker %s (pid %d) at %q for %s (acquisition lock %s)", s.label, s.cur.Pid(), t.point, p.stallFor(), p.lock)
			time.Sleep(p.stallFor())
			s.mu.Lock()
			before := s.lastTxn
			s.mu.Unlock()
			s.cur.Signal(syscall.SIGCONT)
			p.note("SIGCONT worker %s", s.label)
			p.noteNextTxn(s, before)
		}()
	}
	wg.Wait()
}

// txnTimeout: worker 1 runs with a 5s transaction timeout and stalls inside
// one transaction (acknowledgements staged) well past it; the broker
// aborts the transaction, the proxy reverts the staged acknowledgements,
// and the worker's commit must fail.
func (p *phase) txnTimeout() {
	s := p.slots[0]
	stall := s.txnTimeout + 20*time.Second // the broker checks timeouts every 10s
	if !p.holdAt(s, "staged", stall.String(), 30*time.Second) {
		p.note("worker %s never staged acknowledgements within 30s: not stalled", s.label)
		return
	}
	s.mu.Lock()
	before := s.lastTxn
	s.mu.Unlock()
	p.note("worker %s (transaction timeout %s) stalls %s inside a transaction with staged acknowledgements", s.label, s.txnTimeout, stall)
	if !waitHold(s, "HOLD-END staged", stall+30*time.Second) {
		p.fail("worker %s did not resume", s.label)
		return
	}
	p.noteNextTxn(s, before)
}

// noteNextTxn notes how worker s's transaction after a stall ended.
func (p *phase) noteNextTxn(s *workerSlot, before string) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		last := s.lastTxn
		s.mu.Unlock()
		if last != before {
			if i := strings.Index(last, " recs="); i > 0 {
				last = last[:i]
			}
			p.note("worker %s after the stall: %s", s.label, last)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.note("worker %s ended no transaction within 90s of the stall", s.label)
}

func drainHolds(s *workerSlot) {
	for {
		select {
		case <-s.holds:
		default:
			return
		}
	}
}

func waitHold(s *workerSlot, want string, d time.Duration) bool {
	t := time.After(d)
	for {
		select {
		case l := <-s.holds:
			if l == want {
				return true
			}
		case <-t:
			return false
		}
	}
}
