package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfRecorder samples the proxy process with Linux perf (--perf): the
// sharetx binary has no pprof endpoint, and this needs no change to it.
type perfRecorder struct {
	cmd  *exec.Cmd
	data string
}

func startPerf(pid int, dir string) (*perfRecorder, error) {
	path, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("--perf: %w", err)
	}
	p := &perfRecorder{data: filepath.Join(dir, "perf.data")}
	p.cmd = exec.Command(path, "record", "-F", "299", "-g", "-p", strconv.Itoa(pid), "-o", p.data)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("--perf: %w", err)
	}
	return p, nil
}

// stop ends the recording (SIGINT: perf writes its file) and returns the
// heaviest sharetx functions by inclusive time.
func (p *perfRecorder) stop(top int) (string, error) {
	p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perf", "report", "-i", p.data, "--stdio", "--children", "--sort", "symbol", "-g", "none").Output()
	if err != nil {
		return "", fmt.Errorf("perf report: %w", err)
	}
	var b bytes.Buffer
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[0], "%") || strings.HasPrefix(line, "#") {
			continue
		}
		sym := strings.Join(f[3:], " ")
		sym = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sym), "-      -"))
		if !strings.Contains(sym, "sharetx") && !strings.HasPrefix(sym, "runtime.mallocgc") && !strings.HasPrefix(sym, "runtime.gcBgMarkWorker") {
			continue
		}
		fmt.Fprintf(&b, "  %7s incl %7s self  %s\n", f[0], f[1], sym)
		if n++; n == top {
			break
		}
	}
	fmt.Fprintf(&b, "  (perf report -i %s --stdio for everything)\n", p.data)
	return b.String(), nil
}
