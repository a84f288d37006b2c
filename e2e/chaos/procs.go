package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is a child OS process (a proxy or a worker) whose stdout and stderr
// lines go, time-stamped, to a log file and to onLine.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited and its output is drained
	err   error         // exit status, valid after done
	// ending: the orchestrator killed or stopped the process; an exit
	// without it is unexpected.
	ending atomic.Bool

	logMu sync.Mutex
	log   *os.File
	t0    time.Time
}

func startProc(name, path string, args, env []string, logPath string, t0 time.Time, onLine func(line string)) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	// Children die with the orchestrator.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{}), log: lf, t0: t0}
	p.logf("== start %s %s", path, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	scan := func(r io.Reader, prefix string, cb func(string)) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logf("%s%s", prefix, line)
			if cb != nil {
				cb(line)
			}
		}
	}
	wg.Add(2)
	go scan(stdout, "", onLine)
	go scan(stderr, "! ", nil)
	go func() {
		wg.Wait()
		p.err = cmd.Wait()
		p.logf("== exit %v", p.err)
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) logf(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	fmt.Fprintf(p.log, "%8.3f %s\n", time.Since(p.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(s syscall.Signal) error {
	if s == syscall.SIGTERM || s == syscall.SIGKILL {
		p.ending.Store(true)
	}
	return p.cmd.Process.Signal(s)
}

// stop asks a worker to finish its transaction and exit.
func (p *proc) stop() error {
	p.ending.Store(true)
	return p.send("stop")
}

// onUnexpectedExit calls fn if the process exits without the orchestrator
// having killed or stopped it.
func (p *proc) onUnexpectedExit(fn func(err error)) {
	go func() {
		<-p.done
		if !p.ending.Load() {
			fn(p.err)
		}
	}()
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *proc) kill9() {
	p.ending.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// send writes a command line to the process's stdin.
func (p *proc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// wait waits up to d for the process to exit, then kills it. It reports
// whether the process exited on its own.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		p.signal(syscall.SIGCONT) // in case it was stopped
		p.kill9()
		return false
	}
}

// ---------------------------------------------------------------- proxies

// proxyProc is one sharetx process; a restart keeps its ports and id.
type proxyProc struct {
	idx       int // 1-based
	id        string
	bootstrap string // 127.0.0.1:port
	portBase  int
	metrics   string
	p         *proc
	starts    int
}

// buildSharetx builds ./cmd/sharetx once into dir.
func buildSharetx(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "sharetx")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/sharetx/sharetx/cmd/sharetx")
	if root, err := moduleRoot(); err == nil {
		cmd.Dir = root
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sharetx: %v\n%s", err, b)
	}
	return out, nil
}

// moduleRoot is the directory of the sharetx module's go.mod, found from the
// working directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/sharetx/sharetx\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the sharetx module")
		}
		dir = parent
	}
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
	ready := make(chan struct{})
	var once sync.Once
	p, err := startProc(fmt.Sprintf("proxy-%d", pp.idx), bin, []string{"--upstream", strings.Join(seeds, ",")}, proxyEnv(pp, logLevel),
		filepath.Join(dir, fmt.Sprintf("proxy-%d.log", pp.idx)), t0, func(line string) {
			if strings.HasPrefix(line, "sharetx: ready") {
				once.Do(func() { close(ready) })
			}
		})
	if err != nil {
		return err
	}
	pp.p = p
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited during start-up: %v (see %s)", pp.id, p.err, filepath.Join(dir, fmt.Sprintf("proxy-%d.log", pp.idx)))
	case <-time.After(timeout):
		return fmt.Errorf("%s not ready after %s", pp.id, timeout)
	}
}

// scrape reads the proxy's Prometheus metrics: series (with labels) → value.
func (pp *proxyProc) scrape() (map[string]float64, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + pp.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sharetx_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// kipSummary is the line of a proxy's KIP-1289 counters printed after a phase.
func kipSummary(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		for _, pre := range []string{"sharetx_txn_share_acknowledge_total", "sharetx_markers_total", "sharetx_upstream_ack_failures_total",
			"sharetx_client_acks_absorbed_total", "sharetx_client_share_session_epoch_errors_total", "sharetx_lock_renewals_total",
			"sharetx_tx_pending_records", "sharetx_commit_to_applied_seconds_count"} {
			if strings.HasPrefix(k, pre) {
				parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimPrefix(k, "sharetx_"), v))
			}
		}
	}
	sortStrings(parts)
	return strings.Join(parts, " ")
}

// freePortBlock finds n consecutive free TCP ports on 127.0.0.1 below the
// usual ephemeral range (so that no client connection takes one while a
// killed proxy is down).
func freePortBlock(n int, rnd func(int) int) (int, error) {
	for attempt := 0; attempt < 200; attempt++ {
		base := 20000 + rnd(12000-n)
		ok := true
		for i := 0; i < n && ok; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no block of free ports found")
}
