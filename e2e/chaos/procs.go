package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// proxyProc is one sharetx process; a restart keeps its ports and id.
type proxyProc struct {
	idx       int // 1-based
	id        string
	bootstrap string // 127.0.0.1:port
	portBase  int
	metrics   string
	p         *sim.Proc
	starts    int
}

// proxyEnv is the configuration of proxy pp: everything through SHARETX_*
// variables (configs/sharetx.yaml lists the keys). Later entries win.
func proxyEnv(pp *proxyProc, level string) []string {
	return append(os.Environ(),
		"SHARETX_LISTEN_BOOTSTRAP="+pp.bootstrap,
		"SHARETX_LISTEN_ADVERTISED_HOST=127.0.0.1",
		"SHARETX_LISTEN_BROKER_PORT_BASE="+strconv.Itoa(pp.portBase),
		"SHARETX_METRICS_ADDRESS="+pp.metrics,
		"SHARETX_KIP1289_PROXY_ID="+pp.id,
		"SHARETX_LOG_LEVEL="+level,
	)
}

// start starts (or restarts) the proxy and waits until it says ready.
func (pp *proxyProc) start(bin string, seeds []string, logLevel, dir string, t0 time.Time, timeout time.Duration) error {
	pp.starts++
	p, err := sim.StartSharetx(pp.id, bin, []string{"--upstream", strings.Join(seeds, ",")}, proxyEnv(pp, logLevel),
		filepath.Join(dir, fmt.Sprintf("proxy-%d.log", pp.idx)), t0, timeout)
	if p != nil {
		pp.p = p
	}
	return err
}

// scrape reads the proxy's Prometheus metrics: series (with labels) → value.
func (pp *proxyProc) scrape() (map[string]float64, error) {
	return sim.Scrape(pp.metrics, "sharetx_")
}

// kipSummary is the line of a proxy's KIP-1289 counters printed after a phase.
func kipSummary(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		for _, pre := range []string{"sharetx_txn_share_acknowledge_total", "sharetx_markers_total", "sharetx_upstream_ack_failures_total",
			"sharetx_client_acks_absorbed_total", "sharetx_client_share_session_epoch_errors_total", "sharetx_lock_renewals_total",
			"sharetx_tx_pending_records", "sharetx_commit_to_applied_seconds_count", "sharetx_connections_closed_total", "sharetx_shadow_read_records_total"} {
			if strings.HasPrefix(k, pre) {
				parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimPrefix(k, "sharetx_"), v))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// The proxy and worker processes of a phase, and what their output says.

// commitInfo is one committed transaction's claim on an input record.
type commitInfo struct {
	worker   string
	delivery int
	at       time.Duration // since the phase started
}

// workerSlot is worker i of a phase across its restarts.
type workerSlot struct {
	idx         int    // 1-based
	lang        string // go, java or python
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
		Seed: int64(p.r.intn(1 << 30))}, txnTimeout: s.txnTimeout, logLevel: p.r.o.KgoLog, lang: s.lang}
	ready := make(chan struct{})
	var once sync.Once
	s.mu.Lock()
	s.curCommits, s.curAborts = 0, 0
	s.mu.Unlock()
	path, args, env := p.r.workerCommand(cfg)
	pr, err := sim.StartProc(label, path, args, env, filepath.Join(p.dir, fmt.Sprintf("worker-%d.log", s.idx)), p.t0,
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
