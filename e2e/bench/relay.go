package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
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
	*sim.Proc
	addr string
}

func startRelay(ctx context.Context, target, logPath string) (*relayProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	p, err := sim.StartProc("relay", self, []string{"relay", target}, os.Environ(), logPath, time.Now(), func(line string) {
		if a, ok := strings.CutPrefix(line, "relay listening "); ok {
			select {
			case addr <- a:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case a := <-addr:
		return &relayProc{Proc: p, addr: a}, nil
	case <-p.Done():
		return nil, fmt.Errorf("relay exited during start-up: %v (see %s)", p.Err(), logPath)
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.Kill9()
	return nil, fmt.Errorf("relay did not start within 10s (see %s)", logPath)
}

func (r *relayProc) stop() { r.Kill9() }

// usage is the relay's CPU time and the bytes it read (from both sides:
// /proc/<pid>/io rchar, which counts socket reads), comparable to the
// proxy's request + response bytes.
func (r *relayProc) usage() (usage, error) {
	u := usage{at: time.Now()}
	pid := r.Pid()
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
