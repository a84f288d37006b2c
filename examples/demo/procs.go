package main

// Child processes (sharetx and the workers), adapted from e2e/chaos/procs.go.

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
	"syscall"
	"time"
)

// proc is a child OS process whose stdout and stderr lines go, time-stamped,
// to a log file, and whose stdout lines go to onLine too.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited and its output is drained
	err   error         // exit status, valid after done

	logMu sync.Mutex
	log   *os.File
	t0    time.Time
}

func startProc(path string, args, env []string, logPath string, t0 time.Time, onLine func(line string)) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	// Children die with the demo.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err1 := cmd.StdoutPipe()
	stderr, err2 := cmd.StderrPipe()
	stdin, err3 := cmd.StdinPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		lf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, stdin: stdin, done: make(chan struct{}), log: lf, t0: t0}
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

// kill9 kills the process with SIGKILL and waits for it.
func (p *proc) kill9() {
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
		p.kill9()
		return false
	}
}

// buildSharetx builds ./cmd/sharetx into dir.
func buildSharetx(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "sharetx")
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/sharetx/sharetx/cmd/sharetx")
	cmd.Dir = root
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
			return "", errors.New("not inside the sharetx module (run the demo from the repository, or pass --sharetx-bin)")
		}
		dir = parent
	}
}

// sharetxProc is the one sharetx process of the demo: no upstream, so it
// starts its embedded cluster, with its data in a fresh directory.
type sharetxProc struct {
	bootstrap string // where clients connect
	metrics   string
	p         *proc
}

// startSharetx starts bin on free ports and waits until it says ready.
func startSharetx(bin, dir string, t0 time.Time, timeout time.Duration) (*sharetxProc, error) {
	base, err := freePortBlock(3)
	if err != nil {
		return nil, err
	}
	s := &sharetxProc{bootstrap: fmt.Sprintf("127.0.0.1:%d", base), metrics: fmt.Sprintf("127.0.0.1:%d", base+2)}
	// The user's own SHARETX_* settings (an upstream, say) must not leak in.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHARETX_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"SHARETX_LISTEN_ADVERTISED_HOST=127.0.0.1",
		"SHARETX_LISTEN_BROKER_PORT_BASE="+strconv.Itoa(base+1), // the embedded broker is node 0
		"SHARETX_EMBEDDED_DATA_DIR="+filepath.Join(dir, "embedded-cluster"),
	)
	ready := make(chan struct{})
	var once sync.Once
	logPath := filepath.Join(dir, "sharetx.log")
	p, err := startProc(bin, []string{"--bootstrap", s.bootstrap, "--metrics", s.metrics}, env, logPath, t0, func(line string) {
		if strings.HasPrefix(line, "sharetx: ready") {
			once.Do(func() { close(ready) })
		}
	})
	if err != nil {
		return nil, err
	}
	s.p = p
	select {
	case <-ready:
		return s, nil
	case <-p.done:
		return nil, fmt.Errorf("sharetx exited during start-up: %v (see %s)", p.err, logPath)
	case <-time.After(timeout):
		p.kill9()
		return nil, fmt.Errorf("sharetx not ready after %s (see %s)", timeout, logPath)
	}
}

// stop sends SIGTERM and waits for the exit.
func (s *sharetxProc) stop() {
	s.p.cmd.Process.Signal(syscall.SIGTERM)
	s.p.wait(20 * time.Second)
}

// metric sums the series of one metric on the proxy's /metrics whose
// labels contain every one of labels (e.g. `type="commit"`).
func (s *sharetxProc) metric(name string, labels ...string) (float64, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	sum, found := 0.0, false
	for sc.Scan() {
		series, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(series, l)
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && match {
			sum, found = sum+f, true
		}
	}
	if !found {
		return 0, fmt.Errorf("metric %s%v not found", name, labels)
	}
	return sum, nil
}

// freePortBlock finds n consecutive free TCP ports on 127.0.0.1 below the
// usual ephemeral range.
func freePortBlock(n int) (int, error) {
	for attempt := 0; attempt < 200; attempt++ {
		base := 20000 + int(time.Now().UnixNano()/7%int64(12000-n))
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
