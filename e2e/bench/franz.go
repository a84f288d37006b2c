package main

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func newClient(bs string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(clientOpts(bs, opts...)...)
}

// clientOpts are the options of every bench client of bootstrap bs, then
// opts.
func clientOpts(bs string, opts ...kgo.Opt) []kgo.Opt {
	// No compression: kgo's default (snappy) would shrink the repeated
	// payloads, and the bytes on the wire would not be the bytes produced
	// (Java's ProducerPerformance sends uncompressed by default too).
	base := []kgo.Opt{kgo.SeedBrokers(bs), kgo.ClientID("sharetx-bench"),
		kgo.ProducerBatchCompression(kgo.NoCompression())}
	if via, ok := dialVia.Load(bs); ok { // through the reference relay
		addr := via.(string)
		var d net.Dialer
		base = append(base, kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}))
	}
	return append(base, opts...)
}

// closeWithin closes cl, giving up waiting after d (a share consumer's
// Close waits for its final acknowledgements).
func closeWithin(cl *kgo.Client, d time.Duration) {
	done := make(chan struct{})
	go func() { cl.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func payload(size int, seed int64) []byte {
	b := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// throughput is a count of records and bytes over an elapsed time.
type throughput struct {
	Records    int64   `json:"records"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	RecordsSec float64 `json:"records_per_s"`
	MBSec      float64 `json:"mb_per_s"` // MB = 10^6 bytes
}

func mkThroughput(recs, bytes int64, d time.Duration) throughput {
	t := throughput{Records: recs, Bytes: bytes, Seconds: d.Seconds()}
	if d > 0 {
		t.RecordsSec = float64(recs) / d.Seconds()
		t.MBSec = float64(bytes) / 1e6 / d.Seconds()
	}
	return t
}

// franzProduce produces n records of size bytes to topic as fast as kgo
// will (acks=all, idempotent: kgo's defaults) and times it until the last
// is acknowledged.
func franzProduce(ctx context.Context, bs, topic string, n, size int) (throughput, error) {
	cl, err := newClient(bs, kgo.DefaultProduceTopic(topic), kgo.MaxBufferedRecords(20000), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return throughput{}, err
	}
	defer cl.Close()
	// Warm up: metadata, producer id, connections.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return throughput{}, fmt.Errorf("warm-up produce: %w", err)
	}
	val := payload(size, 1)
	var firstErr atomic.Value
	var failed atomic.Int64
	t0 := time.Now()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return throughput{}, err
	}
	d := time.Since(t0)
	if f := failed.Load(); f > 0 {
		return throughput{}, fmt.Errorf("%d of %d records failed: %v", f, n, firstErr.Load())
	}
	return mkThroughput(int64(n), int64(n)*int64(size), d), nil
}

// latencyResult is produce latency at a fixed rate.
type latencyResult struct {
	Rate    int     `json:"rate_records_per_s"`
	Records int     `json:"records"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// franzProduceLatency produces rate records/s of size bytes for d, in
// ticks of 5 ms, and records each record's latency from Produce to its
// acknowledgement (acks=all, no linger).
func franzProduceLatency(ctx context.Context, bs, topic string, rate, size int, d time.Duration) (latencyResult, error) {
	cl, err := newClient(bs, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		return latencyResult{}, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return latencyResult{}, fmt.Errorf("warm-up produce: %w", err)
	}
	val := payload(size, 2)
	var mu sync.Mutex
	lats := make([]float64, 0, int(float64(rate)*d.Seconds())+16)
	var firstErr error
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < d {
		<-t.C
		due := int(time.Since(start).Seconds() * float64(rate))
		for ; sent < due; sent++ {
			t0 := time.Now()
			cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
				el := time.Since(t0).Seconds()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				lats = append(lats, el)
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return latencyResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return latencyResult{}, firstErr
	}
	return latencyResult{Rate: rate, Records: len(lats), P50Ms: sampleQuantile(0.5, lats) * 1000,
		P99Ms: sampleQuantile(0.99, lats) * 1000, MaxMs: sampleQuantile(1, lats) * 1000}, nil
}

// franzShareConsume consumes n records of topic with a new share group
// (kgo's default share consumer settings; each poll accepted implicitly by
// the next). The clock starts at the first record, so the group join is
// not counted.
func franzShareConsume(ctx context.Context, bs, topic, group string, n int) (throughput, error) {
	cl, err := newClient(bs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		return throughput{}, err
	}
	defer closeWithin(cl, 10*time.Second)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var recs, bytes int64
	var t0 time.Time
	for recs < int64(n) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return throughput{}, fmt.Errorf("consumed %d of %d records: %w", recs, n, ctx.Err())
		}
		if err := polled(fs); err != nil {
			return throughput{}, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if t0.IsZero() {
				t0 = time.Now()
			}
			recs++
			bytes += int64(len(r.Value))
		})
	}
	return mkThroughput(recs, bytes, time.Since(t0)), nil
}
