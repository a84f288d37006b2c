package staging

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	dataTopic   = "data"
	shadowTopic = "__sharetx_shadow"
)

type env struct {
	t     *testing.T
	ctx   context.Context
	c     *kfake.Cluster
	seeds []string
	w     *Writer
	n     int32
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
	e.w = NewWriter(e.client(), shadowTopic, nil)
	n, err := e.w.EnsureTopic(ctx, 3, 1)
	if err != nil || n != 3 {
		t.Fatalf("EnsureTopic: %d %v", n, err)
	}
	// Idempotent: an existing topic keeps its count.
	if n, err := e.w.EnsureTopic(ctx, 5, 1); err != nil || n != 3 {
		t.Fatalf("EnsureTopic again: %d %v", n, err)
	}
	e.n = n
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

// producer returns a transactional producer that has begun a transaction
// and produced one record to the data topic (so that EndTransaction sends
// EndTxn), and its producer id and epoch.
func (e *env) producer(txnID string, value string) (*kgo.Client, int64, int16) {
	e.t.Helper()
	p := e.client(kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(dataTopic))
	pid, epoch := e.begin(p, value)
	return p, pid, epoch
}

func (e *env) begin(p *kgo.Client, value string) (int64, int16) {
	e.t.Helper()
	if err := p.BeginTransaction(); err != nil {
		e.t.Fatal(err)
	}
	if err := p.ProduceSync(e.ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	pid, epoch, err := p.ProducerID(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return pid, epoch
}

func (e *env) end(p *kgo.Client, commit bool) {
	e.t.Helper()
	if err := p.EndTransaction(e.ctx, kgo.TransactionEndTry(commit)); err != nil {
		e.t.Fatal(err)
	}
}

func rec(txnID string, pid int64, epoch int16, first int64) *ShadowRecord {
	return &ShadowRecord{
		Version: 1, ProxyID: "proxy-test", TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch,
		GroupID: "g", MemberID: "m",
		Topics: []ShadowTopic{{TopicID: [16]byte{9}, Partitions: []ShadowPartition{{
			Partition: 0, AcknowledgementBatches: []ShadowBatch{{FirstOffset: first, LastOffset: first, AcknowledgeTypes: []int8{1}}},
		}}}},
	}
}

// committed reads with read_committed from the start of the data topic and
// of the shadow partition p until a sentinel record (produced here,
// non-transactionally, after everything else) shows up in each; it returns
// the other records' values by topic.
func (e *env) committed(p int32) map[string][][]byte {
	e.t.Helper()
	pl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, r := range []*kgo.Record{{Topic: dataTopic, Partition: 0}, {Topic: shadowTopic, Partition: p}} {
		r.Value = []byte("sentinel")
		if err := pl.ProduceSync(e.ctx, r).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
	cons := e.client(
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			dataTopic:   {0: kgo.NewOffset().AtStart()},
			shadowTopic: {p: kgo.NewOffset().AtStart()},
		}),
	)
	out := map[string][][]byte{}
	seen := 0
	for seen < 2 {
		fs := cons.PollFetches(e.ctx)
		if err := e.ctx.Err(); err != nil {
			e.t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == "sentinel" {
				seen++
				return
			}
			out[r.Topic] = append(out[r.Topic], r.Value)
		})
	}
	return out
}

func shadowCount(t *testing.T, vals [][]byte) int {
	t.Helper()
	n := 0
	for _, v := range vals {
		if _, err := DecodeShadowRecord(v); err != nil {
			t.Fatalf("non-shadow value in shadow partition: %q: %v", v, err)
		}
		n++
	}
	return n
}

func TestWriterCommit(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-commit"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	off, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1))
	if err != nil {
		t.Fatal(err)
	}
	if off != 0 {
		t.Fatalf("offset %d, want 0", off)
	}
	e.end(p, true)

	got := e.committed(sp)
	if len(got[dataTopic]) != 1 || string(got[dataTopic][0]) != "d1" {
		t.Fatalf("data: %q", got[dataTopic])
	}
	if shadowCount(t, got[shadowTopic]) != 1 {
		t.Fatalf("shadow: %d records", len(got[shadowTopic]))
	}
	r, _ := DecodeShadowRecord(got[shadowTopic][0])
	if r.TransactionalID != txn || r.ProducerID != pid || r.ProducerEpoch != epoch {
		t.Fatalf("decoded %+v", r)
	}
}

func TestWriterAbort(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-abort"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1)); err != nil {
		t.Fatal(err)
	}
	e.end(p, false)
	got := e.committed(sp)
	if len(got[dataTopic]) != 0 || len(got[shadowTopic]) != 0 {
		t.Fatalf("aborted records visible: %q", got)
	}
}

func TestWriterTwoWritesThenNextTransaction(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-two"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	o1, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1))
	if err != nil {
		t.Fatal(err)
	}
	o2, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 2))
	if err != nil {
		t.Fatal(err)
	}
	if o2 != o1+1 {
		t.Fatalf("offsets %d %d", o1, o2)
	}
	e.end(p, true)

	// Next transaction: new epoch (TV2 bumps on EndTxn), sequence restarts.
	pid2, epoch2 := e.begin(p, "d2")
	if pid2 != pid || epoch2 <= epoch {
		t.Fatalf("expected bumped epoch: %d/%d -> %d/%d", pid, epoch, pid2, epoch2)
	}
	if _, err := e.w.Write(e.ctx, txn, pid2, epoch2, sp, rec(txn, pid2, epoch2, 3)); err != nil {
		t.Fatal(err)
	}
	e.end(p, true)

	got := e.committed(sp)
	if len(got[dataTopic]) != 2 || shadowCount(t, got[shadowTopic]) != 3 {
		t.Fatalf("data %q, shadow %d", got[dataTopic], len(got[shadowTopic]))
	}
	for i, v := range got[shadowTopic] {
		r, _ := DecodeShadowRecord(v)
		if r.Topics[0].Partitions[0].AcknowledgementBatches[0].FirstOffset != int64(i+1) {
			t.Fatalf("shadow %d out of order: %+v", i, r)
		}
	}
}

func TestWriterStaleEpoch(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-stale"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1)); err != nil {
		t.Fatal(err)
	}
	e.end(p, true)

	_, epoch2 := e.begin(p, "d2")
	// The old epoch is fenced.
	_, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 2))
	var we *WriteError
	if !errors.As(err, &we) {
		t.Fatalf("want *WriteError, got %v", err)
	}
	if !errors.Is(err, kerr.InvalidProducerEpoch) && !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("want INVALID_PRODUCER_EPOCH or PRODUCER_FENCED, got %v (code %d)", err, we.Code())
	}
	if we.Code() != kerr.InvalidProducerEpoch.Code && we.Code() != kerr.ProducerFenced.Code {
		t.Fatalf("code %d", we.Code())
	}
	// An unknown producer id is not in a transaction.
	_, err = e.w.Write(e.ctx, txn, pid+1, 0, sp, rec(txn, pid+1, 0, 2))
	if !errors.As(err, &we) || we.Code() == kerr.UnknownServerError.Code {
		t.Fatalf("unknown pid: %v", err)
	}
	t.Logf("unknown producer id: %v", err)
	e.end(p, true)
	_ = epoch2

	got := e.committed(sp)
	if shadowCount(t, got[shadowTopic]) != 1 || len(got[dataTopic]) != 2 {
		t.Fatalf("data %q, shadow %d", got[dataTopic], len(got[shadowTopic]))
	}
}

// shadowProduce matches a Produce request for the shadow topic.
func shadowProduce(kr kmsg.Request, id [16]byte) bool {
	req := kr.(*kmsg.ProduceRequest)
	for _, t := range req.Topics {
		if t.Topic == shadowTopic || (req.Version >= 13 && t.TopicID == id) {
			return true
		}
	}
	return false
}

func errResp(kr kmsg.Request, code int16) kmsg.Response {
	req := kr.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// Errors injected into the shadow produce: a retriable one is retried with
// the same sequence, a fatal one is returned with its code and does not
// advance the sequence, a dropped connection is retried with the same bytes.
func TestWriterInjectedErrors(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-inject"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	id := e.w.topicID

	inject := func(code int16, drop bool) {
		e.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			if !shadowProduce(kr, id) {
				return nil, nil, false
			}
			if drop {
				return nil, errors.New("drop connection"), true
			}
			return errResp(kr, code), nil, true
		})
	}

	inject(kerr.NotLeaderForPartition.Code, false)
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1)); err != nil {
		t.Fatalf("retriable: %v", err)
	}
	inject(kerr.TransactionAbortable.Code, false)
	_, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 2))
	var we *WriteError
	if !errors.As(err, &we) || we.Code() != kerr.TransactionAbortable.Code || !errors.Is(err, kerr.TransactionAbortable) {
		t.Fatalf("want TRANSACTION_ABORTABLE, got %v", err)
	}
	inject(0, true)
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 3)); err != nil {
		t.Fatalf("after dropped connection: %v", err) // sequence 1: the failure did not advance it
	}
	e.end(p, true)
	if got := e.committed(sp); shadowCount(t, got[shadowTopic]) != 2 {
		t.Fatalf("shadow %d", len(got[shadowTopic]))
	}
}

// A new Writer (a restarted proxy) in the middle of a transaction recovers
// the sequence with DescribeProducers.
func TestWriterRestartMidTransaction(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-restart"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1)); err != nil {
		t.Fatal(err)
	}
	w2 := NewWriter(e.client(), shadowTopic, nil)
	if _, err := w2.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 2)); err != nil {
		t.Fatalf("restarted writer: %v", err)
	}
	e.end(p, true)
	if got := e.committed(sp); shadowCount(t, got[shadowTopic]) != 2 {
		t.Fatalf("shadow %d", len(got[shadowTopic]))
	}
}

func TestWriterRequiresAllAcks(t *testing.T) {
	e := newEnv(t)
	w := NewWriter(e.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()), shadowTopic, nil)
	_, err := w.Write(e.ctx, "x", 1, 0, 0, rec("x", 1, 0, 1))
	if !errors.Is(err, ErrAcks) {
		t.Fatalf("got %v", err)
	}
}

// An epoch marked fresh (the coordinator gave it out after the Writer
// started) is written from sequence 0 without a DescribeProducers; any other
// epoch the Writer has not written asks the leader first. Both commit.
func TestWriterFreshEpochSkipsDescribeProducers(t *testing.T) {
	e := newEnv(t)
	var describes atomic.Int32
	e.c.ControlKey(int16(kmsg.DescribeProducers), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.c.KeepControl()
		describes.Add(1)
		return nil, nil, false
	})
	const txn = "txn-fresh"
	p, pid, epoch := e.producer(txn, "f1")
	sp := ShadowPartitionFor(txn, e.n)
	w := NewWriter(e.client(), shadowTopic, nil)
	w.MarkFresh(pid, epoch)
	if _, err := w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 1)); err != nil {
		t.Fatal(err)
	}
	if n := describes.Load(); n != 0 {
		t.Fatalf("%d DescribeProducers for a fresh epoch", n)
	}
	e.end(p, true)
	// Next transaction, not marked: the Writer asks.
	pid2, epoch2 := e.begin(p, "f2")
	if _, err := w.Write(e.ctx, txn, pid2, epoch2, sp, rec(txn, pid2, epoch2, 2)); err != nil {
		t.Fatal(err)
	}
	if n := describes.Load(); n != 1 {
		t.Fatalf("%d DescribeProducers for an epoch not marked fresh, want 1", n)
	}
	e.end(p, true)
	if got := e.committed(sp); shadowCount(t, got[shadowTopic]) != 2 {
		t.Fatalf("shadow %d, want 2", len(got[shadowTopic]))
	}
}

// TestReservationRides: a reserved batch sent inside another Produce of the
// transaction (as the proxy splices it into the client's) is appended and
// commits with it; Done moves the sequence on, so the next Write follows
// it; a cancelled reservation leaves the sequence where it was; one whose
// Produce failed retriably is resent with its sequence (Retry); epochs the
// writer has no sequence for do not ride.
func TestReservationRides(t *testing.T) {
	e := newEnv(t)
	const txn = "txn-ride"
	p, pid, epoch := e.producer(txn, "d1")
	sp := ShadowPartitionFor(txn, e.n)
	node := e.w.leaders[sp]
	if _, ok := e.w.Reserve(txn, pid, epoch, node, sp, -1, rec(txn, pid, epoch, 1)); ok {
		t.Fatal("an epoch not marked fresh rode (its first sequence is unknown)")
	}
	e.w.MarkFresh(pid, epoch)
	if _, ok := e.w.Reserve(txn, pid, epoch, node+100, sp, -1, rec(txn, pid, epoch, 1)); ok {
		t.Fatal("reserved on a broker that leads no shadow partition")
	}
	// Cancelled: sequence 0 is still next.
	res, ok := e.w.Reserve(txn, pid, epoch, node, sp, -1, rec(txn, pid, epoch, 1))
	if !ok || res.Partition != sp {
		t.Fatalf("reserve: %v %+v", ok, res)
	}
	if _, ok := e.w.Reserve(txn, pid, epoch, node, sp, -1, rec(txn, pid, epoch, 1)); ok {
		t.Fatal("a second reservation while the first is open")
	}
	res.Cancel()
	// Sent inside a Produce of the proxy's test client, as a ride is.
	res, ok = e.w.Reserve(txn, pid, epoch, node, sp, -1, rec(txn, pid, epoch, 2))
	if !ok {
		t.Fatal("reserve after cancel")
	}
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID, req.Acks, req.TimeoutMillis = kmsg.StringPtr(txn), -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = res.Topic, res.TopicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = res.Partition, res.Batch
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	kresp, err := e.w.cl.Broker(int(node)).Request(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("the reserved batch was refused: %d", code)
	}
	res.Done()
	// The next write continues the sequence (a repeated 0 would be dropped
	// as a duplicate and the record lost).
	if _, err := e.w.Write(e.ctx, txn, pid, epoch, sp, rec(txn, pid, epoch, 3)); err != nil {
		t.Fatal(err)
	}
	// Retry: the reservation's sequence written on the writer's own.
	res, ok = e.w.Reserve(txn, pid, epoch, node, sp, -1, rec(txn, pid, epoch, 4))
	if !ok {
		t.Fatal("reserve for retry")
	}
	if _, err := res.Retry(e.ctx); err != nil {
		t.Fatal(err)
	}
	res.Done() // settled already: nothing happens
	e.end(p, true)
	if n := shadowCount(t, e.committed(sp)[shadowTopic]); n != 3 {
		t.Fatalf("%d shadow records committed, want 3 (ride, write, retry)", n)
	}
}

// TestProducersVerdict: a shadow write that failed for the caller's producer
// or transaction is the client's doing; anything else is the proxy's own
// failure (sharetx_staging_failures_total{reason="shadow_write"}).
func TestProducersVerdict(t *testing.T) {
	for _, err := range []error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping,
		kerr.InvalidTxnState, fmt.Errorf("wrapped: %w", kerr.TransactionAbortable)} {
		if !producersVerdict(err) {
			t.Errorf("%v is the producer's: not the proxy's failure", err)
		}
	}
	for _, err := range []error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.TopicAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, ErrOutcomeUnknown, errors.New("dial tcp: connection refused")} {
		if producersVerdict(err) {
			t.Errorf("%v is the proxy's own failure", err)
		}
	}
}
