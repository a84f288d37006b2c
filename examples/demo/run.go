package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

// Options of one demo run.
type Options struct {
	Records    int           // inputs per mode
	Workers    int           // worker processes
	Crashes    int           // kill -9 per mode
	Modes      []string      // modeEOS, modeALO, in order
	MaxPoll    int           // records per poll (and transaction) at most
	RecordTime time.Duration // simulated processing time per record
	AbortRate  float64       // exactly-once: transactions aborted on purpose
	Seed       int64
	WorkDir    string        // logs; "" = a new temporary directory
	SharetxBin string        // "" = go build ./cmd/sharetx
	Timeout    time.Duration // per mode, for every input to reach the output
	Quiet      time.Duration // the drained check: how long a fresh member polls
	Out        io.Writer     // progress
}

// Crash kinds: where in a batch the worker is killed.
const (
	crashProduced  = "produced"  // outputs produced, inputs not committed/acknowledged
	crashCommitted = "committed" // right after the commit/acknowledgement
	crashRandom    = "random"    // wherever it is
)

var crashKinds = []string{crashProduced, crashCommitted, crashRandom}

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

// Result of one mode.
type Result struct {
	Mode string
	// In, Out, Distinct, Duplicates, Lost, Unexpected and the duplicated
	// and lost ids: the output counted per input id.
	sim.Counts
	TxnCommitted int // exactly-once: as reported by the workers
	TxnAborted   int
	AckBatches   int // at-least-once: polls acknowledged
	Crashes      int // kill -9 injected
	// KilledOpenTxns: exactly-once, transactions open when their worker was
	// killed (aborted when the restart fenced them).
	KilledOpenTxns int
	// KilledProduced: outputs produced by workers killed before committing
	// or acknowledging their inputs.
	KilledProduced int
	CrashKinds     map[string]int // by where the worker was when killed
	Leftover       int            // records a fresh member of the share group was handed afterwards
	Lag            int64          // the share group's lag afterwards (-1: unknown)
	Seconds        float64
	Errors         []string
	LogDir         string
}

// Drained: the share group acknowledged every input.
func (r *Result) Drained() bool { return r.Leftover == 0 && r.Lag == 0 }

// ExactlyOnce: every input exactly once in the output, the group drained.
func (r *Result) ExactlyOnce() bool {
	return r.Duplicates == 0 && r.Lost == 0 && r.Unexpected == 0 && r.Drained() && len(r.Errors) == 0
}

type demo struct {
	o     Options
	log   io.Writer // demo.log in the work dir
	dir   string
	t0    time.Time
	self  string
	stx   *sharetxProc
	admin *kgo.Client
	plan  []crash
	rng   *rand.Rand
	outMu sync.Mutex
}

func (d *demo) say(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	line := fmt.Sprintf(format, args...)
	fmt.Fprintln(d.o.Out, line)
	if d.log != nil {
		fmt.Fprintf(d.log, "%8.3f %s\n", time.Since(d.t0).Seconds(), line)
	}
}

// Run runs the demo: sharetx with its embedded cluster, then every mode.
// Its error is about the set-up; what went wrong in a mode is in its
// Result.
func Run(ctx context.Context, o Options) (results []Result, logDir string, err error) {
	d := &demo{o: o, t0: time.Now(), rng: rand.New(rand.NewSource(o.Seed))}
	d.dir = o.WorkDir
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "sharetx-demo-"); err != nil {
			return nil, "", err
		}
	} else if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, "", err
	}
	if lf, err := os.Create(filepath.Join(d.dir, "demo.log")); err == nil {
		d.log = lf
		defer lf.Close()
	}
	if d.self, err = os.Executable(); err != nil {
		return nil, d.dir, err
	}
	d.say("logs: %s", d.dir)
	bin := o.SharetxBin
	if bin == "" {
		d.say("building ./cmd/sharetx ...")
		if bin, err = buildSharetx(ctx, d.dir); err != nil {
			return nil, d.dir, err
		}
		defer os.Remove(bin) // after sharetx stopped (deferred below); 20+ MB
	}
	if d.stx, err = startSharetx(bin, d.dir, d.t0, time.Minute); err != nil {
		return nil, d.dir, err
	}
	defer d.stx.stop()
	d.say("sharetx is up with its embedded cluster (data in %s): bootstrap.servers=%s, metrics http://%s/metrics",
		filepath.Join(d.dir, "embedded-cluster"), d.stx.bootstrap, d.stx.metrics)
	if d.admin, err = kgo.NewClient(kgo.SeedBrokers(d.stx.bootstrap), kgo.ClientID("demo"), kgo.ProducerLinger(0)); err != nil {
		return nil, d.dir, err
	}
	defer d.admin.Close()
	// The embedded cluster is the demo's own: a delivery limit that
	// aborts and crashes cannot reach (so nothing is archived
	// unprocessed), and expired locks swept every second.
	if err := d.alterConfigs(ctx, kmsg.ConfigResourceTypeBroker, "", map[string]string{
		"group.share.delivery.count.limit":    "10",
		"share.record.lock.sweep.interval.ms": "1000",
	}); err != nil {
		return nil, d.dir, err
	}
	d.plan = makePlan(o, d.rng)
	var kinds []string
	for _, c := range d.plan {
		kinds = append(kinds, fmt.Sprintf("w%d %s", c.worker+1, c.kind))
	}
	d.say("crash plan, the same in every mode (kill -9, spread over the run): %s", strings.Join(kinds, ", "))
	for _, mode := range o.Modes {
		if ctx.Err() != nil {
			break
		}
		results = append(results, d.runMode(ctx, mode))
	}
	return results, d.dir, ctx.Err()
}

func (d *demo) alterConfigs(ctx context.Context, ty kmsg.ConfigResourceType, name string, kv map[string]string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return sim.AlterConfigs(actx, d.admin, ty, name, kv)
}

// ---------------------------------------------------------------- one mode

// slot is worker i of a mode across its restarts (incarnations).
type slot struct {
	idx   int // 1-based
	cfg   workerConfig
	cur   *incarnation // set by the goroutine that starts and kills workers
	at    chan string  // AT lines of the current incarnation
	ready chan struct{}

	mu   sync.Mutex
	incs []*incarnation // every one so far
}

// incarnation is one process of a slot.
type incarnation struct {
	*sim.Proc // ended by the demo (kill -9, stop): its exit is expected

	mu sync.Mutex
	n  [3]int // commits, aborts, batches, as it last reported them
	// Its batch in progress: a transaction open (TXN begin), outputs
	// produced (PRODUCED n=), not yet committed/acknowledged.
	openTxn  bool
	produced int
}

func (s *slot) counts() (commits, aborts, batches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inc := range s.incs {
		inc.mu.Lock()
		commits, aborts, batches = commits+inc.n[0], aborts+inc.n[1], batches+inc.n[2]
		inc.mu.Unlock()
	}
	return
}

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

// startWorker starts (or restarts) slot s's process. With the same
// transactional id, a restart fences the killed incarnation.
func (m *modeRun) startWorker(s *slot) error {
	s.cfg.Seed = m.d.rng.Int63()
	s.ready = make(chan struct{})
	ready := s.ready
	var once sync.Once
	for len(s.at) > 0 {
		<-s.at
	}
	env := sim.WorkerEnv(roleEnv)
	inc := &incarnation{}
	p, err := sim.StartProc(fmt.Sprintf("worker-%d", s.idx), m.d.self, s.cfg.args(), env, filepath.Join(m.dir, fmt.Sprintf("worker-%d.log", s.idx)), m.d.t0,
		func(line string) { m.onWorkerLine(s, inc, line, func() { once.Do(func() { close(ready) }) }) })
	if err != nil {
		return err
	}
	inc.Proc = p
	s.cur = inc
	s.mu.Lock()
	s.incs = append(s.incs, inc)
	s.mu.Unlock()
	p.OnUnexpectedExit(func(err error) {
		m.fail("worker %d exited on its own (%v): see %s", s.idx, err, filepath.Join(m.dir, fmt.Sprintf("worker-%d.log", s.idx)))
	})
	return nil
}

func (m *modeRun) waitReady(s *slot) error {
	select {
	case <-s.ready:
		return nil
	case <-s.cur.Done():
		return fmt.Errorf("worker %d exited during start-up: %v", s.idx, s.cur.Err())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("worker %d not ready after 30s", s.idx)
	}
}

func (m *modeRun) onWorkerLine(s *slot, inc *incarnation, line string, ready func()) {
	switch {
	case line == "READY":
		ready()
	case line == "TXN begin":
		inc.mu.Lock()
		inc.openTxn = true
		inc.mu.Unlock()
	case strings.HasPrefix(line, "PRODUCED "):
		n, _ := strconv.Atoi(fields(line)["n"])
		inc.mu.Lock()
		inc.produced = n
		inc.mu.Unlock()
	case strings.HasPrefix(line, "TXN ") || strings.HasPrefix(line, "ACK "):
		kv := fields(line)
		c, _ := strconv.Atoi(kv["commits"])
		a, _ := strconv.Atoi(kv["aborts"])
		b, _ := strconv.Atoi(kv["batches"])
		inc.mu.Lock()
		inc.n = [3]int{c, a, b}
		inc.openTxn, inc.produced = false, 0
		inc.mu.Unlock()
	case strings.HasPrefix(line, "AT "):
		select {
		case s.at <- strings.TrimPrefix(line, "AT "):
		default:
		}
	}
}

func fields(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
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
		outputs, readErr = verifier(bootstrp).ReadAllCommitted(m.out, 2*time.Second, time.Minute)
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
	m.say("sharetx's metrics: %d TxnShareAcknowledge calls staged acknowledgements; %d commits and %d aborts resolved them; "+
		"%d offsets the share consumer ACCEPTed itself while they were staged or committed (franz-go's implicit "+
		"acknowledgement at the next poll) were absorbed, never forwarded", calls, commits, max(aborts, 0), absorbed)
}
