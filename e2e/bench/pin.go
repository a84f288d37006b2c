package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// pinning is pin mode's placement: the broker, this process and every
// client it starts (children inherit the mask) on clientCPUs; the proxy and
// the relay on proxyCPUs. Every side runs its clients on the same CPUs, and
// the proxy never takes CPU from the broker or the clients.
type pinning struct {
	clientCPUs, proxyCPUs, allCPUs string
	brokers                        []int
}

func newPinning() (*pinning, error) {
	n := runtime.NumCPU()
	if n < 2 {
		return nil, fmt.Errorf("--pin needs at least 2 CPUs, this machine has %d", n)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("--pin needs taskset (util-linux): %w", err)
	}
	clients := "0"
	if n > 2 {
		clients = fmt.Sprintf("0-%d", n-2)
	}
	return &pinning{clientCPUs: clients, proxyCPUs: strconv.Itoa(n - 1), allCPUs: fmt.Sprintf("0-%d", n-1)}, nil
}

// taskset sets the CPU list of every thread of pid.
func taskset(pid int, cpus string) error {
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %v: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pinBrokersAndSelf pins the brokers listening on seeds' ports of this
// machine, and this process, to the client CPUs.
func (p *pinning) pinBrokersAndSelf(seeds []string) error {
	for _, s := range seeds {
		pid, err := seedPID(s)
		if err != nil {
			return fmt.Errorf("--pin: the broker at %s: %w (pin mode needs the broker on this machine)", s, err)
		}
		if err := taskset(pid, p.clientCPUs); err != nil {
			return err
		}
		p.brokers = append(p.brokers, pid)
	}
	return taskset(os.Getpid(), p.clientCPUs)
}

// unpin gives the brokers every CPU again (the cluster outlives the run).
func (p *pinning) unpin() {
	for _, pid := range p.brokers {
		_ = taskset(pid, p.allCPUs)
	}
}

func (p *pinning) String() string {
	return fmt.Sprintf("the broker (pid %v), the bench and its clients on CPU %s; the proxy and the relay on CPU %s", p.brokers, p.clientCPUs, p.proxyCPUs)
}

// listenerPID finds the process listening on TCP port on this machine
// (/proc/net/tcp{,6}, then the socket's inode among /proc/*/fd).
func listenerPID(port int) (int, error) {
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if p, err := strconv.ParseInt(fs[1][i+1:], 16, 32); err == nil && int(p) == port {
				inodes = append(inodes, fs[9])
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no process of this machine listens on port %d", port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		for _, in := range inodes {
			if l == "socket:["+in+"]" {
				pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("the listener on port %d belongs to no process this user can see", port)
}
