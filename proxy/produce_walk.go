package proxy

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kbin"
)

// ProduceHead is the start of a Produce request body.
type ProduceHead struct {
	TxnID    *string // v3+; aliases the body, whose buffer is reused: copy to keep
	Acks     int16
	TopicsAt int // offset of the topics array in the body
}

// ErrBadProduce is a Produce request body that ends early or holds a
// length it cannot.
var ErrBadProduce = errors.New("malformed produce request")

// WalkProduce reads a Produce request body without decoding its records:
// the one walker of the Produce layout the transport (acks) and the filters
// share (transactional id
// from v3, flexible from v9, topic ids from v13), on kbin's reader. It
// reads the head, then hands each topic to onTopic (its name, or its id
// from v13) and each of its partitions to onPartition (index and records,
// which alias body); either returning false ends the walk there, as does a
// nil onTopic (head only). It fails when the body is malformed before the
// walk ended. The work is per topic and partition, never per record byte.
func WalkProduce(body []byte, version int16, onTopic func(name string, id [16]byte) bool, onPartition func(partition int32, records []byte) bool) (ProduceHead, error) {
	var h ProduceHead
	r := kbin.Reader{Src: body}
	flexible := version >= 9
	switch {
	case flexible:
		h.TxnID = r.UnsafeCompactNullableString()
	case version >= 3:
		h.TxnID = r.UnsafeNullableString()
	}
	h.Acks = r.Int16()
	r.Int32() // timeout
	h.TopicsAt = len(body) - len(r.Src)
	if !r.Ok() {
		return h, ErrBadProduce
	}
	if onTopic == nil {
		return h, nil
	}
	arrayLen := func() int32 {
		if flexible {
			return r.CompactArrayLen()
		}
		return r.ArrayLen()
	}
	skipTags := func() {
		if !flexible {
			return
		}
		for n := r.Uvarint(); n > 0 && r.Ok(); n-- {
			r.Uvarint() // tag
			r.Span(int(r.Uvarint()))
		}
	}
	for topics := arrayLen(); topics > 0 && r.Ok(); topics-- {
		var name string
		var id [16]byte
		switch {
		case version >= 13:
			id = r.Uuid()
		case flexible:
			name = r.UnsafeCompactString()
		default:
			name = r.UnsafeString()
		}
		if !r.Ok() {
			break
		}
		if !onTopic(name, id) {
			return h, nil
		}
		for parts := arrayLen(); parts > 0 && r.Ok(); parts-- {
			p := r.Int32()
			var records []byte
			if flexible {
				records = r.CompactNullableBytes()
			} else {
				records = r.NullableBytes()
			}
			if !r.Ok() {
				break
			}
			if onPartition != nil && !onPartition(p, records) {
				return h, nil
			}
			skipTags()
		}
		skipTags()
	}
	if !r.Ok() {
		return h, ErrBadProduce
	}
	return h, nil
}
