package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// tWriter sends the bench's progress lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestBenchOnCluster runs a small bench against the real cluster: every
// pipeline mode, the scaling runs and (with Java) the Java comparison,
// each exactly-once run checked per input id. It asserts what the runs
// did (they ran, the exactly-once checks found every id once, the goals
// were computed from them), never how fast.
func TestBenchOnCluster(t *testing.T) {
	seeds := sim.RealSeeds(t, testing.Short())
	parts := []string{"pipelines", "scaling", "scaleout", "latency"}
	java := sim.JavaMissing() == ""
	if java {
		parts = append(parts, "java-eos")
	} else {
		t.Logf("no java-eos section: %s", sim.JavaMissing())
	}
	o := Options{Seeds: seeds, Records: 1000, RecordSize: 256, Repeat: 1, Partitions: 2, PipelineWorkers: 2,
		PipelineRecords: 6000, PipelineDur: 2 * time.Second, Batches: []int{1000}, Rounds: 1, Prefetch: true,
		ScaleWorkers: []int{1, 8}, ScalePartitions: []int{1}, ScaleBatch: 50, ScaleProc: time.Millisecond,
		ScaleDur: time.Second, ScaleWarm: time.Second, ScaleRounds: 1, ScaleRecords: 6000,
		ScaleOutSidecars: []int{1, 2}, ScaleOutDur: 2 * time.Second, ScaleOutWarm: time.Second, ScaleOutRounds: 1,
		JavaEOSBatches: []int{1000}, JavaEOSDur: 3 * time.Second, PacedRate: 100, PacedDur: 2 * time.Second,
		LatencyRate: 100, LatencyDur: time.Second, ProxyLog: "info", WorkDir: t.TempDir(), Parts: parts, Out: tWriter{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := Run(ctx, o)
	for _, e := range res.Errors {
		t.Errorf("measurement failed: %s", e)
	}
	count := func(runs []*pipelineResult, mode string) int {
		n := 0
		for _, r := range runs {
			if r.Mode == mode {
				n++
				if exactlyOnce(r.Mode) {
					if !r.Verified || r.Duplicates != 0 || r.Lost != 0 || r.Outputs != r.Records || r.Records == 0 {
						t.Errorf("%s run not exactly-once: %+v", mode, r)
					}
				}
			}
		}
		return n
	}
	for _, m := range pipelineModes {
		if n := count(res.Pipeline, m); n != 1 {
			t.Errorf("pipeline %s: %d runs, want 1", m, n)
		}
	}
	if n := count(res.Scaling, modeTxn) + count(res.Scaling, modeGroupEOS); n != 4 {
		t.Errorf("scaling: %d runs, want 4", n)
	}
	// Scale-out: one run per fleet size, exactly-once, and every sidecar
	// measured: it staged calls of its own and read the shadow topic.
	if len(res.ScaleOut) != 2 {
		t.Errorf("scale-out: %d runs, want 2", len(res.ScaleOut))
	}
	for _, r := range res.ScaleOut {
		if count([]*pipelineResult{r.Pipeline}, modeTxn) != 1 || len(r.PerSidecar) != r.Sidecars {
			t.Errorf("scale-out %d sidecars: %d sidecars measured, pipeline %+v", r.Sidecars, len(r.PerSidecar), r.Pipeline)
		}
		for i, c := range r.PerSidecar {
			if c.StagedSec <= 0 || c.ShadowRecsSec <= 0 || c.CPUMillicores <= 0 || c.MBSec <= 0 {
				t.Errorf("scale-out %d sidecars: sidecar %d: %+v", r.Sidecars, i+1, c)
			}
		}
	}
	if java {
		for _, m := range []string{modeJavaShareEOS, modeJavaGroupEOS, modeJavaShareTxn, modeJavaShareTxnDirect} {
			if n := count(res.JavaEOS, m); n != 1 {
				t.Errorf("java-eos: %d runs of %s, want 1", n, m)
			}
		}
	}
	// The time budget is measured for every run: the loop's phases, the
	// requests, and the proxy's side when through it.
	for _, r := range res.Pipeline {
		want := []string{"wait for records", "req Produce"}
		switch r.Mode {
		case modeTxn:
			want = append(want, "stage (TxnShareAcknowledge)", "req TxnShareAcknowledge", "req EndTxn", "proxy: commit → applied", "proxy: ShareFetch response work", "proxy: stage: validate")
		case modeGroupEOS:
			want = append(want, "End (flush, offsets, EndTxn)", "req TxnOffsetCommit")
		}
		for _, k := range want {
			if it, ok := r.Budget[k]; !ok || it.PerTxn <= 0 {
				t.Errorf("%s batch %d: no %q in the budget (%v)", r.Mode, r.Batch, k, r.Budget)
			}
		}
	}
	if res.Paced == nil || res.Paced.Records == 0 {
		t.Errorf("latency pipeline: %+v", res.Paced)
	}
	for _, g := range res.Goals {
		switch g.Name {
		case "share_eos_vs_group_eos_at_1000", "share_eos_vs_group_eos_8_workers_1_partition", "share_eos_vs_kafka_txn_at_1000", "txn_share_ack_p99_vs_produce_p99",
			"scaleout_cpu_per_own_MBps_growth", "scaleout_shadow_bytes_per_own_call_growth":
			if !g.Valid {
				t.Errorf("goal %s not measured: %s", g.Name, g.Line())
			}
		case "java_share_eos_vs_group_eos_at_1000", "java_commit_p99_vs_group_eos_at_1000":
			if !java {
				break
			}
			if !g.Valid {
				t.Errorf("goal %s not measured: %s", g.Name, g.Line())
			}
		}
		t.Log(g.Line())
	}
}
