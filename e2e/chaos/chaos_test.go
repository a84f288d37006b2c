package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

// TestMain lets the test binary be the worker too: the orchestrator
// re-executes its own binary as `<binary> worker ...` with CHAOS_ROLE=worker.
func TestMain(m *testing.M) {
	sim.TestMain(m, roleEnv, workerMain)
}

// TestChaosShort: a short chaos run against the real cluster of
// E2E_KAFKA_SEEDS (make test): 300 inputs, 2 worker processes over 2
// sharetx processes, phases none, txn-input, worker-kill and proxy-kill.
// Every input must be in the output exactly once (read_committed) and
// acknowledged in the share group.
func TestChaosShort(t *testing.T) {
	seeds := sim.RealSeeds(t, testing.Short())
	t.Parallel()
	dir, err := os.MkdirTemp("", "sharetx-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	log := &sim.LineLog{T: t}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	results, err := Run(ctx, Options{
		Seeds:   seeds,
		Records: 300,
		Workers: 2,
		Proxies: 2,
		Faults:  []string{"none", "txn-input", "worker-kill", "proxy-kill"},
		// Random aborts: the aborted records are redelivered and must
		// not be accepted by the next poll.
		AbortRate: 0.15,
		Timeout:   2 * time.Minute,
		// The third kill of worker-kill leaves a transaction for the
		// broker to time out: keep that short.
		TxnTimeout: 10 * time.Second,
		WorkDir:    dir,
		Out:        log,
	})
	if err != nil {
		t.Fatalf("chaos run: %v (logs in %s)", err, dir)
	}
	var table strings.Builder
	WriteTable(&table, results)
	t.Logf("chaos run took %s:\n%s", time.Since(start).Round(time.Second), table.String())
	failed := false
	for _, r := range results {
		if r.Skipped != "" || !r.Pass {
			failed = true
			t.Errorf("%s: %s: in %d, out %d, duplicates %d, lost %d, unacked %d, unexpected %d, errors %v",
				r.Fault, r.Result(), r.In, r.Out, r.Duplicates, r.Lost, r.Unacked, r.Unexpected, r.Errors)
			for _, n := range r.Notes {
				t.Logf("%s: %s", r.Fault, n)
			}
		}
	}
	if failed {
		t.Logf("logs kept in %s", dir)
		return
	}
	os.RemoveAll(dir)
}

// TestChaosShortJava: a short chaos run with the Java worker (e2e/chaos/java:
// the stock KafkaShareConsumer in explicit mode and sharetx-clients'
// SharetxProducer) against the real cluster of E2E_KAFKA_SEEDS: 600 inputs,
// small polls (--max-poll 5: many transactions, many random aborts), 3 Java
// workers over 2 sharetx processes, phases none and worker-kill. Three
// workers: one input partition each, so that worker 1 still has work when
// the first kill comes (the later kills may find no work left: a JVM takes
// about two seconds to restart, and the others finish meanwhile; the test
// asserts that at least one kill landed). Not parallel: a JVM per worker (and per restart) on top
// of TestChaosShort's processes would slow both down past their start-up
// deadlines on a small machine.
func TestChaosShortJava(t *testing.T) {
	seeds := sim.RealSeeds(t, testing.Short())
	sim.NeedJava(t)
	dir, err := os.MkdirTemp("", "sharetx-chaos-java-test-")
	if err != nil {
		t.Fatal(err)
	}
	log := &sim.LineLog{T: t}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const records = 600
	faults := []string{"none", "worker-kill"}
	start := time.Now()
	results, err := Run(ctx, Options{
		Seeds:      seeds,
		Records:    records,
		Workers:    3,
		Proxies:    2,
		Faults:     faults,
		MaxPoll:    5,
		AbortRate:  0.15,
		Timeout:    2 * time.Minute,
		TxnTimeout: 10 * time.Second, // the third kill's transaction is left for the broker to time out
		WorkerLang: "java",
		WorkDir:    dir,
		Out:        log,
	})
	if err != nil {
		t.Fatalf("chaos run: %v (logs in %s)", err, dir)
	}
	var table strings.Builder
	WriteTable(&table, results)
	t.Logf("chaos run with Java workers took %s:\n%s", time.Since(start).Round(time.Second), table.String())
	if len(results) != len(faults) {
		t.Fatalf("%d results for %d phases", len(results), len(faults))
	}
	for i, r := range results {
		if r.Fault != faults[i] || r.WorkerLang != "java" {
			t.Errorf("phase %d: fault %q with %q workers, want %q with java", i, r.Fault, r.WorkerLang, faults[i])
		}
		// Every input in the output exactly once, acknowledged, by
		// workers that committed transactions.
		if r.Skipped != "" || !r.Pass || r.In != records || r.Out != records || r.Distinct != records || r.Duplicates != 0 ||
			r.Lost != 0 || r.Unacked != 0 || r.Unexpected != 0 || r.TxnsCommitted == 0 {
			t.Errorf("%s: %s: in %d, out %d, distinct %d, duplicates %d, lost %d, unacked %d, unexpected %d, txns committed %d, skipped %q, errors %v",
				r.Fault, r.Result(), r.In, r.Out, r.Distinct, r.Duplicates, r.Lost, r.Unacked, r.Unexpected, r.TxnsCommitted, r.Skipped, r.Errors)
		}
		if r.Fault == "worker-kill" {
			kills := 0
			for _, n := range r.Notes {
				if strings.Contains(n, "kill -9 worker") {
					kills++
				}
			}
			if kills == 0 {
				t.Errorf("worker-kill: no Java worker was killed (notes %v)", r.Notes)
			}
		}
	}
	if !AllPass(results) {
		t.Errorf("not every phase passed")
	}
	if t.Failed() {
		for _, r := range results {
			for _, n := range r.Notes {
				t.Logf("%s: %s", r.Fault, n)
			}
		}
		t.Logf("logs kept in %s", dir)
		return
	}
	os.RemoveAll(dir)
}

// TestVerifierOnCluster: the verifier's two checks are not toothless. The
// output count sees committed records only (an aborted transaction's
// record is not counted) and finds duplicates and losses; the share-group
// check hands back records nobody acknowledged, and never acknowledges them
// itself (a second check finds them again).
func TestVerifierOnCluster(t *testing.T) {
	s := sim.RealSeeds(t, false)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := direct(s)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	ids, err := brokerIDs(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	rf := int16(min(3, len(ids)))
	name := fmt.Sprintf("chaos-verifier-%d", time.Now().UnixNano())
	in, out, group := name+"-in", name+"-out", name
	for _, topic := range []string{in, out} {
		if err := sim.CreateTopic(ctx, adm, topic, 1, rf); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.AlterConfigs(ctx, admin, kmsg.ConfigResourceTypeGroupConfig, group, map[string]string{"share.auto.offset.reset": "earliest"}); err != nil {
		t.Fatal(err)
	}
	inputs, _, err := seedInputs(ctx, admin, in, "v", 5)
	if err != nil {
		t.Fatal(err)
	}

	txn, err := direct(s, kgo.TransactionalID(name), kgo.DefaultProduceTopic(out))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	for _, step := range []struct {
		values []string
		commit kgo.TransactionEndTry
	}{{[]string{inputs[0], inputs[1]}, kgo.TryCommit}, {[]string{inputs[2]}, kgo.TryAbort}, {[]string{inputs[0]}, kgo.TryCommit}} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range step.values {
			if err := txn.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, step.commit); err != nil {
			t.Fatal(err)
		}
	}
	outputs, err := orchestrator(s).ReadAllCommitted(out, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := sim.Count(inputs, outputs)
	if c.Out != 3 || c.Duplicates != 1 || c.Lost != 3 || c.Distinct != 2 || outputs[inputs[2]] != 0 {
		t.Fatalf("output count %+v from %v: want 3 committed records, 1 duplicate, 3 lost, the aborted record not counted", c, outputs)
	}

	for round := 1; round <= 2; round++ {
		// Records are expected: poll until they come (a fresh member's
		// join and first assignment took longer than 9 s on a loaded
		// three-node cluster; the wait ends at the first records), then
		// settle past the lock time as the chaos verdict does.
		got, lag, err := orchestrator(s).Unacked(group, in, time.Minute, 6*time.Second+3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(inputs) || lag != int64(len(inputs)) {
			t.Fatalf("round %d: the share-group check was handed %d unacknowledged inputs (lag %d), want %d: %v", round, len(got), lag, len(inputs), got)
		}
	}
}

// TestSoakShort: two minutes of `chaos soak` against the real cluster (make
// test runs it on three nodes): 2 Go and 1 Java worker over 2 sidecars, up
// to 300 inputs/s, a fault every 30 s (worker kill -9, last sidecar kill -9
// and restart; no broker restart here: make test runs the e2e failover
// tests, which stop brokers of their own, at the same time; make soak
// restarts brokers), the input in transactions every other 15 s, sampled
// every 10 s, and a churn cycle (a new share group, member and transactional
// id) every 3 s. Every input in the output exactly once and acknowledged, and
// no sampled figure of a sidecar kept growing.
func TestSoakShort(t *testing.T) {
	seeds := sim.RealSeeds(t, testing.Short())
	sim.NeedJava(t)
	t.Parallel()
	dir, err := os.MkdirTemp("", "sharetx-soak-test-")
	if err != nil {
		t.Fatal(err)
	}
	log := &sim.LineLog{T: t}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	so := SoakOptions{Duration: 2 * time.Minute, Sample: 10 * time.Second, WarmUp: 30 * time.Second, Rate: 300, Backlog: 5000,
		GoWorkers: 2, JavaWorkers: 1, FaultEvery: 30 * time.Second, Drain: 3 * time.Minute, ChurnEvery: 3 * time.Second}
	res, err := Soak(ctx, Options{Seeds: seeds, Proxies: 2, TxnTimeout: 10 * time.Second, AbortRate: 0.1,
		MaxPoll: 50, WorkDir: dir, Out: log}, so)
	if err != nil {
		t.Fatalf("soak: %v (logs in %s)", err, dir)
	}
	var sum strings.Builder
	WriteSoakSummary(&sum, res, 0)
	t.Logf("soak (logs in %s):\n%s", dir, sum.String())
	r := res.PhaseResult
	if !res.SoakPass || r.In != res.Records || r.Distinct != res.Records || r.Duplicates != 0 || r.Lost != 0 || r.Unacked != 0 || r.Unexpected != 0 {
		t.Errorf("soak: %s: records %d, in %d, distinct %d, duplicates %d, lost %d, unacked %d, unexpected %d, growing %v, errors %v",
			r.Result(), res.Records, r.In, r.Distinct, r.Duplicates, r.Lost, r.Unacked, r.Unexpected, res.Growing, r.Errors)
	}
	// The run did what it says: inputs, faults, samples of sidecar 1 over
	// the whole load, and growth judged on them.
	if res.Records < 1000 || r.TxnsCommitted == 0 || r.TxnsAborted == 0 {
		t.Errorf("%d inputs, %d transactions committed, %d aborted: the load did not run", res.Records, r.TxnsCommitted, r.TxnsAborted)
	}
	if len(res.Faults) < 2 {
		t.Errorf("faults injected: %v, want at least a worker kill and a sidecar restart", res.Faults)
	}
	var first int
	for _, s := range res.Samples {
		if s.Proxy == 1 && s.Start == 1 && s.Load {
			first++
		}
	}
	if first < 9 {
		t.Errorf("%d samples of sidecar 1 under load, want at least 9 (one every 10 s for 2 minutes)", first)
	}
	judged := 0
	for _, row := range judgeGrowth(res.Samples, so.WarmUp, so.ChurnEvery > 0) {
		if row.Proxy == 1 && row.NotJudgedWhy == "" {
			judged++
		}
	}
	// The figures churned owners grow are judged only after the time they
	// are kept (longer than this soak): make soak judges them.
	if want := len(soakMetrics) - len(keptFor); judged != want {
		t.Errorf("%d figures of sidecar 1 judged for growth, want %d (all but %d kept for churned owners)", judged, want, len(keptFor))
	}
	if c := res.Churn; c == nil || c.Committed < 5 {
		t.Errorf("churn: %+v, want at least 5 cycles committed in two minutes", c)
	}
	if _, err := os.Stat(res.Plot); err != nil {
		t.Errorf("plot: %v", err)
	}
}
