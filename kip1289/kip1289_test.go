package kip1289

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// referenceRequestBytes encodes a request field by field in the order of the
// reference implementation's TxnShareAcknowledgeRequest.json (commit
// d4ddb080), by hand, without the codec: TransactionalId (nullable),
// GroupId, ProducerId, ProducerEpoch, MemberId (not nullable), MemberEpoch,
// Topics.
func referenceRequestBytes() []byte {
	var b []byte
	str := func(s string) { b = append(b, byte(len(s)+1)); b = append(b, s...) }
	str("txn-1")                                     // TransactionalId
	str("group-a")                                   // GroupId
	b = binary.BigEndian.AppendUint64(b, 4242)       // ProducerId
	b = binary.BigEndian.AppendUint16(b, 7)          // ProducerEpoch
	str("member-x")                                  // MemberId
	b = binary.BigEndian.AppendUint32(b, 3)          // MemberEpoch
	b = append(b, 2)                                 // Topics: 1
	b = append(b, bytes.Repeat([]byte{0xab}, 16)...) // TopicId
	b = append(b, 2)                                 // Partitions: 1
	b = binary.BigEndian.AppendUint32(b, 5)          // PartitionIndex
	b = append(b, 3)                                 // AcknowledgementBatches: 2
	b = binary.BigEndian.AppendUint64(b, 10)         // FirstOffset
	b = binary.BigEndian.AppendUint64(b, 12)         // LastOffset
	b = append(b, 4, 1, 0, 3)                        // AcknowledgeTypes [ACCEPT, gap, REJECT]
	b = append(b, 0)                                 // batch tags
	b = binary.BigEndian.AppendUint64(b, 20)
	b = binary.BigEndian.AppendUint64(b, 29)
	b = append(b, 2, 1) // one type for the range
	b = append(b, 0)
	b = append(b, 0) // partition tags
	b = append(b, 0) // topic tags
	b = append(b, 0) // request tags
	return b
}

func referenceRequest() *TxnShareAcknowledgeRequest {
	txn := "txn-1"
	var id [16]byte
	copy(id[:], bytes.Repeat([]byte{0xab}, 16))
	return &TxnShareAcknowledgeRequest{
		TransactionalID: &txn, GroupID: "group-a", ProducerID: 4242, ProducerEpoch: 7,
		MemberID: "member-x", MemberEpoch: 3,
		Topics: []TxnShareAcknowledgeTopic{{TopicID: id, Partitions: []TxnShareAcknowledgePartition{{
			Partition: 5,
			AcknowledgementBatches: []TxnShareAcknowledgeBatch{
				{FirstOffset: 10, LastOffset: 12, AcknowledgeTypes: []int8{Accept, Gap, Reject}},
				{FirstOffset: 20, LastOffset: 29, AcknowledgeTypes: []int8{Accept}},
			},
		}}}},
	}
}

func TestRequestMatchesReferenceLayout(t *testing.T) {
	want := referenceRequestBytes()
	if got := referenceRequest().AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant (reference field order)\n%x", got, want)
	}
	var r TxnShareAcknowledgeRequest
	if err := r.ReadFrom(want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&r, referenceRequest()) {
		t.Fatalf("decoded %+v", r)
	}
}

func TestResponseMatchesReferenceLayout(t *testing.T) {
	// ThrottleTimeMs, ErrorCode, Responses[TopicId, Partitions[PartitionIndex,
	// ErrorCode, ErrorMessage]]: no top-level error message.
	var want []byte
	want = binary.BigEndian.AppendUint32(want, 0)
	want = binary.BigEndian.AppendUint16(want, 0)
	want = append(want, 2)
	want = append(want, bytes.Repeat([]byte{0xab}, 16)...)
	want = append(want, 3)
	want = binary.BigEndian.AppendUint32(want, 5)
	want = binary.BigEndian.AppendUint16(want, 55) // INVALID_RECORD_STATE
	want = append(want, 4, 'b', 'a', 'd', 0)
	want = binary.BigEndian.AppendUint32(want, 6)
	want = binary.BigEndian.AppendUint16(want, 0)
	want = append(want, 0, 0) // null message, tags
	want = append(want, 0, 0) // topic tags, response tags

	msg := "bad"
	var id [16]byte
	copy(id[:], bytes.Repeat([]byte{0xab}, 16))
	resp := &TxnShareAcknowledgeResponse{Topics: []TxnShareAcknowledgeResponseTopic{{TopicID: id,
		Partitions: []TxnShareAcknowledgeResponsePartition{{Partition: 5, ErrorCode: 55, ErrorMessage: &msg}, {Partition: 6}}}}}
	if got := resp.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, want)
	}
	var back TxnShareAcknowledgeResponse
	if err := back.ReadFrom(want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, resp) {
		t.Fatalf("decoded %+v", back)
	}
}

func TestRefusesWhatTheReferenceRefuses(t *testing.T) {
	good := referenceRequestBytes()
	// A null MemberId: the field is not nullable in the reference.
	nullMember := append([]byte{}, good[:6+8+8+2]...) // "txn-1", "group-a", pid, epoch
	nullMember = append(nullMember, 0)
	nullMember = append(nullMember, good[6+8+8+2+9:]...)
	// A null GroupId.
	nullGroup := append([]byte{6, 't', 'x', 'n', '-', '1', 0}, good[6+8:]...)
	cases := map[string][]byte{
		"null MemberId":  nullMember,
		"null GroupId":   nullGroup,
		"trailing bytes": append(append([]byte{}, good...), 0),
		"truncated":      good[:len(good)-1],
		"huge array":     append(append([]byte{}, good[:6+8+8+2+9+4]...), 0xff, 0xff, 0xff, 0xff, 0x07),
		"empty":          nil,
	}
	for name, b := range cases {
		var r TxnShareAcknowledgeRequest
		if err := r.ReadFrom(b); !IsMalformed(err) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	// A null TransactionalId is allowed by the layout (the proxy refuses it).
	nullTxn := append([]byte{0}, good[6:]...)
	var r TxnShareAcknowledgeRequest
	if err := r.ReadFrom(nullTxn); err != nil || r.TransactionalID != nil {
		t.Fatalf("null TransactionalId: %v %v", err, r.TransactionalID)
	}
}

func TestSkipsUnknownTags(t *testing.T) {
	b := referenceRequestBytes()
	b = b[:len(b)-1]
	b = append(b, 1, 9, 2, 0xca, 0xfe) // one tagged field, tag 9, 2 bytes
	var r TxnShareAcknowledgeRequest
	if err := r.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&r, referenceRequest()) {
		t.Fatalf("decoded %+v", r)
	}
}

// FuzzTxnShareAcknowledge: no input panics or allocates past its size, and
// whatever decodes re-encodes to bytes that decode to the same message.
func FuzzTxnShareAcknowledge(f *testing.F) {
	f.Add(referenceRequestBytes())
	f.Add((&TxnShareAcknowledgeResponse{ErrorCode: 15}).AppendTo(nil))
	withOutput := referenceRequest()
	withOutput.OutputRecord = &OutputRef{TopicID: [16]byte{7}, Topic: "out", Partition: 2, Offset: 99}
	f.Add(withOutput.AppendTo(nil))
	deferred := referenceRequest()
	deferred.Defer, deferred.RideProduce = true, true
	f.Add(deferred.AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req TxnShareAcknowledgeRequest
		if req.ReadFrom(b) == nil {
			var again TxnShareAcknowledgeRequest
			if err := again.ReadFrom(req.AppendTo(nil)); err != nil || !reflect.DeepEqual(req, again) {
				t.Fatalf("request round trip: %v\n%+v\n%+v", err, req, again)
			}
		}
		var resp TxnShareAcknowledgeResponse
		if resp.ReadFrom(b) == nil {
			var again TxnShareAcknowledgeResponse
			if err := again.ReadFrom(resp.AppendTo(nil)); err != nil || !reflect.DeepEqual(resp, again) {
				t.Fatalf("response round trip: %v", err)
			}
		}
	})
}

func TestEveryTruncationFails(t *testing.T) {
	b := referenceRequestBytes()
	for i := 0; i < len(b); i++ {
		var r TxnShareAcknowledgeRequest
		if err := r.ReadFrom(b[:i]); !IsMalformed(err) {
			t.Fatalf("a request truncated to %d of %d bytes: %v", i, len(b), err)
		}
	}
}

// TestRideProduceTag: the sharetx extension is the request's only tagged
// field (tag RideProduceTag, one byte), and the reference layout is
// unchanged without it (the KIP's client never sends it).
func TestRideProduceTag(t *testing.T) {
	r := referenceRequest()
	r.RideProduce = true
	b := r.AppendTo(nil)
	ref := referenceRequestBytes()
	want := append(append([]byte(nil), ref[:len(ref)-1]...), 1) // one tagged field
	want = binary.AppendUvarint(want, RideProduceTag)
	want = append(want, 1, 1)
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", b, want)
	}
	var got TxnShareAcknowledgeRequest
	if err := got.ReadFrom(b); err != nil || !got.RideProduce {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if err := got.ReadFrom(ref); err != nil || got.RideProduce {
		t.Fatalf("the reference layout decoded with the flag: %+v, %v", got, err)
	}
}

// withRide is the reference request ref with its tagged fields' count set
// for n more fields and, when ride, RideProduce as the first of them.
func withRide(ref []byte, ride bool, n byte) []byte {
	want := append([]byte(nil), ref[:len(ref)-1]...)
	if !ride {
		return append(want, n)
	}
	want = append(want, n+1)
	want = binary.AppendUvarint(want, RideProduceTag)
	return append(want, 1, 1)
}

// TestDeferTag: Defer is a tagged field of its own (tag DeferTag,
// one byte), last when sent with the others (tags in increasing order); the
// reference layout decodes without it, and a value of another size is
// ignored.
func TestDeferTag(t *testing.T) {
	ref := referenceRequestBytes()
	for _, ride := range []bool{false, true} {
		r := referenceRequest()
		r.RideProduce, r.Defer = ride, true
		b := r.AppendTo(nil)
		want := withRide(ref, ride, 1)
		want = binary.AppendUvarint(want, DeferTag)
		want = append(want, 1, 1)
		if !bytes.Equal(b, want) {
			t.Fatalf("ride %v: encoded\n%x\nwant\n%x", ride, b, want)
		}
		var got TxnShareAcknowledgeRequest
		if err := got.ReadFrom(b); err != nil || !got.Defer || got.RideProduce != ride {
			t.Fatalf("ride %v: decoded %+v, %v", ride, got, err)
		}
	}
	var got TxnShareAcknowledgeRequest
	if err := got.ReadFrom(ref); err != nil || got.Defer {
		t.Fatalf("the reference layout decoded with Defer: %+v, %v", got, err)
	}
	odd := append(append([]byte(nil), ref[:len(ref)-1]...), 1)
	odd = binary.AppendUvarint(odd, DeferTag)
	odd = append(odd, 2, 1, 1)
	if err := got.ReadFrom(odd); err != nil || got.Defer {
		t.Fatalf("a two-byte Defer decoded as %+v, %v; want it ignored", got, err)
	}
}

// TestTouchOffsetTag: the touch offset is a tagged field of its own (tag
// TouchOffsetTag, an int64), after RideProduce when both are sent (tags in
// increasing order); absent, the reference layout decodes with none, and
// offset 0 is an offset, not absence.
func TestTouchOffsetTag(t *testing.T) {
	ref := referenceRequestBytes()
	for _, ride := range []bool{false, true} {
		for _, off := range []int64{0, 42, 1 << 40} {
			r := referenceRequest()
			r.RideProduce = ride
			r.TouchOffset = &off
			b := r.AppendTo(nil)
			want := withRide(ref, ride, 1)
			want = binary.AppendUvarint(want, TouchOffsetTag)
			want = append(want, 8)
			want = binary.BigEndian.AppendUint64(want, uint64(off))
			if !bytes.Equal(b, want) {
				t.Fatalf("ride %v offset %d: encoded\n%x\nwant\n%x", ride, off, b, want)
			}
			var got TxnShareAcknowledgeRequest
			if err := got.ReadFrom(b); err != nil || got.RideProduce != ride || got.TouchOffset == nil || *got.TouchOffset != off {
				t.Fatalf("ride %v offset %d: decoded %+v, %v", ride, off, got, err)
			}
		}
	}
	var got TxnShareAcknowledgeRequest
	if err := got.ReadFrom(ref); err != nil || got.TouchOffset != nil {
		t.Fatalf("the reference layout decoded with a touch offset: %+v, %v", got, err)
	}
}

// TestOutputRecordTag: the output record is a tagged field of its own (tag
// OutputRecordTag: uuid, compact string, int32, int64), after TouchOffset
// when both are sent; a malformed value, a negative partition or offset, a
// topic named neither by id nor by name or a name over 249 bytes decode as
// absent, and the reference layout decodes with none.
func TestOutputRecordTag(t *testing.T) {
	ref := referenceRequestBytes()
	off := int64(5)
	for _, o := range []OutputRef{
		{TopicID: [16]byte{1, 2, 3}, Topic: "out", Partition: 3, Offset: 0},
		{Topic: "out", Partition: 0, Offset: 1 << 40},
		{TopicID: [16]byte{9}, Partition: 7, Offset: 12},
	} {
		r := referenceRequest()
		r.TouchOffset = &off
		r.OutputRecord = &o
		b := r.AppendTo(nil)
		want := append([]byte(nil), ref[:len(ref)-1]...)
		want = append(want, 2)
		want = binary.AppendUvarint(want, TouchOffsetTag)
		want = append(want, 8)
		want = binary.BigEndian.AppendUint64(want, uint64(off))
		v := append([]byte(nil), o.TopicID[:]...)
		v = binary.AppendUvarint(v, uint64(len(o.Topic))+1)
		v = append(v, o.Topic...)
		v = binary.BigEndian.AppendUint32(v, uint32(o.Partition))
		v = binary.BigEndian.AppendUint64(v, uint64(o.Offset))
		want = binary.AppendUvarint(want, OutputRecordTag)
		want = binary.AppendUvarint(want, uint64(len(v)))
		want = append(want, v...)
		if !bytes.Equal(b, want) {
			t.Fatalf("%+v: encoded\n%x\nwant\n%x", o, b, want)
		}
		var got TxnShareAcknowledgeRequest
		if err := got.ReadFrom(b); err != nil || got.OutputRecord == nil || *got.OutputRecord != o || got.TouchOffset == nil {
			t.Fatalf("%+v: decoded %+v, %v", o, got, err)
		}
	}
	for name, o := range map[string]OutputRef{
		"negative partition": {Topic: "out", Partition: -1, Offset: 1},
		"negative offset":    {Topic: "out", Partition: 1, Offset: -1},
		"no topic":           {Partition: 1, Offset: 1},
		"long name":          {Topic: strings.Repeat("t", 250), Partition: 1, Offset: 1},
	} {
		r := referenceRequest()
		r.OutputRecord = &o
		var got TxnShareAcknowledgeRequest
		if err := got.ReadFrom(r.AppendTo(nil)); err != nil || got.OutputRecord != nil {
			t.Fatalf("%s: decoded %+v, %v; want the tag ignored", name, got.OutputRecord, err)
		}
	}
	// A value one byte short of its fields: ignored, the request still decodes.
	b := append([]byte(nil), ref[:len(ref)-1]...)
	b = append(b, 1)
	b = binary.AppendUvarint(b, OutputRecordTag)
	b = append(b, 16+2+4+7)
	b = append(b, make([]byte, 16)...)
	b = append(b, 2, 'o')
	b = append(b, make([]byte, 4+7)...)
	var got TxnShareAcknowledgeRequest
	if err := got.ReadFrom(b); err != nil || got.OutputRecord != nil {
		t.Fatalf("a short value: decoded %+v, %v; want the tag ignored", got.OutputRecord, err)
	}
	if err := got.ReadFrom(ref); err != nil || got.OutputRecord != nil {
		t.Fatalf("the reference layout decoded with an output record: %+v, %v", got, err)
	}
}
