package markers

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/staging"
)

const (
	dataTopic   = "data"
	shadowTopic = "__sharetx_shadow"
	proxyID     = "proxy-1"
)

// ---- resolver unit tests (synthetic records) ----

func shadowRec(t *testing.T, p int32, off int64, pid int64, epoch int16, proxy string, tag int64) logRecord {
	t.Helper()
	sr := &staging.ShadowRecord{Version: 1, ProxyID: proxy, ProducerID: pid, ProducerEpoch: epoch,
		Topics: []staging.ShadowTopic{{Partitions: []staging.ShadowPartition{{AcknowledgementBatches: []staging.ShadowBatch{
			{FirstOffset: tag, LastOffset: tag, AcknowledgeTypes: []int8{1}}}}}}}}
	return logRecord{partition: p, offset: off, producerID: pid, producerEpoch: epoch, transactional: true, value: sr.AppendTo(nil)}
}

func marker(p int32, off int64, pid int64, epoch int16, commit bool) logRecord {
	key := make([]byte, 4)
	if commit {
		binary.BigEndian.PutUint16(key[2:], 1)
	}
	return logRecord{partition: p, offset: off, producerID: pid, producerEpoch: epoch,
		control: true, transactional: true, key: key, value: []byte{0, 0, 0, 0, 0, 0}}
}

func tag(r Resolution) int64 {
	return r.Record.Topics[0].Partitions[0].AcknowledgementBatches[0].FirstOffset
}

func TestResolver(t *testing.T) {
	var got []Resolution
	r := newMatcher(proxyID, each(func(res Resolution) { got = append(got, res) }))
	feed := func(recs ...logRecord) {
		for _, rec := range recs {
			r.handle(rec)
		}
	}
	corrupt := shadowRec(t, 0, 3, 1, 3, proxyID, 0)
	corrupt.value = corrupt.value[:len(corrupt.value)-1]
	nonTxn := shadowRec(t, 0, 4, 1, 3, proxyID, 0)
	nonTxn.transactional = false
	feed(
		shadowRec(t, 0, 1, 1, 3, proxyID, 101),
		shadowRec(t, 0, 2, 1, 3, "other", 0),
		corrupt,
		nonTxn,
		logRecord{partition: 0, offset: 5, value: []byte("filler")},
		shadowRec(t, 0, 6, 2, 5, proxyID, 201),
		shadowRec(t, 0, 7, 1, 3, proxyID, 102),
		marker(0, 8, 1, 3, true),               // resolves 101, 102 (kfake-style: same epoch)
		marker(0, 8, 1, 3, true),               // same offset again: nothing
		marker(0, 9, 1, 4, true),               // a second marker for pid 1: nothing pending
		shadowRec(t, 0, 1, 1, 3, proxyID, 101), // redelivered: ignored
		marker(0, 10, 2, 4, false),             // lower epoch than staged: not this transaction
		marker(0, 11, 2, 6, false),             // bumped epoch (real Kafka TV2): resolves 201
		shadowRec(t, 1, 0, 1, 3, proxyID, 301), // other partition: separate state
		marker(1, 1, 1, 3, false),
	)
	want := []struct {
		tag    int64
		off    int64
		p      int32
		commit bool
	}{{101, 1, 0, true}, {102, 7, 0, true}, {201, 6, 0, false}, {301, 0, 1, false}}
	if len(got) != len(want) {
		t.Fatalf("got %d resolutions: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		if tag(g) != w.tag || g.Offset != w.off || g.Partition != w.p || g.Commit != w.commit {
			t.Fatalf("resolution %d: got tag %d off %d p %d commit %v, want %+v", i, tag(g), g.Offset, g.Partition, g.Commit, w)
		}
	}
	if r.pending() != 0 {
		t.Fatalf("pending %d", r.pending())
	}
}

// ---- kfake tests ----

type env struct {
	t     *testing.T
	ctx   context.Context
	c     *kfake.Cluster
	seeds []string
	w     *staging.Writer
	n     int32

	mu  sync.Mutex
	got []Resolution
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, dataTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, seeds: c.ListenAddrs()}
	e.w = staging.NewWriter(e.client(), shadowTopic, nil)
	if e.n, err = e.w.EnsureTopic(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	start, err := EndOffsets(ctx, e.client(), shadowTopic)
	if err != nil || len(start) != 2 {
		t.Fatalf("EndOffsets: %v %v", start, err)
	}
	tl, err := NewTailer([]kgo.Opt{kgo.SeedBrokers(e.seeds...)}, shadowTopic, proxyID, start, func(r Resolution) {
		e.mu.Lock()
		e.got = append(e.got, r)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.Close)
	return e
}

func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.seeds...)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

type producer struct {
	e     *env
	cl    *kgo.Client
	txn   string
	pid   int64
	epoch int16
}

func (e *env) producer(txn string, opts ...kgo.Opt) *producer {
	return &producer{e: e, txn: txn, cl: e.client(append([]kgo.Opt{kgo.TransactionalID(txn), kgo.DefaultProduceTopic(dataTopic)}, opts...)...)}
}

func (p *producer) begin() {
	t := p.e.t
	t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.cl.ProduceSync(p.e.ctx, &kgo.Record{Value: []byte("data")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var err error
	if p.pid, p.epoch, err = p.cl.ProducerID(p.e.ctx); err != nil {
		t.Fatal(err)
	}
}

// stage writes a shadow record tagged with tag (as FirstOffset) on
// partition part for proxy.
func (p *producer) stage(part int32, proxy string, tag int64) {
	t := p.e.t
	t.Helper()
	sr := &staging.ShadowRecord{Version: 1, ProxyID: proxy, TransactionalID: p.txn, ProducerID: p.pid, ProducerEpoch: p.epoch,
		GroupID: "g", MemberID: "m",
		Topics: []staging.ShadowTopic{{Partitions: []staging.ShadowPartition{{AcknowledgementBatches: []staging.ShadowBatch{
			{FirstOffset: tag, LastOffset: tag, AcknowledgeTypes: []int8{1}}}}}}}}
	if _, err := p.e.w.Write(p.e.ctx, p.txn, p.pid, p.epoch, part, sr); err != nil {
		t.Fatalf("stage %d: %v", tag, err)
	}
}

func (p *producer) end(commit bool) {
	p.e.t.Helper()
	if err := p.cl.EndTransaction(p.e.ctx, kgo.TransactionEndTry(commit)); err != nil {
		p.e.t.Fatal(err)
	}
}

// waitTag waits until tag is resolved and returns all resolutions so far.
func (e *env) waitTag(tagWant int64, d time.Duration) []Resolution {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		e.mu.Lock()
		got := append([]Resolution(nil), e.got...)
		e.mu.Unlock()
		for _, r := range got {
			if tag(r) == tagWant {
				return got
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("tag %d not resolved within %v; got %d resolutions", tagWant, d, len(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTailerInterleaved(t *testing.T) {
	e := newEnv(t)
	a, b := e.producer("txn-A"), e.producer("txn-B")
	plain := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	filler := func(p int32) {
		if err := plain.ProduceSync(e.ctx, &kgo.Record{Topic: shadowTopic, Partition: p, Value: []byte("filler")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Round 1, both producers on partition 0, interleaved.
	a.begin()
	b.begin()
	a.stage(0, proxyID, 1)
	b.stage(0, proxyID, 2)
	a.stage(0, "other-proxy", 900) // another proxy's record: ignored
	filler(0)                      // non-shadow record: ignored
	b.stage(0, proxyID, 3)
	a.stage(1, proxyID, 4) // A also on partition 1
	b.end(false)           // 2, 3 abort
	a.end(true)            // 1, 4 commit

	// Round 2: A aborts, B commits; B's records on both partitions.
	a.begin()
	a.stage(0, proxyID, 5)
	b.begin()
	b.stage(1, proxyID, 6)
	b.stage(0, proxyID, 7)
	filler(1)
	a.stage(0, proxyID, 8)
	a.end(false) // 5, 8 abort
	b.end(true)  // 6, 7 commit

	// A last committed transaction on each partition orders everything
	// before it.
	a.begin()
	a.stage(0, proxyID, 100)
	a.stage(1, proxyID, 101)
	a.end(true)
	e.waitTag(100, 10*time.Second)
	got := e.waitTag(101, 10*time.Second)

	want := map[int64]bool{1: true, 2: false, 3: false, 4: true, 5: false, 6: true, 7: true, 8: false, 100: true, 101: true}
	seen := map[int64]int{}
	for _, r := range got {
		tg := tag(r)
		seen[tg]++
		w, ok := want[tg]
		if !ok {
			t.Errorf("unexpected resolution of tag %d", tg)
			continue
		}
		if r.Commit != w {
			t.Errorf("tag %d: commit=%v, want %v", tg, r.Commit, w)
		}
		if r.Record.ProxyID != proxyID {
			t.Errorf("tag %d: proxy %q", tg, r.Record.ProxyID)
		}
	}
	for tg := range want {
		if seen[tg] != 1 {
			t.Errorf("tag %d resolved %d times", tg, seen[tg])
		}
	}
	// Partition 0, in marker order and, per marker, in log order:
	// B abort (2, 3), A commit (1), A abort (5, 8), B commit (7), A commit (100).
	var tags []int64
	for _, r := range got {
		if r.Partition == 0 {
			tags = append(tags, tag(r))
		}
	}
	if fmt.Sprint(tags) != fmt.Sprint([]int64{2, 3, 1, 5, 8, 7, 100}) {
		t.Errorf("partition 0 order: %v", tags)
	}
	if t.Failed() {
		sort.Slice(got, func(i, j int) bool { return tag(got[i]) < tag(got[j]) })
		for _, r := range got {
			t.Logf("p%d off %d tag %d commit %v", r.Partition, r.Offset, tag(r), r.Commit)
		}
	}
}

// A transaction that is never ended is aborted by the coordinator when it
// times out; the staged record resolves as abort.
func TestTailerTransactionTimeout(t *testing.T) {
	e := newEnv(t)
	p := e.producer("txn-timeout", kgo.TransactionTimeout(time.Second))
	p.begin()
	p.stage(0, proxyID, 1)
	start := time.Now()
	got := e.waitTag(1, 20*time.Second)
	if len(got) != 1 || got[0].Commit {
		t.Fatalf("got %+v", got)
	}
	t.Logf("timed-out transaction resolved as abort after %v", time.Since(start))
}

func TestStableOffsets(t *testing.T) {
	e := newEnv(t)
	p := e.producer("txn-lso")
	p.begin()
	p.stage(0, proxyID, 1)
	cl := e.client()
	lso, err := StableOffsets(e.ctx, cl, shadowTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, err := EndOffsets(e.ctx, cl, shadowTopic)
	if err != nil {
		t.Fatal(err)
	}
	if lso[0] != 0 || end[0] != 1 {
		t.Fatalf("open transaction: lso %v end %v", lso, end)
	}
	p.end(true)
	e.waitTag(1, 10*time.Second)
	if lso, err = StableOffsets(e.ctx, cl, shadowTopic); err != nil || lso[0] != 2 {
		t.Fatalf("after commit: lso %v %v", lso, err)
	}
}

// FuzzResolver feeds arbitrary record sequences: no panic, and no staged
// offset is resolved twice.
func FuzzResolver(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		seen := map[[2]int64]bool{}
		r := newMatcher(proxyID, func(rs []Resolution) {
			if len(rs) == 0 {
				t.Fatal("a marker resolved nothing but was reported")
			}
			for _, res := range rs {
				k := [2]int64{int64(res.Partition), res.Offset}
				if seen[k] {
					t.Fatalf("offset %v resolved twice", k)
				}
				seen[k] = true
			}
		})
		for i := 0; i+3 < len(in); i += 4 {
			p, off, pid, epoch := int32(in[i]%2), int64(in[i+1]%16), int64(in[i+2]%3), int16(in[i+3]%4)
			switch in[i+3] / 4 % 4 {
			case 0:
				r.handle(shadowRec(t, p, off, pid, epoch, proxyID, off))
			case 1:
				r.handle(marker(p, off, pid, epoch, in[i]&0x80 != 0))
			case 2:
				r.handle(shadowRec(t, p, off, pid, epoch, "other", off))
			default:
				r.handle(logRecord{partition: p, offset: off, key: in[i:], value: in[i:], control: in[i]&0x40 != 0})
			}
		}
	})
}

// TestResolverTrustsOnlySignedRecords: with a key, an unsigned record, one
// signed with another key and a signed one copied into another producer's
// batch are reported and never staged or resolved; a signed one is.
func TestResolverTrustsOnlySignedRecords(t *testing.T) {
	key := staging.DeriveShadowKey([]byte("0123456789abcdef0123456789abcdef"))
	var got []Resolution
	var rejected []string
	r := newMatcher("", each(func(res Resolution) { got = append(got, res) }))
	r.key = key
	r.onRejected = func(_ int32, _ int64, reason string) { rejected = append(rejected, reason) }
	var read []string
	bytes := 0
	r.onRead = func(kind string, n int) { read, bytes = append(read, kind), bytes+n }
	signed := func(off, pid int64, epoch int16, k []byte, batchPID int64) logRecord {
		sr := &staging.ShadowRecord{ProxyID: proxyID, ProducerID: pid, ProducerEpoch: epoch,
			Topics: []staging.ShadowTopic{{Partitions: []staging.ShadowPartition{{AcknowledgementBatches: []staging.ShadowBatch{
				{FirstOffset: off, LastOffset: off, AcknowledgeTypes: []int8{1}}}}}}}}
		return logRecord{partition: 0, offset: off, producerID: batchPID, producerEpoch: epoch, transactional: true, value: sr.AppendSigned(nil, k)}
	}
	r.handle(shadowRec(t, 0, 1, 7, 0, proxyID, 1))                                                    // unsigned
	r.handle(signed(2, 7, 0, staging.DeriveShadowKey([]byte("not the key, but long enough....")), 7)) // other key
	r.handle(signed(3, 8, 0, key, 7))                                                                 // copied into pid 7's batch
	r.handle(signed(4, 7, 0, key, 7))                                                                 // good
	r.handle(marker(0, 5, 7, 0, true))
	r.handle(logRecord{partition: 0, offset: 6, producerID: 9, transactional: true, value: []byte("sharetx-touch")})
	r.handle(marker(0, 6, 7, 0, true)) // read already: not counted again
	if fmt.Sprint(rejected) != "[unsigned bad_signature copied]" {
		t.Fatalf("rejected %v", rejected)
	}
	// Every record read once, by kind (sharetx_shadow_read_records_total).
	if fmt.Sprint(read) != "[rejected rejected rejected staged marker other]" || bytes < 4*50 {
		t.Fatalf("records read %v (%d bytes)", read, bytes)
	}
	if len(got) != 1 || tag(got[0]) != 4 || !got[0].Commit {
		t.Fatalf("resolved %+v, want only the signed record at 4", got)
	}
}

// BenchmarkTailOtherSidecarsCall is what one call staged through another
// sidecar costs every sidecar that tails the shadow topic (design.md §8.5):
// its signed shadow record (one partition, 100 offsets) and its COMMIT
// marker through the matcher, the Resolver and the ledger, as Follow wires
// them. Fetching is not included; the records are signed beforehand.
func BenchmarkTailOtherSidecarsCall(b *testing.B) {
	key := staging.DeriveShadowKey([]byte("0123456789abcdef0123456789abcdef"))
	r, _ := testResolver(b)
	m := newMatcher("", r.ResolveAll)
	m.onStaged = func(st stagedRecord) { r.OnShadowRecord(st.Partition, st.Offset, st.Record) }
	m.key, m.onRejected, m.onRead = key, r.RejectShadow, r.countRead
	const producers = 64
	values := make([][]byte, producers)
	for i := range values {
		sr := &staging.ShadowRecord{ProxyID: "another-sidecar", TransactionalID: fmt.Sprintf("txn-%d", i), GroupID: "group",
			MemberID: "member", ProducerID: int64(1000 + i), ProducerEpoch: 3,
			Topics: []staging.ShadowTopic{{TopicID: recTopic, Partitions: []staging.ShadowPartition{{Partition: int32(i % 3),
				AcknowledgementBatches: []staging.ShadowBatch{{FirstOffset: int64(100 * i), LastOffset: int64(100*i + 99), AcknowledgeTypes: []int8{1}}}}}}}}
		values[i] = sr.AppendSigned(nil, key)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		off, pid := int64(2*i), int64(1000+i%producers)
		m.handle(logRecord{partition: 0, offset: off, producerID: pid, producerEpoch: 3, transactional: true, value: values[i%producers]})
		m.handle(marker(0, off+1, pid, 3, true))
	}
}
