package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The relay is the bench's reference for what any proxy of sharetx's shape
// costs before it does anything: a separate process that accepts TCP
// connections and copies bytes to and from the broker through a user-space
// buffer (read, write; no splice), with no protocol logic at all. The
// franz-go pass-through runs go through it too, interleaved with the direct
// and proxied runs, so "relay/direct" is the ceiling a user-space proxy can
// reach on this machine, and the relay's CPU per MB is the floor of what
// moving the bytes costs.
//
// Clients reach it with a dialer that sends every connection to the relay,
// so it needs a one-broker cluster (every broker address is the target).

// dialVia maps a bootstrap string to the address every connection of a
// client with that bootstrap must dial instead (newClient reads it).
var dialVia sync.Map

// runRelay is the relay process: `bench relay <target>`. It prints
// "relay listening <addr>" and serves until killed.
func runRelay(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: bench relay host:port")
		return 2
	}
	target := args[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(stderr, "relay: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "relay listening %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(stderr, "relay: accept: %v\n", err)
			return 1
		}
		go relayConn(c, target)
	}
}

func relayConn(c net.Conn, target string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 64<<10)
		// Plain Reader/Writer wrappers: no ReadFrom/WriteTo, so no splice;
		// the bytes pass through user space as in a protocol-aware proxy.
		io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		dst.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}
	go pump(up, c)
	go pump(c, up)
	<-done
	<-done
}

// relayProc is a running relay process.
type relayProc struct {
	cmd  *exec.Cmd
	addr string
}

func startRelay(ctx context.Context, target string) (*relayProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "relay", target)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "relay listening ")
		if !ok || !found {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("relay did not start (said %q)", l)
		}
		return &relayProc{cmd: cmd, addr: addr}, nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, errors.New("relay did not start within 10s")
}

func (r *relayProc) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// usage is the relay's CPU time and the bytes it read (from both sides:
// /proc/<pid>/io rchar, which counts socket reads), comparable to the
// proxy's request + response bytes.
func (r *relayProc) usage() (usage, error) {
	u := usage{at: time.Now()}
	pid := r.cmd.Process.Pid
	var err error
	if u.cpu, err = readProcCPU(pid); err != nil {
		return u, err
	}
	if u.mem, err = readProcMem(pid); err != nil {
		return u, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return u, err
	}
	if u.bytes, err = parseRchar(string(b)); err != nil {
		return u, err
	}
	return u, nil
}

// parseRchar reads the rchar line of /proc/<pid>/io.
func parseRchar(s string) (float64, error) {
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, "rchar:"); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/pid/io rchar: %w", err)
			}
			return n, nil
		}
	}
	return 0, errors.New("/proc/pid/io has no rchar line")
}
