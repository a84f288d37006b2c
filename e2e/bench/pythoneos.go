package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// The Python exactly-once comparison (section python-eos): e2e/bench/python/eos_bench.py, the Java
// EosBench's twin on confluent-kafka (librdkafka), through sharetx (ShareConsumer + sharetx.Producer)
// against confluent-kafka's own consumer-group EOS (Consumer + send_offsets_to_transaction, direct),
// in python/venv.sh's virtual environment. Its RESULT line is EosBench's (parseEosResult).

const (
	modePyShareEOS       = "python-share-eos"
	modePyGroupEOS       = "python-group-eos"
	modePyShareTxn       = "python-share-txn"
	modePyShareTxnDirect = "python-share-txn-direct"
	pythonEOSBench       = "e2e/bench/python/eos_bench.py"
)

var pythonApps struct {
	once                sync.Once
	python, script, err string
}

// runPythonEOS makes the virtual environment once (python/venv.sh) and runs eos_bench.py, killing
// it when ctx ends.
func runPythonEOS(ctx context.Context, o javaEOSOpts) (javaEOSResult, error) {
	pythonApps.once.Do(func() {
		var log bytes.Buffer
		python, root, err := sim.PythonApps(ctx, &log)
		pythonApps.python, pythonApps.script = python, filepath.Join(root, pythonEOSBench)
		if err != nil {
			pythonApps.err = fmt.Sprintf("%v\n%s", err, log.String())
		}
	})
	if pythonApps.err != "" {
		return javaEOSResult{}, fmt.Errorf("making the Python environment: %s", pythonApps.err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.MaxDur+3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonApps.python, "-u", pythonApps.script,
		"--mode", o.Mode, "--bootstrap", o.Bootstrap, "--in", o.In, "--out", o.Out, "--group", o.Group,
		"--transactional-id", o.TxnID, "--batch", strconv.Itoa(o.Batch), "--target", strconv.FormatInt(o.Target, 10),
		"--max-seconds", strconv.FormatFloat(o.MaxDur.Seconds(), 'f', 3, 64))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r, perr := parseEosResult(stdout.String())
	if err != nil || perr != nil {
		return javaEOSResult{}, fmt.Errorf("eos_bench.py --mode %s: %v %v\nstdout: %s\nstderr (last lines): %s", o.Mode, err, perr,
			strings.TrimSpace(stdout.String()), sim.LastLines(stderr.String(), 15))
	}
	r.CPUSeconds = processCPU(cmd)
	return r, nil
}

// pythonEOS runs the Python consume-transform-produce through sharetx against confluent-kafka's
// own consumer-group EOS, one process each, in interleaved rounds, both checked exactly-once.
func (b *bench) pythonEOS(ctx context.Context) {
	o := b.o
	in, err := b.pipelineInput(ctx)
	if err != nil {
		b.fail("pipeline input", err)
		return
	}
	b.progress("python exactly-once: %d round(s) of ShareConsumer + sharetx.Producer (through sharetx), Consumer + send_offsets_to_transaction (direct) and ShareConsumer + Kafka transactions alone (through sharetx and direct, ACCEPTs after the commit), transactions of %v, one process each, up to %d records or %s",
		o.Rounds, o.PythonEOSBatches, o.PipelineRecords, o.PythonEOSDur)
	for round := 0; round < o.Rounds; round++ {
		for _, batch := range o.PythonEOSBatches {
			for _, mode := range rotated([]string{modePyShareEOS, modePyGroupEOS, modePyShareTxn, modePyShareTxnDirect}, round) {
				if ctx.Err() != nil {
					return
				}
				r, err := b.clientEOSRun(ctx, pythonEOSClient, mode, in, batch, round)
				if err != nil {
					b.fail(fmt.Sprintf("python %s batch %d round %d", mode, batch, round+1), err)
					continue
				}
				b.res.PythonEOS = append(b.res.PythonEOS, r)
				b.progress("python round %d: %s", round+1, describeRun(r))
			}
		}
	}
}
