package client

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/kip1289"
)

// AcknowledgeType is the type of a share-group acknowledgement. Inside a
// transaction only Accept and Reject are allowed (KIP-1289).
type AcknowledgeType int8

const (
	// Accept marks the record as processed.
	Accept AcknowledgeType = 1
	// Reject marks the record as unprocessable; it is archived, never
	// redelivered.
	Reject AcknowledgeType = 3
)

func (t AcknowledgeType) String() string {
	switch t {
	case Accept:
		return "ACCEPT"
	case Reject:
		return "REJECT"
	case 2:
		return "RELEASE"
	default:
		return fmt.Sprintf("AcknowledgeType(%d)", int8(t))
	}
}

func (t AcknowledgeType) valid() bool { return t == Accept || t == Reject }

type topicPartition struct {
	topic     string
	partition int32
}

// ShareAcknowledgements collects acknowledgements of records polled by a kgo
// share consumer (kgo.ShareGroup) to bind to a transaction with
// SendShareAcknowledgementsToTransaction. It is not safe for concurrent use.
type ShareAcknowledgements struct {
	acks    map[topicPartition]map[int64]int8 // offset -> AcknowledgeType
	n       int
	invalid []string // problems found by Add, reported by Send
}

// NewShareAcknowledgements returns an empty set of acknowledgements.
func NewShareAcknowledgements() *ShareAcknowledgements {
	return &ShareAcknowledgements{acks: make(map[topicPartition]map[int64]int8)}
}

// Add acknowledges r with type t. Adding the same record (topic, partition,
// offset) again replaces its type. Invalid input (nil record, record without
// topic, a type other than Accept or Reject) is reported by
// SendShareAcknowledgementsToTransaction, which then sends nothing.
func (a *ShareAcknowledgements) Add(r *kgo.Record, t AcknowledgeType) {
	if p := ackProblem(r, t); p != "" {
		a.invalid = append(a.invalid, p)
		return
	}
	a.add(r.Topic, r.Partition, r.Offset, t)
}

// ackProblem says what is wrong with acknowledging r with t in a
// transaction, or "" if nothing is.
func ackProblem(r *kgo.Record, t AcknowledgeType) string {
	switch {
	case r == nil:
		return "nil record"
	case r.Topic == "":
		return fmt.Sprintf("record at partition %d offset %d has no topic", r.Partition, r.Offset)
	case r.Offset < 0 || r.Partition < 0:
		return fmt.Sprintf("%s[%d]@%d: negative partition or offset", r.Topic, r.Partition, r.Offset)
	case !t.valid():
		return fmt.Sprintf("%s[%d]@%d: acknowledge type %v is not allowed in a transaction (only ACCEPT and REJECT)", r.Topic, r.Partition, r.Offset, t)
	}
	return ""
}

func (a *ShareAcknowledgements) add(topic string, partition int32, offset int64, t AcknowledgeType) {
	if a.acks == nil {
		a.acks = make(map[topicPartition]map[int64]int8)
	}
	tp := topicPartition{topic, partition}
	m := a.acks[tp]
	if m == nil {
		m = make(map[int64]int8)
		a.acks[tp] = m
	}
	if _, dup := m[offset]; !dup {
		a.n++
	}
	m[offset] = int8(t)
}

// Len returns the number of distinct records acknowledged.
func (a *ShareAcknowledgements) Len() int {
	if a == nil {
		return 0
	}
	return a.n
}

func (a *ShareAcknowledgements) validate() error {
	if len(a.invalid) == 0 {
		return nil
	}
	if len(a.invalid) == 1 {
		return fmt.Errorf("sharetx: invalid acknowledgement: %s", a.invalid[0])
	}
	return fmt.Errorf("sharetx: %d invalid acknowledgements, first: %s", len(a.invalid), a.invalid[0])
}

// topicNames returns the acknowledged topics, sorted.
func (a *ShareAcknowledgements) topicNames() []string {
	seen := make(map[string]bool)
	var names []string
	for tp := range a.acks {
		if !seen[tp.topic] {
			seen[tp.topic] = true
			names = append(names, tp.topic)
		}
	}
	slices.Sort(names)
	return names
}

// requestTopics returns the request's topics: those of names (sorted),
// with their ids, each with its partitions (sorted) and their
// acknowledgement batches (kip1289.Batches).
func (a *ShareAcknowledgements) requestTopics(names []string, ids map[string][16]byte) []kip1289.TxnShareAcknowledgeTopic {
	parts := make(map[string][]int32, len(names))
	for tp := range a.acks {
		parts[tp.topic] = append(parts[tp.topic], tp.partition)
	}
	out := make([]kip1289.TxnShareAcknowledgeTopic, 0, len(names))
	for _, name := range names {
		ps := parts[name]
		slices.Sort(ps)
		t := kip1289.TxnShareAcknowledgeTopic{TopicID: ids[name], Partitions: make([]kip1289.TxnShareAcknowledgePartition, len(ps))}
		for i, p := range ps {
			t.Partitions[i] = kip1289.TxnShareAcknowledgePartition{
				Partition:              p,
				AcknowledgementBatches: kip1289.Batches(a.acks[topicPartition{name, p}]),
			}
		}
		out = append(out, t)
	}
	return out
}

// ShareGroupMetadata identifies the share-group member whose acquired records
// are acknowledged.
type ShareGroupMetadata struct {
	GroupID string
	// MemberID of the share consumer; "" lets the proxy resolve the member
	// that acquired the offsets (franz-go does not expose its member id).
	MemberID string
	// MemberEpoch of the share consumer: with a MemberID it must be the
	// member's current epoch; with MemberID "" it is not checked.
	MemberEpoch int32
}

// NewShareGroupMetadata returns the metadata for group with MemberID "" and
// MemberEpoch -1: the proxy resolves the acquiring member.
func NewShareGroupMetadata(group string) ShareGroupMetadata {
	return ShareGroupMetadata{GroupID: group, MemberEpoch: -1}
}

// ReleaseForRedelivery acknowledges records with kgo.AckRelease. Call it
// with records whose SendShareAcknowledgementsToTransaction failed (nothing
// was staged: otherwise the share consumer's next poll implicitly ACCEPTs
// them and they are never redelivered). After the abort of a transaction
// that staged them it is not needed (the proxy released them and absorbs
// the consumer's acknowledgement of that delivery) but harmless. Records
// already given a terminal ack with Record.Ack are left as they are;
// records not from a share fetch are ignored.
func ReleaseForRedelivery(records ...*kgo.Record) {
	for _, r := range records {
		if r != nil {
			r.Ack(kgo.AckRelease)
		}
	}
}
