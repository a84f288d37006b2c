package staging

import (
	"sort"
	"time"
)

// A client's own acknowledgement (ShareFetch or ShareAcknowledge) is looked
// at twice. On the request, filterClientAcks decides which offsets the proxy
// holds back (staged, committed, known from the shadow topic, or owed after
// an abort) and changes nothing. Only when the broker accepted the
// acknowledgement does applyAckPlan settle what the member acknowledged in
// the ledger: a request naming a bogus member, a wrong session epoch or
// someone else's offsets, which the broker refuses, leaves every
// acquisition as it was.
//
// The work is bounded by the request's batches and the proxy's state of the
// partition, never by the width of a range: a batch [0, 2^40] with one type
// is cut around the held offsets, not expanded.

// AckPlan is what one partition's client acknowledgement changes in the
// ledger once the broker accepts it.
type AckPlan struct {
	k        partKey
	member   string
	topic    [16]byte
	part     int32
	allHeld  bool        // nothing of it went upstream: the session's answer decides
	settle   []AckRange  // the member's acquisition ranges to settle (types unused)
	owed     []int64     // owed acknowledgements taken
	acked    []int64     // held offsets of the member the client acknowledged
	ackedSt  []*offState // ...their entries when the plan was made (offState.gone)
	released []bool      // ...with RELEASE
	drop     []int64     // the member's plain entries to forget
}

// Applies reports whether the plan is to be applied: the broker accepted
// the request's session (the response's top-level code is 0) and, unless
// every offset was held back, the partition's acknowledgement (codeOf: the
// partition's acknowledgement code in the response, false if absent).
func (p *AckPlan) Applies(codeOf func(topic [16]byte, partition int32) (int16, bool)) bool {
	if p.allHeld {
		return true
	}
	code, ok := codeOf(p.topic, p.part)
	return ok && code == 0
}

// expandLimit: an acknowledgement of at most this many offsets in all is
// looked at offset by offset; a wider one only at the offsets the proxy has
// state for.
var expandLimit int64 = 4096

// validBatch reports whether b is well-formed, without expanding it.
func validBatch(b AckRange) bool {
	if b.First < 0 || b.First > b.Last {
		return false
	}
	return len(b.Types) == 1 || int64(len(b.Types)) == b.Last-b.First+1
}

func (b AckRange) typeAt(o int64) int8 {
	if len(b.Types) == 1 {
		return b.Types[0]
	}
	return b.Types[o-b.First]
}

// sub returns the part [first, last] of b, with its types.
func (b AckRange) sub(first, last int64) AckRange {
	if len(b.Types) == 1 {
		return AckRange{first, last, b.Types}
	}
	return AckRange{first, last, b.Types[first-b.First : last-b.First+1]}
}

// interval is an inclusive offset range.
type interval struct{ first, last int64 }

// FilterClientAcks returns what of member's acknowledgement goes upstream,
// how many offsets were held back, and the plan to apply if the broker
// accepts it (nil: nothing to apply). It changes nothing.
func (l *Ledger) FilterClientAcks(group, member string, topic [16]byte, partition int32, batches []AckRange) (out []AckRange, held int, plan *AckPlan) {
	for _, b := range batches {
		if !validBatch(b) {
			return batches, 0, nil // malformed: the broker answers INVALID_REQUEST
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := partKey{group, topic, partition}
	ps := l.parts[k]
	known := l.known[k]
	if ps == nil && known.live() == 0 {
		return batches, 0, nil
	}
	plan = &AckPlan{k: k, member: member, topic: topic, part: partition}
	if ps == nil || (len(ps.offsets) == 0 && len(ps.owed) == 0 && known.live() == 0) {
		plan.settle = batches // nothing held, known or owed: the common case
		return batches, 0, plan
	}
	now := time.Now()
	var points []int64 // sorted offsets with an entry or an owed ack; built for wide batches only
	pointsIn := func(first, last int64) []int64 {
		if points == nil {
			points = make([]int64, 0, len(ps.offsets)+len(ps.owed))
			for o := range ps.offsets {
				points = append(points, o)
			}
			for o := range ps.owed {
				if ps.offsets[o] == nil {
					points = append(points, o)
				}
			}
			sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
		}
		i := sort.Search(len(points), func(i int) bool { return points[i] >= first })
		j := sort.Search(len(points), func(i int) bool { return points[i] > last })
		return points[i:j]
	}
	// decide classifies offset o of batch b: held back or not, and notes
	// in the plan what the ack changes if accepted.
	decide := func(b AckRange, o int64) bool {
		if ow, ok := ps.owed[o]; ok && ow.member == member && now.Before(ow.until) {
			plan.owed = append(plan.owed, o)
			return true
		}
		st := ps.offsets[o]
		switch {
		case st != nil && st.state.held():
			if st.member == member {
				plan.acked = append(plan.acked, o)
				plan.ackedSt = append(plan.ackedSt, st)
				plan.released = append(plan.released, b.typeAt(o) == 2)
			}
			return true
		case st == nil && known.at(o) != nil:
			// Staged or committed in a transaction the proxy learned
			// from the shadow topic (a killed proxy's, or another
			// sidecar's): the transaction decides, not this ack.
			return true
		case st != nil && st.member == member:
			plan.drop = append(plan.drop, o)
		}
		return false
	}
	// Offset by offset only while the whole request names few offsets: the
	// work under the engine lock is then bounded by expandLimit per
	// request, else by the proxy's state (wideHeld), never by the ranges.
	var width int64
	for _, b := range batches {
		width += b.Last - b.First + 1
		if width > expandLimit || width < 0 {
			width = expandLimit + 1
			break
		}
	}
	perOffset := width <= expandLimit
	for _, b := range batches {
		var hold []interval
		if perOffset {
			for o := b.First; o <= b.Last; o++ {
				if decide(b, o) {
					if n := len(hold); n > 0 && hold[n-1].last == o-1 {
						hold[n-1].last = o
					} else {
						hold = append(hold, interval{o, o})
					}
				}
			}
		} else {
			hold = l.wideHeld(b, known, pointsIn(b.First, b.Last), ps, decide)
		}
		// What goes upstream: b minus hold. What the member settles: b
		// minus the owed offsets (an owed ack was of the aborted
		// delivery; a later acquisition of the offset stands).
		next := b.First
		for _, h := range hold {
			held += int(h.last - h.first + 1)
			if h.first > next {
				out = append(out, b.sub(next, h.first-1))
			}
			next = h.last + 1
		}
		if next <= b.Last {
			out = append(out, b.sub(next, b.Last))
		}
		plan.settle = append(plan.settle, b)
	}
	if len(plan.owed) > 0 {
		plan.settle = minusPoints(plan.settle, plan.owed)
	}
	if held == 0 {
		return batches, 0, plan
	}
	plan.allHeld = len(out) == 0
	l.mAbsorbed.Add(float64(held))
	return out, held, plan
}

// wideHeld is decide over a wide batch: the offsets with state (points) one
// by one, and the known ranges overlapping it as a whole (less the points
// that decide keeps).
func (l *Ledger) wideHeld(b AckRange, known *knownList, points []int64, ps *partState, decide func(AckRange, int64) bool) []interval {
	var hold []interval
	known.overlapping(b.First, b.Last, func(r *knownRange) bool {
		hold = append(hold, interval{max(r.first, b.First), min(r.last, b.Last)})
		return true
	})
	var keep []int64
	for _, o := range points {
		if decide(b, o) {
			hold = append(hold, interval{o, o})
		} else {
			keep = append(keep, o)
		}
	}
	hold = mergeIntervals(hold)
	if len(keep) == 0 {
		return hold
	}
	rs := make([]AckRange, len(hold))
	for i, h := range hold {
		rs[i] = AckRange{First: h.first, Last: h.last, Types: []int8{0}}
	}
	rs = minusPoints(rs, keep)
	hold = hold[:0]
	for _, r := range rs {
		hold = append(hold, interval{r.First, r.Last})
	}
	return hold
}

// mergeIntervals sorts and merges overlapping or adjacent intervals.
func mergeIntervals(in []interval) []interval {
	if len(in) < 2 {
		return in
	}
	sort.Slice(in, func(i, j int) bool { return in[i].first < in[j].first })
	out := in[:1]
	for _, r := range in[1:] {
		last := &out[len(out)-1]
		if r.first <= last.last+1 {
			last.last = max(last.last, r.last)
			continue
		}
		out = append(out, r)
	}
	return out
}

// minusPoints removes the offsets pts (any order) from the ranges rs,
// splitting ranges (and their types) around them.
func minusPoints(rs []AckRange, pts []int64) []AckRange {
	sorted := append([]int64(nil), pts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var out []AckRange
	for _, r := range rs {
		next := r.First
		i := sort.Search(len(sorted), func(i int) bool { return sorted[i] >= r.First })
		for ; i < len(sorted) && sorted[i] <= r.Last; i++ {
			p := sorted[i]
			if p < next {
				continue // duplicate point
			}
			if p > next {
				out = append(out, r.sub(next, p-1))
			}
			next = p + 1
		}
		if next <= r.Last {
			out = append(out, r.sub(next, r.Last))
		}
	}
	return out
}

// ApplyAckPlan makes the ledger follow an acknowledgement the broker
// accepted (or, all held back, whose session the broker accepted).
func (l *Ledger) ApplyAckPlan(p *AckPlan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ps := l.parts[p.k]
	if ps == nil {
		return
	}
	for _, o := range p.owed {
		if ow, ok := ps.owed[o]; ok && ow.member == p.member {
			delete(ps.owed, o)
		}
	}
	for i, o := range p.acked {
		st := p.ackedSt[i] // no lookup per offset: an entry not gone is the map's (offState.gone)
		if st.gone || !st.state.held() || st.member != p.member {
			continue
		}
		st.clientAcked = true
		st.releaseReq = p.released[i]
		if st.state == stApplied {
			ps.drop(o, st)
		}
	}
	for _, o := range p.drop {
		if st := ps.offsets[o]; st != nil && !st.state.held() && st.member == p.member {
			ps.drop(o, st)
		}
	}
	ps.settleMember(p.settle, p.member)
}
