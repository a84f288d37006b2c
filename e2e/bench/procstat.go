package main

import (
	"net"
	"os"
	"strconv"

	"github.com/prometheus/procfs"
)

// procCPU is a process's CPU time (user + system) in seconds.
type procCPU struct {
	User, System float64
}

func (c procCPU) Total() float64 { return c.User + c.System }

// procMem is a process's resident memory, in bytes.
type procMem struct {
	RSS, HWM int64 // VmRSS, VmHWM (peak RSS)
}

// userHZ is the unit of utime/stime in /proc/<pid>/stat (procfs's own, 100
// on every mainstream Linux architecture).
const userHZ = 100

// readProcCPU reads a process's user and system time (prometheus/procfs:
// /proc/<pid>/stat).
func readProcCPU(pid int) (procCPU, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procCPU{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procCPU{}, err
	}
	return procCPU{User: float64(st.UTime) / userHZ, System: float64(st.STime) / userHZ}, nil
}

// readProcMem reads a process's resident and peak resident memory
// (prometheus/procfs: /proc/<pid>/status).
func readProcMem(pid int) (procMem, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procMem{}, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return procMem{}, err
	}
	return procMem{RSS: int64(st.VmRSS), HWM: int64(st.VmHWM)}, nil
}

// localBrokers are the pids of the processes of this machine listening on
// the seeds' ports (the brokers kafka.sh started); seeds on other machines
// are left out.
func localBrokers(seeds []string) []int {
	var pids []int
	for _, s := range seeds {
		if pid, err := seedPID(s); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// seedPID is the pid of the process of this machine listening on seed's
// port.
func seedPID(seed string) (int, error) {
	_, port, err := net.SplitHostPort(seed)
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(port)
	return listenerPID(n)
}

// cpuBenchProcess names this process's CPU line: the Go pipelines' clients
// run in it.
const cpuBenchProcess = "bench process (clients)"

// cpuNow is the CPU time (seconds) so far of the brokers on this machine
// (summed), this process (the Go clients of a pipeline run) and the proxy,
// by the names the budget's CPU lines take. A process that cannot be read
// is left out.
func (b *bench) cpuNow() map[string]float64 {
	out := map[string]float64{}
	for _, pid := range b.brokers {
		c, err := readProcCPU(pid)
		if err != nil {
			delete(out, "broker")
			break
		}
		out["broker"] += c.Total()
	}
	if c, err := readProcCPU(os.Getpid()); err == nil {
		out[cpuBenchProcess] = c.Total()
	}
	if b.proxy != nil {
		if c, err := readProcCPU(b.proxy.pid()); err == nil {
			out["proxy"] = c.Total()
		}
	}
	return out
}
