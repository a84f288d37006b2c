package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster is where, and as whom, a program's own checking clients connect:
// the real cluster (the chaos test) or sharetx (the demo).
type Cluster struct {
	Seeds    []string
	ClientID string
}

// Client is a client of the cluster with opts.
func (c Cluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds...), kgo.ClientID(c.ClientID)}, opts...)...)
}

// readCommitted is a client that reads topic read_committed from the start.
func (c Cluster) readCommitted(topic string) (*kgo.Client, error) {
	return c.Client(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
}

// CreateTopic creates topic and waits until every partition has a leader.
func CreateTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, rf int16) error {
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

// AlterConfigs sets configurations of one resource (a share group's:
// kmsg.ConfigResourceTypeGroupConfig; the brokers': ConfigResourceTypeBroker
// with name "") with IncrementalAlterConfigs, keys in sorted order.
func AlterConfigs(ctx context.Context, cl *kgo.Client, ty kmsg.ConfigResourceType, name string, kv map[string]string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = ty, name
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
		return fmt.Errorf("alter configs %v of %s %q: %w", kv, ty, name, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = " " + *r.ErrorMessage
			}
			return fmt.Errorf("alter configs %v of %s %q: %w%s", kv, ty, name, err, msg)
		}
	}
	return nil
}

// OutputWatcher reads an output topic read_committed from the start, until
// closed, and counts records per value (for progress lines and for knowing
// when every input is in).
type OutputWatcher struct {
	cl     *kgo.Client
	mu     sync.Mutex
	counts map[string]int
	total  int
	last   time.Time
	done   chan struct{}
	cancel context.CancelFunc
}

// WatchOutput starts an OutputWatcher on topic.
func (c Cluster) WatchOutput(topic string) (*OutputWatcher, error) {
	cl, err := c.readCommitted(topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &OutputWatcher{cl: cl, counts: map[string]int{}, done: make(chan struct{}), cancel: cancel, last: time.Now()}
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

// Snapshot: distinct values and records so far, and the time of the last
// record (of the start, before the first).
func (w *OutputWatcher) Snapshot() (distinct, total int, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.counts), w.total, w.last
}

// Close stops the watcher and closes its client.
func (w *OutputWatcher) Close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// ReadAllCommitted reads the whole topic read_committed with a fresh client
// and counts the data records per value. It reads to the topic's end, known
// from offsets rather than from a quiet spell (a quiet spell is also what a
// partition whose leader is moving looks like): it waits until no
// transaction is open on the topic (every partition's last stable offset is
// its high watermark; the caller's producers have stopped, so the end is
// final) and reads every partition up to it, control records included.
// Transient errors (a broker down, a leader moving) are retried until max
// has passed; then it returns what it read and an error saying what is
// missing.
func (c Cluster) ReadAllCommitted(topic string, max time.Duration) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	admCl, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	end, err := stableEnd(ctx, kadm.NewClient(admCl), topic)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	cl, err := c.Client(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	counts := map[string]int{}
	next := map[int32]int64{} // per partition: the offset after the last record read
	behind := func() []string {
		var b []string
		for p, e := range end {
			if next[p] < e {
				b = append(b, fmt.Sprintf("%d: at %d of %d", p, next[p], e))
			}
		}
		sort.Strings(b)
		return b
	}
	var fetchErr error
	for len(behind()) > 0 {
		if ctx.Err() != nil {
			msg := fmt.Sprintf("reading %s: partitions not read to their end within %s (%v)", topic, max, behind())
			if fetchErr != nil {
				msg += fmt.Sprintf("; last fetch error: %v", fetchErr)
			}
			return counts, errors.New(msg)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fetchErr = err
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				counts[string(r.Value)]++
			}
		})
	}
	return counts, nil
}

// stableEnd waits until no transaction is open on topic (each partition's
// last stable offset equals its high watermark) and returns those offsets,
// retrying transient errors until ctx ends.
func stableEnd(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	var last error
	for {
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hw.Error()
		}
		var lso kadm.ListedOffsets
		if err == nil {
			lso, err = adm.ListCommittedOffsets(ctx, topic)
			if err == nil {
				err = lso.Error()
			}
		}
		if err == nil {
			end := map[int32]int64{}
			open := 0
			hw.Each(func(o kadm.ListedOffset) {
				end[o.Partition] = o.Offset
				if l, ok := lso.Lookup(topic, o.Partition); !ok || l.Offset != o.Offset {
					open++
				}
			})
			if len(end) == 0 {
				err = fmt.Errorf("no partitions listed for %s", topic)
			} else if open == 0 {
				return end, nil
			} else {
				err = fmt.Errorf("%d partition(s) with a transaction still open", open)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the end of %s: %w (last: %v)", topic, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// PO is a record's partition and offset.
type PO struct {
	Partition int32
	Offset    int64
}

// Unacked joins the share group with a fresh member and polls topic until
// it is handed records or poll has passed. It never accepts them: it
// releases what the first such poll hands it and leaves at once (each
// further poll would redeliver them, counting towards the delivery limit,
// which archives them). Then it waits until settle has passed since it
// started (a settle longer than the acquisition lock lets records locked
// by a member that went away be released meanwhile) and asks the group's
// lag on topic. It returns the records it was handed (partition/offset →
// value: records the group never acknowledged) and that lag (records
// neither acknowledged nor archived, including any still locked by
// someone; -1 if unknown).
func (c Cluster) Unacked(group, topic string, poll, settle time.Duration) (map[PO]string, int64, error) {
	cl, err := c.Client(kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, -1, err
	}
	closeOnce := sync.OnceFunc(cl.Close)
	defer closeOnce()
	got := map[PO]string{}
	start := time.Now()
	for time.Since(start) < poll {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs := cl.PollRecords(ctx, 10000).Records()
		cancel()
		for _, r := range recs {
			got[PO{r.Partition, r.Offset}] = string(r.Value)
			r.Ack(kgo.AckRelease)
		}
		if len(recs) > 0 {
			break
		}
	}
	closeOnce() // sends the releases, releases anything buffered, leaves
	for time.Since(start) < settle {
		time.Sleep(250 * time.Millisecond)
	}
	admin, err := c.Client()
	if err != nil {
		return got, -1, err
	}
	defer admin.Close()
	lag, err := ShareLag(admin, group, topic)
	return got, lag, err
}

// ShareLag sums the share-group lag (KIP-1226: records not yet acknowledged
// or archived) over the topic's partitions; -1 if a partition's is unknown.
// A failed look (a broker down, a coordinator moving: a fault of a test that
// overlaps this check) is retried for up to two minutes; the error is the
// last one.
func ShareLag(cl *kgo.Client, group, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		lag, err := shareLagOnce(ctx, cl, group, topic)
		if err == nil {
			return lag, nil
		}
		select {
		case <-ctx.Done():
			return -1, err
		case <-time.After(time.Second):
		}
	}
}

func shareLagOnce(ctx context.Context, cl *kgo.Client, group, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
