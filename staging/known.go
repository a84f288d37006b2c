package staging

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the ledger knows from the shadow topic, for restart recovery and
// redelivery (docs/design.md §8.1; markers/recovery.go drives it).
//
// Every proxy reads the shadow topic of every proxy. From it, it knows which
// share-partition offsets are staged in an open transaction and which were
// committed: the "known" ranges. A record the broker hands out again (its
// member's session closed because a proxy was killed, or its lock expired)
// whose acknowledgement was already committed must not reach an application
// a second time: the proxy that sees it in a ShareFetch response removes it
// from AcquiredRecords and acknowledges it itself, on the fetching member's
// session, with the committed type. One whose transaction is still open is
// removed too and held (its lock renewed) until the transaction ends: a
// commit acknowledges it, an abort releases it for redelivery.
//
// Known ranges are forgotten when this proxy applied them, when their
// transaction aborts, and when the share-partition start offset of the group
// passes them (ForgetBelow): the broker never hands out offsets below it.

// knownRange is a run of offsets of one share partition staged by one
// shadow record.
type knownRange struct {
	first, last int64
	types       []int8 // one for the whole range, or one per offset
	loc         Loc
	open        bool   // the transaction has not ended
	seq         uint64 // the ledger's count of ranges learned when this one was
	dead        bool   // forgotten; still in its knownList until compacted
}

func (r *knownRange) typeOf(o int64) int8 {
	if len(r.types) == 1 {
		return r.types[0]
	}
	if i := o - r.first; i >= 0 && i < int64(len(r.types)) {
		return r.types[i]
	}
	return 1
}

// knownList is one share partition's known ranges, sorted by first offset,
// so that the ranges overlapping an interval are found by binary search and
// a bounded step back (widest: no range added was wider), not by a scan of
// everything the fleet staged there (design.md §8.5). A forgotten range is
// marked dead and compacted away once the dead are half the list, so that
// forgetting is not a copy of the list either. Where ranges overlap (a
// record staged again before the abort of an earlier one was read), the
// one learned first answers, as the list's order did before. The methods
// take a nil list as an empty one.
type knownList struct {
	rs     []*knownRange
	widest int64
	dead   int
}

func (kl *knownList) live() int {
	if kl == nil {
		return 0
	}
	return len(kl.rs) - kl.dead
}

func (kl *knownList) add(r *knownRange) {
	i := sort.Search(len(kl.rs), func(i int) bool { return kl.rs[i].first > r.first })
	kl.rs = slices.Insert(kl.rs, i, r)
	kl.widest = max(kl.widest, r.last-r.first)
}

func (kl *knownList) remove(r *knownRange) {
	if r.dead {
		return
	}
	r.dead = true
	kl.dead++
	if kl.dead > len(kl.rs)/2 {
		kl.rs = slices.DeleteFunc(kl.rs, func(r *knownRange) bool { return r.dead })
		kl.dead = 0
	}
}

// overlapping calls f with every live range overlapping [a, b], in no
// particular order, until f returns false.
func (kl *knownList) overlapping(a, b int64, f func(*knownRange) bool) {
	if kl == nil {
		return
	}
	i := sort.Search(len(kl.rs), func(i int) bool { return kl.rs[i].first > b })
	for j := i - 1; j >= 0 && kl.rs[j].first >= a-kl.widest; j-- {
		if r := kl.rs[j]; !r.dead && r.last >= a && !f(r) {
			return
		}
	}
}

func (kl *knownList) overlaps(a, b int64) bool {
	found := false
	kl.overlapping(a, b, func(*knownRange) bool { found = true; return false })
	return found
}

// at returns the range offset o lies in (the one learned first when several
// do), or nil.
func (kl *knownList) at(o int64) *knownRange {
	var first *knownRange
	kl.overlapping(o, o, func(r *knownRange) bool {
		if first == nil || r.seq < first.seq {
			first = r
		}
		return true
	})
	return first
}

type knownRef struct {
	part partKey
	r    *knownRange
}

// Fetcher is the member a ShareFetch response is for.
type Fetcher struct {
	Node          int32
	Group, Member string
	Ident         string // the principal of its connection
}

// Screened is what Screen took out of one partition's acquired records.
type Screened struct {
	Changed bool                                                  // Kept differs from what the broker sent
	Kept    []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord // what the client gets
	Now     *Call                                                 // known committed: acknowledge now (nil: none)
	Held    []*Call                                               // known open: held until their transaction ends
}

// Learn records the ranges a shadow record read from the shadow topic at
// loc staged, its transaction not yet ended. Idempotent; a record resolved
// before it was read changes nothing.
func (l *Ledger) Learn(loc Loc, rec *ShadowRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.learnLocked(loc, rec)
}

func (l *Ledger) learnLocked(loc Loc, rec *ShadowRecord) {
	if _, ok := l.knownAt[loc]; ok || l.resolvedLocs[loc] {
		return
	}
	var refs []knownRef
	for _, t := range rec.Topics {
		for _, p := range t.Partitions {
			k := partKey{rec.GroupID, t.TopicID, p.Partition}
			for _, b := range p.AcknowledgementBatches {
				if b.FirstOffset > b.LastOffset || (len(b.AcknowledgeTypes) != 1 && int64(len(b.AcknowledgeTypes)) != b.LastOffset-b.FirstOffset+1) {
					continue
				}
				r := &knownRange{first: b.FirstOffset, last: b.LastOffset, types: b.AcknowledgeTypes, loc: loc, open: true}
				l.addKnownLocked(k, r)
				refs = append(refs, knownRef{k, r})
			}
		}
	}
	l.knownAt[loc] = refs
	l.mKnown.Set(float64(len(l.knownAt)))
}

// addKnownLocked puts r among k's known ranges, numbered in learning order.
func (l *Ledger) addKnownLocked(k partKey, r *knownRange) {
	kl := l.known[k]
	if kl == nil {
		kl = &knownList{}
		l.known[k] = kl
	}
	l.knownSeq++
	r.seq = l.knownSeq
	kl.add(r)
}

// ResolveKnown applies a transaction's end to the known ranges of the
// shadow record at loc and to the redelivered records held for it, which it
// returns: committed, to acknowledge with their types; aborted, to release
// (type 2).
func (l *Ledger) ResolveKnown(loc Loc, commit bool) []*Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	refs, ok := l.knownAt[loc]
	if !ok {
		// Resolved before it was read (the EndTxn fast path of another
		// connection, or a restarted tailer): remember, so reading it
		// later does not make it open again.
		l.markResolvedLocked(loc)
	}
	if commit {
		for _, ref := range refs {
			ref.r.open = false
		}
	} else {
		l.forgetKnownLocked(loc)
		l.markResolvedLocked(loc)
	}
	waiting := l.waiting[loc]
	delete(l.waiting, loc)
	for _, call := range waiting {
		for _, r := range call.offsets {
			st := r.st
			if st.call != call {
				continue
			}
			if commit {
				st.state = stCommitted
			} else {
				// Released by the caller; no longer held, so the broker's
				// redelivery of it is recorded as a new acquisition
				// even before the release's answer is back.
				st.state, st.ackType = stAcquired, 2
			}
		}
		if commit {
			call.committed = time.Now()
		} else {
			for i := range call.offsets {
				call.offsets[i].ackType = 2 // RELEASE: the application never saw it
			}
		}
	}
	return waiting
}

// ForgetApplied forgets the known ranges of the shadow record at loc: this
// proxy applied its acknowledgements, so the broker never hands its offsets
// out again.
func (l *Ledger) ForgetApplied(loc Loc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetKnownLocked(loc)
	l.markResolvedLocked(loc)
}

func (l *Ledger) markResolvedLocked(loc Loc) {
	l.resolvedLocs[loc] = true
	l.resolvedOrder = append(l.resolvedOrder, loc)
	if len(l.resolvedOrder) > 1<<16 {
		for _, old := range l.resolvedOrder[:1<<15] {
			delete(l.resolvedLocs, old)
		}
		l.resolvedOrder = append([]Loc(nil), l.resolvedOrder[1<<15:]...)
	}
}

// forgetKnownLocked drops the known ranges of the shadow record at loc.
func (l *Ledger) forgetKnownLocked(loc Loc) {
	refs, ok := l.knownAt[loc]
	if !ok {
		return
	}
	delete(l.knownAt, loc)
	for _, ref := range refs {
		kl := l.known[ref.part]
		if kl == nil {
			continue
		}
		kl.remove(ref.r)
		if kl.live() == 0 {
			delete(l.known, ref.part)
		}
	}
	l.mKnown.Set(float64(len(l.knownAt)))
}

// KnowsAny reports whether anything is known from the shadow topic.
func (l *Ledger) KnowsAny() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.known) > 0
}

// Screen splits acquired ranges of one partition, fetched by st, into what
// the client gets and what the proxy takes: known committed offsets go into
// Screened.Now (to be acknowledged at once), known open ones into
// Screened.Held (held for their transaction, resolved with it).
func (l *Ledger) Screen(st Fetcher, topic [16]byte, partition int32, recs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, lock time.Duration) Screened {
	k := partKey{st.Group, topic, partition}
	l.mu.Lock()
	known := l.known[k]
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("screening acquired records", "group", st.Group, "partition", partition, "acquired", fmt.Sprint(recs), "known", known.live(), "known_parts", len(l.known))
	}
	if known.live() == 0 {
		l.mu.Unlock()
		return Screened{}
	}
	deadline := time.Now().Add(lock)
	var kept []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	var now *Call
	held := map[Loc]*Call{}
	taken := 0
	for _, ar := range recs {
		if !known.overlaps(ar.FirstOffset, ar.LastOffset) { // the common case: nothing known in this range
			kept = append(kept, ar)
			continue
		}
		cur := kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{FirstOffset: -1, DeliveryCount: ar.DeliveryCount}
		flush := func() {
			if cur.FirstOffset >= 0 {
				kept = append(kept, cur)
				cur.FirstOffset = -1
			}
		}
		for o := ar.FirstOffset; o <= ar.LastOffset && o-ar.FirstOffset < 1<<20; o++ {
			r := known.at(o)
			if r == nil {
				if cur.FirstOffset < 0 {
					cur.FirstOffset = o
				}
				cur.LastOffset = o
				continue
			}
			flush()
			taken++
			var call *Call
			state := stCommitted
			if r.open {
				state = stTxPending
				call = held[r.loc]
				if call == nil {
					call = &Call{txnID: "(redelivered)", group: st.Group, member: st.Member, shadowPart: -1, redelivered: true}
					held[r.loc] = call
				}
			} else {
				if now == nil {
					now = &Call{txnID: "(redelivered)", group: st.Group, member: st.Member, shadowPart: -1, committed: time.Now(), redelivered: true}
				}
				call = now
			}
			typ := r.typeOf(o)
			ps := l.parts[k]
			if ps == nil {
				ps = &partState{offsets: map[int64]*offState{}}
				l.parts[k] = ps
			}
			ent := &offState{member: st.Member, ident: st.Ident, node: st.Node, deadline: deadline, lock: lock, state: state, ackType: typ, call: call}
			ps.put(o, ent)
			call.offsets = append(call.offsets, offRef{part: k, node: st.Node, offset: o, ackType: typ, st: ent})
		}
		flush()
	}
	if taken == 0 {
		l.mu.Unlock()
		return Screened{}
	}
	l.addPendingLocked(taken)
	out := Screened{Changed: true, Now: now, Kept: kept}
	for loc, call := range held {
		l.waiting[loc] = append(l.waiting[loc], call)
		out.Held = append(out.Held, call)
	}
	l.mu.Unlock()
	if out.Kept == nil {
		out.Kept = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{}
	}
	return out
}

// KnownGroups lists the groups with known ranges, sorted.
func (l *Ledger) KnownGroups() []string {
	l.mu.Lock()
	groups := map[string]bool{}
	for k := range l.known {
		groups[k.group] = true
	}
	l.mu.Unlock()
	list := make([]string, 0, len(groups))
	for g := range groups {
		list = append(list, g)
	}
	sort.Strings(list)
	return list
}

// ForgetBelow forgets the shadow records all of whose known ranges lie
// below their group's share-partition start offset (starts: group → topic
// id → partition → start offset): the broker never hands those offsets out
// again.
func (l *Ledger) ForgetBelow(starts map[string]map[[16]byte]map[int32]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var drop []Loc
	for loc, refs := range l.knownAt {
		below := true
		for _, ref := range refs {
			start, ok := starts[ref.part.group][ref.part.topic][ref.part.partition]
			if !ok || ref.r.last >= start {
				below = false
				break
			}
		}
		if below {
			drop = append(drop, loc)
		}
	}
	for _, loc := range drop {
		l.forgetKnownLocked(loc)
	}
}

// KnownRanges is how many shadow records the ledger holds knowledge of.
func (l *Ledger) KnownRanges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.knownAt)
}
