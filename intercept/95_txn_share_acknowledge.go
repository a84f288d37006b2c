package intercept

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultTxnShareAcknowledgeKey is the default API key of
// TxnShareAcknowledge. KIP-1289's draft numbers (93, 94) are taken by Kafka
// 4.4, so sharetx uses 95 unless configured otherwise; the proxy refuses to
// start if the cluster advertises the configured key itself.
const DefaultTxnShareAcknowledgeKey int16 = 95

// TxnShareAcknowledgeRequest binds share-group acknowledgements to a Kafka
// transaction (KIP-1289). Version 0, flexible.
//
//	TxnShareAcknowledgeRequest => key 95 (configurable), max version 0, flexible v0+
//	  TransactionalID: string
//	  ProducerID: int64
//	  ProducerEpoch: int16
//	  GroupID: string
//	  MemberID: nullable-string  // null or "": the proxy resolves the acquiring member
//	  MemberEpoch: int32         // -1: not checked
//	  Topics: [TopicID uuid, Partitions: [Partition int32,
//	           AcknowledgementBatches: [FirstOffset int64, LastOffset int64, AcknowledgeTypes [int8]]]]
//
// It implements kmsg.Request so a franz-go client can send it with
// Client.Request once the proxy advertises the key.
type TxnShareAcknowledgeRequest struct {
	// APIKey is the key the request is sent with; zero means
	// DefaultTxnShareAcknowledgeKey.
	APIKey  int16
	Version int16

	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	GroupID         string
	MemberID        *string
	MemberEpoch     int32
	Topics          []TxnShareAcknowledgeTopic
}

// TxnShareAcknowledgeTopic is one topic of a TxnShareAcknowledgeRequest.
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
// type for the whole range, or one type per offset. Only 1 (ACCEPT) and 3
// (REJECT) are valid inside a transaction.
type TxnShareAcknowledgeBatch struct {
	FirstOffset      int64
	LastOffset       int64
	AcknowledgeTypes []int8
}

// TxnShareAcknowledgeResponse answers a TxnShareAcknowledgeRequest.
type TxnShareAcknowledgeResponse struct {
	APIKey  int16
	Version int16

	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
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

func keyOr(k int16) int16 {
	if k == 0 {
		return DefaultTxnShareAcknowledgeKey
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
	b = appendCompactString(b, r.TransactionalID)
	b = appendInt64(b, r.ProducerID)
	b = appendInt16(b, r.ProducerEpoch)
	b = appendCompactString(b, r.GroupID)
	b = appendCompactNullableString(b, r.MemberID)
	b = appendInt32(b, r.MemberEpoch)
	b = appendCompactLen(b, len(r.Topics))
	for _, t := range r.Topics {
		b = append(b, t.TopicID[:]...)
		b = appendCompactLen(b, len(t.Partitions))
		for _, p := range t.Partitions {
			b = appendInt32(b, p.Partition)
			b = appendCompactLen(b, len(p.AcknowledgementBatches))
			for _, ab := range p.AcknowledgementBatches {
				b = appendInt64(b, ab.FirstOffset)
				b = appendInt64(b, ab.LastOffset)
				b = appendCompactLen(b, len(ab.AcknowledgeTypes))
				for _, ty := range ab.AcknowledgeTypes {
					b = append(b, byte(ty))
				}
				b = appendNoTags(b)
			}
			b = appendNoTags(b)
		}
		b = appendNoTags(b)
	}
	return appendNoTags(b)
}

// ReadFrom implements kmsg.Request; unknown tagged fields are skipped.
func (r *TxnShareAcknowledgeRequest) ReadFrom(src []byte) error {
	rd := &reader{b: src}
	r.TransactionalID = rd.compactString()
	r.ProducerID = rd.int64()
	r.ProducerEpoch = rd.int16()
	r.GroupID = rd.compactString()
	r.MemberID = rd.compactNullableString()
	r.MemberEpoch = rd.int32()
	r.Topics = nil
	nt := rd.compactLen(17) // uuid + partitions length at least
	for i := 0; i < nt && rd.err == nil; i++ {
		var t TxnShareAcknowledgeTopic
		t.TopicID = rd.uuid()
		np := rd.compactLen(6)
		for j := 0; j < np && rd.err == nil; j++ {
			var p TxnShareAcknowledgePartition
			p.Partition = rd.int32()
			nb := rd.compactLen(18)
			for k := 0; k < nb && rd.err == nil; k++ {
				var ab TxnShareAcknowledgeBatch
				ab.FirstOffset = rd.int64()
				ab.LastOffset = rd.int64()
				nty := rd.compactLen(1)
				if nty > 0 {
					ab.AcknowledgeTypes = make([]int8, 0, nty)
				}
				for x := 0; x < nty && rd.err == nil; x++ {
					ab.AcknowledgeTypes = append(ab.AcknowledgeTypes, rd.int8())
				}
				rd.tags()
				p.AcknowledgementBatches = append(p.AcknowledgementBatches, ab)
			}
			rd.tags()
			t.Partitions = append(t.Partitions, p)
		}
		rd.tags()
		r.Topics = append(r.Topics, t)
	}
	rd.tags()
	return rd.complete()
}

// AppendTo implements kmsg.Response.
func (r *TxnShareAcknowledgeResponse) AppendTo(b []byte) []byte {
	b = appendInt32(b, r.ThrottleMillis)
	b = appendInt16(b, r.ErrorCode)
	b = appendCompactNullableString(b, r.ErrorMessage)
	b = appendCompactLen(b, len(r.Topics))
	for _, t := range r.Topics {
		b = append(b, t.TopicID[:]...)
		b = appendCompactLen(b, len(t.Partitions))
		for _, p := range t.Partitions {
			b = appendInt32(b, p.Partition)
			b = appendInt16(b, p.ErrorCode)
			b = appendCompactNullableString(b, p.ErrorMessage)
			b = appendNoTags(b)
		}
		b = appendNoTags(b)
	}
	return appendNoTags(b)
}

// ReadFrom implements kmsg.Response.
func (r *TxnShareAcknowledgeResponse) ReadFrom(src []byte) error {
	rd := &reader{b: src}
	r.ThrottleMillis = rd.int32()
	r.ErrorCode = rd.int16()
	r.ErrorMessage = rd.compactNullableString()
	r.Topics = nil
	nt := rd.compactLen(17)
	for i := 0; i < nt && rd.err == nil; i++ {
		var t TxnShareAcknowledgeResponseTopic
		t.TopicID = rd.uuid()
		np := rd.compactLen(8)
		for j := 0; j < np && rd.err == nil; j++ {
			var p TxnShareAcknowledgeResponsePartition
			p.Partition = rd.int32()
			p.ErrorCode = rd.int16()
			p.ErrorMessage = rd.compactNullableString()
			rd.tags()
			t.Partitions = append(t.Partitions, p)
		}
		rd.tags()
		r.Topics = append(r.Topics, t)
	}
	rd.tags()
	return rd.complete()
}
