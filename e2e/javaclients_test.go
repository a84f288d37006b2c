package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestJavaClientsThroughProxy runs Apache Kafka's own Java clients and tools
// (ProducerPerformance, a share consumer, ShareConsumerPerformance,
// TransactionalMessageCopier, a read_committed ConsoleConsumer, admin
// tools) through the proxy against the real broker, via
// e2e/kafka/java-clients.sh. Every check must give the same result as it
// does directly against the broker, and no Java client may open a
// connection to a real broker port: they must follow the rewritten
// metadata to the proxy.
func TestJavaClientsThroughProxy(t *testing.T) {
	SkipForPass(t, 3) // the Java clients must follow metadata naming several brokers to the proxy
	b := RealBackend(t)
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("java is not installed: the real-broker tests need Java 17 (make test installs the jars, not the JDK)")
	}
	p := StartProxy(t, b.Seeds)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "kafka/java-clients.sh", p.Addr)
	cmd.Env = append(os.Environ(), "JC_RECORDS="+envOr("JC_RECORDS", "10000"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// Watch the real brokers' ports for connections from anything but the
	// proxy (this process) and the brokers themselves.
	leaks := watchDirectConnections(ctx, b.Seeds)

	var results []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "RESULT ") {
			results = append(results, l)
			t.Log(l)
		}
	}
	err = cmd.Wait()
	cancel()
	leaked := <-leaks
	if err != nil {
		t.Errorf("java-clients.sh through the proxy: %v\n%s", err, tail(stderr.String(), 40))
	}
	if len(results) < 4 {
		t.Fatalf("java-clients.sh printed %d RESULT lines, want at least 4\n%s", len(results), tail(stderr.String(), 40))
	}
	for _, r := range results {
		if !strings.HasSuffix(r, " ok") && !strings.Contains(r, " ok ") {
			t.Errorf("failed check through the proxy: %s", r)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("Java clients connected straight to a real broker, bypassing the proxy: %v", leaked)
	}
	m := p.Metrics()
	if testutil.ToFloat64(m.Rewrites.WithLabelValues("Metadata")) == 0 {
		t.Error("no Metadata response was rewritten")
	}
	for _, api := range []string{"Produce", "ShareFetch", "EndTxn", "Fetch"} {
		if n := requests(p, api); n == 0 {
			t.Errorf("no %s request went through the proxy", api)
		}
	}
	brokerConns := 0.0
	for _, br := range p.Brokers() {
		brokerConns += testutil.ToFloat64(m.ConnsTotal.WithLabelValues(strconv.Itoa(int(br.NodeID))))
	}
	if brokerConns == 0 {
		t.Error("no Java client connected to a per-broker listener")
	}
}

func requests(p *Proxy, api string) float64 {
	v, _ := labelledValue(p, "sharetx_requests_total", "api", api)
	return v
}

var ssPid = regexp.MustCompile(`pid=(\d+)`)

// watchDirectConnections samples `ss` until ctx ends and returns the
// connections to a broker port owned by a Java process that is not a
// broker (the Java clients under test; the proxy runs in this process).
func watchDirectConnections(ctx context.Context, seeds []string) <-chan []string {
	out := make(chan []string, 1)
	ports := map[string]bool{}
	for _, s := range seeds {
		if _, p, err := net.SplitHostPort(s); err == nil {
			ports[p] = true
		}
	}
	self := strconv.Itoa(os.Getpid())
	brokerPid := map[string]bool{}
	isBroker := func(pid string) bool {
		if v, ok := brokerPid[pid]; ok {
			return v
		}
		b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		v := strings.Contains(string(b), "kafka.Kafka")
		brokerPid[pid] = v
		return v
	}
	go func() {
		seen := map[string]bool{}
		var mu sync.Mutex
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				mu.Lock()
				var l []string
				for k := range seen {
					l = append(l, k)
				}
				mu.Unlock()
				out <- l
				return
			case <-t.C:
			}
			raw, err := exec.Command("ss", "-tnpH").Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(raw), "\n") {
				f := strings.Fields(line)
				if len(f) < 6 {
					continue
				}
				peer := f[4]
				_, port, err := net.SplitHostPort(strings.NewReplacer("[::ffff:", "", "]", "").Replace(peer))
				if err != nil || !ports[port] {
					continue
				}
				m := ssPid.FindStringSubmatch(line)
				if m == nil || m[1] == self || isBroker(m[1]) {
					continue
				}
				b, _ := os.ReadFile("/proc/" + m[1] + "/cmdline")
				if argv0, _, _ := strings.Cut(string(b), "\x00"); filepath.Base(argv0) != "java" {
					// Not a JVM: another test's process on this machine (the
					// chaos runs' sidecars, whose paths may well say "java").
					continue
				}
				mu.Lock()
				seen[fmt.Sprintf("pid %s (%s) -> %s", m[1], strings.ReplaceAll(string(b), "\x00", " ")[:min(80, len(b))], peer)] = true
				mu.Unlock()
			}
		}
	}()
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
