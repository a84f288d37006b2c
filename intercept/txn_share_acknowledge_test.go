package intercept

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	_ kmsg.Request  = (*TxnShareAcknowledgeRequest)(nil)
	_ kmsg.Response = (*TxnShareAcknowledgeResponse)(nil)
)

func sampleTxnAck() *TxnShareAcknowledgeRequest {
	m := "member-1"
	return &TxnShareAcknowledgeRequest{
		TransactionalID: "txn-a", ProducerID: 4000, ProducerEpoch: 3, GroupID: "g", MemberID: &m, MemberEpoch: 7,
		Topics: []TxnShareAcknowledgeTopic{{TopicID: [16]byte{1, 2, 3}, Partitions: []TxnShareAcknowledgePartition{
			{Partition: 0, AcknowledgementBatches: []TxnShareAcknowledgeBatch{{FirstOffset: 10, LastOffset: 19, AcknowledgeTypes: []int8{1}}}},
			{Partition: 2, AcknowledgementBatches: []TxnShareAcknowledgeBatch{{FirstOffset: 0, LastOffset: 2, AcknowledgeTypes: []int8{1, 3, 1}}}},
		}}},
	}
}

func TestTxnShareAcknowledgeRoundTrip(t *testing.T) {
	req := sampleTxnAck()
	b := req.AppendTo(nil)
	var back TxnShareAcknowledgeRequest
	if err := back.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, req) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, *req)
	}
	if back.Key() != DefaultTxnShareAcknowledgeKey {
		t.Fatalf("key %d", back.Key())
	}
	for i := 0; i < len(b); i++ {
		var short TxnShareAcknowledgeRequest
		if err := short.ReadFrom(b[:i]); err == nil {
			t.Fatalf("a request truncated to %d of %d bytes decoded", i, len(b))
		}
	}
	msg := "no"
	resp := &TxnShareAcknowledgeResponse{ErrorCode: 0, Topics: []TxnShareAcknowledgeResponseTopic{{TopicID: [16]byte{9},
		Partitions: []TxnShareAcknowledgeResponsePartition{{Partition: 1, ErrorCode: 121, ErrorMessage: &msg}}}}}
	var rback TxnShareAcknowledgeResponse
	if err := rback.ReadFrom(resp.AppendTo(nil)); err != nil || !reflect.DeepEqual(&rback, resp) {
		t.Fatalf("response round trip: %v %+v", err, rback)
	}
}

// FuzzTxnShareAcknowledge: any bytes decode or fail cleanly; whatever
// decodes re-encodes to something that decodes to the same message.
func FuzzTxnShareAcknowledge(f *testing.F) {
	f.Add(sampleTxnAck().AppendTo(nil), false)
	f.Add((&TxnShareAcknowledgeResponse{}).AppendTo(nil), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, false)
	f.Fuzz(func(t *testing.T, b []byte, isResp bool) {
		if isResp {
			var r TxnShareAcknowledgeResponse
			if r.ReadFrom(b) != nil {
				return
			}
			var back TxnShareAcknowledgeResponse
			if err := back.ReadFrom(r.AppendTo(nil)); err != nil || !reflect.DeepEqual(back, r) {
				t.Fatalf("response re-encode differs: %v", err)
			}
			return
		}
		var r TxnShareAcknowledgeRequest
		if r.ReadFrom(b) != nil {
			return
		}
		var back TxnShareAcknowledgeRequest
		if err := back.ReadFrom(r.AppendTo(nil)); err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("request re-encode differs: %v", err)
		}
	})
}
