package main

// The worker processes of a mode: each slot's incarnations, started and
// restarted, and what their protocol lines tell.

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

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
	path, args := m.d.workerCommand(s.cfg)
	p, err := sim.StartProc(fmt.Sprintf("worker-%d", s.idx), path, args, env, filepath.Join(m.dir, fmt.Sprintf("worker-%d.log", s.idx)), m.d.t0,
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
