package main

import (
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
