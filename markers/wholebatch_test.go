package markers

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

func offsetsOf(m map[int64]int8) []int64 {
	return slices.Sorted(maps.Keys(m))
}

func span(first, last int64) map[int64]int8 {
	m := map[int64]int8{}
	for o := first; o <= last; o++ {
		m[o] = 1
	}
	return m
}

// testHold is an empty hold with wait, and the session and partition the
// tests acknowledge on.
func testHold(wait time.Duration) (*batchHold, upstream.SessionKey, upstream.TopicPartition) {
	return &batchHold{wait: wait, held: map[heldKey]*heldPart{}}, upstream.SessionKey{Node: 1, Group: "g", Member: "m"},
		upstream.TopicPartition{Topic: [16]byte{1}, Partition: 0}
}

// A commit covering the end of one acquired batch and the start of the
// next sends the first batch whole and holds the start of the second; the
// next commit completes it and takes what was held along, once.
func TestBatchHoldSplitsAndCompletes(t *testing.T) {
	h, k, tp := testHold(time.Hour)
	b1, b2 := staging.Batch{First: 0, Last: 999}, staging.Batch{First: 1000, Last: 1999}
	expired := 0
	expire := func(heldKey, *heldPart) { expired++ }

	j1 := &applyJob{failed: make([]bool, 1), left: 1}
	t0 := time.Now()
	s1 := &upstreamSend{k: k, acks: upstream.Acks{tp: span(0, 1499)}, committed: t0}
	h.split(s1, map[upstream.TopicPartition][]staging.Batch{tp: {b1, b2}}, jobRef{j1, []int{0}}, expire)
	if got := offsetsOf(s1.acks[tp]); !slices.Equal(got, offsetsOf(span(0, 999))) {
		t.Fatalf("first commit sends %d offsets, want the whole first batch 0..999", len(got))
	}
	if n := h.size(); n != 500 || j1.left != 2 {
		t.Fatalf("held %d offsets, job counts %d requests; want 500 held and 2 (its own, the held part)", n, j1.left)
	}

	j2 := &applyJob{failed: make([]bool, 1), left: 1}
	s2 := &upstreamSend{k: k, acks: upstream.Acks{tp: span(1500, 1999)}, refs: []jobRef{{j2, []int{0}}}, committed: t0.Add(time.Second)}
	if n := h.split(s2, map[upstream.TopicPartition][]staging.Batch{tp: {b2}}, jobRef{j2, []int{0}}, expire); n != 1 {
		t.Fatalf("the second commit completed %d held parts, want 1", n)
	}
	if got := offsetsOf(s2.acks[tp]); !slices.Equal(got, offsetsOf(span(1000, 1999))) {
		t.Fatalf("second commit sends %d offsets, want the whole second batch 1000..1999", len(got))
	}
	if h.size() != 0 || len(s2.refs) != 2 || s2.refs[1].job != j1 {
		t.Fatalf("held %d after completion, refs %d; want 0 held and the first job's part carried by the second request", h.size(), len(s2.refs))
	}
	if !s2.committed.Equal(t0) {
		t.Fatalf("the request's commit time is %v, want the earliest of what it carries (%v)", s2.committed, t0)
	}
	if j1.done(nil, nil) || !j1.done(nil, nil) {
		t.Fatal("the first job must finish with its second request answered, not before")
	}
	if expired != 0 {
		t.Fatal("a completed part expired")
	}
}

// Commits that each complete one batch and start the next: a request's
// commit time is the earliest of what it carries, and a part held now keeps
// the commit that staged it, not the earlier one of the part its request
// completed (which would carry the first commit's time down the chain).
func TestBatchHoldCommitTimeDoesNotChain(t *testing.T) {
	h, k, tp := testHold(time.Hour)
	b := []staging.Batch{{First: 0, Last: 999}, {First: 1000, Last: 1999}, {First: 2000, Last: 2999}}
	batches := map[upstream.TopicPartition][]staging.Batch{tp: b}
	t0 := time.Now()
	commit := func(i int, first, last int64) *upstreamSend {
		j := &applyJob{failed: make([]bool, 1), left: 1}
		s := &upstreamSend{k: k, acks: upstream.Acks{tp: span(first, last)}, refs: []jobRef{{j, []int{0}}}, committed: t0.Add(time.Duration(i) * time.Second)}
		h.split(s, batches, jobRef{j, []int{0}}, func(heldKey, *heldPart) {})
		return s
	}
	commit(0, 0, 499)           // holds 0..499 (t0)
	s1 := commit(1, 500, 1499)  // completes b0, holds 1000..1499 (t0+1s)
	s2 := commit(2, 1500, 2499) // completes b1, holds 2000..2499 (t0+2s)
	s3 := commit(3, 2500, 2999) // completes b2
	for i, c := range []struct {
		s    *upstreamSend
		want time.Time
	}{{s1, t0}, {s2, t0.Add(time.Second)}, {s3, t0.Add(2 * time.Second)}} {
		if n := len(c.s.acks[tp]); n != 1000 {
			t.Fatalf("commit %d sends %d offsets, want one whole batch", i+1, n)
		}
		if !c.s.committed.Equal(c.want) {
			t.Fatalf("commit %d: the request's commit time is %v after the first commit, want %v (the commit of the part it completed)",
				i+1, c.s.committed.Sub(t0), c.want.Sub(t0))
		}
	}
}

// A part whose batch is not completed within the wait is sent on its own;
// a batch shorter than minHeldBatch is never held.
func TestBatchHoldExpires(t *testing.T) {
	h, k, tp := testHold(10 * time.Millisecond)
	fired := make(chan *heldPart, 1)
	expire := func(key heldKey, hp *heldPart) {
		if h.take(key, hp) {
			fired <- hp
		}
	}
	j := &applyJob{failed: make([]bool, 1), left: 1}
	s := &upstreamSend{k: k, acks: upstream.Acks{tp: span(0, 59)}, committed: time.Now()}
	for o := int64(1000); o < 1005; o++ {
		s.acks[tp][o] = 1
	}
	h.split(s, map[upstream.TopicPartition][]staging.Batch{tp: {{First: 0, Last: minHeldBatch - 1}, {First: 1000, Last: 1000 + minHeldBatch - 2}}}, jobRef{j, []int{0}}, expire)
	if got := offsetsOf(s.acks[tp]); !slices.Equal(got, offsetsOf(span(1000, 1004))) {
		t.Fatalf("sends %v, want only the part of the batch shorter than minHeldBatch", got)
	}
	select {
	case hp := <-fired:
		if got := offsetsOf(hp.acks); !slices.Equal(got, offsetsOf(span(0, 59))) || len(hp.refs) != 1 {
			t.Fatalf("expired part holds %v (%d refs), want 0..59 of the job", got, len(hp.refs))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held part did not expire")
	}
	if h.size() != 0 {
		t.Fatal("an expired part is still held")
	}
}

// A commit far smaller than the rest of its batch is not held (the batch
// would take many more commits to complete); one within holdCommits
// commits of its size is.
func TestBatchHoldOnlyNearlyCompleteBatches(t *testing.T) {
	h, k, tp := testHold(time.Hour)
	b := staging.Batch{First: 0, Last: 999}
	expire := func(heldKey, *heldPart) {}
	j := &applyJob{failed: make([]bool, 1), left: 1}
	small := &upstreamSend{k: k, acks: upstream.Acks{tp: span(0, 9)}, committed: time.Now()}
	h.split(small, map[upstream.TopicPartition][]staging.Batch{tp: {b}}, jobRef{j, []int{0}}, expire)
	if n := len(small.acks[tp]); n != 10 || h.size() != 0 {
		t.Fatalf("10 offsets of a batch of 1000: %d sent, %d held; want all sent now", n, h.size())
	}
	// A commit of n offsets leaves 1000-n: held when that is at most 2n.
	for _, c := range []struct {
		n    int64
		held bool
	}{{333, false}, {334, true}} {
		h, _, _ := testHold(time.Hour)
		s := &upstreamSend{k: k, acks: upstream.Acks{tp: span(0, c.n-1)}, committed: time.Now()}
		h.split(s, map[upstream.TopicPartition][]staging.Batch{tp: {b}}, jobRef{j, []int{0}}, expire)
		if got := h.size() > 0; got != c.held {
			t.Fatalf("a commit of %d offsets of a batch of 1000: held %v, want %v", c.n, got, c.held)
		}
	}
}

// An abort that releases part of a batch before a commit's split of the
// same batch ran (both run off the resolver's goroutine) leaves nothing for
// that split to hold: the commit's part of the batch is sent at once, not
// held for a completion that will not come. One held already is taken.
func TestBatchHoldReleasedBatchIsNotHeld(t *testing.T) {
	h, k, tp := testHold(time.Hour)
	b1, b2 := staging.Batch{First: 0, Last: 299}, staging.Batch{First: 300, Last: 599}
	expire := func(heldKey, *heldPart) {}
	j := &applyJob{failed: make([]bool, 1), left: 1}
	held := &upstreamSend{k: k, acks: upstream.Acks{tp: span(300, 449)}, committed: time.Now()}
	h.split(held, map[upstream.TopicPartition][]staging.Batch{tp: {b2}}, jobRef{j, []int{0}}, expire)
	if h.size() != 150 {
		t.Fatalf("held %d, want 150 of the second batch", h.size())
	}
	if hp := h.release(heldKey{k, tp, b1}); hp != nil {
		t.Fatal("releasing a batch with nothing held returned a part")
	}
	if hp := h.release(heldKey{k, tp, b2}); hp == nil || len(hp.acks) != 150 || h.size() != 0 {
		t.Fatal("releasing the held batch did not hand over its part")
	}
	for _, b := range []staging.Batch{b1, b2} {
		s := &upstreamSend{k: k, acks: upstream.Acks{tp: span(b.First, b.First+199)}, committed: time.Now()}
		h.split(s, map[upstream.TopicPartition][]staging.Batch{tp: {b}}, jobRef{j, []int{0}}, expire)
		if n := len(s.acks[tp]); n != 200 || h.size() != 0 {
			t.Fatalf("batch %v released before the commit's split: %d sent, %d held; want all 200 sent", b, n, h.size())
		}
	}
}

// size is the number of offsets held (the tests' view of the hold).
func (h *batchHold) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, hp := range h.held {
		n += len(hp.acks)
	}
	return n
}
