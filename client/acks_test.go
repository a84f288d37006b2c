package client

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/twmb/franz-go/pkg/kgo"
)

func rec(topic string, partition int32, offset int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset}
}

// TestRequestTopics: topics sorted by name with their ids, partitions
// sorted, each partition's batches those of kip1289.Batches (which has its
// own tests), duplicates deduplicated with the last type winning.
func TestRequestTopics(t *testing.T) {
	A, R := int8(Accept), int8(Reject)
	type B = kip1289.TxnShareAcknowledgeBatch
	type P = kip1289.TxnShareAcknowledgePartition
	b := func(first, last int64, types ...int8) B {
		return B{FirstOffset: first, LastOffset: last, AcknowledgeTypes: types}
	}
	p := func(partition int32, batches ...B) P {
		return P{Partition: partition, AcknowledgementBatches: batches}
	}
	ids := map[string][16]byte{"a": {1}, "b": {2}, "t": {3}}
	for _, tc := range []struct {
		name string
		add  func(a *ShareAcknowledgements)
		want []kip1289.TxnShareAcknowledgeTopic
	}{
		{
			name: "runs, gaps and mixed types",
			add: func(a *ShareAcknowledgements) {
				for _, o := range []int64{12, 10, 11, 13} {
					a.Add(rec("t", 0, o), Accept)
				}
				a.Add(rec("t", 0, 15), Accept)
				a.Add(rec("t", 0, 16), Reject)
			},
			want: []kip1289.TxnShareAcknowledgeTopic{{TopicID: ids["t"], Partitions: []P{p(0, b(10, 13, A), b(15, 16, A, R))}}},
		},
		{
			name: "partitions and topics sorted",
			add: func(a *ShareAcknowledgements) {
				a.Add(rec("b", 2, 0), Accept)
				a.Add(rec("a", 1, 4), Accept)
				a.Add(rec("b", 0, 9), Reject)
				a.Add(rec("a", 0, 4), Accept)
				a.Add(rec("b", 2, 1), Accept)
			},
			want: []kip1289.TxnShareAcknowledgeTopic{
				{TopicID: ids["a"], Partitions: []P{p(0, b(4, 4, A)), p(1, b(4, 4, A))}},
				{TopicID: ids["b"], Partitions: []P{p(0, b(9, 9, R)), p(2, b(0, 1, A))}},
			},
		},
		{
			name: "duplicates: same type deduplicated, last type wins",
			add: func(a *ShareAcknowledgements) {
				a.Add(rec("t", 0, 1), Accept)
				a.Add(rec("t", 0, 1), Accept)
				a.Add(rec("t", 0, 2), Accept)
				a.Add(rec("t", 0, 2), Reject)
			},
			want: []kip1289.TxnShareAcknowledgeTopic{{TopicID: ids["t"], Partitions: []P{p(0, b(1, 2, A, R))}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewShareAcknowledgements()
			tc.add(a)
			if err := a.validate(); err != nil {
				t.Fatal(err)
			}
			if got := a.requestTopics(a.topicNames(), ids); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLen(t *testing.T) {
	var nilAcks *ShareAcknowledgements
	if nilAcks.Len() != 0 {
		t.Fatal("nil Len")
	}
	a := NewShareAcknowledgements()
	a.Add(rec("t", 0, 1), Accept)
	a.Add(rec("t", 0, 1), Reject)
	a.Add(rec("t", 1, 1), Accept)
	a.Add(rec("u", 0, 1), Accept)
	if a.Len() != 3 {
		t.Fatalf("Len = %d, want 3", a.Len())
	}
}

func TestInvalidAcksFailWithoutSending(t *testing.T) {
	ctx := context.Background()
	// A nil producer proves nothing is sent: validation comes first.
	var noProducer *Producer
	if err := noProducer.SendShareAcknowledgementsToTransaction(ctx, NewShareAcknowledgements(), NewShareGroupMetadata("g")); err != nil {
		t.Fatalf("empty acks: %v", err)
	}
	if err := noProducer.SendShareAcknowledgementsToTransaction(ctx, nil, NewShareGroupMetadata("g")); err != nil {
		t.Fatalf("nil acks: %v", err)
	}
	for name, add := range map[string]func(a *ShareAcknowledgements){
		"release":    func(a *ShareAcknowledgements) { a.Add(rec("t", 0, 1), AcknowledgeType(2)) },
		"renew":      func(a *ShareAcknowledgements) { a.Add(rec("t", 0, 1), AcknowledgeType(4)) },
		"zero":       func(a *ShareAcknowledgements) { a.Add(rec("t", 0, 1), 0) },
		"nil record": func(a *ShareAcknowledgements) { a.Add(nil, Accept) },
		"no topic":   func(a *ShareAcknowledgements) { a.Add(rec("", 0, 1), Accept) },
		"mixed": func(a *ShareAcknowledgements) {
			a.Add(rec("t", 0, 1), Accept)
			a.Add(rec("t", 0, 2), AcknowledgeType(2))
		},
	} {
		a := NewShareAcknowledgements()
		add(a)
		err := noProducer.SendShareAcknowledgementsToTransaction(ctx, a, NewShareGroupMetadata("g"))
		if err == nil || !strings.Contains(err.Error(), "invalid acknowledgement") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	a := NewShareAcknowledgements()
	a.Add(rec("t", 0, 1), AcknowledgeType(2))
	if err := noProducer.SendShareAcknowledgementsToTransaction(ctx, a, NewShareGroupMetadata("g")); !strings.Contains(err.Error(), "RELEASE") {
		t.Errorf("type name missing: %v", err)
	}
}

func TestShareGroupMetadata(t *testing.T) {
	md := NewShareGroupMetadata("g")
	if md != (ShareGroupMetadata{GroupID: "g", MemberID: "", MemberEpoch: -1}) {
		t.Fatalf("%+v", md)
	}
	p := &Producer{apiKey: 95, txnID: "tx"}
	req := p.newRequest(md)
	if req.MemberID != "" || req.MemberEpoch != -1 || req.GroupID != "g" || *req.TransactionalID != "tx" || req.Key() != 95 {
		t.Fatalf("%+v", req)
	}
	req = p.newRequest(ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 3})
	if req.MemberID != "m" || req.MemberEpoch != 3 {
		t.Fatalf("%+v", req)
	}
}

func TestReleaseForRedeliveryIgnoresNonShareRecords(t *testing.T) {
	ReleaseForRedelivery(nil, rec("t", 0, 1)) // must not panic
}
