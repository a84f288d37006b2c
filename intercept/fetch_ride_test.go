package intercept

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/upstream"
)

// fetchThrough passes a ShareFetch request through the feature's hook as
// the transport does (the session's lock released once "written") and
// returns what would go upstream and the state its response gets.
func fetchThrough(t *testing.T, e *KIP1289, c *fakeConn, req *kmsg.ShareFetchRequest) (*kmsg.ShareFetchRequest, *shareState) {
	t.Helper()
	req.Version = 1
	frame := append([]byte{0, 0, 0, 0}, req.AppendTo(nil)...)
	act, st := e.shareFetchRequest(&proxy.Request{Conn: c, Key: kmsg.ShareFetch.Int16(), Version: 1, Frame: frame, BodyOffset: 4})
	if act.Written != nil {
		act.Written()
	}
	out := kmsg.NewPtrShareFetchRequest()
	out.Version = 1
	body := frame[4:]
	if act.Body != nil {
		body = act.Body
	}
	if err := out.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return out, st
}

func shareFetch(epoch int32, acks map[[16]byte]map[int32][2]int64) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = kmsg.StringPtr("g"), kmsg.StringPtr("m")
	req.ShareSessionEpoch, req.MaxWaitMillis = epoch, 500
	for topic, parts := range acks {
		t := kmsg.NewShareFetchRequestTopic()
		t.TopicID = topic
		for part, r := range parts {
			p := kmsg.NewShareFetchRequestTopicPartition()
			p.Partition = part
			b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
			b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = r[0], r[1], []int8{1}
			p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
			t.Partitions = append(t.Partitions, p)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}

// batchesOf lists a request's acknowledgement batches per topic and
// partition as [first, last].
func batchesOf(req *kmsg.ShareFetchRequest) map[upstream.TopicPartition][][2]int64 {
	out := map[upstream.TopicPartition][][2]int64{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			for _, b := range p.AcknowledgementBatches {
				tp := upstream.TopicPartition{Topic: t.TopicID, Partition: p.Partition}
				out[tp] = append(out[tp], [2]int64{b.FirstOffset, b.LastOffset})
			}
		}
	}
	return out
}

// TestAcksRideTheMembersFetch (docs/design.md §6.4): acknowledgements of
// the proxy's own waiting on a member's session go in the member's next
// ShareFetch, as batches of partitions the fetch does not acknowledge
// itself, with no wait for records; the broker's per-partition answer goes
// to the proxy, and the client gets the answer to what it sent: no
// acknowledgement code on partitions it did not acknowledge, no entry the
// broker added only for the proxy's batches. A fetch that acknowledges one
// of those partitions itself does not take them (a partition's batches
// succeed or fail together), nor does the fetch that opens a session.
func TestAcksRideTheMembersFetch(t *testing.T) {
	e := engineWith(t, configs.Default().KIP1289)
	c := &fakeConn{done: make(chan struct{}), principal: "User:alice"}
	a, b := [16]byte{1}, [16]byte{2}
	key := upstream.SessionKey{Node: 0, Group: "g", Member: "m"}
	answer := func(st *shareState, resp *kmsg.ShareFetchResponse) bool {
		resp.Version = 1
		return e.shareFetchResponse(st, resp)
	}

	// The session opens (epoch 0) fetching a/0, a/1 and b/0, and is
	// answered; b/1 is never fetched.
	open := shareFetch(0, nil)
	open.Topics = []kmsg.ShareFetchRequestTopic{
		{TopicID: a, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}, {Partition: 1}}},
		{TopicID: b, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}}}}
	_, st := fetchThrough(t, e, c, open)
	answer(st, kmsg.NewPtrShareFetchResponse())

	// Acknowledgements of a partition outside the fetch set do not ride:
	// listing it would add it to the set.
	outside := upstream.Acks{}
	outside.Add(upstream.TopicPartition{Topic: b, Partition: 1}, 1, 1)
	rode := make(chan bool, 1)
	go func() {
		_, ok := e.sessions.Ride(key, outside, 5*time.Second)
		rode <- ok
	}()
	for !e.sessions.RiderWaiting(key) {
		time.Sleep(time.Millisecond)
	}
	s, st := fetchThrough(t, e, c, shareFetch(1, nil))
	if len(batchesOf(s)) != 0 || !e.sessions.RiderWaiting(key) {
		t.Fatalf("acknowledgements of a partition outside the fetch set rode: %v", batchesOf(s))
	}
	answer(st, kmsg.NewPtrShareFetchResponse())
	if <-rode {
		t.Fatal("acknowledgements of a partition outside the fetch set rode")
	}

	acks := upstream.Acks{}
	for o := int64(10); o <= 12; o++ {
		acks.Add(upstream.TopicPartition{Topic: a, Partition: 1}, o, 1)
	}
	acks.Add(upstream.TopicPartition{Topic: b, Partition: 0}, 7, 2)
	type ride struct {
		res upstream.RideResult
		ok  bool
	}
	done := make(chan ride, 1)
	go func() {
		res, ok := e.sessions.Ride(key, acks, 10*time.Second)
		done <- ride{res, ok}
	}()
	for !e.sessions.RiderWaiting(key) {
		time.Sleep(time.Millisecond)
	}

	// A fetch acknowledging a/1 itself cannot carry them.
	conflict, st := fetchThrough(t, e, c, shareFetch(2, map[[16]byte]map[int32][2]int64{a: {1: {3, 4}}}))
	if got := batchesOf(conflict); len(got) != 1 || conflict.MaxWaitMillis != 500 {
		t.Fatalf("a fetch acknowledging a partition of the proxy's took them: batches %v, max wait %d", got, conflict.MaxWaitMillis)
	}
	answer(st, kmsg.NewPtrShareFetchResponse())
	if !e.sessions.RiderWaiting(key) {
		t.Fatal("the acknowledgements stopped waiting without riding")
	}

	// The next fetch (acknowledging a/0 itself) carries them.
	sent, st := fetchThrough(t, e, c, shareFetch(3, map[[16]byte]map[int32][2]int64{a: {0: {5, 5}}}))
	got := batchesOf(sent)
	if len(got) != 3 || got[upstream.TopicPartition{Topic: a, Partition: 0}][0] != [2]int64{5, 5} ||
		got[upstream.TopicPartition{Topic: a, Partition: 1}][0] != [2]int64{10, 12} || got[upstream.TopicPartition{Topic: b, Partition: 0}][0] != [2]int64{7, 7} {
		t.Fatalf("upstream fetch batches %v", got)
	}
	if sent.MaxWaitMillis != 0 || sent.ShareSessionEpoch != 3 {
		t.Fatalf("carrying fetch: max wait %d (want 0), epoch %d (want 3: riding adds no request to the session)", sent.MaxWaitMillis, sent.ShareSessionEpoch)
	}

	// The broker answers: a/0 the client's (ok, records), a/1 only the
	// proxy's (refused, nothing fetched), b/0 the proxy's with records.
	resp := kmsg.NewPtrShareFetchResponse()
	ta := kmsg.NewShareFetchResponseTopic()
	ta.TopicID = a
	p0 := kmsg.NewShareFetchResponseTopicPartition()
	p0.Partition, p0.Records = 0, []byte{}
	p1 := kmsg.NewShareFetchResponseTopicPartition()
	p1.Partition, p1.Records, p1.AcknowledgeErrorCode = 1, []byte{}, kerr.InvalidRecordState.Code
	ta.Partitions = []kmsg.ShareFetchResponseTopicPartition{p0, p1}
	tb := kmsg.NewShareFetchResponseTopic()
	tb.TopicID = b
	q0 := kmsg.NewShareFetchResponseTopicPartition()
	q0.Partition, q0.Records = 0, []byte{1}
	q0.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 8, LastOffset: 8, DeliveryCount: 1}}
	tb.Partitions = []kmsg.ShareFetchResponseTopicPartition{q0}
	resp.Topics = []kmsg.ShareFetchResponseTopic{ta, tb}
	if !answer(st, resp) {
		t.Fatal("the answer was not rewritten")
	}
	r := <-done
	if !r.ok || r.res.Err != nil || r.res.Codes[upstream.TopicPartition{Topic: a, Partition: 1}] != kerr.InvalidRecordState.Code ||
		r.res.Codes[upstream.TopicPartition{Topic: b, Partition: 0}] != 0 || len(r.res.Codes) != 2 {
		t.Fatalf("the proxy's answer: %+v", r)
	}
	if len(resp.Topics) != 2 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].Partition != 0 ||
		len(resp.Topics[1].Partitions) != 1 || resp.Topics[1].Partitions[0].AcknowledgeErrorCode != 0 {
		t.Fatalf("the client's answer: %+v", resp.Topics)
	}
	if e.sessions.RiderWaiting(key) {
		t.Fatal("a rider still waits")
	}
}

// TestRideFallsBack: acknowledgements that no fetch takes within the wait,
// or whose fetch the broker refuses as a whole, are not reported as ridden
// (the applier then sends them on their own); none wait while a client
// request of the session is in flight (the proxy's request goes behind it
// on the client's connection, holding nothing).
func TestRideFallsBack(t *testing.T) {
	e := engineWith(t, configs.Default().KIP1289)
	c := &fakeConn{done: make(chan struct{}), principal: "User:alice"}
	key := upstream.SessionKey{Node: 0, Group: "g", Member: "m"}
	acks := upstream.Acks{}
	acks.Add(upstream.TopicPartition{Topic: [16]byte{1}, Partition: 0}, 1, 1)

	opening := shareFetch(0, nil)
	opening.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: [16]byte{1}, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}}}}
	_, open := fetchThrough(t, e, c, opening)
	if _, ok := e.sessions.Ride(key, acks, time.Millisecond); ok {
		t.Fatal("rode while the opening fetch was in flight")
	}
	resp := kmsg.NewPtrShareFetchResponse()
	resp.Version = 1
	e.shareFetchResponse(open, resp)
	if _, ok := e.sessions.Ride(key, acks, time.Millisecond); ok {
		t.Fatal("rode with no fetch")
	}

	done := make(chan upstream.RideResult, 1)
	go func() {
		res, _ := e.sessions.Ride(key, acks, 10*time.Second)
		done <- res
	}()
	for !e.sessions.RiderWaiting(key) {
		time.Sleep(time.Millisecond)
	}
	_, st := fetchThrough(t, e, c, shareFetch(1, nil))
	refused := kmsg.NewPtrShareFetchResponse()
	refused.Version, refused.ErrorCode = 1, kerr.InvalidShareSessionEpoch.Code
	e.shareFetchResponse(st, refused)
	if res := <-done; res.Err == nil {
		t.Fatalf("a refused fetch reported the acknowledgements applied: %+v", res)
	}
}

// TestRiderAnswerRewritesOnlyWhatChanged: a ride the broker accepted on a
// partition that brought records changes nothing in the client's answer,
// which then goes on as it came (not encoded again); a code to hide or an
// entry to drop is a change.
func TestRiderAnswerRewritesOnlyWhatChanged(t *testing.T) {
	a := [16]byte{1}
	tp := upstream.TopicPartition{Topic: a, Partition: 0}
	resp := func(code int16, records []byte) *kmsg.ShareFetchResponse {
		r := kmsg.NewPtrShareFetchResponse()
		ta := kmsg.NewShareFetchResponseTopic()
		ta.TopicID = a
		p := kmsg.NewShareFetchResponseTopicPartition()
		p.Records, p.AcknowledgeErrorCode = records, code
		ta.Partitions = []kmsg.ShareFetchResponseTopicPartition{p}
		r.Topics = []kmsg.ShareFetchResponseTopic{ta}
		return r
	}
	ride := func() *shareState { return &shareState{rider: &upstream.Rider{Acks: upstream.Acks{tp: {5: 1}}}} }
	if r := resp(0, []byte{1}); answerRider(ride(), r) || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("an accepted ride beside records: rewritten, or the answer changed: %+v", r.Topics)
	}
	if r := resp(kerr.InvalidRecordState.Code, []byte{1}); !answerRider(ride(), r) || r.Topics[0].Partitions[0].AcknowledgeErrorCode != 0 {
		t.Fatalf("the proxy's ack error was not taken out of the client's answer: %+v", r.Topics)
	}
	if r := resp(0, nil); !answerRider(ride(), r) || len(r.Topics) != 0 {
		t.Fatalf("the entry only the ride brought was not dropped: %+v", r.Topics)
	}
}

// A ShareFetch response with a redelivered record waits for the shadow
// barrier only while its client waits for it (markers.Resolver.Screen):
// with a barrier that never finishes, it goes back at the request's MaxWait
// and fetchPatience after the request came (franz-go gives up a fetch at
// MaxWait + 5 s), not at the resolver's own 15 s.
func TestRedeliveredFetchWaitsOnlyWhileTheClientDoes(t *testing.T) {
	e := engineWith(t, configs.Default().KIP1289)
	e.resolver.Recovered(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	c := &fakeConn{done: make(chan struct{}), principal: "User:alice"}
	topic := [16]byte{1}
	open := shareFetch(0, nil)
	open.MaxWaitMillis = 200
	open.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: topic, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}}}}
	start := time.Now()
	_, st := fetchThrough(t, e, c, open)
	resp := kmsg.NewPtrShareFetchResponse()
	resp.Version = 1
	rt := kmsg.NewShareFetchResponseTopic()
	rt.TopicID = topic
	rp := kmsg.NewShareFetchResponseTopicPartition()
	rp.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 0, LastOffset: 9, DeliveryCount: 2}}
	rt.Partitions = append(rt.Partitions, rp)
	resp.Topics = append(resp.Topics, rt)
	e.shareFetchResponse(st, resp)
	want := 200*time.Millisecond + fetchPatience
	if d := time.Since(start); d < want-100*time.Millisecond || d > want+3*time.Second {
		t.Fatalf("the response with a redelivered record went back after %v, want about %v (MaxWait 200 ms and fetchPatience)", d, want)
	}
	if got := resp.Topics[0].Partitions[0].AcquiredRecords; len(got) != 1 || got[0].LastOffset != 9 {
		t.Fatalf("handed on %v, want the redelivered 0-9 (nothing known to screen them against)", got)
	}
}
