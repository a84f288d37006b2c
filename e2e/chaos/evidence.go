package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// evidence adds to the notes of a phase that did not pass what its logs
// say went wrong: the last warnings and errors of each sidecar and the
// last errors of each worker. The work directory may be gone by the time
// anyone reads a CI log (it is under $TMPDIR), so the lines that explain
// a failure travel with the result.
func (p *phase) evidence() {
	for _, pp := range p.proxy {
		path := filepath.Join(p.dir, fmt.Sprintf("proxy-%d.log", pp.idx))
		for _, l := range logTail(path, 12, proxyTrouble) {
			p.res.Notes = append(p.res.Notes, fmt.Sprintf("%s log: %s", pp.id, l))
		}
	}
	for _, s := range p.slots {
		path := filepath.Join(p.dir, fmt.Sprintf("worker-%d.log", s.idx))
		for _, l := range logTail(path, 8, workerTrouble) {
			p.res.Notes = append(p.res.Notes, fmt.Sprintf("worker %d log: %s", s.idx, l))
		}
	}
}

// proxyTrouble: a sidecar's log line worth showing (its warnings and
// errors, and what sharetx itself prints to stderr).
func proxyTrouble(l string) bool {
	return strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, " sharetx: ")
}

// workerTrouble: a worker's error lines (ERR ..., panics, kgo warnings).
func workerTrouble(l string) bool {
	return strings.Contains(l, " ERR ") || strings.Contains(l, "panic") || strings.Contains(l, "level=WARN") || strings.Contains(l, "[WARN]")
}

// logTail returns the last n lines of path that keep accepts, each cut to
// 400 bytes; nothing if the file cannot be read.
func logTail(path string, n int, keep func(string) bool) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !keep(l) {
			continue
		}
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		out = append(out, l)
		if len(out) > n {
			out = out[1:]
		}
	}
	return out
}
