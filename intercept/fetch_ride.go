package intercept

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/upstream"
)

// The proxy's own acknowledgements riding in the member's ShareFetch
// (docs/design.md §6.4). A committed transaction's acknowledgements (an
// aborted one's releases) wait a moment on the member's session
// (upstream.Sessions.Ride); the member's next ShareFetch takes them as
// acknowledgement batches of partitions it does not acknowledge itself, so
// it does not wait behind a ShareAcknowledge of the proxy's. The broker
// applies them before fetching and answers each partition's
// AcknowledgeErrorCode; the proxy takes that answer for itself and the
// client sees the fetch it sent.

// takeRider notes the request's changes to the session's fetch set and
// adds to req the acknowledgements waiting on the session, when it can
// carry them: all their partitions are in the fetch set (listing another
// would add it, and bring records the client did not ask for), and none is
// acknowledged by the client's request (after what the proxy held back) or
// forgotten by it. The session is locked (step).
func (e *KIP1289) takeRider(r *proxy.Request, st *shareState, step upstream.Step, req *kmsg.ShareFetchRequest) bool {
	var listed, forgotten []upstream.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			listed = append(listed, upstream.TopicPartition{Topic: t.TopicID, Partition: p.Partition})
		}
	}
	for _, t := range req.ForgottenTopicsData {
		for _, p := range t.Partitions {
			forgotten = append(forgotten, upstream.TopicPartition{Topic: t.TopicID, Partition: p})
		}
	}
	step.Fetching(listed, forgotten)
	rider := step.TakeRider(r.Conn, func(acks upstream.Acks) bool { return canCarry(req, acks) })
	if rider == nil {
		return false
	}
	st.rider = rider
	for tp, offs := range rider.Acks {
		ti := findOrAdd(&req.Topics, func(t *kmsg.ShareFetchRequestTopic) bool { return t.TopicID == tp.Topic }, func() kmsg.ShareFetchRequestTopic {
			t := kmsg.NewShareFetchRequestTopic()
			t.TopicID = tp.Topic
			return t
		})
		t := &req.Topics[ti]
		pi := findOrAdd(&t.Partitions, func(p *kmsg.ShareFetchRequestTopicPartition) bool { return p.Partition == tp.Partition }, func() kmsg.ShareFetchRequestTopicPartition {
			p := kmsg.NewShareFetchRequestTopicPartition()
			p.Partition = tp.Partition
			return p
		})
		p := &t.Partitions[pi]
		for _, b := range kip1289.Batches(offs) {
			kb := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
			kb.FirstOffset, kb.LastOffset, kb.AcknowledgeTypes = b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			p.AcknowledgementBatches = append(p.AcknowledgementBatches, kb)
		}
	}
	// The broker answers the acknowledgements with the fetch: a fetch
	// that would wait for records holds their answer (and the committed
	// records' commit → applied) for its whole wait. Carrying them, it
	// answers at once with what it has; the client fetches again.
	req.MaxWaitMillis = 0
	return true
}

// canCarry: req names none of acks' partitions with acknowledgements of
// its own, nor forgets them. A partition's batches succeed or fail
// together at the broker, so the proxy's never share a partition with the
// client's.
func canCarry(req *kmsg.ShareFetchRequest, acks upstream.Acks) bool {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if len(p.AcknowledgementBatches) > 0 && acks[upstream.TopicPartition{Topic: t.TopicID, Partition: p.Partition}] != nil {
				return false
			}
		}
	}
	for _, t := range req.ForgottenTopicsData {
		for _, p := range t.Partitions {
			if acks[upstream.TopicPartition{Topic: t.TopicID, Partition: p}] != nil {
				return false
			}
		}
	}
	return true
}

// answerRider hands the rider of st the broker's answer to its partitions
// and takes that answer out of resp: a partition the client acknowledged
// nothing on carries no acknowledgement code, and an entry of one that
// brought nothing is dropped (a partition the client's acknowledgements
// were held back on gets its answer from shareFetchResponse, as without a
// rider; kfake answers an acknowledgement error in an entry of its own
// beside the records'). Reports whether resp changed.
func answerRider(st *shareState, resp *kmsg.ShareFetchResponse) bool {
	if st == nil || st.rider == nil {
		return false
	}
	rider := st.rider
	st.rider = nil
	if resp.ErrorCode != 0 {
		rider.Answer(upstream.RideResult{Err: fmt.Errorf("the fetch carrying them was refused: %w", kerr.ErrorForCode(resp.ErrorCode))})
		return false
	}
	codes := map[upstream.TopicPartition]int16{}
	changed := false
	keepTopics := resp.Topics[:0]
	for _, t := range resp.Topics {
		keep := t.Partitions[:0]
		for _, p := range t.Partitions {
			tp := upstream.TopicPartition{Topic: t.TopicID, Partition: p.Partition}
			if rider.Acks[tp] == nil {
				keep = append(keep, p)
				continue
			}
			if c, seen := codes[tp]; !seen || c == 0 {
				codes[tp] = p.AcknowledgeErrorCode
			}
			if p.AcknowledgeErrorCode != 0 || p.AcknowledgeErrorMessage != nil {
				p.AcknowledgeErrorCode, p.AcknowledgeErrorMessage = 0, nil
				changed = true
			}
			if p.ErrorCode == 0 && len(p.Records) == 0 && len(p.AcquiredRecords) == 0 {
				changed = true
				continue
			}
			keep = append(keep, p)
		}
		t.Partitions = keep
		if len(t.Partitions) > 0 {
			keepTopics = append(keepTopics, t)
		}
	}
	resp.Topics = keepTopics
	rider.Answer(upstream.RideResult{Codes: codes})
	// Most answers carry the proxy's acknowledgements as a code 0 on a
	// partition that brought records: nothing to take out, and the
	// response (a transaction's records, hundreds of KB at 1000) goes on
	// as it came instead of being encoded again.
	return changed
}

// findOrAdd returns the index of the first element of *s that match
// accepts, appending mk() first when none does.
func findOrAdd[T any](s *[]T, match func(*T) bool, mk func() T) int {
	for i := range *s {
		if match(&(*s)[i]) {
			return i
		}
	}
	*s = append(*s, mk())
	return len(*s) - 1
}
