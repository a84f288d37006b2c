// Package markers resolves staged shadow records (docs/design.md §5, §8):
// the Tailer reads the shadow topic with read_uncommitted and control
// records kept, and resolves every shadow record (of any proxy) by the next
// transaction marker (COMMIT or ABORT) of the same producer id on the same
// partition; the Resolver owns the step from TX_PENDING to committed or
// aborted, applies committed acknowledgements, and screens redelivered
// records against what the shadow topic says.
package markers

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/staging"
)

// Resolution is the outcome of one staged shadow record.
type Resolution struct {
	Record    *staging.ShadowRecord
	Offset    int64
	Partition int32
	Commit    bool // true: the transaction committed; false: it aborted (or timed out)
}

// The tailer's fetches: the broker answers once tailMinBytes of shadow
// records are there, or after tailMaxWait.
const (
	tailMinBytes = 256 << 10
	tailMaxWait  = 200 * time.Millisecond
)

// Tailer consumes the shadow topic and calls onResolve for each staged record
// of its proxy once the record's transaction has ended.
type Tailer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	log    *slog.Logger
	res    *matcher

	pmu      sync.Mutex
	progress map[int32]int64 // per partition: offsets below were handled
	hwm      map[int32]int64 // per partition: the high watermark of the last fetch
	moved    chan struct{}   // closed (and replaced) when progress moves
}

// handlers are what a Tailer started with startAll calls, from one goroutine,
// per partition in log order.
type handlers struct {
	// OnStaged is called for every shadow record (of any proxy) when it is
	// read, before its transaction is resolved. May be nil.
	OnStaged func(stagedRecord)
	// OnResolve is called once per COMMIT/ABORT marker that resolves shadow
	// records (of any proxy): with every record of its producer id, at an
	// epoch <= the marker's, read before it on the same partition (its
	// transaction's records there; never empty).
	OnResolve func([]Resolution)
	// Key, when set, is the shadow key: only version 2 records signed with
	// it, whose producer id and epoch are the record batch's, are handled;
	// any other shadow record changes nothing and is reported to OnRejected.
	Key []byte
	// OnRejected is told why a shadow record was not trusted. May be nil.
	OnRejected func(partition int32, offset int64, reason string)
	// OnRead is told of every record read (its key and value bytes), by
	// kind: staged (a trusted shadow record, of any proxy), marker (a
	// COMMIT or ABORT), rejected, other (touch records, other control
	// records, anything else). May be nil.
	OnRead func(kind string, bytes int)
}

// stagedRecord is a shadow record as read, its transaction still open.
type stagedRecord struct {
	Record    *staging.ShadowRecord
	Offset    int64
	Partition int32
}

// NewTailer builds its own consumer client from opts (seed brokers, TLS,
// SASL, ... — anything but consumer options, which it sets itself:
// read_uncommitted, control records kept, and exactly the partitions of
// start) and starts tailing topic. start gives, per partition to watch, the
// offset to start from (the proxy passes the end offsets it lists at
// start-up, see EndOffsets, or the stable offsets, see StableOffsets).
//
// onResolve is called, from one goroutine, for every shadow record staged by
// proxyID once the next COMMIT/ABORT marker of the record batch's producer id
// with an epoch >= the batch's epoch is read on the same partition; per
// partition in log order. Shadow records of other proxies, non-shadow records
// and undecodable records are skipped. Each offset is handled at most once,
// so a marker or record delivered twice results in one call.
//
// Fetch errors are logged and retried (by the client). Close stops the
// Tailer.
func NewTailer(opts []kgo.Opt, topic, proxyID string, start map[int32]int64, onResolve func(Resolution)) (*Tailer, error) {
	return newTailer(opts, topic, start, newMatcher(proxyID, each(onResolve)))
}

// each is a per-marker callback that calls f for every record it resolves.
func each(f func(Resolution)) func([]Resolution) {
	return func(rs []Resolution) {
		for _, r := range rs {
			f(r)
		}
	}
}

// startAll is NewTailer for the shadow records of every proxy: a restarted
// proxy, or another sidecar, learns from them which share-partition offsets
// are staged in open transactions and which were committed (docs/design.md §8.1).
func startAll(opts []kgo.Opt, topic string, start map[int32]int64, h handlers) (*Tailer, error) {
	r := newMatcher("", h.OnResolve)
	r.onStaged = h.OnStaged
	r.key, r.onRejected, r.onRead = h.Key, h.OnRejected, h.OnRead
	return newTailer(opts, topic, start, r)
}

// Follow is startAll for a Resolver: it learns every shadow record and
// resolves them by their markers, trusting only records signed with key.
func Follow(opts []kgo.Opt, topic string, start map[int32]int64, key []byte, r *Resolver) (*Tailer, error) {
	return startAll(opts, topic, start, handlers{
		OnStaged:   func(st stagedRecord) { r.OnShadowRecord(st.Partition, st.Offset, st.Record) },
		OnResolve:  r.ResolveAll,
		Key:        key,
		OnRejected: r.RejectShadow,
		OnRead:     r.countRead,
	})
}

func newTailer(opts []kgo.Opt, topic string, start map[int32]int64, res *matcher) (*Tailer, error) {
	parts := make(map[int32]kgo.Offset, len(start))
	for p, o := range start {
		parts[p] = kgo.NewOffset().At(o)
	}
	all := append([]kgo.Opt{}, opts...)
	all = append(all,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
		// Batch the tail: without a minimum, every shadow record and
		// marker any sidecar writes ends the parked fetch and costs a
		// fetch round trip of its own on every sidecar (docs/design.md
		// §8.5). The broker answers once tailMinBytes are there or after
		// tailMaxWait, so a barrier or a marker waits at most that long
		// more.
		kgo.FetchMinBytes(tailMinBytes),
		kgo.FetchMaxWait(tailMaxWait),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("markers: new client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tailer{
		cl:     cl,
		cancel: cancel,
		done:   make(chan struct{}),
		log:    slog.Default().With("component", "markers", "topic", topic),
		res:    res,

		progress: make(map[int32]int64, len(start)),
		hwm:      make(map[int32]int64, len(start)),
		moved:    make(chan struct{}),
	}
	for p, o := range start {
		t.progress[p] = o
	}
	go t.run(ctx)
	return t, nil
}

func (t *Tailer) run(ctx context.Context) {
	defer close(t.done)
	for {
		fs := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.log.Warn("shadow fetch error", "partition", p, "err", err)
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if ftp.Err == nil && ftp.HighWatermark > 0 {
				t.pmu.Lock()
				t.hwm[ftp.Partition] = ftp.HighWatermark
				t.pmu.Unlock()
			}
			if n := len(ftp.Records); n > 0 {
				defer t.advance(ftp.Partition, ftp.Records[n-1].Offset+1)
			}
			for _, r := range ftp.Records {
				t.res.handle(logRecord{
					partition:     r.Partition,
					offset:        r.Offset,
					producerID:    r.ProducerID,
					producerEpoch: r.ProducerEpoch,
					control:       r.Attrs.IsControl(),
					transactional: r.Attrs.IsTransactional(),
					key:           r.Key,
					value:         r.Value,
				})
			}
		})
	}
}

func (t *Tailer) advance(p int32, next int64) {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	if next <= t.progress[p] {
		return
	}
	t.progress[p] = next
	close(t.moved)
	t.moved = make(chan struct{})
}

// WaitCaughtUp waits until every record below ends[p] of every partition p
// was handled (its OnStaged/OnResolve calls returned), or ctx ends.
func (t *Tailer) WaitCaughtUp(ctx context.Context, ends map[int32]int64) error {
	for {
		t.pmu.Lock()
		behind := -1
		var at, want int64
		for p, end := range ends {
			if t.progress[p] < end {
				behind, at, want = int(p), t.progress[p], end
				break
			}
		}
		moved := t.moved
		t.pmu.Unlock()
		if behind < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("markers: shadow partition %d read to %d of %d: %w", behind, at, want, ctx.Err())
		case <-t.done:
			return errors.New("markers: tailer closed")
		case <-moved:
		}
	}
}

// Close stops the Tailer and closes its client. No onResolve call runs after
// Close returns.
func (t *Tailer) Close() {
	t.cancel()
	<-t.done
	t.cl.Close()
}

// Lag is how many records of the shadow topic the Tailer has not handled
// yet, as of the last high watermarks its fetches saw.
func (t *Tailer) Lag() int64 {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	var lag int64
	for p, h := range t.hwm {
		lag += max(0, h-t.progress[p])
	}
	return lag
}

// Pending returns how many staged records of this proxy await a marker.
func (t *Tailer) Pending() int { return t.res.pending() }

// staged is a shadow record waiting for its marker.
type staged struct {
	rec    *staging.ShadowRecord
	offset int64
	epoch  int16
}

type partState struct {
	next    int64               // offsets below next were handled
	pending map[int64][]*staged // producer id -> staged, in log order
}

// logRecord is what the resolver needs of a record.
type logRecord struct {
	partition     int32
	offset        int64
	producerID    int64
	producerEpoch int16
	control       bool
	transactional bool
	key, value    []byte
}

// matcher is the Tailer's state machine, fed records in log order per
// partition.
type matcher struct {
	proxyID   string             // "" = every proxy
	onResolve func([]Resolution) // per marker, with the records it resolves
	onStaged  func(stagedRecord)

	key        []byte
	onRejected func(partition int32, offset int64, reason string)
	onRead     func(kind string, bytes int)

	mu    sync.Mutex
	parts map[int32]*partState
}

func newMatcher(proxyID string, onResolve func([]Resolution)) *matcher {
	return &matcher{proxyID: proxyID, onResolve: onResolve, parts: make(map[int32]*partState)}
}

func (r *matcher) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ps := range r.parts {
		for _, s := range ps.pending {
			n += len(s)
		}
	}
	return n
}

// Control record key: int16 version, int16 type.
const (
	controlAbort  = 0
	controlCommit = 1
)

func (r *matcher) handle(rec logRecord) {
	r.mu.Lock()
	ps := r.parts[rec.partition]
	if ps == nil {
		ps = &partState{next: -1, pending: make(map[int64][]*staged)}
		r.parts[rec.partition] = ps
	}
	if rec.offset < ps.next {
		r.mu.Unlock()
		return // seen already
	}
	ps.next = rec.offset + 1

	var out []Resolution
	var newStaged *stagedRecord
	rejected := ""
	kind := "other"
	switch {
	case rec.control:
		if len(rec.key) < 4 {
			break
		}
		typ := int16(binary.BigEndian.Uint16(rec.key[2:4]))
		if typ != controlAbort && typ != controlCommit {
			break // other control records (e.g. leader change markers)
		}
		kind = "marker"
		list := ps.pending[rec.producerID]
		keep := list[:0]
		for _, s := range list {
			if s.epoch <= rec.producerEpoch {
				out = append(out, Resolution{Record: s.rec, Offset: s.offset, Partition: rec.partition, Commit: typ == controlCommit})
			} else {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			delete(ps.pending, rec.producerID)
		} else {
			ps.pending[rec.producerID] = keep
		}
	case rec.transactional && staging.IsShadowRecord(rec.value):
		sr, err := r.decode(rec)
		if err != nil {
			rejected, kind = RejectReason(err), "rejected"
			break
		}
		kind = "staged"
		if r.proxyID != "" && sr.ProxyID != r.proxyID {
			break
		}
		ps.pending[rec.producerID] = append(ps.pending[rec.producerID], &staged{rec: sr, offset: rec.offset, epoch: rec.producerEpoch})
		newStaged = &stagedRecord{Record: sr, Offset: rec.offset, Partition: rec.partition}
	}
	r.mu.Unlock()
	if r.onRead != nil {
		r.onRead(kind, len(rec.key)+len(rec.value))
	}
	if rejected != "" && r.onRejected != nil {
		r.onRejected(rec.partition, rec.offset, rejected)
	}
	if newStaged != nil && r.onStaged != nil {
		r.onStaged(*newStaged)
	}
	if len(out) > 0 {
		r.onResolve(out)
	}
}

// decode returns the shadow record of rec if it is to be trusted: without a
// key any decodable one; with a key only a signed one whose producer id and
// epoch are the batch's (a signed record copied into another producer's
// transaction is not).
func (r *matcher) decode(rec logRecord) (*staging.ShadowRecord, error) {
	if r.key == nil {
		return staging.DecodeShadowRecord(rec.value)
	}
	sr, err := staging.VerifyShadowRecord(rec.value, r.key)
	if err != nil {
		return nil, err
	}
	if sr.ProducerID != rec.producerID || sr.ProducerEpoch != rec.producerEpoch {
		return nil, errCopied
	}
	return sr, nil
}

var errCopied = errors.New("markers: a signed shadow record in another producer's batch (copied)")

// RejectReason names why a shadow record was not trusted, as a metric label:
// unsigned, bad_signature, copied or undecodable.
func RejectReason(err error) string {
	switch {
	case errors.Is(err, staging.ErrUnsigned):
		return "unsigned"
	case errors.Is(err, staging.ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, errCopied):
		return "copied"
	}
	return "undecodable"
}

// EndOffsets returns the end offset (high watermark) of every partition of
// topic. Records staged before these offsets are not seen by a Tailer started
// from them.
func EndOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	l, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	return listed(l, err, topic)
}

// StableOffsets returns the last stable offset of every partition of topic:
// every transaction with data below it has its marker below it. A Tailer
// started from them sees every staged record whose transaction was still
// open when they were listed (and more), which is what a restarted proxy
// needs to resolve records staged by its previous run.
func StableOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	l, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	return listed(l, err, topic)
}

// OffsetsAfter returns, per partition of topic, the first offset with a
// timestamp at or after ts (the end offset when there is none): where a
// restarted proxy starts reading the shadow topic to recover (docs/design.md §8.2).
func OffsetsAfter(ctx context.Context, cl *kgo.Client, topic string, ts time.Time) (map[int32]int64, error) {
	l, err := kadm.NewClient(cl).ListOffsetsAfterMilli(ctx, ts.UnixMilli(), topic)
	return listed(l, err, topic)
}

func listed(l kadm.ListedOffsets, err error, topic string) (map[int32]int64, error) {
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("markers: list offsets of %q: %w", topic, err)
	}
	ps, ok := l[topic]
	if !ok {
		return nil, fmt.Errorf("markers: list offsets: topic %q not found", topic)
	}
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		out[p] = o.Offset
	}
	return out, nil
}
