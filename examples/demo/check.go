package main

// Reading the output and asking the share group what is left, through
// sharetx (adapted from e2e/chaos/cluster.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func readCommittedClient(bootstrap, topic string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID("demo-verifier"), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
}

// outputWatcher reads the output topic read_committed from the start, all
// mode long, and counts records per value (for the progress lines).
type outputWatcher struct {
	cl     *kgo.Client
	mu     sync.Mutex
	counts map[string]int
	total  int
	done   chan struct{}
	cancel context.CancelFunc
}

func watchOutput(bootstrap, topic string) (*outputWatcher, error) {
	cl, err := readCommittedClient(bootstrap, topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &outputWatcher{cl: cl, counts: map[string]int{}, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w.counts[string(r.Value)]++
				w.total++
			})
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// snapshot: distinct values and records so far.
func (w *outputWatcher) snapshot() (distinct, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.counts), w.total
}

func (w *outputWatcher) close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// readAllCommitted reads the whole topic read_committed with a fresh client
// until no record came for idle (and at most max), and counts per value.
func readAllCommitted(bootstrap, topic string, idle, max time.Duration) (map[string]int, error) {
	cl, err := readCommittedClient(bootstrap, topic)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	counts := map[string]int{}
	start := time.Now()
	last := start
	var fetchErr error
	for time.Since(last) < idle {
		if time.Since(start) > max {
			return counts, fmt.Errorf("reading %s: still receiving records after %s", topic, max)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fetchErr = err
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			counts[string(r.Value)]++
			last = time.Now()
		})
	}
	if len(counts) == 0 && fetchErr != nil {
		return counts, fmt.Errorf("reading %s: %w", topic, fetchErr)
	}
	return counts, nil
}

// leftover joins the share group with a fresh member through sharetx and
// polls for quiet: it returns how many records it was handed (records the
// group never acknowledged) and then the group's lag on the topic (records
// neither acknowledged nor archived, including any still locked by someone;
// -1 if unknown). It never accepts: what it gets it releases, and leaves.
func leftover(bootstrap, group, topic string, quiet time.Duration) (int, int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID("demo-verifier"), kgo.ShareGroup(group),
		kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return 0, -1, err
	}
	closeOnce := sync.OnceFunc(cl.Close)
	defer closeOnce()
	got := map[int64]bool{}
	start := time.Now()
	for time.Since(start) < quiet {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs := cl.PollRecords(ctx, 10000).Records()
		cancel()
		for _, r := range recs {
			got[r.Offset] = true
			r.Ack(kgo.AckRelease)
		}
		if len(recs) > 0 {
			break
		}
	}
	closeOnce() // sends the releases and leaves
	admin, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID("demo-verifier"))
	if err != nil {
		return len(got), -1, err
	}
	defer admin.Close()
	lag, err := shareLag(admin, group, topic)
	return len(got), lag, err
}

// shareLag sums the share-group lag (KIP-1226) over the topic's partitions.
func shareLag(cl *kgo.Client, group, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	tp := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	tp.Topic = topic
	tp.Partitions = []int32{0} // the demo's input topics have one partition
	g.Topics = append(g.Topics, tp)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, fmt.Errorf("describe share group offsets: %w", err)
	}
	var sum int64
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return -1, fmt.Errorf("describe share group offsets of %s: %w", group, err)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return -1, fmt.Errorf("describe share group offsets of %s/%d: %w", topic, p.Partition, err)
				}
				if p.Lag < 0 {
					return -1, nil
				}
				sum += p.Lag
			}
		}
	}
	return sum, nil
}
