package staging

import (
	"time"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/upstream"
)

// The transitions of a staged call's offsets (docs/design.md §3.2):
//
//	ACQUIRED → STAGING (validateAndReserve) → TX_PENDING (markPending)
//	STAGING → ACQUIRED (unstage: the shadow write failed)
//	DEFERRED → ... (deferred.go)
//	TX_PENDING → COMMITTED (Commit) → APPLIED or forgotten (Finish)
//	TX_PENDING → released upstream, one client ack owed (Abort)

// markPending marks the offsets of call TX_PENDING: its shadow record is at
// loc, written in the caller's transaction.
func (l *Ledger) markPending(call *Call, loc Loc, rec *ShadowRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	call.shadowPart, call.shadowOff = int32(loc[0]), loc[1]
	for _, r := range call.offsets {
		if r.st.call == call {
			r.st.state = stTxPending
		}
	}
	l.learnLocked(loc, rec)
}

// Commit marks the offsets of call COMMITTED: its transaction committed;
// they are to be applied upstream (markers.Resolver), then Finish.
func (l *Ledger) Commit(call *Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	call.committed = time.Now()
	for _, r := range call.offsets {
		if r.st.call == call {
			r.st.state = stCommitted
		}
	}
}

// unstage returns the offsets of a call whose shadow write failed to
// ACQUIRED: nothing was staged, the member still holds them, and the client
// aborts its transaction (the reference broker leaves them acquired too).
func (l *Ledger) unstage(call *Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	releases := Releases{}
	var parts partCache
	for _, r := range call.offsets {
		st := r.st
		if st.call != call {
			continue
		}
		st.state, st.call = stAcquired, nil
		if st.releaseReq || (r.adopted && st.clientAcked) {
			// The client released it while it was being staged, or
			// acknowledged it while a deferred call held it (an earlier
			// poll's record: the consumer will not acknowledge it again):
			// release it upstream now.
			call.addRef(releases, r, kip1289.Release)
			ps := l.partOf(&parts, r.part)
			ps.drop(r.offset, st)
			ps.settle(r.offset, r.offset)
			continue
		}
		st.clientAcked = false
	}
	l.addPendingLocked(-len(call.offsets))
	l.sendReleases(call, releases)
}

// Abort releases the records of an aborted transaction upstream at once
// (ABORT marker, EndTxn abort, transaction timeout, fencing), as the
// reference broker does: AVAILABLE again, redelivered, possibly to another
// member, without the client doing anything. The client still acknowledges
// the delivery it polled (a franz-go share consumer implicitly on its next
// poll, a Java explicit-mode consumer before it may poll again): that one
// acknowledgement is owed, absorbed when it comes (filterClientAcks) and never
// applied to a later delivery of the same offset. It returns the releases to
// send, per share session: the resolver sends them (markers), as it sends a
// committed call's acknowledgements.
func (l *Ledger) Abort(call *Call) Releases {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.abortLocked(call)
}

// abortLocked is Abort with l.mu held.
func (l *Ledger) abortLocked(call *Call) Releases {
	now := time.Now()
	releases := Releases{}
	var parts partCache
	for _, r := range call.offsets {
		st := r.st
		if st.call != call {
			continue
		}
		call.addRef(releases, r, kip1289.Release)
		ps := l.partOf(&parts, r.part)
		if !st.clientAcked {
			ps.oweAck(r.offset, call.member, now.Add(2*max(st.lock, time.Minute)))
		}
		ps.drop(r.offset, st)
		ps.settle(r.offset, r.offset)
	}
	l.addPendingLocked(-len(call.offsets))
	return releases
}

// partCache remembers the share partition last looked up: a call's
// offsets come partition by partition, so a transition looks each one up
// once, not once per offset. It is keyed by the partition itself, not by
// the previous offset's, since a transition skips offsets that are no
// longer the call's.
type partCache struct {
	k  partKey
	ps *partState
	ok bool
}

// partOf is the share partition k (an offset whose entry is still a call's
// is in a share partition of the ledger: offRef).
func (l *Ledger) partOf(c *partCache, k partKey) *partState {
	if !c.ok || c.k != k {
		c.k, c.ps, c.ok = k, l.parts[k], true
	}
	return c.ps
}

// Releases are acknowledgements per share session (RELEASEs, or a
// committed call's types: Call.Acks).
type Releases map[upstream.SessionKey]upstream.Acks

// addRef adds offset r of call to m, on the member's session at r's node.
func (call *Call) addRef(m Releases, r offRef, ty int8) {
	k := upstream.SessionKey{Node: r.node, Group: call.group, Member: call.member}
	if m[k] == nil {
		m[k] = upstream.Acks{}
	}
	m[k].Add(upstream.TopicPartition{Topic: r.part.topic, Partition: r.part.partition}, r.offset, ty)
}

// sendReleases releases offsets of a call that could not be staged
// upstream on the member's share sessions, off the caller's goroutine (l.mu
// may be held). An aborted transaction's releases are the resolver's
// (Abort returns them).
func (l *Ledger) sendReleases(call *Call, releases Releases) {
	for k, acks := range releases {
		l.applier.Release(k, acks, call.txnID)
	}
}

// Finish marks a call's offsets applied (or, if applying failed, given up:
// the broker redelivers them, and a proxy that sees them redelivered
// acknowledges them then); those the client already acked are forgotten,
// the rest wait for the client's (absorbed) ack.
func (l *Ledger) Finish(call *Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts partCache
	for _, r := range call.offsets {
		st := r.st
		if st.call != call {
			continue
		}
		if st.clientAcked || call.redelivered {
			ps := l.partOf(&parts, r.part)
			ps.drop(r.offset, st)
		} else {
			st.state, st.call = stApplied, nil
		}
	}
	l.addPendingLocked(-len(call.offsets))
}

// DueForRenewal lists, per share session, the held (STAGING..COMMITTED)
// records with less than half their lock left, and marks them renewing
// until Renewed.
func (l *Ledger) DueForRenewal(now time.Time) map[upstream.SessionKey]upstream.Acks {
	due := map[upstream.SessionKey]upstream.Acks{}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, ps := range l.parts {
		for o, st := range ps.offsets {
			if st.state < stStaging || st.state > stCommitted || st.renewing || st.deadline.Sub(now) > st.lock/2 {
				continue
			}
			st.renewing = true
			sk := upstream.SessionKey{Node: st.node, Group: k.group, Member: st.member}
			if due[sk] == nil {
				due[sk] = upstream.Acks{}
			}
			due[sk].Add(upstream.TopicPartition{Topic: k.topic, Partition: k.partition}, o, 4) // RENEW
		}
	}
	return due
}

// Renewed records the broker's answer r to the RENEW of acks on session sk,
// sent at sent.
func (l *Ledger) Renewed(sk upstream.SessionKey, acks upstream.Acks, r upstream.Renewal, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tp, offs := range acks {
		ps := l.parts[partKey{sk.Group, tp.Topic, tp.Partition}]
		if ps == nil {
			continue
		}
		for o := range offs {
			st := ps.offsets[o]
			if st == nil {
				continue
			}
			st.renewing = false
			if r.Renewed(tp) {
				lock := st.lock
				if r.Lock > 0 {
					lock = r.Lock
				}
				st.deadline = sent.Add(lock)
			} else if r.Result == "unsupported" {
				st.deadline = st.deadline.Add(time.Hour) // do not retry every tick; the lock expires as it will
			}
		}
	}
}
