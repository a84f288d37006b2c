// Package staging holds TX_PENDING (docs/design.md §3, §4): the Ledger of
// what the proxy learned from the traffic and the state of every offset it
// holds, whose methods are the state machine's transitions; the Stager,
// which turns a TxnShareAcknowledge into a shadow record written inside the
// caller's Kafka transaction (the durable half of TX_PENDING); the shadow
// record format (signed), the mapping from a transactional id to its shadow
// partition, and the Writer that appends the record.
package staging

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sharetx/sharetx/kip1289"
)

// ShadowRecord is the value of one record in the shadow topic: the
// acknowledgements staged by one TxnShareAcknowledge call on one shadow
// partition, written inside the caller's transaction. It takes effect if and
// only if that transaction commits (the markers package resolves it).
//
// # Wire format, version 1
//
// All integers are big-endian. A string is a uint32 byte length followed by
// that many bytes. An array is a uint32 element count followed by the
// elements. There is no trailing data: a decoder of version 1 rejects bytes
// after the last field, so the encoding of a record is unique.
//
//	magic            [4]byte  "STXR"
//	version          int8     1
//	proxy_id         string
//	transactional_id string
//	producer_id      int64
//	producer_epoch   int16
//	group_id         string
//	member_id        string
//	topics           array of
//	  topic_id         [16]byte
//	  partitions       array of
//	    partition        int32
//	    batches          array of
//	      first_offset     int64
//	      last_offset      int64
//	      acknowledge_types  array of int8   (one for the whole range, or one per offset)
//
// # Version 2: signed
//
// Version 2 is version 1's fields followed by
//
//	mac              [32]byte HMAC-SHA256, under the shadow key, of every byte before it
//
// Only sharetx processes hold the shadow key (docs/operations.md), so a record
// a principal with WRITE on the shadow topic wrote itself does not verify and
// changes nothing (VerifyShadowRecord). sharetx writes version 2 and trusts
// only version 2 records that verify.
//
// A later version keeps the magic and the version byte in place; this
// decoder answers ErrUnsupportedVersion for it.
//
// The record key is null. The producer id and epoch in the value are
// informational: the tailer resolves by the ones of the record batch.
type ShadowRecord struct {
	Version         int8   // 1 or 2 (signed)
	ProxyID         string // which sharetx process staged it
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	GroupID         string
	MemberID        string
	Topics          []ShadowTopic
}

// ShadowTopic, ShadowPartition and ShadowBatch are a ShadowRecord's
// acknowledgements: those of the TxnShareAcknowledge that staged it, in
// its own types (a batch is inclusive at both ends, with one type for the
// whole range or one per offset).
type (
	ShadowTopic     = kip1289.TxnShareAcknowledgeTopic
	ShadowPartition = kip1289.TxnShareAcknowledgePartition
	ShadowBatch     = kip1289.TxnShareAcknowledgeBatch
)

// ShadowVersion is the version of an unsigned record (AppendTo);
// SignedShadowVersion the version AppendSigned writes.
const (
	ShadowVersion       int8 = 1
	SignedShadowVersion int8 = 2
	macLen                   = sha256.Size
)

// shadowMagic starts every shadow record value.
var shadowMagic = [4]byte{'S', 'T', 'X', 'R'}

// Decoding errors.
var (
	ErrNotShadow          = errors.New("staging: not a shadow record (bad magic)")
	ErrUnsupportedVersion = errors.New("staging: unsupported shadow record version")
	ErrTruncated          = errors.New("staging: shadow record truncated or a length exceeds the bytes left")
	ErrTrailingBytes      = errors.New("staging: trailing bytes after shadow record")
	ErrUnsigned           = errors.New("staging: shadow record is not signed (version 1)")
	ErrBadSignature       = errors.New("staging: shadow record signature does not verify under this proxy's shadow key")
)

// DeriveShadowKey turns a secret every sharetx process of a cluster shares
// (the shadow key file, or the proxy's own upstream credentials) into the
// key that signs shadow records.
func DeriveShadowKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sharetx shadow record key v1"))
	return m.Sum(nil)
}

// AppendSigned appends the version 2 encoding of r, signed with key, to dst.
func (r *ShadowRecord) AppendSigned(dst []byte, key []byte) []byte {
	start := len(dst)
	dst = r.appendFields(dst, SignedShadowVersion)
	m := hmac.New(sha256.New, key)
	m.Write(dst[start:])
	return m.Sum(dst)
}

// VerifyShadowRecord decodes b and checks that it is a version 2 record
// signed with key.
func VerifyShadowRecord(b []byte, key []byte) (*ShadowRecord, error) {
	rec, err := DecodeShadowRecord(b)
	if err != nil {
		return nil, err
	}
	if rec.Version != SignedShadowVersion {
		return nil, ErrUnsigned
	}
	m := hmac.New(sha256.New, key)
	m.Write(b[:len(b)-macLen])
	if !hmac.Equal(m.Sum(nil), b[len(b)-macLen:]) {
		return nil, ErrBadSignature
	}
	return rec, nil
}

// IsShadowRecord reports whether value starts with the shadow record magic.
// It does not validate the rest.
func IsShadowRecord(value []byte) bool {
	return len(value) >= len(shadowMagic) && [4]byte(value[:4]) == shadowMagic
}

// AppendTo appends the unsigned (version 1) encoding of r to dst and
// returns it; sharetx writes AppendSigned's.
func (r *ShadowRecord) AppendTo(dst []byte) []byte {
	return r.appendFields(dst, ShadowVersion)
}

func (r *ShadowRecord) appendFields(dst []byte, v int8) []byte {
	be := binary.BigEndian
	dst = append(dst, shadowMagic[:]...)
	dst = append(dst, byte(v))
	dst = appendString(dst, r.ProxyID)
	dst = appendString(dst, r.TransactionalID)
	dst = be.AppendUint64(dst, uint64(r.ProducerID))
	dst = be.AppendUint16(dst, uint16(r.ProducerEpoch))
	dst = appendString(dst, r.GroupID)
	dst = appendString(dst, r.MemberID)
	dst = be.AppendUint32(dst, uint32(len(r.Topics)))
	for _, t := range r.Topics {
		dst = append(dst, t.TopicID[:]...)
		dst = be.AppendUint32(dst, uint32(len(t.Partitions)))
		for _, p := range t.Partitions {
			dst = be.AppendUint32(dst, uint32(p.Partition))
			dst = be.AppendUint32(dst, uint32(len(p.AcknowledgementBatches)))
			for _, b := range p.AcknowledgementBatches {
				dst = be.AppendUint64(dst, uint64(b.FirstOffset))
				dst = be.AppendUint64(dst, uint64(b.LastOffset))
				dst = be.AppendUint32(dst, uint32(len(b.AcknowledgeTypes)))
				for _, at := range b.AcknowledgeTypes {
					dst = append(dst, byte(at))
				}
			}
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// Validate checks what the wire format cannot: every batch has
// FirstOffset <= LastOffset, FirstOffset >= 0, and either one acknowledge
// type or one per offset. It does not restrict the type values.
func (r *ShadowRecord) Validate() error {
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			for _, b := range p.AcknowledgementBatches {
				if b.FirstOffset < 0 || b.LastOffset < b.FirstOffset {
					return fmt.Errorf("staging: partition %d: invalid range [%d, %d]", p.Partition, b.FirstOffset, b.LastOffset)
				}
				n := len(b.AcknowledgeTypes)
				if n != 1 && uint64(n) != uint64(b.LastOffset-b.FirstOffset)+1 {
					return fmt.Errorf("staging: partition %d: range [%d, %d] has %d acknowledge types", p.Partition, b.FirstOffset, b.LastOffset, n)
				}
			}
		}
	}
	return nil
}

// Minimum encoded sizes, used to bound every count by the bytes left.
const (
	minTopicLen     = 16 + 4
	minPartitionLen = 4 + 4
	minBatchLen     = 8 + 8 + 4
)

type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = ErrTruncated
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u32()
	if r.err != nil || uint64(n) > uint64(len(r.b)) {
		r.err = ErrTruncated
		return ""
	}
	return string(r.take(int(n)))
}

// count reads an array length and checks that at least n*minElem bytes are
// left, so no allocation exceeds what the input justifies.
func (r *reader) count(minElem int) int {
	n := r.u32()
	if r.err != nil || uint64(n)*uint64(minElem) > uint64(len(r.b)) {
		r.err = ErrTruncated
		return 0
	}
	return int(n)
}

// DecodeShadowRecord decodes a shadow record value. It never panics, and it
// allocates at most a small constant factor of len(b): every length and count
// is checked against the bytes left before anything is allocated.
func DecodeShadowRecord(b []byte) (*ShadowRecord, error) {
	if !IsShadowRecord(b) {
		return nil, ErrNotShadow
	}
	r := &reader{b: b[len(shadowMagic):]}
	rec := &ShadowRecord{Version: int8(r.u8())}
	if r.err != nil {
		return nil, r.err
	}
	if rec.Version != ShadowVersion && rec.Version != SignedShadowVersion {
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedVersion, rec.Version)
	}
	rec.ProxyID = r.str()
	rec.TransactionalID = r.str()
	rec.ProducerID = int64(r.u64())
	rec.ProducerEpoch = int16(r.u16())
	rec.GroupID = r.str()
	rec.MemberID = r.str()
	if nt := r.count(minTopicLen); nt > 0 {
		rec.Topics = make([]ShadowTopic, nt)
		for i := range rec.Topics {
			t := &rec.Topics[i]
			copy(t.TopicID[:], r.take(16))
			np := r.count(minPartitionLen)
			if np > 0 {
				t.Partitions = make([]ShadowPartition, np)
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				p.Partition = int32(r.u32())
				nb := r.count(minBatchLen)
				if nb > 0 {
					p.AcknowledgementBatches = make([]ShadowBatch, nb)
				}
				for k := range p.AcknowledgementBatches {
					bt := &p.AcknowledgementBatches[k]
					bt.FirstOffset = int64(r.u64())
					bt.LastOffset = int64(r.u64())
					na := r.count(1)
					if na > 0 {
						raw := r.take(na)
						bt.AcknowledgeTypes = make([]int8, na)
						for x, c := range raw {
							bt.AcknowledgeTypes[x] = int8(c)
						}
					}
				}
				if r.err != nil {
					return nil, r.err
				}
			}
		}
	}
	if rec.Version == SignedShadowVersion {
		r.take(macLen)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, ErrTrailingBytes
	}
	return rec, nil
}

// ShadowPartitionFor returns the shadow partition of a transactional id
// (kip1289.ShadowPartition: FNV-1a (32 bit) of the id, modulo partitions).
// Clients compute the same value, so it must never change. It returns 0 if
// partitions <= 0.
func ShadowPartitionFor(transactionalID string, partitions int32) int32 {
	return kip1289.ShadowPartition(transactionalID, partitions)
}

// TouchPartitionFor returns (ShadowPartitionFor+1) % partitions
// (kip1289.TouchPartition): a partition of the shadow topic, different from
// the shadow partition when partitions >= 2, where a client may write a
// filler record so that its transaction has a partition of its own
// (franz-go sends no EndTxn for a transaction in which the client produced
// nothing). The filler must never go to the shadow partition itself: the
// client and the Writer would then both use sequence numbers from 0 for the
// same (producer id, epoch, partition), and the broker would drop one batch
// as a duplicate. The tailer ignores non-shadow records.
func TouchPartitionFor(transactionalID string, partitions int32) int32 {
	return kip1289.TouchPartition(transactionalID, partitions)
}
