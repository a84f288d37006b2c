package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestWalkProduce: the walker reads acks at every version (v0-v2 have no
// transactional id), sees every topic and partition with its records as
// kmsg encoded them, and fails, without panicking, on every truncation
// that cuts into what it walks.
func TestWalkProduce(t *testing.T) {
	for v := int16(0); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		req.Acks, req.TimeoutMillis = 1, 500
		if v >= 3 {
			req.TransactionID = kmsg.StringPtr("t")
		}
		for i := 0; i < 3; i++ {
			tp := kmsg.NewProduceRequestTopic()
			tp.Topic, tp.TopicID = "topic-"+string(rune('a'+i)), [16]byte{byte(i + 1)}
			for j := 0; j <= i; j++ {
				p := kmsg.NewProduceRequestTopicPartition()
				p.Partition, p.Records = int32(j), []byte{byte(i), byte(j)}
				tp.Partitions = append(tp.Partitions, p)
			}
			req.Topics = append(req.Topics, tp)
		}
		body := req.AppendTo(nil)
		if h, err := WalkProduce(body, v, nil, nil); err != nil || h.Acks != 1 {
			t.Fatalf("v%d: acks %d %v", v, h.Acks, err)
		}
		var got []string
		h, err := WalkProduce(body, v, func(name string, id [16]byte) bool {
			got = append(got, fmt.Sprintf("%s/%d", name, id[0]))
			return true
		}, func(p int32, recs []byte) bool {
			got = append(got, fmt.Sprintf("%d:%v", p, recs))
			return true
		})
		if err != nil || (v >= 3) != (h.TxnID != nil) {
			t.Fatalf("v%d: %+v %v", v, h, err)
		}
		want := "topic-a/0 0:[0 0] topic-b/0 0:[1 0] 1:[1 1] topic-c/0 0:[2 0] 1:[2 1] 2:[2 2]"
		if v >= 13 {
			want = "/1 0:[0 0] /2 0:[1 0] 1:[1 1] /3 0:[2 0] 1:[2 1] 2:[2 2]"
		}
		if s := strings.Join(got, " "); s != want {
			t.Errorf("v%d: walked %s, want %s", v, s, want)
		}
		walked := len(body)
		if v >= 9 {
			walked-- // the request's own (empty) tag section, after the topics: not walked
		}
		for n := 0; n < walked; n++ {
			if _, err := WalkProduce(body[:n], v, func(string, [16]byte) bool { return true }, nil); err == nil {
				t.Errorf("v%d: truncated to %d of %d bytes, walked without an error", v, n, len(body))
			}
		}
	}
}
