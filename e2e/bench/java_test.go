package main

import (
	"reflect"
	"testing"
)

// Output of Kafka 4.4.0's tools, captured from e2e/kafka/kafka.sh tool runs.

func TestParseProducerPerformance(t *testing.T) {
	out := "1500 records sent, 299.9 records/sec (0.29 MB/sec), 3.1 ms avg latency, 200.0 ms max latency.\n" +
		"3000 records sent, 3562.945368 records/sec (3.48 MB/sec), 93.31 ms avg latency, 667.00 ms max latency, 100 ms 50th, 107 ms 95th, 111 ms 99th, 112 ms 99.9th.\n"
	r, err := parseProducerPerformance(out)
	if err != nil {
		t.Fatal(err)
	}
	want := javaProduce{Records: 3000, RecordsSec: 3562.945368, MiBSec: 3.48, AvgMs: 93.31, MaxMs: 667, P50Ms: 100, P99Ms: 111}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	if _, err := parseProducerPerformance("org.apache.kafka.common.errors.TimeoutException: ...\n"); err == nil {
		t.Error("no summary line: no error")
	}
}

func TestParseShareConsumerPerformance(t *testing.T) {
	out := "start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms\n" +
		"2026-11-30 05:57:54:512, 2026-11-30 05:57:56:802, 2.9883, 1.3049, 1336.2445, 3060, 2290\n"
	r, err := parseShareConsumerPerformance(out)
	if err != nil {
		t.Fatal(err)
	}
	want := javaShareConsume{Records: 3060, RecordsSec: 1336.2445, MiBSec: 1.3049, FetchMs: 2290}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	if _, err := parseShareConsumerPerformance("WARN nothing consumed\n"); err == nil {
		t.Error("no CSV: no error")
	}
}

func TestParseEosResult(t *testing.T) {
	out := "progress\nRESULT mode=share records=100000 transactions=120 aborts=1 seconds=4.250 records_per_s=23529.4 cpu_s=7.125 commit_p50_ms=3.100 commit_p99_ms=12.500 poll_p50_ms=0.200 poll_p99_ms=9.000 stage_p50_ms=1.500 later=1\n"
	r, err := parseEosResult(out)
	if err != nil {
		t.Fatal(err)
	}
	want := javaEOSResult{Mode: "share", Records: 100000, Transactions: 120, Aborts: 1, Seconds: 4.25, RecordsSec: 23529.4, LoopCPUSeconds: 7.125, CommitP50Ms: 3.1, CommitP99Ms: 12.5,
		Budget: map[string]budgetItem{"commitTransaction": {PerTxn: 1, P50Ms: 3.1, P99Ms: 12.5}, "wait for records": {PerTxn: 1, P50Ms: 0.2, P99Ms: 9}, "stage (acks or offsets)": {PerTxn: 1, P50Ms: 1.5}}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	for _, bad := range []string{"", "RESULT mode=share records=x", "RESULT mode=share records=1", "RESULT mode=share records=1 transactions=1 aborts=0 seconds=1 records_per_s=1 cpu_s=x", "ERROR org.apache.kafka.common.errors.TimeoutException: boom\n"} {
		if _, err := parseEosResult(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
