package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

// commitInfo is one committed transaction's claim on an input record.
type commitInfo struct {
	worker   string
	delivery int
	at       time.Duration // since the phase started
}

// workerSlot is worker i of a phase across its restarts.
type workerSlot struct {
	idx         int // 1-based
	proxy       *proxyProc
	incarnation int // suffix of the transactional id
	txnTimeout  time.Duration
	starts      int
	cur         *sim.Proc
	label       string // w<idx>#<start>

	mu                    sync.Mutex
	doneCommits, doneAbts int // from processes that exited
	curCommits, curAborts int
	lastTxn               string
	holds                 chan string // HOLD / HOLD-END lines
}

func (s *workerSlot) txns() (commits, aborts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.doneCommits + s.curCommits, s.doneAbts + s.curAborts
}

type phase struct {
	r      *runner
	fault  string
	id     string
	dir    string
	in     string
	out    string
	group  string
	n      int
	t0     time.Time
	lock   time.Duration
	ids    []string
	where  map[poKey]string
	proxy  []*proxyProc
	slots  []*workerSlot
	watch  *sim.OutputWatcher
	res    PhaseResult
	failed bool // set up failed: nothing to verify

	mu      sync.Mutex
	commits map[poKey][]commitInfo
	errLogs int
}

func (r *runner) newPhase(fault string) *phase {
	id := fmt.Sprintf("chaos-%s-%s", r.runID, fault)
	return &phase{r: r, fault: fault, id: id, dir: r.phaseDir(fault), in: id + "-in", out: id + "-out", group: id,
		n: r.o.Records, lock: r.o.Lock, commits: map[poKey][]commitInfo{}, res: PhaseResult{Fault: fault}}
}

func (p *phase) say(format string, args ...any) {
	p.r.say("%s: %s", p.fault, fmt.Sprintf(format, args...))
}

func (p *phase) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.say("%s", s)
	p.mu.Lock()
	p.res.Notes = append(p.res.Notes, fmt.Sprintf("%.1fs %s", time.Since(p.t0).Seconds(), s))
	p.mu.Unlock()
}

func (p *phase) fail(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.say("ERROR %s", s)
	p.mu.Lock()
	p.res.Errors = append(p.res.Errors, s)
	p.mu.Unlock()
}

func (p *phase) since() time.Duration { return time.Since(p.t0) }

// run runs the phase up to stopping its processes and returns the function
// that verifies it (slow: the share group check waits longer than the lock).
func (p *phase) run(ctx context.Context) func() PhaseResult {
	p.t0 = time.Now()
	p.res.WorkDir = p.dir
	o := p.r.o
	if skip := p.skipReason(); skip != "" {
		p.res.Skipped = skip
		p.say("skipped: %s", skip)
		return func() PhaseResult { return p.res }
	}
	p.say("phase starts: input %s, output %s, group %s, logs %s", p.in, p.out, p.group, p.dir)
	if err := p.setup(ctx); err != nil {
		p.fail("set-up: %v", err)
		p.teardown()
		p.failed = true
		return func() PhaseResult { p.res.Seconds = p.since().Seconds(); p.res.Judge(); return p.res }
	}

	// Inject the fault once 20–60% of the inputs are committed.
	trigger := max(1, int(float64(p.n)*(0.2+0.4*p.r.float())))
	var faultDone chan struct{}
	deadline := time.Now().Add(o.Timeout)
	lastProgress := time.Now()
	for {
		distinct, total, _ := p.watch.Snapshot()
		if faultDone == nil && distinct >= trigger {
			faultDone = make(chan struct{})
			p.say("%d/%d outputs committed: injecting %s", distinct, p.n, p.fault)
			go func() { defer close(faultDone); p.inject(ctx) }()
		}
		done := distinct >= p.n && faultDone != nil && sim.Closed(faultDone)
		if time.Since(lastProgress) >= 5*time.Second || done {
			p.progress(distinct, total)
			lastProgress = time.Now()
		}
		if done {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			why := fmt.Sprintf("phase timeout (%s)", o.Timeout)
			if ctx.Err() != nil {
				why = "interrupted"
			}
			p.fail("%s: %d of %d inputs in the output", why, distinct, p.n)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Let transactions in flight finish (a late duplicate shows up here).
	time.Sleep(2 * time.Second)
	if faultDone != nil && !sim.Closed(faultDone) {
		p.say("waiting for the fault injection to finish")
		<-faultDone
	}
	p.teardown()
	p.res.Seconds = p.since().Seconds()
	return p.verify
}

func (p *phase) skipReason() string {
	switch p.fault {
	case "broker-restart":
		if p.r.o.KafkaScript == "" {
			return "needs --kafka-script (e2e/kafka/kafka.sh) to restart a broker"
		}
		if len(p.r.brokers) < 3 {
			return fmt.Sprintf("needs a 3-node cluster (this one has %d)", len(p.r.brokers))
		}
		found := false
		for _, id := range p.r.brokers {
			found = found || id == int32(p.r.o.RestartNode)
		}
		if !found {
			return fmt.Sprintf("node %d is not in the cluster %v", p.r.o.RestartNode, p.r.brokers)
		}
	}
	return ""
}

func (p *phase) progress(distinct, total int) {
	var c, a, up int
	for _, s := range p.slots {
		sc, sa := s.txns()
		c, a = c+sc, a+sa
		if s.cur != nil && !s.cur.Exited() {
			up++
		}
	}
	p.say("%d/%d inputs committed in the output (%d records); transactions %d committed, %d aborted; workers up %d/%d",
		distinct, p.n, total, c, a, up, len(p.slots))
}

func (p *phase) setup(ctx context.Context) error {
	o := p.r.o
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, t := range []string{p.in, p.out} {
		if err := sim.CreateTopic(sctx, p.r.adm, t, 3, p.r.rf); err != nil {
			return err
		}
	}
	// earliest: the inputs are produced before the group exists; a high
	// delivery limit: aborts and redeliveries must not archive inputs.
	if err := sim.AlterConfigs(sctx, p.r.admin, kmsg.ConfigResourceTypeGroupConfig, p.group, map[string]string{
		"share.auto.offset.reset":       "earliest",
		"share.delivery.count.limit":    "10",
		"share.record.lock.duration.ms": strconv.FormatInt(p.lock.Milliseconds(), 10),
	}); err != nil {
		return err
	}
	seedOpts := []kgo.Opt{kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(0)}
	if p.fault == "txn-input" {
		// Every chunk of inputs in a transaction of its own: the input
		// holds a commit marker after each, so the share consumer is
		// handed control-record offsets (gaps) in every poll.
		seedOpts = append(seedOpts, kgo.TransactionalID(p.group+"-seeder"))
	}
	seeder, err := direct(o.Seeds, seedOpts...)
	if err != nil {
		return err
	}
	p.ids, p.where, err = seedInputs(sctx, seeder, p.in, "id", p.n)
	seeder.Close()
	if err != nil {
		return err
	}
	p.say("%d inputs produced", p.n)
	if p.watch, err = orchestrator(o.Seeds).WatchOutput(p.out); err != nil {
		return err
	}
	for i := 0; i < o.Proxies; i++ {
		base := p.r.portBase + i*p.r.portBlock
		pp := &proxyProc{idx: i + 1, id: fmt.Sprintf("chaos-proxy-%d", i+1), bootstrap: fmt.Sprintf("127.0.0.1:%d", base),
			portBase: base, metrics: fmt.Sprintf("127.0.0.1:%d", base+p.r.portBlock-1)}
		if err := p.startProxy(pp); err != nil {
			return err
		}
		p.proxy = append(p.proxy, pp)
	}
	p.say("%d proxies ready: %s", len(p.proxy), strings.Join(proxyAddrs(p.proxy), ", "))
	for i := 0; i < o.Workers; i++ {
		s := &workerSlot{idx: i + 1, proxy: p.proxy[i%len(p.proxy)], txnTimeout: o.TxnTimeout, holds: make(chan string, 16)}
		switch {
		case p.fault == "worker-stall":
			// A worker stopped after staging must be able to commit
			// after the stall: its transaction outlives the stall.
			s.txnTimeout = max(o.TxnTimeout, 3*p.stallFor())
		case p.fault == "txn-timeout" && i == 0:
			s.txnTimeout = 5 * time.Second
		}
		if err := p.startWorker(s); err != nil {
			return err
		}
		p.slots = append(p.slots, s)
	}
	return nil
}

// startProxy starts (or restarts) pp and watches for it dying on its own.
func (p *phase) startProxy(pp *proxyProc) error {
	if err := pp.start(p.r.sharetxBin, p.r.o.Seeds, p.r.o.ProxyLog, p.dir, p.t0, time.Minute); err != nil {
		return err
	}
	start := pp.starts
	pp.p.OnUnexpectedExit(func(err error) {
		p.fail("%s (start %d) exited on its own (%v): see %s", pp.id, start, err, filepath.Join(p.dir, fmt.Sprintf("proxy-%d.log", pp.idx)))
	})
	return nil
}

func proxyAddrs(ps []*proxyProc) []string {
	var s []string
	for _, pp := range ps {
		s = append(s, fmt.Sprintf("%s=%s", pp.id, pp.bootstrap))
	}
	return s
}

// maxPoll: records per poll, at most --max-poll, fewer for a small run so
// that there are transactions enough (about 20) for the fault to land in.
func (p *phase) maxPoll() int {
	return min(p.r.o.MaxPoll, max(5, p.n/20))
}

func (p *phase) txnID(s *workerSlot) string {
	return fmt.Sprintf("%s-w%d-%d", p.id, s.idx, s.incarnation)
}

// startWorker starts (or restarts) slot s's process.
func (p *phase) startWorker(s *workerSlot) error {
	s.starts++
	label := fmt.Sprintf("w%d#%d", s.idx, s.starts-1)
	cfg := workerConfig{name: fmt.Sprintf("%s-%s", p.fault, label), WorkerConfig: sim.WorkerConfig{Bootstrap: s.proxy.bootstrap,
		Group: p.group, In: p.in, Out: p.out, TxnID: p.txnID(s), MaxPoll: p.maxPoll(), AbortRate: p.r.o.AbortRate,
		Seed: int64(p.r.intn(1 << 30))}, txnTimeout: s.txnTimeout, logLevel: p.r.o.KgoLog}
	ready := make(chan struct{})
	var once sync.Once
	s.mu.Lock()
	s.curCommits, s.curAborts = 0, 0
	s.mu.Unlock()
	env := sim.WorkerEnv(roleEnv)
	pr, err := sim.StartProc(label, p.r.selfBin, cfg.args(), env, filepath.Join(p.dir, fmt.Sprintf("worker-%d.log", s.idx)), p.t0,
		func(line string) { p.onWorkerLine(s, label, line, func() { once.Do(func() { close(ready) }) }) })
	if err != nil {
		return err
	}
	s.cur, s.label = pr, label
	pr.OnUnexpectedExit(func(err error) {
		p.fail("worker %s exited on its own (%v): see %s", label, err, filepath.Join(p.dir, fmt.Sprintf("worker-%d.log", s.idx)))
	})
	go func() {
		<-pr.Done()
		s.mu.Lock()
		s.doneCommits += s.curCommits
		s.doneAbts += s.curAborts
		s.curCommits, s.curAborts = 0, 0
		s.mu.Unlock()
	}()
	select {
	case <-ready:
		return nil
	case <-pr.Done():
		return fmt.Errorf("worker %s exited during start-up: %v", label, pr.Err())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("worker %s not ready after 30s", label)
	}
}

func (p *phase) onWorkerLine(s *workerSlot, label, line string, ready func()) {
	switch {
	case line == "READY":
		ready()
	case strings.HasPrefix(line, "TXN "):
		kv := fields(line)
		c, _ := strconv.Atoi(kv["commits"])
		a, _ := strconv.Atoi(kv["aborts"])
		s.mu.Lock()
		s.curCommits, s.curAborts, s.lastTxn = c, a, line
		s.mu.Unlock()
		if strings.HasPrefix(line, "TXN commit ") {
			at := p.since()
			p.mu.Lock()
			for _, rec := range strings.Split(kv["recs"], ",") {
				f := strings.Split(rec, ":")
				if len(f) != 3 {
					continue
				}
				part, _ := strconv.Atoi(f[0])
				off, _ := strconv.ParseInt(f[1], 10, 64)
				dc, _ := strconv.Atoi(f[2])
				k := poKey{Partition: int32(part), Offset: off}
				p.commits[k] = append(p.commits[k], commitInfo{worker: label, delivery: dc, at: at})
			}
			p.mu.Unlock()
		}
	case strings.HasPrefix(line, "HOLD"):
		select {
		case s.holds <- line:
		default:
		}
	case strings.HasPrefix(line, "ERR "):
		p.mu.Lock()
		p.errLogs++
		n := p.errLogs
		p.mu.Unlock()
		if n <= 25 {
			p.say("%s %s", label, line)
		} else if n == 26 {
			p.say("(more worker errors: see the worker logs)")
		}
	}
}

// fields parses the key=value words of a worker line.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return m
}

// teardown stops the workers (they finish their transaction), waits until
// the proxies applied every committed acknowledgement, and stops the
// proxies.
func (p *phase) teardown() {
	for _, s := range p.slots {
		if s.cur != nil && !s.cur.Exited() {
			s.cur.Signal(syscall.SIGCONT)
			s.cur.Stop()
		}
	}
	for _, s := range p.slots {
		if s.cur != nil && !s.cur.Wait(30*time.Second) {
			p.fail("worker %s did not stop within 30s: killed", s.label)
		}
	}
	// Committed acknowledgements the proxies have not applied yet would
	// otherwise be redelivered once the proxies stop.
	deadline := time.Now().Add(45 * time.Second)
	for {
		pending := 0.0
		for _, pp := range p.proxy {
			if pp.p == nil || pp.p.Exited() {
				continue
			}
			if m, err := pp.scrape(); err == nil {
				pending += m["sharetx_tx_pending_records"]
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.note("proxies still hold %v records TX_PENDING or committed-not-applied after 45s; stopping them anyway", pending)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, pp := range p.proxy {
		if pp.p == nil || pp.p.Exited() {
			continue
		}
		if m, err := pp.scrape(); err == nil {
			p.note("%s (start %d) metrics: %s", pp.id, pp.starts, kipSummary(m))
		}
		pp.p.Signal(syscall.SIGTERM)
	}
	for _, pp := range p.proxy {
		if pp.p != nil && !pp.p.Wait(20*time.Second) {
			p.fail("%s did not stop within 20s of SIGTERM: killed", pp.id)
		}
	}
	if p.watch != nil {
		p.watch.Close()
	}
	var c, a int
	for _, s := range p.slots {
		sc, sa := s.txns()
		c, a = c+sc, a+sa
	}
	p.res.TxnsCommitted, p.res.TxnsAborted = c, a
}

// verify reads the output and asks the share group what is left.
func (p *phase) verify() PhaseResult {
	if p.failed {
		p.res.Judge()
		return p.res
	}
	o := p.r.o
	var (
		wg       sync.WaitGroup
		outputs  map[string]int
		readErr  error
		unacked  map[poKey]string
		lag      int64
		unackErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		outputs, readErr = orchestrator(o.Seeds).ReadAllCommitted(p.out, 3*time.Second, 2*time.Minute)
	}()
	go func() {
		defer wg.Done()
		unacked, lag, unackErr = orchestrator(o.Seeds).Unacked(p.group, p.in, 6*time.Second+p.lock+3*time.Second, 6*time.Second+p.lock+3*time.Second)
	}()
	wg.Wait()
	if readErr != nil {
		p.fail("%v", readErr)
	}
	if unackErr != nil {
		p.fail("share group check: %v", unackErr)
	}
	p.res.Counts = sim.Count(p.ids, outputs)
	// Unacked: what the fresh member was handed, or the group's lag if
	// that is more (records still locked by someone when it looked).
	p.res.Unacked = len(unacked)
	p.res.ShareLag = lag
	if lag > int64(len(unacked)) {
		p.res.Unacked = int(lag)
	}
	for _, id := range unacked {
		p.res.UnackedIDs = append(p.res.UnackedIDs, id)
		if outputs[id] > 0 {
			p.res.UnackedCommitted++
		}
	}
	sort.Strings(p.res.UnackedIDs)
	p.diagnose()
	p.res.Judge()
	p.say("verified: in %d, out %d, duplicates %d, lost %d, unacked %d (handed to a fresh member: %d, %d of them in the output; group lag %d), unexpected %d",
		p.res.In, p.res.Out, p.res.Duplicates, p.res.Lost, p.res.Unacked, len(unacked), p.res.UnackedCommitted, lag, p.res.Unexpected)
	return p.res
}

// diagnose notes, for some duplicated ids, every committed transaction
// that processed the record: which worker, which delivery, when.
func (p *phase) diagnose() {
	if len(p.res.DuplicateIDs) == 0 {
		return
	}
	byID := map[string]poKey{}
	for k, id := range p.where {
		byID[id] = k
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range p.res.DuplicateIDs {
		if i == 10 {
			break
		}
		k := byID[id]
		var parts []string
		for _, c := range p.commits[k] {
			parts = append(parts, fmt.Sprintf("%s delivery %d at %.1fs", c.worker, c.delivery, c.at.Seconds()))
		}
		s := fmt.Sprintf("duplicate %s (partition %d offset %d) committed by: %s", id, k.Partition, k.Offset, strings.Join(parts, "; "))
		if len(p.commits[k]) < 2 {
			s += " (fewer commits reported than outputs: a worker died with a commit in flight)"
		}
		p.res.Notes = append(p.res.Notes, s)
		p.r.say("%s: %s", p.fault, s)
	}
}

// ---------------------------------------------------------------- faults

func (p *phase) inject(ctx context.Context) {
	switch p.fault {
	case "none", "txn-input":
	case "worker-kill":
		p.workerKill()
	case "proxy-kill":
		p.proxyKill()
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
		s := k.s
		if !p.holdAt(s, k.point, "5s", 15*time.Second) {
			p.note("worker %s did not reach %q (no work left?): kill %d skipped", s.label, k.point, i+1)
			continue
		}
		pid := s.cur.Pid()
		s.cur.Kill9()
		old := p.txnID(s)
		if k.newID {
			s.incarnation++
		}
		if err := p.startWorker(s); err != nil {
			p.fail("restart worker %d: %v", s.idx, err)
			return
		}
		how := "the same transactional id " + old + " (fences the dead incarnation)"
		if k.newID {
			how = "a new transactional id " + p.txnID(s)
			if k.point == "staged" {
				how += " (the dead one's open transaction must time out)"
			}
		}
		p.note("kill -9 worker %d (pid %d) at %q; restarted as %s with %s", s.idx, pid, k.point, s.label, how)
	}
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
func (p *phase) proxyKill() {
	pp := p.proxy[0]
	var target *workerSlot
	for _, s := range p.slots {
		if s.proxy == pp {
			target = s
			break
		}
	}
	where := "at a random moment"
	if target != nil {
		if p.holdAt(target, "staged", "3s", 15*time.Second) {
			where = fmt.Sprintf("while worker %s holds acknowledgements staged in an open transaction", target.label)
		} else {
			where = fmt.Sprintf("(worker %s did not reach \"staged\" within 15s)", target.label)
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
