package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// TestJavaClientsZeroConfig runs Apache Kafka's own Java clients and tools
// (e2e/kafka/java-clients.sh: admin tools, an idempotent and a
// transactional ProducerPerformance, ConsoleShareConsumer,
// ShareGroupCommand, ShareConsumerPerformance, TransactionalMessageCopier,
// a read_committed ConsoleConsumer) against the zero-config start: sharetx
// with no upstream, in front of its embedded cluster. It needs Java and the
// jars of e2e/kafka/kafka.sh; without Java it skips, unless
// E2E_REQUIRE_KAFKA is set (make test).
func TestJavaClientsZeroConfig(t *testing.T) {
	if _, err := exec.LookPath("java"); err != nil {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatal("java is not installed: the Java client tests need Java 17")
		}
		t.Skip("java is not installed")
	}
	if testing.Short() {
		t.Skip("-short: no Java run")
	}
	if !kafkaJarsCached() && os.Getenv("E2E_REQUIRE_KAFKA") == "" {
		t.Skip("Kafka's jars are not in the cache: `e2e/kafka/kafka.sh libs` (make test does)")
	}
	addr := startZeroConfig(t)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../e2e/kafka/java-clients.sh", addr)
	records := os.Getenv("JC_RECORDS")
	if records == "" {
		records = "2000"
	}
	// 2000 records and 3 s of consumer idleness: the run is mostly the
	// tools' 13 JVM start-ups.
	idle := os.Getenv("JC_IDLE_MS")
	if idle == "" {
		idle = "3000"
	}
	cmd.Env = append(os.Environ(), "JC_RECORDS="+records, "JC_IDLE_MS="+idle, "JC_LOG_DIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var results []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "RESULT ") {
			results = append(results, l)
			t.Log(l)
		}
	}
	err = cmd.Wait()
	if err != nil {
		t.Errorf("java-clients.sh against the zero-config start: %v\n%s", err, lastLines(stderr.String(), 40))
	}
	if len(results) < 10 {
		t.Errorf("java-clients.sh printed %d RESULT lines, want at least 10\n%s", len(results), lastLines(stderr.String(), 40))
	}
	for _, r := range results {
		if !strings.HasSuffix(r, " ok") && !strings.HasPrefix(r, "RESULT summary ok ") {
			t.Errorf("failed check against the zero-config start: %s", r)
		}
	}
}

// kafkaJarsCached reports whether e2e/kafka/kafka.sh has resolved the jars
// (SHARETX_CACHE, KAFKA_LIBS and KAFKA_VERSION as there).
func kafkaJarsCached() bool {
	libs, _ := sim.KafkaLibsDir("")
	_, err := os.Stat(filepath.Join(libs, ".complete"))
	return err == nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startZeroConfig starts the sharetx binary with no upstream (its embedded
// cluster) on free ports, waits until it is ready, keeps its output flowing,
// and returns its bootstrap address.
func startZeroConfig(t *testing.T) string {
	t.Helper()
	d := start(t, buildBinary(t), testEnv(t.TempDir()))
	line := d.await(t, "bootstrap.servers=")
	addr := strings.TrimSpace(line[strings.Index(line, "bootstrap.servers=")+len("bootstrap.servers="):])
	d.await(t, "sharetx: ready")
	go func() {
		for l := range d.lines {
			fmt.Fprintln(d.all, l)
		}
	}()
	// A failed check shows what the sidecar said (its warnings name the
	// requests it refused or retried).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sharetx's output, its last lines:\n%s", lastLines(d.all.String(), 60))
		}
	})
	return addr
}
