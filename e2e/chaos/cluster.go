package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func sortStrings(s []string) { sort.Strings(s) }

// direct is a client of the real cluster (not through a proxy).
func direct(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("chaos-orchestrator")}, opts...)...)
}

// brokerIDs returns the node ids of the cluster's brokers.
func brokerIDs(ctx context.Context, adm *kadm.Client) ([]int32, error) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range md.Brokers {
		ids = append(ids, b.NodeID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// createTopic creates topic and waits until every partition has a leader.
func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, rf int16) error {
	resp, err := adm.CreateTopic(ctx, partitions, rf, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ok := true
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ok = false
					}
				}
				if ok {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leader for every partition: %w", topic, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setGroupConfigs sets share-group configurations (GROUP resource).
func setGroupConfigs(ctx context.Context, cl *kgo.Client, group string, kv map[string]string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = k, kmsg.StringPtr(kv[k])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("set group configs of %s: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			return fmt.Errorf("set group configs %v of %s: %w %s", kv, group, err, msg)
		}
	}
	return nil
}

// poKey is an input record's partition and offset.
type poKey struct {
	p   int32
	off int64
}

// seedInputs produces n records with unique ids as values, in small
// batches spread over the partitions (a share fetch acquires whole batches:
// small ones spread the work over the workers). It returns the ids and
// where each landed.
func seedInputs(ctx context.Context, cl *kgo.Client, topic, prefix string, n int) ([]string, map[poKey]string, error) {
	ids := make([]string, n)
	where := make(map[poKey]string, n)
	const chunk = 24
	for start := 0; start < n; start += chunk {
		var recs []*kgo.Record
		for i := start; i < min(n, start+chunk); i++ {
			ids[i] = fmt.Sprintf("%s-%06d", prefix, i)
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(ids[i])})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return nil, nil, fmt.Errorf("seed %s: %w", topic, err)
		}
		for _, r := range recs {
			where[poKey{r.Partition, r.Offset}] = string(r.Value)
		}
	}
	return ids, where, nil
}

// outputWatcher reads the output topic read_committed from the start, all
// phase long, and counts records per value.
type outputWatcher struct {
	cl     *kgo.Client
	mu     sync.Mutex
	counts map[string]int
	total  int
	last   time.Time
	done   chan struct{}
	cancel context.CancelFunc
}

func watchOutput(seeds []string, topic string) (*outputWatcher, error) {
	cl, err := direct(seeds, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &outputWatcher{cl: cl, counts: map[string]int{}, done: make(chan struct{}), cancel: cancel, last: time.Now()}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w.counts[string(r.Value)]++
				w.total++
				w.last = time.Now()
			})
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// snapshot: distinct values, records, time of the last record.
func (w *outputWatcher) snapshot() (distinct, total int, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.counts), w.total, w.last
}

func (w *outputWatcher) close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// readAllCommitted reads the whole topic read_committed with a fresh client
// until no record came for idle (and at most max), and counts per value.
func readAllCommitted(seeds []string, topic string, idle, max time.Duration) (map[string]int, error) {
	cl, err := direct(seeds, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
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

// unackedRecords joins the share group with a fresh member straight to the
// cluster and collects the input records it is handed within join + quiet
// (quiet longer than the acquisition lock, so that records locked by a
// member that went away are released meanwhile). It never accepts them: the
// first poll that hands it records is released and the member leaves (each
// further poll would redeliver them, counting towards the delivery limit,
// which archives them). For the rest of the period it watches the group's
// lag instead. It returns the records it was handed (partition/offset →
// value) and the group's lag on the topic at the end (records not yet
// acknowledged; -1 if the broker does not know).
func unackedRecords(seeds []string, group, topic string, join, quiet time.Duration) (map[poKey]string, int64, error) {
	cl, err := direct(seeds, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, 0, err
	}
	closeOnce := sync.OnceFunc(cl.Close)
	defer closeOnce()
	got := map[poKey]string{}
	start := time.Now()
	for polling := true; time.Since(start) < quiet+join; {
		if !polling {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs := cl.PollRecords(ctx, 10000).Records()
		cancel()
		for _, r := range recs {
			got[poKey{r.Partition, r.Offset}] = string(r.Value)
			r.Ack(kgo.AckRelease)
		}
		if len(recs) > 0 {
			closeOnce() // sends the releases, releases anything buffered, leaves
			polling = false
		}
	}
	closeOnce()
	admin, err := direct(seeds)
	if err != nil {
		return got, -1, err
	}
	defer admin.Close()
	lag, err := shareLag(admin, group, topic)
	return got, lag, err
}

// shareLag sums the share-group lag (KIP-1226: records not yet acknowledged
// or archived) over the topic's partitions; -1 if a partition's is unknown.
func shareLag(cl *kgo.Client, group, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return -1, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return -1, fmt.Errorf("metadata of %s: %v", topic, td.Err)
	}
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	tp := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	tp.Topic = topic
	for p := range td.Partitions {
		tp.Partitions = append(tp.Partitions, p)
	}
	g.Topics = append(g.Topics, tp)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, fmt.Errorf("describe share group offsets: %w", err)
	}
	var sum int64
	n := 0
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
				n++
			}
		}
	}
	if n != len(td.Partitions) {
		return -1, nil
	}
	return sum, nil
}
