package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/intercept"
	"github.com/sharetx/sharetx/internal/syncbuf"
	"github.com/sharetx/sharetx/proxy"
)

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sharetx")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type daemon struct {
	cmd   *exec.Cmd
	lines chan string
	all   *syncbuf.Buffer // every line read so far (await, or startZeroConfig's reader)
}

// start runs the binary with env and waits for a line containing want.
func start(t *testing.T, bin string, env []string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, lines: make(chan string, 1000), all: &syncbuf.Buffer{}}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			d.lines <- s.Text()
		}
		close(d.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return d
}

// await returns the first line containing want.
func (d *daemon) await(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("sharetx exited before printing %q; output:\n%s", want, d.all.String())
			}
			fmt.Fprintln(d.all, l)
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("sharetx did not print %q; output:\n%s", want, d.all.String())
		}
	}
}

func testEnv(dataDir string) []string {
	return []string{
		"SHARETX_LISTEN_BOOTSTRAP=127.0.0.1:0",
		"SHARETX_LISTEN_BROKER_PORT_BASE=0",
		"SHARETX_METRICS_ADDRESS=127.0.0.1:0",
		"SHARETX_EMBEDDED_DATA_DIR=" + dataDir,
	}
}

// TestZeroConfigStart: with no configuration sharetx starts an embedded
// cluster and serves clients; it prints where to connect, the brokers and
// the metrics address; SIGTERM stops it with exit code 0; a restart with
// the same data directory keeps the topics.
func TestZeroConfigStart(t *testing.T) {
	bin := buildBinary(t)
	dataDir := t.TempDir()
	env := testEnv(dataDir)

	d := start(t, bin, env)
	d.await(t, "data is kept in "+dataDir)
	line := d.await(t, "bootstrap.servers=")
	addr := strings.TrimSpace(line[strings.Index(line, "bootstrap.servers=")+len("bootstrap.servers="):])
	mline := d.await(t, "metrics at http://")
	murl := strings.Fields(mline[strings.Index(mline, "http://"):])[0]
	d.await(t, "is served at")
	d.await(t, "sharetx: ready")

	resp, err := http.Get(strings.Replace(murl, "/metrics", "/readyz", 1))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz: %v %v", err, resp)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("zero-config"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "zero-config"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("hello")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.Close()

	mresp, err := http.Get(murl)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	if !strings.Contains(string(body), `sharetx_requests_total{api="Produce"}`) {
		t.Error("metrics do not count the Produce request")
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	d.await(t, "sharetx: stopped")
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v (want 0)", err)
	}

	// Restart on the same data: the topic and its record are still there.
	d2 := start(t, bin, env)
	line = d2.await(t, "bootstrap.servers=")
	addr = strings.TrimSpace(line[strings.Index(line, "bootstrap.servers=")+len("bootstrap.servers="):])
	d2.await(t, "sharetx: ready")
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("zero-config"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	if fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "hello" {
		t.Fatalf("after restart: %d records, errors %v", fs.NumRecords(), fs.Errors())
	}
}

// TestBadConfig: a bad value stops start-up with exit code 2 and a message
// that names the key.
func TestBadConfig(t *testing.T) {
	bin := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("limits:\n  max_in_flight: -3\n"), 0o644)
	out, err := exec.Command(bin, "--config", cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2; output %s", err, out)
	}
	if !strings.Contains(string(out), "limits.max_in_flight") {
		t.Fatalf("message does not name the key: %s", out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SHARETX_UPSTREAM_DIAL_TIMEOUT=forever")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "upstream.dial_timeout") {
		t.Fatalf("bad env value: %v %s", err, out)
	}
}

// --check-config never prints the SASL password.
func TestCheckConfigRedactsPassword(t *testing.T) {
	t.Setenv("SHARETX_UPSTREAM_BOOTSTRAP_SERVERS", "127.0.0.1:1")
	t.Setenv("SHARETX_UPSTREAM_SASL_MECHANISM", "PLAIN")
	t.Setenv("SHARETX_UPSTREAM_SASL_USERNAME", "alice")
	t.Setenv("SHARETX_UPSTREAM_SASL_PASSWORD", "s3cr3t-pw")
	var out, errb bytes.Buffer
	code := run([]string{"--check-config"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if strings.Contains(out.String(), "s3cr3t-pw") || !strings.Contains(out.String(), "(redacted)") {
		t.Fatalf("--check-config output: %s", out.String())
	}
}

// --check-config prints the effective configuration as YAML on stdout (the
// verdict on stderr): loaded back with --config it is the same
// configuration.
func TestCheckConfigPrintsLoadableYAML(t *testing.T) {
	t.Setenv("SHARETX_UPSTREAM_BOOTSTRAP_SERVERS", "127.0.0.1:1,127.0.0.1:2")
	t.Setenv("SHARETX_KIP1289_CLOSE_HOLD", "90s")
	var out, errb bytes.Buffer
	if code := run([]string{"--check-config", "--bootstrap", "127.0.0.1:19999"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "configuration OK") {
		t.Fatalf("stderr: %q", errb.String())
	}
	want, err := configs.Load("", os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	want.Listen.Bootstrap = "127.0.0.1:19999"
	f := filepath.Join(t.TempDir(), "printed.yaml")
	if err := os.WriteFile(f, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := configs.Load(f, nil)
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v\n%s", err, out.String())
	}
	// Compared as printed: a map or list the YAML shows empty loads
	// empty, where the defaults leave it nil.
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	if !bytes.Equal(g, w) || !bytes.Equal(out.Bytes(), w) {
		t.Fatalf("printed:\n%s\nloaded back:\n%s\nwant:\n%s", out.String(), g, w)
	}
	if got.KIP1289.CloseHold != 90*time.Second || len(got.Upstream.BootstrapServers) != 2 {
		t.Fatalf("the environment's settings were not printed: close_hold %v, upstream %v", got.KIP1289.CloseHold, got.Upstream.BootstrapServers)
	}
}

// --version names sharetx and the Go version, and starts nothing.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if line := out.String(); !strings.HasPrefix(line, "sharetx ") || !strings.Contains(line, runtime.Version()) || strings.Count(line, "\n") != 1 {
		t.Fatalf("--version printed %q", line)
	}
}

// Go's profiles are served only when metrics.pprof asks for them.
func TestPprofOnlyWhenAsked(t *testing.T) {
	srv, err := proxy.New(configs.Default(), slog.New(slog.DiscardHandler), nil, intercept.NewFilter)
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		hs := httptest.NewServer(httpHandler(srv, on))
		resp, err := http.Get(hs.URL + "/debug/pprof/heap?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if profiled := resp.StatusCode == 200 && strings.Contains(string(body), "heap profile"); profiled != on {
			t.Errorf("metrics.pprof %v: /debug/pprof/heap answered %d %.60q", on, resp.StatusCode, body)
		}
		if resp, err := http.Get(hs.URL + "/metrics"); err != nil || resp.StatusCode != 200 {
			t.Errorf("metrics.pprof %v: /metrics: %v %v", on, err, resp)
		}
		hs.Close()
	}
}

// limits.max_procs sets Go's GOMAXPROCS (1 by default), and the GOMAXPROCS
// environment variable, when set, wins over it; the start-up log says
// which. The line comes before the upstream is dialled, so an address
// nothing listens on will do.
func TestMaxProcs(t *testing.T) {
	bin := buildBinary(t)
	for _, k := range []string{"GOMAXPROCS", "SHARETX_LIMITS_MAX_PROCS"} {
		t.Setenv(k, "") // restored after the test: the binary sees neither of the test's own
		os.Unsetenv(k)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "gomaxprocs=1 from=limits.max_procs"},
		{[]string{"SHARETX_LIMITS_MAX_PROCS=2"}, "gomaxprocs=2 from=limits.max_procs"},
		{[]string{"SHARETX_LIMITS_MAX_PROCS=1", "GOMAXPROCS=3"}, `gomaxprocs=3 from="the GOMAXPROCS environment variable"`},
	} {
		d := start(t, bin, append([]string{"SHARETX_LISTEN_BROKER_PORT_BASE=0"}, tc.env...),
			"--upstream", "127.0.0.1:1", "--bootstrap", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
		if line := d.await(t, "CPUs for Go code"); !strings.Contains(line, tc.want) {
			t.Errorf("env %v: the start-up line is %q, want it to contain %s", tc.env, line, tc.want)
		}
	}
}
