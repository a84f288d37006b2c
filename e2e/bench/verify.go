package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// outputCount is what the exactly-once check found in a run's output topic.
type outputCount struct {
	Outputs    int64 // committed output records
	Distinct   int64 // distinct input ids among them
	Duplicates int64 // outputs beyond the first of their id
}

// countOutputs reads topic read_committed from the start, directly, and
// counts its records per key (the input id "partition:offset"). It reads
// until want distinct ids were seen and then until the topic has been
// quiet for a moment (so that duplicates written after the last id are
// counted too), or until it has been quiet for idle with fewer: the
// markers of the last transactions may land just after their EndTxn
// returned.
func countOutputs(ctx context.Context, bs, topic string, want int64, idle time.Duration) (outputCount, error) {
	cl, err := newClient(bs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return outputCount{}, err
	}
	defer cl.Close()
	seen := make(map[string]int, want)
	var c outputCount
	quiet := time.Now()
	for {
		wait := idle
		if c.Distinct >= want {
			wait = 300 * time.Millisecond
		}
		if time.Since(quiet) > wait {
			return c, nil
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return c, ctx.Err()
		}
		if err := polled(fs); err != nil {
			return c, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			quiet = time.Now()
			c.Outputs++
			k := string(r.Key)
			if seen[k]++; seen[k] == 1 {
				c.Distinct++
			} else {
				c.Duplicates++
			}
		})
	}
}

// verify checks that r's outputs in topic are exactly its committed inputs,
// each once, and records what it found in r.
func verify(ctx context.Context, bs, topic string, r *pipelineResult) error {
	c, err := countOutputs(ctx, bs, topic, r.Records, 5*time.Second)
	if err != nil {
		return fmt.Errorf("reading the outputs of %s: %w", topic, err)
	}
	r.Outputs, r.Duplicates, r.Lost = c.Outputs, c.Duplicates, max(r.Records-c.Distinct, 0)
	switch {
	case c.Duplicates > 0 || c.Distinct != r.Records:
		return fmt.Errorf("not exactly-once: %d inputs committed, %d outputs in %s for %d distinct inputs (%d duplicates, %d lost)",
			r.Records, c.Outputs, topic, c.Distinct, c.Duplicates, r.Records-c.Distinct)
	}
	r.Verified = true
	return nil
}
