package intercept

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

// touchBatch encodes a record batch of producer pid at epoch holding recs,
// with attributes attrs (0x10: transactional).
func touchBatch(pid int64, epoch int16, attrs int16, recs ...kmsg.Record) []byte {
	var body []byte
	for i := range recs {
		recs[i].OffsetDelta = int32(i)
		body = recs[i].AppendTo(body)
	}
	b := kmsg.RecordBatch{Magic: 2, Attributes: attrs, ProducerID: pid, ProducerEpoch: epoch,
		LastOffsetDelta: int32(len(recs) - 1), NumRecords: int32(len(recs)), Records: body}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	return b.AppendTo(nil)
}

func touchRecord(value string, headers ...kmsg.Header) kmsg.Record {
	r := kmsg.Record{Value: []byte(value), Headers: headers}
	r.Length = int32(len(r.AppendTo(nil)) - 1) // a one-byte varint for these small records
	return r
}

func TestIsTouch(t *testing.T) {
	hdr := kmsg.Header{Key: kip1289.TouchHeader, Value: []byte(kip1289.TouchHeaderValue)}
	touch := func() kmsg.Record { return touchRecord(kip1289.TouchValue, hdr) }
	good := touchBatch(7, 3, 0x10, touch())
	if !isTouch(good, 7, 3) {
		t.Fatalf("the Go client's touch batch was not taken for a touch")
	}
	big := make([]byte, maxTouchBytes)
	cases := []struct {
		name string
		recs []byte
	}{
		{"another producer id", touchBatch(8, 3, 0x10, touch())},
		{"another epoch", touchBatch(7, 4, 0x10, touch())},
		{"not transactional", touchBatch(7, 3, 0, touch())},
		{"a control batch", touchBatch(7, 3, 0x30, touch())},
		{"two records", touchBatch(7, 3, 0x10, touch(), touch())},
		{"no touch header", touchBatch(7, 3, 0x10, touchRecord(kip1289.TouchValue))},
		{"another header value", touchBatch(7, 3, 0x10, touchRecord(kip1289.TouchValue, kmsg.Header{Key: kip1289.TouchHeader, Value: []byte("x")}))},
		{"a second batch behind a touch (another producer's)", append(append([]byte(nil), good...), touchBatch(9, 0, 0x10, touch())...)},
		{"too big", touchBatch(7, 3, 0x10, kmsg.Record{Value: big, Headers: []kmsg.Header{hdr}})},
		{"truncated", good[:len(good)-3]},
		{"short", good[:40]},
	}
	for _, c := range cases {
		if isTouch(c.recs, 7, 3) {
			t.Errorf("%s: taken for a touch", c.name)
		}
	}
	// A compressed touch (a Java producer with compression.type set) is
	// judged by its batch header: not decompressed.
	gz := touchBatch(7, 3, 0x10|0x01, touch())
	if !isTouch(gz, 7, 3) {
		t.Errorf("a compressed one-record batch of the caller's was refused")
	}
}
