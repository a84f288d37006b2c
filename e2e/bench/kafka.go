package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/e2e/sim"
)

// kafkaUp runs `kafka.sh up` (start or reuse a cluster; KAFKA_* variables
// pass through) and returns its bootstrap list (the last line of stdout).
func kafkaUp(ctx context.Context, script string) ([]string, error) {
	cmd := exec.CommandContext(ctx, script, "up")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s up: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return nil, fmt.Errorf("%s up printed no bootstrap list", script)
	}
	return strings.Split(last, ","), nil
}

// shareFromEarliest sets share.auto.offset.reset=earliest on a share group
// (the default, latest, would hand a new group nothing already produced).
func shareFromEarliest(ctx context.Context, cl *kgo.Client, group string) error {
	return sim.AlterConfigs(ctx, cl, kmsg.ConfigResourceTypeGroupConfig, group, map[string]string{"share.auto.offset.reset": "earliest"})
}

// ---------------------------------------------------------------- Java tools

// javaProduce is ProducerPerformance's summary line.
type javaProduce struct {
	Records     int64   `json:"records"`
	RecordsSec  float64 `json:"records_per_s"`
	MiBSec      float64 `json:"mib_per_s"` // as the tool prints it (MB = 2^20 bytes)
	AvgMs       float64 `json:"avg_latency_ms"`
	MaxMs       float64 `json:"max_latency_ms"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	WallSeconds float64 `json:"wall_seconds"`
}

// "100000 records sent, 41545.492314 records/sec (40.57 MB/sec), 540.31 ms avg latency, 1032.00 ms max latency, 520 ms 50th, 950 ms 95th, 1010 ms 99th, 1030 ms 99.9th."
var producePerfRE = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th`)

func parseProducerPerformance(out string) (javaProduce, error) {
	all := producePerfRE.FindAllStringSubmatch(out, -1)
	if len(all) == 0 {
		return javaProduce{}, fmt.Errorf("no ProducerPerformance summary line in its output")
	}
	m := all[len(all)-1] // the last one is the final summary
	f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
	return javaProduce{Records: int64(f(1)), RecordsSec: f(2), MiBSec: f(3), AvgMs: f(4), MaxMs: f(5), P50Ms: f(6), P99Ms: f(8)}, nil
}

// javaShareConsume is ShareConsumerPerformance's CSV line.
type javaShareConsume struct {
	Records     int64   `json:"records"`
	RecordsSec  float64 `json:"records_per_s"`
	MiBSec      float64 `json:"mib_per_s"`
	FetchMs     float64 `json:"fetch_time_ms"`
	WallSeconds float64 `json:"wall_seconds"`
}

// parseShareConsumerPerformance reads the header line (start.time, ...) and
// the last data line after it, by column name.
func parseShareConsumerPerformance(out string) (javaShareConsume, error) {
	var cols map[string]int
	var last []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(f) > 3 && f[0] == "start.time" {
			cols = map[string]int{}
			for i, c := range f {
				cols[c] = i
			}
			continue
		}
		if cols != nil && len(f) == len(cols) {
			last = f
		}
	}
	if cols == nil || last == nil {
		return javaShareConsume{}, fmt.Errorf("no ShareConsumerPerformance CSV in its output")
	}
	get := func(name string) (float64, error) {
		i, ok := cols[name]
		if !ok {
			return 0, fmt.Errorf("ShareConsumerPerformance: no column %s", name)
		}
		return strconv.ParseFloat(last[i], 64)
	}
	var r javaShareConsume
	var err error
	var n float64
	if n, err = get("data.consumed.in.nMsg"); err != nil {
		return r, err
	}
	r.Records = int64(n)
	if r.RecordsSec, err = get("nMsg.sec"); err != nil {
		return r, err
	}
	if r.MiBSec, err = get("MB.sec"); err != nil {
		return r, err
	}
	r.FetchMs, _ = get("fetch.time.ms")
	return r, nil
}

// runTool runs `kafka.sh tool <main> args...` and returns its stdout.
func runTool(ctx context.Context, script string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, append([]string{"tool"}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tail := stderr.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return stdout.String(), fmt.Errorf("%s: %w\n%s", args[0], err, tail)
	}
	return stdout.String(), nil
}

func javaProducerPerf(ctx context.Context, script, bs, topic string, n, size int) (javaProduce, error) {
	t0 := time.Now()
	out, err := runTool(ctx, script, 5*time.Minute, "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(n), "--record-size", strconv.Itoa(size), "--throughput", "-1",
		"--bootstrap-server", bs, "--command-property", "acks=all", "--command-property", "client.id=sharetx-bench")
	if err != nil {
		return javaProduce{}, err
	}
	r, err := parseProducerPerformance(out)
	r.WallSeconds = time.Since(t0).Seconds()
	if err == nil && r.Records != int64(n) {
		err = fmt.Errorf("ProducerPerformance sent %d of %d records", r.Records, n)
	}
	return r, err
}

func javaShareConsumerPerf(ctx context.Context, script, bs, topic, group string, n int) (javaShareConsume, error) {
	t0 := time.Now()
	out, err := runTool(ctx, script, 5*time.Minute, "org.apache.kafka.tools.ShareConsumerPerformance",
		"--bootstrap-server", bs, "--topic", topic, "--group", group, "--num-records", strconv.Itoa(n), "--timeout", "30000")
	if err != nil {
		return javaShareConsume{}, err
	}
	r, err := parseShareConsumerPerformance(out)
	r.WallSeconds = time.Since(t0).Seconds()
	if err == nil && r.Records < int64(n) {
		err = fmt.Errorf("ShareConsumerPerformance consumed %d of %d records", r.Records, n)
	}
	return r, err
}
