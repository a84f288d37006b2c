// Package kip1289 is the wire codec of KIP-1289's TxnShareAcknowledge, in
// exactly the layout of the KIP's reference implementation (apache/kafka
// pull request #22357; TxnShareAcknowledgeRequest.json and
// TxnShareAcknowledgeResponse.json at its latest revision). It is the codec
// and nothing else: the sharetx proxy and the client library both import it,
// and it imports neither, as franz-go's kmsg serves kgo and kfake.
//
// The messages implement kmsg.Request and kmsg.Response, so a franz-go client
// can send a TxnShareAcknowledgeRequest with kgo.Client.Request once its
// version table holds the key.
//
// sharetx extensions (docs/protocol.md): an empty MemberID means "the member
// that acquired these offsets through this proxy"; ProducerID -1 with
// ProducerEpoch -1 means "the producer id and epoch this proxy last saw for
// the TransactionalID". A client of the reference layout never sends them.
package kip1289

import (
	"encoding/binary"
	"errors"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultKey is the API key of TxnShareAcknowledge in the reference
// implementation's latest revision (it moved 93 → 94 → 95 during the pull
// request; Kafka 4.4 uses 93 and 94). The proxy's key is configurable.
const DefaultKey int16 = 95

// Acknowledge types of an AcknowledgementBatch. Inside a transaction only
// Gap, Accept and Reject are valid.
const (
	Gap     int8 = 0 // an acquired offset that holds no non-control record
	Accept  int8 = 1
	Release int8 = 2
	Reject  int8 = 3
	Renew   int8 = 4
)

// TxnShareAcknowledgeRequest binds share-group acknowledgements to a Kafka
// transaction. Version 0, flexible, request header v2. Fields in wire order:
//
//	TxnShareAcknowledgeRequest => key 95, version 0, flexible v0+
//	  TransactionalID: nullable-string
//	  GroupID: string
//	  ProducerID: int64
//	  ProducerEpoch: int16
//	  MemberID: string
//	  MemberEpoch: int32
//	  Topics: [=>]
//	    TopicID: uuid
//	    Partitions: [=>]
//	      Partition: int32
//	      AcknowledgementBatches: [=>]
//	        FirstOffset: int64
//	        LastOffset: int64
//	        AcknowledgeTypes: [int8]  // one for the range, or one per offset
type TxnShareAcknowledgeRequest struct {
	// APIKey is the key the request is sent with; zero means DefaultKey.
	APIKey  int16
	Version int16

	TransactionalID *string
	GroupID         string
	ProducerID      int64
	ProducerEpoch   int16
	MemberID        string
	MemberEpoch     int32
	Topics          []TxnShareAcknowledgeTopic

	// RideProduce (a sharetx extension, tagged field RideProduceTag, never
	// sent by the KIP's client): the caller is about to flush records of
	// this transaction, so the proxy may write the shadow record inside
	// that Produce instead of a write of its own (docs/protocol.md).
	RideProduce bool

	// TouchOffset (a sharetx extension, tagged field TouchOffsetTag, never
	// sent by the KIP's client; nil: absent) names the caller's touch
	// record of this transaction by its offset in the transaction's touch
	// partition. With ProducerID and ProducerEpoch -1 it asks the proxy for
	// the ids that touch was written with, not the ones it saw last for
	// the transactional id: a zombie whose touch was accepted just before
	// a newer instance initialised is then fenced instead of staging into
	// the newer instance's transaction (docs/protocol.md).
	TouchOffset *int64

	// OutputRecord (a sharetx extension, tagged field OutputRecordTag,
	// never sent by the KIP's client; nil: absent) names one of the
	// caller's output records of this transaction, delivered before the
	// call: with ProducerID and ProducerEpoch -1 the call is checked
	// against the ids that record's batch was written with, as with
	// TouchOffset, so a transaction with outputs needs no touch record
	// (docs/protocol.md).
	OutputRecord *OutputRef

	// Defer (a sharetx extension, tagged field DeferTag, never sent
	// by the KIP's client): check the call and hold the offsets back from
	// the client's own acknowledgements, but write no shadow record and
	// stage nothing: a later call of the same transaction, naming them
	// again, stages them; the transaction's EndTxn, a newer epoch or the
	// end of their acquisition lock releases what it did not
	// (docs/protocol.md).
	Defer bool
}

// OutputRef names one record of a topic partition: by topic id, by name,
// or both (a Produce names its topics by name before v13, by id from v13).
type OutputRef struct {
	TopicID   [16]byte
	Topic     string
	Partition int32
	Offset    int64
}

// OutputRecordTag is the top-level tagged field of OutputRecord: a uuid,
// a compact string, an int32 and an int64.
const OutputRecordTag = 10002

// maxOutputTopicBytes bounds an OutputRecord's topic name (Kafka's own
// limit is 249 bytes).
const maxOutputTopicBytes = 249

// RideProduceTag is the top-level tagged field of RideProduce: far above
// any tag the KIP may define.
const RideProduceTag = 10000

// TouchOffsetTag is the top-level tagged field of TouchOffset (an int64).
const TouchOffsetTag = 10001

// DeferTag is the top-level tagged field of Defer (one byte, 1).
const DeferTag = 10003

// TxnShareAcknowledgeTopic is one topic of a request.
type TxnShareAcknowledgeTopic struct {
	TopicID    [16]byte
	Partitions []TxnShareAcknowledgePartition
}

// TxnShareAcknowledgePartition is one partition's acknowledgements.
type TxnShareAcknowledgePartition struct {
	Partition              int32
	AcknowledgementBatches []TxnShareAcknowledgeBatch
}

// TxnShareAcknowledgeBatch acknowledges FirstOffset..LastOffset with one
// type for the whole range, or one type per offset.
type TxnShareAcknowledgeBatch struct {
	FirstOffset      int64
	LastOffset       int64
	AcknowledgeTypes []int8
}

// TxnShareAcknowledgeResponse answers a TxnShareAcknowledgeRequest; response
// header v1. It has no top-level error message: messages are per partition.
//
//	TxnShareAcknowledgeResponse
//	  ThrottleMillis: int32
//	  ErrorCode: int16
//	  Topics: [=>]            // "Responses" in the JSON
//	    TopicID: uuid
//	    Partitions: [=>]
//	      Partition: int32
//	      ErrorCode: int16
//	      ErrorMessage: nullable-string
type TxnShareAcknowledgeResponse struct {
	APIKey  int16
	Version int16

	ThrottleMillis int32
	ErrorCode      int16
	Topics         []TxnShareAcknowledgeResponseTopic
}

// TxnShareAcknowledgeResponseTopic is one topic's outcome.
type TxnShareAcknowledgeResponseTopic struct {
	TopicID    [16]byte
	Partitions []TxnShareAcknowledgeResponsePartition
}

// TxnShareAcknowledgeResponsePartition is one partition's outcome.
type TxnShareAcknowledgeResponsePartition struct {
	Partition    int32
	ErrorCode    int16
	ErrorMessage *string
}

// ErrMalformed is returned by ReadFrom for bytes that are not a message of
// this layout (truncated, a length longer than what is left, trailing
// bytes).
var ErrMalformed = errors.New("kip1289: malformed TxnShareAcknowledge message")

func keyOr(k int16) int16 {
	if k == 0 {
		return DefaultKey
	}
	return k
}

func (r *TxnShareAcknowledgeRequest) Key() int16          { return keyOr(r.APIKey) }
func (*TxnShareAcknowledgeRequest) MaxVersion() int16     { return 0 }
func (r *TxnShareAcknowledgeRequest) SetVersion(v int16)  { r.Version = v }
func (r *TxnShareAcknowledgeRequest) GetVersion() int16   { return r.Version }
func (*TxnShareAcknowledgeRequest) IsFlexible() bool      { return true }
func (r *TxnShareAcknowledgeResponse) Key() int16         { return keyOr(r.APIKey) }
func (*TxnShareAcknowledgeResponse) MaxVersion() int16    { return 0 }
func (r *TxnShareAcknowledgeResponse) SetVersion(v int16) { r.Version = v }
func (r *TxnShareAcknowledgeResponse) GetVersion() int16  { return r.Version }
func (*TxnShareAcknowledgeResponse) IsFlexible() bool     { return true }

// ResponseKind implements kmsg.Request.
func (r *TxnShareAcknowledgeRequest) ResponseKind() kmsg.Response {
	return &TxnShareAcknowledgeResponse{APIKey: r.APIKey, Version: r.Version}
}

// RequestKind implements kmsg.Response.
func (r *TxnShareAcknowledgeResponse) RequestKind() kmsg.Request {
	return &TxnShareAcknowledgeRequest{APIKey: r.APIKey, Version: r.Version}
}

// AppendTo implements kmsg.Request.
func (r *TxnShareAcknowledgeRequest) AppendTo(b []byte) []byte {
	b = kbin.AppendCompactNullableString(b, r.TransactionalID)
	b = kbin.AppendCompactString(b, r.GroupID)
	b = kbin.AppendInt64(b, r.ProducerID)
	b = kbin.AppendInt16(b, r.ProducerEpoch)
	b = kbin.AppendCompactString(b, r.MemberID)
	b = kbin.AppendInt32(b, r.MemberEpoch)
	b = kbin.AppendCompactArrayLen(b, len(r.Topics))
	for _, t := range r.Topics {
		b = kbin.AppendUuid(b, t.TopicID)
		b = kbin.AppendCompactArrayLen(b, len(t.Partitions))
		for _, p := range t.Partitions {
			b = kbin.AppendInt32(b, p.Partition)
			b = kbin.AppendCompactArrayLen(b, len(p.AcknowledgementBatches))
			for _, ab := range p.AcknowledgementBatches {
				b = kbin.AppendInt64(b, ab.FirstOffset)
				b = kbin.AppendInt64(b, ab.LastOffset)
				b = kbin.AppendCompactArrayLen(b, len(ab.AcknowledgeTypes))
				for _, ty := range ab.AcknowledgeTypes {
					b = kbin.AppendInt8(b, ty)
				}
				b = noTags(b)
			}
			b = noTags(b)
		}
		b = noTags(b)
	}
	n := 0
	if r.RideProduce {
		n++
	}
	if r.TouchOffset != nil {
		n++
	}
	if r.OutputRecord != nil {
		n++
	}
	if r.Defer {
		n++
	}
	b = kbin.AppendUvarint(b, uint32(n)) // tagged fields, in increasing tag order
	if r.RideProduce {
		b = kbin.AppendUvarint(b, RideProduceTag)
		b = kbin.AppendUvarint(b, 1) // its size
		b = append(b, 1)
	}
	if r.TouchOffset != nil {
		b = kbin.AppendUvarint(b, TouchOffsetTag)
		b = kbin.AppendUvarint(b, 8)
		b = kbin.AppendInt64(b, *r.TouchOffset)
	}
	if o := r.OutputRecord; o != nil {
		v := kbin.AppendUuid(nil, o.TopicID)
		v = kbin.AppendCompactString(v, o.Topic)
		v = kbin.AppendInt32(v, o.Partition)
		v = kbin.AppendInt64(v, o.Offset)
		b = kbin.AppendUvarint(b, OutputRecordTag)
		b = kbin.AppendUvarint(b, uint32(len(v)))
		b = append(b, v...)
	}
	if r.Defer {
		b = kbin.AppendUvarint(b, DeferTag)
		b = kbin.AppendUvarint(b, 1)
		b = append(b, 1)
	}
	return b
}

// ReadFrom implements kmsg.Request. Unknown tagged fields are skipped; an
// array is never allocated larger than the bytes left could hold.
func (r *TxnShareAcknowledgeRequest) ReadFrom(src []byte) error {
	d := reader{kbin.Reader{Src: src}}
	r.TransactionalID = d.CompactNullableString()
	r.GroupID = d.str()
	r.ProducerID = d.Int64()
	r.ProducerEpoch = d.Int16()
	r.MemberID = d.str()
	r.MemberEpoch = d.Int32()
	r.Topics = nil
	if n := d.arrayLen(17); n > 0 { // uuid + partitions length at least
		r.Topics = make([]TxnShareAcknowledgeTopic, n)
	}
	for i := range r.Topics {
		t := &r.Topics[i]
		t.TopicID = d.Uuid()
		if n := d.arrayLen(6); n > 0 {
			t.Partitions = make([]TxnShareAcknowledgePartition, n)
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = d.Int32()
			if n := d.arrayLen(18); n > 0 {
				p.AcknowledgementBatches = make([]TxnShareAcknowledgeBatch, n)
			}
			for k := range p.AcknowledgementBatches {
				ab := &p.AcknowledgementBatches[k]
				ab.FirstOffset = d.Int64()
				ab.LastOffset = d.Int64()
				if n := d.arrayLen(1); n > 0 {
					ab.AcknowledgeTypes = make([]int8, n)
				}
				for x := range ab.AcknowledgeTypes {
					ab.AcknowledgeTypes[x] = d.Int8()
				}
				d.skipTags()
			}
			d.skipTags()
		}
		d.skipTags()
	}
	r.RideProduce, r.TouchOffset, r.OutputRecord, r.Defer = false, nil, nil, false
	d.eachTag(func(tag uint32, v []byte) {
		switch {
		case tag == RideProduceTag && len(v) == 1:
			r.RideProduce = v[0] != 0
		case tag == TouchOffsetTag && len(v) == 8:
			o := int64(binary.BigEndian.Uint64(v))
			r.TouchOffset = &o
		case tag == OutputRecordTag:
			r.OutputRecord = readOutputRef(v)
		case tag == DeferTag && len(v) == 1:
			r.Defer = v[0] != 0
		}
	})
	return d.complete()
}

// AppendTo implements kmsg.Response.
func (r *TxnShareAcknowledgeResponse) AppendTo(b []byte) []byte {
	b = kbin.AppendInt32(b, r.ThrottleMillis)
	b = kbin.AppendInt16(b, r.ErrorCode)
	b = kbin.AppendCompactArrayLen(b, len(r.Topics))
	for _, t := range r.Topics {
		b = kbin.AppendUuid(b, t.TopicID)
		b = kbin.AppendCompactArrayLen(b, len(t.Partitions))
		for _, p := range t.Partitions {
			b = kbin.AppendInt32(b, p.Partition)
			b = kbin.AppendInt16(b, p.ErrorCode)
			b = kbin.AppendCompactNullableString(b, p.ErrorMessage)
			b = noTags(b)
		}
		b = noTags(b)
	}
	return noTags(b)
}

// ReadFrom implements kmsg.Response.
func (r *TxnShareAcknowledgeResponse) ReadFrom(src []byte) error {
	d := reader{kbin.Reader{Src: src}}
	r.ThrottleMillis = d.Int32()
	r.ErrorCode = d.Int16()
	r.Topics = nil
	if n := d.arrayLen(17); n > 0 {
		r.Topics = make([]TxnShareAcknowledgeResponseTopic, n)
	}
	for i := range r.Topics {
		t := &r.Topics[i]
		t.TopicID = d.Uuid()
		if n := d.arrayLen(8); n > 0 {
			t.Partitions = make([]TxnShareAcknowledgeResponsePartition, n)
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = d.Int32()
			p.ErrorCode = d.Int16()
			p.ErrorMessage = d.CompactNullableString()
			d.skipTags()
		}
		d.skipTags()
	}
	d.skipTags()
	return d.complete()
}

// IsMalformed reports whether err came from decoding bytes of the wrong
// shape (as opposed to, say, a nil message).
func IsMalformed(err error) bool { return errors.Is(err, ErrMalformed) }

func noTags(b []byte) []byte { return append(b, 0) }

// readOutputRef decodes an OutputRecord tag's value; nil when it is
// malformed (the tag is then ignored, as a malformed TouchOffset is).
func readOutputRef(v []byte) *OutputRef {
	d := reader{kbin.Reader{Src: v}}
	var o OutputRef
	o.TopicID = d.Uuid()
	o.Topic = d.str()
	o.Partition = d.Int32()
	o.Offset = d.Int64()
	if d.complete() != nil || len(o.Topic) > maxOutputTopicBytes || o.Partition < 0 || o.Offset < 0 ||
		(o.Topic == "" && o.TopicID == [16]byte{}) {
		return nil
	}
	return &o
}

// reader adds to kbin.Reader the bounds a proxy needs on hostile input:
// array lengths checked against the bytes left times each element's
// smallest encoding, non-nullable strings that refuse null, tagged fields
// skipped, and trailing bytes refused.
type reader struct{ kbin.Reader }

func (d *reader) fail() { d.Src = nil; d.Span(-1) } // Span(-1) marks the reader bad

// arrayLen reads a compact array length; null and hostile lengths fail.
func (d *reader) arrayLen(minElem int) int {
	n := int64(d.Uvarint()) - 1
	if !d.Ok() {
		return 0
	}
	if n < 0 || n*int64(minElem) > int64(len(d.Src)) {
		d.fail()
		return 0
	}
	return int(n)
}

// str reads a non-nullable compact string.
func (d *reader) str() string {
	s := d.CompactNullableString()
	if s == nil {
		d.fail()
		return ""
	}
	return *s
}

func (d *reader) skipTags() { d.eachTag(func(uint32, []byte) {}) }

// eachTag reads a tagged-field section, handing each field to f.
func (d *reader) eachTag(f func(tag uint32, v []byte)) {
	n := d.Uvarint()
	for i := uint32(0); i < n && d.Ok(); i++ {
		tag := d.Uvarint()
		size := d.Uvarint()
		if int64(size) > int64(len(d.Src)) {
			d.fail()
			return
		}
		v := d.Span(int(size))
		if d.Ok() {
			f(tag, v)
		}
	}
}

func (d *reader) complete() error {
	if !d.Ok() || len(d.Src) != 0 {
		return ErrMalformed
	}
	return nil
}
