package client

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func rec(topic string, partition int32, offset int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset}
}

func TestBatches(t *testing.T) {
	A, R := int8(Accept), int8(Reject)
	for _, tc := range []struct {
		name string
		add  func(a *ShareAcknowledgements)
		want []topicBatches
	}{
		{
			name: "contiguous one type",
			add: func(a *ShareAcknowledgements) {
				for _, o := range []int64{12, 10, 11, 13} {
					a.Add(rec("t", 0, o), Accept)
				}
			},
			want: []topicBatches{{"t", []partitionBatches{{0, []ackBatch{{10, 13, []int8{A}}}}}}},
		},
		{
			name: "gaps",
			add: func(a *ShareAcknowledgements) {
				for _, o := range []int64{5, 1, 2, 9, 7, 8} {
					a.Add(rec("t", 0, o), Reject)
				}
			},
			want: []topicBatches{{"t", []partitionBatches{{0, []ackBatch{
				{1, 2, []int8{R}}, {5, 5, []int8{R}}, {7, 9, []int8{R}},
			}}}}},
		},
		{
			name: "mixed types",
			add: func(a *ShareAcknowledgements) {
				a.Add(rec("t", 0, 3), Accept)
				a.Add(rec("t", 0, 4), Reject)
				a.Add(rec("t", 0, 5), Accept)
				a.Add(rec("t", 0, 7), Reject)
				a.Add(rec("t", 0, 8), Reject)
			},
			want: []topicBatches{{"t", []partitionBatches{{0, []ackBatch{
				{3, 5, []int8{A, R, A}}, {7, 8, []int8{R}},
			}}}}},
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
			want: []topicBatches{
				{"a", []partitionBatches{{0, []ackBatch{{4, 4, []int8{A}}}}, {1, []ackBatch{{4, 4, []int8{A}}}}}},
				{"b", []partitionBatches{{0, []ackBatch{{9, 9, []int8{R}}}}, {2, []ackBatch{{0, 1, []int8{A}}}}}},
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
			want: []topicBatches{{"t", []partitionBatches{{0, []ackBatch{{1, 2, []int8{A, R}}}}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewShareAcknowledgements()
			tc.add(a)
			if err := a.validate(); err != nil {
				t.Fatal(err)
			}
			if got := a.batches(); !reflect.DeepEqual(got, tc.want) {
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
	if err := SendShareAcknowledgementsToTransaction(ctx, nil, NewShareAcknowledgements(), NewShareGroupMetadata("g")); err != nil {
		t.Fatalf("empty acks: %v", err)
	}
	if err := SendShareAcknowledgementsToTransaction(ctx, nil, nil, NewShareGroupMetadata("g")); err != nil {
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
		err := SendShareAcknowledgementsToTransaction(ctx, nil, a, NewShareGroupMetadata("g"))
		if err == nil || !strings.Contains(err.Error(), "invalid acknowledgement") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	a := NewShareAcknowledgements()
	a.Add(rec("t", 0, 1), AcknowledgeType(2))
	if err := SendShareAcknowledgementsToTransaction(ctx, nil, a, NewShareGroupMetadata("g")); !strings.Contains(err.Error(), "RELEASE") {
		t.Errorf("type name missing: %v", err)
	}
}

func TestShareGroupMetadata(t *testing.T) {
	md := NewShareGroupMetadata("g")
	if md != (ShareGroupMetadata{GroupID: "g", MemberID: "", MemberEpoch: -1}) {
		t.Fatalf("%+v", md)
	}
	req := buildRequest(95, "tx", md, nil, nil)
	if req.MemberID != "" || req.MemberEpoch != -1 || req.GroupID != "g" {
		t.Fatalf("%+v", req)
	}
	req = buildRequest(95, "tx", ShareGroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 3}, nil, nil)
	if req.MemberID != "m" || req.MemberEpoch != 3 {
		t.Fatalf("%+v", req)
	}
}

func TestReleaseForRedeliveryIgnoresNonShareRecords(t *testing.T) {
	ReleaseForRedelivery(nil, rec("t", 0, 1)) // must not panic
}

func TestTouchPartitionFor(t *testing.T) {
	for _, tc := range []struct {
		id   string
		n    int32
		want int32
	}{
		{"", 3, 2}, // FNV-1a("") = 0x811c9dc5
		{"orders-worker-1", 8, 0},
		{"txn-a", 2, 0},
		{"txn-a", 5, 4},
		{"txn-a", 1, 0},
		{"txn-a", 0, 0},
	} {
		if got := touchPartitionFor(tc.id, tc.n); got != tc.want {
			t.Errorf("touchPartitionFor(%q, %d) = %d, want %d", tc.id, tc.n, got, tc.want)
		}
	}
	for i := 0; i < 200; i++ {
		id := strings.Repeat("x", i)
		for n := int32(2); n < 12; n++ {
			p := touchPartitionFor(id, n)
			if p != touchPartitionFor(id, n) || p < 0 || p >= n {
				t.Fatalf("touchPartitionFor(%q, %d) = %d", id, n, p)
			}
			if shadow := (p - 1 + n) % n; shadow == p {
				t.Fatalf("touch partition equals shadow partition")
			}
		}
	}
}
