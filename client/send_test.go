package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

const testTxnID = "sharetx-client-test"

func newCluster(t *testing.T, shadowPartitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(2, "in"),
		kfake.SeedTopics(3, "in2"),
		kfake.SeedTopics(shadowPartitions, defaultShadowTopic),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newProducer(t *testing.T, c *kfake.Cluster, f *fakeSharetx, extra ...kgo.Opt) *Producer {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(testTxnID)}
	if f != nil {
		opts = append(opts, kgo.Dialer(f.dial))
	}
	opts = append(opts, extra...)
	p, err := NewProducer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func someAcks() *ShareAcknowledgements {
	a := NewShareAcknowledgements()
	a.Add(rec("in", 1, 10), Accept)
	a.Add(rec("in", 1, 11), Reject)
	a.Add(rec("in", 0, 3), Accept)
	a.Add(rec("in2", 2, 7), Reject)
	return a
}

func topicIDs(t *testing.T, p *Producer, topics ...string) map[string][16]byte {
	t.Helper()
	resp, err := requestMetadata(context.Background(), p.Client(), topics)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][16]byte)
	for _, tp := range resp.Topics {
		out[*tp.Topic] = tp.TopicID
	}
	return out
}

// touches reads the committed records of the shadow topic.
func touches(t *testing.T, c *kfake.Cluster) []*kgo.Record {
	t.Helper()
	// Read the shadow topic to its last stable offsets, not for a fixed
	// time: a slow machine (the race detector beside a real-broker run)
	// must not turn "not read yet" into "not committed".
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(defaultShadowTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, defaultShadowTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("the shadow topic's last stable offsets: %v", err)
	}
	next := map[int32]int64{} // per partition: the offset after the last record read
	behind := func() bool {
		b := false
		ends.Each(func(o kadm.ListedOffset) { b = b || next[o.Partition] < o.Offset })
		return b
	}
	var out []*kgo.Record
	for behind() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the shadow topic not read to its last stable offsets %v within 30s: read up to %v", ends.Offsets(), next)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

func TestNotAdvertised(t *testing.T) {
	c := newCluster(t, 3)
	var reqs int
	c.ControlKey(int16(kip1289.DefaultKey), func(kmsg.Request) (kmsg.Response, error, bool) {
		reqs++
		return nil, nil, false
	})
	cl := newProducer(t, c, nil)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	err := cl.SendShareAcknowledgementsToTransaction(context.Background(), someAcks(), NewShareGroupMetadata("g"))
	if !errors.Is(err, ErrNotAdvertised) || !strings.Contains(err.Error(), "connect through sharetx: the cluster does not advertise TxnShareAcknowledge (key 95)") {
		t.Fatalf("err = %v", err)
	}
	if reqs != 0 {
		t.Fatal("the request reached the cluster")
	}
	if err := cl.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if n := len(touches(t, c)); n != 0 {
		t.Fatalf("%d touch records; nothing may be produced before the check", n)
	}
}

func TestSendRequiresGroup(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	ctx := context.Background()
	if err := newProducer(t, c, f).SendShareAcknowledgementsToTransaction(ctx, someAcks(), ShareGroupMetadata{}); err == nil || !strings.Contains(err.Error(), "GroupID") {
		t.Fatalf("no group: %v", err)
	}
	var nilProducer *Producer
	if err := nilProducer.SendShareAcknowledgementsToTransaction(ctx, someAcks(), NewShareGroupMetadata("g")); err == nil || !strings.Contains(err.Error(), "nil producer") {
		t.Fatalf("nil producer: %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("sent")
	}
}

func TestSendThroughFakeProxy(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	ctx := context.Background()
	ids := topicIDs(t, cl, "in", "in2")
	md := ShareGroupMetadata{GroupID: "g", MemberID: "m1", MemberEpoch: 4}

	// Not in a transaction: the touch fails, nothing is staged.
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err == nil || !strings.Contains(err.Error(), "in a transaction") {
		t.Fatalf("outside a transaction: %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("staged outside a transaction")
	}

	// Transaction 1: acks only, two calls.
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err != nil {
		t.Fatal(err)
	}
	a2 := NewShareAcknowledgements()
	a2.Add(rec("in", 0, 4), Accept)
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, a2, md); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.Client().ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.TransactionalID == nil || *r.TransactionalID != testTxnID || r.ProducerID != pid || r.ProducerEpoch != epoch ||
		r.GroupID != "g" || r.MemberID != "m1" || r.MemberEpoch != 4 {
		t.Fatalf("request header: %+v (pid %d epoch %d)", r, pid, epoch)
	}
	want := []kip1289.TxnShareAcknowledgeTopic{
		{TopicID: ids["in"], Partitions: []kip1289.TxnShareAcknowledgePartition{
			{Partition: 0, AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: 3, LastOffset: 3, AcknowledgeTypes: []int8{1}}}},
			{Partition: 1, AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: 10, LastOffset: 11, AcknowledgeTypes: []int8{1, 3}}}},
		}},
		{TopicID: ids["in2"], Partitions: []kip1289.TxnShareAcknowledgePartition{
			{Partition: 2, AcknowledgementBatches: []kip1289.TxnShareAcknowledgeBatch{{FirstOffset: 7, LastOffset: 7, AcknowledgeTypes: []int8{3}}}},
		}},
	}
	if !equalTopics(r.Topics, want) {
		t.Fatalf("topics:\n got %+v\nwant %+v", r.Topics, want)
	}
	// An acks-only transaction must really commit (EndTxn sent).
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// Transaction 2: the epoch changed (TV2), so it is touched again.
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, a2, md); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if len(f.requests()) != 3 || f.requests()[2].ProducerEpoch == epoch && cl.tv2 {
		t.Fatalf("third request: %+v", f.requests())
	}

	if !cl.tv2 {
		t.Log("kfake did not negotiate transaction version 2; every call touches")
	}
	recs := touches(t, c)
	wantTouches := 2
	if !cl.tv2 {
		wantTouches = 3 // every call touches without transaction version 2
	}
	if len(recs) != wantTouches {
		t.Fatalf("%d committed touch records, want %d", len(recs), wantTouches)
	}
	for _, r := range recs {
		if r.Partition != kip1289.TouchPartition(testTxnID, 3) || string(r.Value) != "sharetx-touch" ||
			len(r.Headers) != 1 || r.Headers[0].Key != "sharetx" || string(r.Headers[0].Value) != "touch" {
			t.Fatalf("touch record %+v", r)
		}
	}
}

func equalTopics(a, b []kip1289.TxnShareAcknowledgeTopic) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].TopicID != b[i].TopicID || len(a[i].Partitions) != len(b[i].Partitions) {
			return false
		}
		for j := range a[i].Partitions {
			pa, pb := a[i].Partitions[j], b[i].Partitions[j]
			if pa.Partition != pb.Partition || len(pa.AcknowledgementBatches) != len(pb.AcknowledgementBatches) {
				return false
			}
			for k := range pa.AcknowledgementBatches {
				x, y := pa.AcknowledgementBatches[k], pb.AcknowledgementBatches[k]
				if x.FirstOffset != y.FirstOffset || x.LastOffset != y.LastOffset || string(int8s(x.AcknowledgeTypes)) != string(int8s(y.AcknowledgeTypes)) {
					return false
				}
			}
		}
	}
	return true
}

func int8s(v []int8) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

func TestSendErrors(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	ctx := context.Background()
	md := NewShareGroupMetadata("g")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	defer cl.EndTransaction(ctx, kgo.TryAbort)

	msg := "no ongoing transaction"
	f.setAnswer(func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
		return topLevelError(kerr.InvalidTxnState.Code, msg)
	})
	err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md)
	if !errors.Is(err, kerr.InvalidTxnState) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("top level: %v", err)
	}

	ids := topicIDs(t, cl, "in", "in2")
	badMsg := "offset 11 not acquired by the member"
	f.setAnswer(func(req *kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
		resp := &kip1289.TxnShareAcknowledgeResponse{}
		for _, tp := range req.Topics {
			rt := kip1289.TxnShareAcknowledgeResponseTopic{TopicID: tp.TopicID}
			for _, p := range tp.Partitions {
				rp := kip1289.TxnShareAcknowledgeResponsePartition{Partition: p.Partition, ErrorCode: kerr.OperationNotAttempted.Code}
				if tp.TopicID == ids["in"] && p.Partition == 1 {
					rp.ErrorCode, rp.ErrorMessage = kerr.InvalidRecordState.Code, &badMsg
				}
				if tp.TopicID == ids["in2"] {
					rp.ErrorCode = kerr.UnknownTopicID.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	})
	err = cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md)
	var pes *PartitionErrors
	if !errors.As(err, &pes) {
		t.Fatalf("partition errors: %v", err)
	}
	if len(pes.Errors) != 3 || len(pes.Failed()) != 2 {
		t.Fatalf("%+v", pes.Errors)
	}
	if !errors.Is(err, kerr.InvalidRecordState) || !errors.Is(err, kerr.UnknownTopicID) {
		t.Fatalf("errors.Is: %v", err)
	}
	var found bool
	for _, pe := range pes.Errors {
		if pe.Topic == "in" && pe.Partition == 1 && pe.TopicID == ids["in"] && pe.Err == kerr.InvalidRecordState && pe.Message == badMsg {
			found = true
		}
	}
	if !found {
		t.Fatalf("partition error for in[1] missing: %+v", pes.Errors)
	}
	for _, s := range []string{"in[1]: INVALID_RECORD_STATE", badMsg, "in2[2]: UNKNOWN_TOPIC_ID", "1 other partition(s) OPERATION_NOT_ATTEMPTED", "all-or-nothing"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message lacks %q: %v", s, err)
		}
	}
	cl.mu.Lock()
	_, cachedIn := cl.topicIDs["in"]
	_, cachedIn2 := cl.topicIDs["in2"]
	cl.mu.Unlock()
	if !cachedIn || cachedIn2 {
		t.Fatalf("UNKNOWN_TOPIC_ID must drop only in2 from the cache (in %v, in2 %v)", cachedIn, cachedIn2)
	}
}

func TestUnknownTopic(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	defer cl.EndTransaction(context.Background(), kgo.TryAbort)
	a := someAcks()
	a.Add(rec("nope", 0, 1), Accept)
	err := cl.SendShareAcknowledgementsToTransaction(context.Background(), a, NewShareGroupMetadata("g"))
	if err == nil || !strings.Contains(err.Error(), "nope: UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("sent")
	}
}

func TestShadowTopicTooSmall(t *testing.T) {
	c := newCluster(t, 1)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	defer cl.EndTransaction(context.Background(), kgo.TryAbort)
	err := cl.SendShareAcknowledgementsToTransaction(context.Background(), someAcks(), NewShareGroupMetadata("g"))
	if err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("sent")
	}
}

func TestShadowTopicMissing(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "in2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	defer cl.EndTransaction(context.Background(), kgo.TryAbort)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	err = cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), NewShareGroupMetadata("g"))
	if err == nil || !strings.Contains(err.Error(), `shadow topic "__sharetx_shadow"`) {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("sent")
	}
}

// A transaction that already produced a record needs no touch record (under
// transaction version 2): kgo sends EndTxn for it anyway, and the
// acknowledgements are staged with the transaction's producer id and epoch.
// A later transaction that produces nothing is touched again.
func TestNoTouchAfterProduce(t *testing.T) {
	c := newCluster(t, 3)
	f := &fakeSharetx{key: 95}
	cl := newProducer(t, c, f)
	ctx := context.Background()
	md := NewShareGroupMetadata("g")

	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in2", Value: []byte("out")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.Client().ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rs := f.requests(); len(rs) != 1 || rs[0].ProducerID != pid || rs[0].ProducerEpoch != epoch {
		t.Fatalf("requests %+v, want one with producer %d epoch %d", rs, pid, epoch)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	tv2 := cl.tv2
	if n, want := len(touches(t, c)), map[bool]int{true: 0, false: 1}[tv2]; n != want {
		t.Fatalf("%d touch records after a transaction that produced (tv2=%v), want %d", n, tv2, want)
	}
	if _, epoch2, _ := cl.Client().ProducerID(ctx); tv2 && epoch2 == epoch {
		t.Fatal("the commit did not bump the epoch: EndTxn was not sent")
	}

	// Acks only: touched.
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if n, want := len(touches(t, c)), map[bool]int{true: 1, false: 2}[tv2]; n != want {
		t.Fatalf("%d touch records after an acks-only transaction, want %d", n, want)
	}
	// Records in flight when the acks are sent: no touch either (the
	// broker holds the produce until the acks were sent).
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { c.SleepControl(func() { <-release }) })
		return nil, nil, false
	})
	done := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: "in2", Value: []byte("out2")}, func(_ *kgo.Record, err error) { done <- err })
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if n, want := len(touches(t, c)), map[bool]int{true: 1, false: 3}[tv2]; n != want {
		t.Fatalf("%d touch records after a transaction with a record in flight, want %d", n, want)
	}
	// Outside a transaction the produced record of the last committed one
	// does not count: the touch fails and nothing is staged.
	if err := cl.SendShareAcknowledgementsToTransaction(ctx, someAcks(), md); err == nil || !strings.Contains(err.Error(), "in a transaction") {
		t.Fatalf("outside a transaction: %v", err)
	}
	if len(f.requests()) != 3 {
		t.Fatalf("%d requests, want 3", len(f.requests()))
	}
}
