package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Proc is a child OS process (sharetx or a worker) whose stdout and stderr
// lines go, time-stamped, to a log file, and whose stdout lines go to the
// onLine callback of StartProc too. It dies with its parent (SIGKILL).
type Proc struct {
	Name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited and its output is drained
	err   error         // exit status, valid after done
	// ending: the parent killed or stopped the process; an exit without it
	// is unexpected.
	ending atomic.Bool

	logMu sync.Mutex
	log   *os.File
	t0    time.Time
}

// StartProc starts path with args and env. Its output goes to logPath
// (appended, each line stamped with the seconds since t0; stderr lines
// marked "! "), and each stdout line to onLine (if not nil), from the
// goroutine that reads stdout.
func StartProc(name, path string, args, env []string, logPath string, t0 time.Time, onLine func(line string)) (*Proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	// Children die with their parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err1 := cmd.StdoutPipe()
	stderr, err2 := cmd.StderrPipe()
	stdin, err3 := cmd.StdinPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		lf.Close()
		return nil, err
	}
	p := &Proc{Name: name, cmd: cmd, stdin: stdin, done: make(chan struct{}), log: lf, t0: t0}
	p.Logf("== start %s %s", path, strings.Join(args, " "))
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
			p.Logf("%s%s", prefix, line)
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
		p.Logf("== exit %v", p.err)
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Logf writes a time-stamped line to the process's log file.
func (p *Proc) Logf(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	fmt.Fprintf(p.log, "%8.3f %s\n", time.Since(p.t0).Seconds(), fmt.Sprintf(format, args...))
}

// Done is closed once the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit status; valid once Done is closed.
func (p *Proc) Err() error { return p.err }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited (and its output is read).
func (p *Proc) Exited() bool { return Closed(p.done) }

// Ending marks the process as being ended by the parent: its exit is
// expected from now on.
func (p *Proc) Ending() { p.ending.Store(true) }

// Signal sends s; SIGTERM and SIGKILL mark the exit expected.
func (p *Proc) Signal(s syscall.Signal) error {
	if s == syscall.SIGTERM || s == syscall.SIGKILL {
		p.Ending()
	}
	return p.cmd.Process.Signal(s)
}

// Stop asks a worker to finish what it is doing and exit (the line "stop"
// on its stdin).
func (p *Proc) Stop() error {
	p.Ending()
	return p.Send("stop")
}

// OnUnexpectedExit calls fn with the exit status if the process exits
// without the parent having ended it (Ending, Signal, Stop, Kill9).
func (p *Proc) OnUnexpectedExit(fn func(err error)) {
	go func() {
		<-p.done
		if !p.ending.Load() {
			fn(p.err)
		}
	}()
}

// Kill9 kills the process with SIGKILL and waits until it has exited and
// its output is read.
func (p *Proc) Kill9() {
	p.Ending()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Send writes a command line to the process's stdin.
func (p *Proc) Send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// Wait waits up to d for the process to exit, then kills it (continuing it
// first, in case it was stopped). It reports whether the process exited on
// its own.
func (p *Proc) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		p.Signal(syscall.SIGCONT)
		p.Kill9()
		return false
	}
}

// StartSharetx starts a sharetx binary as StartProc does and waits until
// it prints its "sharetx: ready" line. If it exits first or is not ready
// within timeout (then it is killed), the error says so and names the log;
// the process is returned whenever it was started.
func StartSharetx(name, bin string, args, env []string, logPath string, t0 time.Time, timeout time.Duration) (*Proc, error) {
	ready := make(chan struct{})
	var once sync.Once
	p, err := StartProc(name, bin, args, env, logPath, t0, func(line string) {
		if strings.HasPrefix(line, "sharetx: ready") {
			once.Do(func() { close(ready) })
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return p, fmt.Errorf("%s exited during start-up: %v (see %s)", name, p.err, logPath)
	case <-time.After(timeout):
		p.Kill9()
		return p, fmt.Errorf("%s not ready after %s (see %s)", name, timeout, logPath)
	}
}

// BuildSharetx builds ./cmd/sharetx into dir (from the module root when
// ModuleRoot finds it) and returns the binary's path.
func BuildSharetx(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "sharetx")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "github.com/sharetx/sharetx/cmd/sharetx")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as `make build`
	if root, err := ModuleRoot(); err == nil {
		cmd.Dir = root
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sharetx: %v\n%s", err, b)
	}
	return out, nil
}

// ModuleRoot is the directory of the sharetx module's go.mod, found from
// the working directory upwards.
func ModuleRoot() (string, error) {
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

// Scrape reads the Prometheus metrics at http://addr/metrics: the series
// (name with labels) whose name starts with prefix → value.
func Scrape(addr, prefix string) (map[string]float64, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return ParseMetrics(resp.Body, prefix)
}

// ParseMetrics parses the Prometheus text format (prometheus/common's
// expfmt) as Scrape does: every series whose name starts with prefix, keyed
// by its name and labels as the exposition prints them (a histogram's
// name_bucket{...,le="…"}, name_sum and name_count; a summary's quantiles,
// name_sum and name_count).
func ParseMetrics(r io.Reader, prefix string) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	put := func(name string, labels []*dto.LabelPair, last string, v float64) {
		if !strings.HasPrefix(name, prefix) {
			return
		}
		var parts []string
		for _, l := range labels {
			parts = append(parts, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
		if last != "" {
			parts = append(parts, last)
		}
		if len(parts) > 0 {
			name += "{" + strings.Join(parts, ",") + "}"
		}
		m[name] = v
	}
	bound := func(label string, v float64) string {
		return label + `="` + strconv.FormatFloat(v, 'g', -1, 64) + `"`
	}
	for name, f := range fams {
		for _, x := range f.GetMetric() {
			ls := x.GetLabel()
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				put(name, ls, "", x.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				put(name, ls, "", x.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := x.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					inf = inf || math.IsInf(b.GetUpperBound(), 1)
					put(name+"_bucket", ls, bound("le", b.GetUpperBound()), float64(b.GetCumulativeCount()))
				}
				if !inf {
					put(name+"_bucket", ls, `le="+Inf"`, float64(h.GetSampleCount()))
				}
				put(name+"_sum", ls, "", h.GetSampleSum())
				put(name+"_count", ls, "", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := x.GetSummary()
				for _, q := range s.GetQuantile() {
					put(name, ls, bound("quantile", q.GetQuantile()), q.GetValue())
				}
				put(name+"_sum", ls, "", s.GetSampleSum())
				put(name+"_count", ls, "", float64(s.GetSampleCount()))
			default:
				put(name, ls, "", x.GetUntyped().GetValue())
			}
		}
	}
	return m, nil
}

// Sum adds up the series of metric name in m whose labels contain every
// one of labels (e.g. `type="commit"`); found is false if none matched.
func Sum(m map[string]float64, name string, labels ...string) (sum float64, found bool) {
	for series, v := range m {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(series, l)
		}
		if match {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// FreePortBlock finds n consecutive free TCP ports on 127.0.0.1 below the
// usual ephemeral range (so that no client connection takes one while a
// killed process is down); rnd(k) picks a number in [0, k).
func FreePortBlock(n int, rnd func(int) int) (int, error) {
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
