package staging

import (
	"slices"
	"time"
)

// Deferred calls (kip1289 Defer, docs/design.md §4.5): a client that must
// hand a poll's records back to its consumer before the next poll, but
// whose transaction goes on over more polls (the Python library: librdkafka
// polls do not end where a transaction does), defers each poll's
// acknowledgements and stages them all with the transaction's last call,
// one shadow record instead of one per poll.
//
//	ACQUIRED → DEFERRED (validateAndReserve of a deferred call)
//	DEFERRED → STAGING (a call of the same transaction, producer id and
//	           epoch naming the offset again takes it over: adopted)
//	DEFERRED → released upstream, one client ack owed (EndDeferred: the
//	           transaction's EndTxn, either outcome, or a newer producer
//	           of its transactional id)
//	DEFERRED → forgotten (pruneDeferredLocked: the acquisition lock ended
//	           long ago; the broker redelivers the record by itself)
//	DEFERRED → superseded (Acquired: the broker handed the offset out again)
//
// A deferred offset is held back from the client's own acknowledgements as
// a staged one is (recState.held), but nothing about it is durable, and
// nothing needs to be: if the proxy stops, its upstream connections close
// and the broker releases the member's records; the client's last call then
// finds them no longer acquired through this proxy (INVALID_RECORD_STATE)
// and the transaction aborts. Its lock is not renewed (DueForRenewal): a
// deferred offset lives no longer than the acquisition, and a transaction
// that outlives it cannot stage it. It does not keep a member's closed
// connection open either (HeldFor): nothing was committed that a release
// would lose.

// superseded reports whether a new acquisition of st's offset replaces st:
// an entry not held, or held only by a deferred call (the broker handed the
// record out again: its lock ended or the member's session closed).
func superseded(st *offState) bool { return !st.state.held() || st.state == stDeferred }

// adoptedIn counts the offsets a call takes over from deferred calls.
func adoptedIn(refs []offRef) int {
	n := 0
	for _, r := range refs {
		if r.adopted {
			n++
		}
	}
	return n
}

// shrinkDeferredLocked drops from deferred call d the offsets it no longer
// holds (a later call took them over, or they were superseded), so its
// offsets stay the ones it counts as pending; a call left with none is
// forgotten. l.mu is held.
func (l *Ledger) shrinkDeferredLocked(d *Call) {
	kept := d.offsets[:0]
	for _, r := range d.offsets {
		if r.st.call == d {
			kept = append(kept, r)
		}
	}
	l.addPendingLocked(len(kept) - len(d.offsets))
	clear(d.offsets[len(kept):])
	d.offsets = kept
	if len(kept) == 0 {
		l.forgetDeferredLocked(d)
	}
}

// forgetDeferredLocked takes d out of its transaction's deferred calls.
func (l *Ledger) forgetDeferredLocked(d *Call) {
	calls := slices.DeleteFunc(l.deferred[d.txnID], func(c *Call) bool { return c == d })
	if len(calls) == 0 {
		delete(l.deferred, d.txnID)
	} else {
		l.deferred[d.txnID] = calls
	}
}

// EndDeferred releases, upstream and at once, the offsets that deferred
// calls of transaction txnID still hold and no later call staged: those of
// producer id pid and epoch when keep is false (the transaction's EndTxn,
// commit or abort: what was not staged is not in it), or those of any
// other producer id or epoch when keep is true (the coordinator gave the
// transactional id to pid and epoch: the older transaction is over). As an
// abort's releases, each leaves the member one acknowledgement owed. It
// returns how many offsets it released.
func (l *Ledger) EndDeferred(txnID string, pid int64, epoch int16, keep bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls := l.deferred[txnID]
	if len(calls) == 0 {
		return 0
	}
	n := 0
	var left []*Call
	for _, c := range calls {
		if c.Matches(txnID, pid, epoch) == keep {
			left = append(left, c)
			continue
		}
		for _, r := range c.offsets {
			if r.st.call == c {
				n++
			}
		}
		releases := l.abortLocked(c)
		l.sendReleases(c, releases)
	}
	if len(left) == 0 {
		delete(l.deferred, txnID)
	} else {
		l.deferred[txnID] = left
	}
	return n
}

// pruneDeferredLocked forgets deferred calls whose offsets' acquisition
// locks all ended more than grace ago (the client never ended the
// transaction through this proxy): the broker redelivers the records by
// itself, so nothing is sent. l.mu is held.
func (l *Ledger) pruneDeferredLocked(now time.Time, grace time.Duration) {
	for _, calls := range l.deferred {
		for _, c := range slices.Clone(calls) {
			live := false
			for _, r := range c.offsets {
				if r.st.call == c && !now.After(r.st.deadline.Add(grace)) {
					live = true
					break
				}
			}
			if live {
				continue
			}
			var parts partCache
			for _, r := range c.offsets {
				if r.st.call == c {
					l.partOf(&parts, r.part).drop(r.offset, r.st)
				}
			}
			l.shrinkDeferredLocked(c)
		}
	}
}

// DeferredCalls is how many deferred calls hold offsets.
func (l *Ledger) DeferredCalls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, calls := range l.deferred {
		n += len(calls)
	}
	return n
}
