package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is
// 100 on every mainstream Linux architecture (x86, arm64); sysconf would need
// cgo.
const clockTicks = 100

// procCPU is a process's CPU time (user + system) in seconds.
type procCPU struct {
	User, System float64
}

func (c procCPU) Total() float64 { return c.User + c.System }

// parseStat reads utime and stime (fields 14 and 15) from the contents of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// itself contain spaces and parentheses, so fields are counted from the last
// ')'.
func parseStat(s string) (procCPU, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procCPU{}, fmt.Errorf("/proc stat: no ')' in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14 = f[11], stime f[12].
	if len(f) < 13 {
		return procCPU{}, fmt.Errorf("/proc stat: %d fields after the command name, want >= 13", len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return procCPU{}, fmt.Errorf("/proc stat utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return procCPU{}, fmt.Errorf("/proc stat stime: %w", err)
	}
	return procCPU{User: float64(ut) / clockTicks, System: float64(st) / clockTicks}, nil
}

// procMem is what /proc/<pid>/status says about resident memory, in bytes.
type procMem struct {
	RSS, HWM int64 // VmRSS, VmHWM (peak RSS)
}

// parseStatus reads VmRSS and VmHWM from the contents of /proc/<pid>/status.
func parseStatus(s string) (procMem, error) {
	var m procMem
	var haveRSS, haveHWM bool
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("/proc status: unexpected %s line %q", k, sc.Text())
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc status %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS, haveRSS = n*1024, true
		} else {
			m.HWM, haveHWM = n*1024, true
		}
	}
	if !haveRSS || !haveHWM {
		return m, fmt.Errorf("/proc status: no VmRSS/VmHWM (a zombie?)")
	}
	return m, nil
}

func readProcCPU(pid int) (procCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}, err
	}
	return parseStat(string(b))
}

func readProcMem(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	return parseStatus(string(b))
}
