package main

import (
	"context"
	"errors"
	"fmt"
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
		n: r.o.Records, lock: r.o.Lock, commits: map[poKey][]commitInfo{}, res: PhaseResult{Fault: fault, WorkerLang: r.o.WorkerLang}}
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
	if err := p.setupTopics(sctx); err != nil {
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
	if err := p.startProxies(); err != nil {
		return err
	}
	for i := 0; i < o.Workers; i++ {
		s := &workerSlot{idx: i + 1, lang: o.WorkerLang, proxy: p.proxy[i%len(p.proxy)], txnTimeout: o.TxnTimeout, holds: make(chan string, 16)}
		switch {
		case p.fault == "worker-stall":
			// A worker stopped after staging must be able to commit
			// after the stall: its transaction outlives the stall.
			s.txnTimeout = max(o.TxnTimeout, 3*p.stallFor())
		case p.fault == "txn-timeout" && i == 0:
			s.txnTimeout = 5 * time.Second
		}
		p.slots = append(p.slots, s)
	}
	return p.startWorkers()
}

// setupTopics creates the phase's input and output topics (3 partitions)
// and configures its share group.
func (p *phase) setupTopics(ctx context.Context) error {
	for _, t := range []string{p.in, p.out} {
		if err := sim.CreateTopic(ctx, p.r.adm, t, 3, p.r.rf); err != nil {
			return err
		}
	}
	// earliest: the inputs are produced before the group exists; a high
	// delivery limit: aborts and redeliveries must not archive inputs.
	return sim.AlterConfigs(ctx, p.r.admin, kmsg.ConfigResourceTypeGroupConfig, p.group, map[string]string{
		"share.auto.offset.reset":       "earliest",
		"share.delivery.count.limit":    "10",
		"share.record.lock.duration.ms": strconv.FormatInt(p.lock.Milliseconds(), 10),
	})
}

// startProxies starts watching the output and the phase's proxies.
func (p *phase) startProxies() error {
	o := p.r.o
	var err error
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
	return nil
}

// startWorkers starts every slot's worker.
func (p *phase) startWorkers() error {
	// All at once: a JVM worker takes a second or two to be ready; started
	// one after the other, the first would be through its share of the
	// inputs before the last one polls, and the faults would find idle
	// workers.
	errs := make([]error, len(p.slots))
	var wg sync.WaitGroup
	for i, s := range p.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.startWorker(s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
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
		p.evidence()
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
		outputs, readErr = orchestrator(o.Seeds).ReadAllCommitted(p.out, 3*time.Minute)
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
	if !p.res.Pass {
		p.evidence()
	}
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
