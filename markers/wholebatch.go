package markers

import (
	"sync"
	"time"

	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// batchHold keeps committed acknowledgements that cover only part of an
// acquired batch until the rest of that batch is committed too, so that the
// broker takes the batch whole, or until wait ends (docs/design.md §5.2).
// Kafka's SharePartition keeps an in-flight batch's state as one entry until
// an acknowledgement covers only part of it, and per offset from then on: one
// state write per offset, not one per batch.
type batchHold struct {
	wait time.Duration

	mu   sync.Mutex
	held map[heldKey]*heldPart
	// released: the batches an abort released part of, and when. The
	// broker keeps such a batch per offset from then on, so no part of it
	// is held again; and a commit's split that runs after the abort's
	// flush (both run off the resolver's goroutine) must not start a hold
	// that the flush will never see.
	released map[heldKey]time.Time
}

// releasedFor is how long a released batch is remembered: longer than its
// records stay acquired (the acquisition lock, 30 s by default), after
// which no commit covers them.
const releasedFor = 2 * time.Minute

// minHeldBatch is the shortest acquired batch whose parts are held. The
// broker's extra work for a batch acknowledged in parts grows with the
// batch's length; for a short one it is small, and holding its parts would
// only add to commit → applied.
const minHeldBatch = 100

// holdCommits bounds what a new hold waits for: the rest of the batch must
// be at most that many commits of the size of the one that starts it (the
// session's acknowledgements in that commit). A part is held for about one
// or two transactions, not for the many a small transaction takes to get
// through a large acquired batch (10 records a transaction through a batch
// of 100 would hold each part for nine more).
const holdCommits = 2

type heldKey struct {
	session upstream.SessionKey
	tp      upstream.TopicPartition
	batch   staging.Batch
}

// heldPart is the committed part of one acquired batch, not yet sent.
type heldPart struct {
	acks      map[int64]int8
	refs      []jobRef  // whose they are
	committed time.Time // the earliest commit among them
	timer     *time.Timer
}

// applyJob is one resolution's committed calls on their way upstream: they
// are finished once every request carrying their acknowledgements was
// answered (left reaches 0), and applied unless one of those failed.
type applyJob struct {
	calls []*staging.Call

	mu     sync.Mutex
	failed []bool
	left   int
}

// jobRef names calls of a job (by index) whose acknowledgements a request
// carries.
type jobRef struct {
	job   *applyJob
	calls []int
}

func (j *applyJob) add() {
	j.mu.Lock()
	j.left++
	j.mu.Unlock()
}

// done counts one request of the job answered (err: it failed for the
// calls of ref); it reports whether that was the job's last.
func (j *applyJob) done(calls []int, err error) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		for _, i := range calls {
			j.failed[i] = true
		}
	}
	j.left--
	return j.left == 0
}

// upstreamSend is one request of committed acknowledgements on a session.
type upstreamSend struct {
	k         upstream.SessionKey
	acks      upstream.Acks
	refs      []jobRef
	committed time.Time
}

// split takes out of s the acknowledgements of every batch in batches that
// s (with what is held of that batch) covers only in part, and holds them;
// a batch that s completes goes in s whole, with what was held of it. It
// counts each part it holds as a request of ref's job, and returns how many
// held parts s completed.
func (h *batchHold) split(s *upstreamSend, batches map[upstream.TopicPartition][]staging.Batch, ref jobRef, expire func(heldKey, *heldPart)) (completed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The commit of the calls s carries. Merging a completed part makes
	// s.committed that part's earlier commit (the request's latency
	// starts there); a part held now was committed now, not then:
	// inheriting it would carry the earliest commit from batch to batch
	// while each commit completes one part and starts the next.
	own := s.committed
	carried := 0 // this commit's size on the session
	for _, m := range s.acks {
		carried += len(m)
	}
	for tp, bs := range batches {
		m := s.acks[tp]
		if m == nil {
			continue
		}
		for _, b := range bs {
			if b.Len() < minHeldBatch {
				continue
			}
			key := heldKey{s.k, tp, b}
			if _, ok := h.released[key]; ok {
				continue // split at the broker already: sent now
			}
			hp := h.held[key]
			n := 0
			for o := range m {
				if o >= b.First && o <= b.Last {
					n++
				}
			}
			if n == 0 {
				continue // s carries none of it: what is held of it stays held
			}
			if hp != nil {
				n += len(hp.acks)
			}
			if int64(n) >= b.Len() {
				if hp != nil {
					completed++
					delete(h.held, key)
					hp.timer.Stop()
					for o, ty := range hp.acks {
						m[o] = ty
					}
					s.refs = append(s.refs, hp.refs...)
					if hp.committed.Before(s.committed) {
						s.committed = hp.committed
					}
				}
				continue
			}
			if hp == nil {
				if b.Len()-int64(n) > holdCommits*int64(carried) {
					continue // too far from complete: sent now
				}
				hp = &heldPart{acks: map[int64]int8{}, committed: own}
				h.held[key] = hp
				hp.timer = time.AfterFunc(h.wait, func() { expire(key, hp) })
			}
			for o, ty := range m {
				if o >= b.First && o <= b.Last {
					hp.acks[o] = ty
					delete(m, o)
				}
			}
			hp.refs = append(hp.refs, ref)
			ref.job.add()
			if own.Before(hp.committed) {
				hp.committed = own
			}
		}
		if len(m) == 0 {
			delete(s.acks, tp)
		}
	}
	return completed
}

// take removes hp from the held parts if it is still there (nobody merged
// it into a request since its timer fired).
func (h *batchHold) take(key heldKey, hp *heldPart) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[key] != hp {
		return false
	}
	delete(h.held, key)
	return true
}

// release removes and returns the part held of key, or nil, and marks key
// released (an abort released part of its batch) when split could hold
// parts of it.
func (h *batchHold) release(key heldKey) *heldPart {
	h.mu.Lock()
	defer h.mu.Unlock()
	hp := h.held[key]
	delete(h.held, key)
	if key.batch.Len() < minHeldBatch {
		return hp // never held: nothing to remember
	}
	now := time.Now()
	if h.released == nil {
		h.released = map[heldKey]time.Time{}
	}
	for k, at := range h.released {
		if now.Sub(at) > releasedFor {
			delete(h.released, k)
		}
	}
	h.released[key] = now
	return hp
}
