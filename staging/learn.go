package staging

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the ledger learns from the traffic passing through (docs/design.md
// §3.1): members from ShareGroupHeartbeat, transactions from
// InitProducerId, EndTxn and transactional writes, acquisitions from
// ShareFetch responses. Each from an answer the broker accepted, bound to
// the principal of the connection it came on.

// SetMember records member's epoch in group (a heartbeat the broker
// accepted from ident); a negative epoch (it left) forgets it.
func (l *Ledger) SetMember(ident, group, member string, epoch int32) {
	if !keepable(group, member) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch < 0 {
		delete(l.members, memberKey{group, member})
		return
	}
	k := memberKey{group, member}
	if m, ok := l.members[k]; ok && boundElsewhere(m.ident, ident) {
		return // another principal's member: the binding stays (MemberOfAnother)
	}
	l.members[k] = memberInfo{epoch: epoch, ident: ident, seen: time.Now()}
	l.noteReaderLocked(group, ident)
}

// MemberOfAnother reports whether member of group is bound to a principal
// other than ident: the broker lets any principal that may read the group
// use any member id (a share session opened or closed with another's id,
// its records handed to the caller), but the proxy knows whose member it
// is. Only principals read from the exchange (User:…, §9.1) are compared:
// an identity by token hash (GSSAPI, opaque OAUTHBEARER tokens) changes
// with each connection of the same client.
func (l *Ledger) MemberOfAnother(group, member, ident string) bool {
	if member == "" || !strings.HasPrefix(ident, "User:") {
		return false // nothing to compare: no lock taken (clusters without SASL)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.members[memberKey{group, member}]
	return ok && boundElsewhere(m.ident, ident)
}

// boundElsewhere reports whether a member bound to owner is someone
// else's for caller: both are principals read from the exchange, and they
// differ.
func boundElsewhere(owner, caller string) bool {
	return owner != caller && strings.HasPrefix(owner, "User:") && strings.HasPrefix(caller, "User:")
}

// noteReaderLocked records that the broker let ident read group (a
// heartbeat or fetch of it was accepted from ident). Bounded: a group
// keeps at most maxReaders principals, the newest.
func (l *Ledger) noteReaderLocked(group, ident string) {
	r := l.readers[group]
	if r == nil {
		r = map[string]bool{}
		l.readers[group] = r
	}
	if !r[ident] && len(r) >= maxReaders {
		clear(r)
	}
	r[ident] = true
}

// readsGroupLocked reports whether ident was seen allowed to read group, or
// no principal was.
func (l *Ledger) readsGroupLocked(group, ident string) bool {
	r := l.readers[group]
	return len(r) == 0 || r[ident] // no member of it seen: nothing of it to take (checkOffsets refuses)
}

// maxReaders bounds the principals remembered per group or transaction.
const maxReaders = 64

// LearnTxn records a transactional id's producer id and epoch from a write
// the broker accepted from ident, when the id is unknown or the epoch moved
// on; ident showed WRITE on the id where the broker authorises it on
// Produce (kip1289.learn_owner_from_produce; otherwise only a later epoch of
// a transaction ident already owns is learned).
func (l *Ledger) LearnTxn(ident, txnID string, pid int64, epoch int16) {
	if !keepable(txnID) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.txns[txnID]
	if !l.cfg.LearnOwnerFromProduce && !(ok && t.producerID == pid && t.ownedBy(ident)) {
		// This broker does not authorise the transactional id on Produce
		// (kip1289.learn_owner_from_produce): a write teaches a later
		// epoch of a transaction the caller was seen to own, nothing else.
		return
	}
	if ok && t.producerID == pid {
		t.own(ident)
		if t.epoch < epoch {
			t.epoch = epoch
		}
		t.seen = time.Now()
		l.txns[txnID] = t
		return
	}
	if ok {
		return // a new producer id is learned from InitProducerId/EndTxn only
	}
	t = txnInfo{producerID: pid, epoch: epoch, seen: time.Now()}
	t.own(ident)
	l.txns[txnID] = t
}

// LearnTouch records a touch record of txnID the broker accepted at offset
// of its touch partition, written by ident with producer id pid at epoch:
// what LearnTxn learns from a write, and the touch itself, which a call
// with producer id and epoch -1/-1 may name (kip1289 TouchOffset) to be
// checked against the ids it was written with rather than the latest.
func (l *Ledger) LearnTouch(ident, txnID string, pid int64, epoch int16, offset int64) {
	l.LearnTxn(ident, txnID, pid, epoch)
	if offset < 0 || !keepable(txnID) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.txns[txnID]
	if !ok || !t.ownedBy(ident) {
		return
	}
	t.touches[t.touchNext%maxTouches] = touchSeen{offset: offset, wroteBy: wroteBy{pid, epoch, ident}, valid: true}
	t.touchNext++
	l.txns[txnID] = t
}

// OutputBatch is the records a transactional Produce wrote to one
// partition, as the broker answered it: offsets first to last.
type OutputBatch struct {
	Topic       string   // the Produce's topic name (before v13)
	TopicID     [16]byte // or its topic id (v13+)
	Partition   int32
	First, Last int64
}

// LearnOutputs records the output batches of txnID the broker accepted from
// ident with producer id pid at epoch, the first per partition of the
// transaction (a later batch of the same producer id and epoch leaves it; a
// newer epoch or another producer replaces it; ForgetOutputs drops them at
// EndTxn), for a call with producer id and epoch -1/-1 that names one of
// them (kip1289 OutputRecord) to be checked against the ids it was written
// with, as a touch is. Only a transaction known and owned by ident learns.
func (l *Ledger) LearnOutputs(ident, txnID string, pid int64, epoch int16, outs []OutputBatch) {
	if len(outs) == 0 || !keepable(txnID) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.txns[txnID]
	if !ok || !t.ownedBy(ident) || t.producerID != pid {
		return
	}
	if t.outputs == nil {
		t.outputs = map[outputKey]outputSeen{}
		l.txns[txnID] = t
	}
	w := wroteBy{pid, epoch, ident}
	for _, o := range outs {
		if o.First < 0 || o.Last < o.First {
			continue
		}
		k := outputKey{topic: o.Topic, topicID: o.TopicID, partition: o.Partition}
		old, had := t.outputs[k]
		if had && old.wroteBy == w {
			continue // the transaction's first batch there is kept
		}
		if !had && len(t.outputs) >= MaxOutputPartitions {
			continue
		}
		t.outputs[k] = outputSeen{first: o.First, last: o.Last, wroteBy: w}
	}
}

// ForgetOutputs drops the output batches kept for txnID: its transaction
// ended (EndTxn), and the next one's outputs are other batches.
func (l *Ledger) ForgetOutputs(txnID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.txns[txnID]; ok && len(t.outputs) > 0 {
		clear(t.outputs)
	}
}

// SetTxn records the producer id and epoch the coordinator just gave a
// transactional id (InitProducerId, EndTxn v5+) on a connection of ident.
// (Such an epoch is fresh: the caller tells the shadow writer,
// Stager.MarkFresh.)
func (l *Ledger) SetTxn(ident, txnID string, pid int64, epoch int16) {
	if !keepable(txnID) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.txns[txnID]
	t.producerID, t.epoch, t.seen = pid, epoch, time.Now()
	t.own(ident)
	l.txns[txnID] = t
}

// OwnsTxn reports whether the proxy saw transactional id txnID hold
// producer id pid, written by principal ident.
func (l *Ledger) OwnsTxn(txnID string, pid int64, ident string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, known := l.txns[txnID]
	return known && t.producerID == pid && t.ownedBy(ident)
}

// Acquired records what a ShareFetch response the broker sent to ident's
// connection on node handed to member.
func (l *Ledger) Acquired(ident string, node int32, group, member string, topic [16]byte, partition int32, recs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, lock time.Duration) {
	if len(recs) == 0 || !keepable(group, member) {
		return
	}
	now := time.Now()
	deadline := now.Add(lock)
	l.mu.Lock()
	defer l.mu.Unlock()
	k := partKey{group, topic, partition}
	ps := l.parts[k]
	if ps == nil {
		ps = &partState{offsets: map[int64]*offState{}}
		l.parts[k] = ps
	}
	if l.topics[group] == nil {
		l.topics[group] = map[[16]byte]bool{}
	}
	l.topics[group][topic] = true
	l.noteReaderLocked(group, ident)
	if len(ps.acq) > 0 && now.After(ps.acq[0].deadline.Add(time.Minute)) {
		ps.pruneAcq(now, time.Minute)
	}
	for _, r := range recs {
		if r.LastOffset < r.FirstOffset || r.LastOffset-r.FirstOffset >= 1<<20 {
			continue // malformed; the client gets it as the broker sent it
		}
		// Entries in the range that are not held, or held only by a
		// deferred call, are superseded by this acquisition (a deferred
		// call counts the offset until it ends: deferred.go). A staged
		// one stays: it was redelivered while we hold it staged (the
		// broker released it: lock expired, session closed); recovery.go
		// handles that window.
		if n := len(ps.offsets); n > 0 {
			if int64(n) < r.LastOffset-r.FirstOffset+1 {
				for o, cur := range ps.offsets {
					if o >= r.FirstOffset && o <= r.LastOffset && superseded(cur) {
						ps.drop(o, cur)
					}
				}
			} else {
				for o := r.FirstOffset; o <= r.LastOffset; o++ {
					if cur := ps.offsets[o]; cur != nil && superseded(cur) {
						ps.drop(o, cur)
					}
				}
			}
		}
		ps.acq = append(ps.acq, acqRange{first: r.FirstOffset, last: r.LastOffset, batch: Batch{r.FirstOffset, r.LastOffset}, member: member, ident: ident, node: node, deadline: deadline, lock: lock})
	}
}

// HeldFor counts the offsets member acquired on node that are staged or
// committed and not yet applied.
func (l *Ledger) HeldFor(node int32, group, member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, ps := range l.parts {
		if k.group != group {
			continue
		}
		for _, st := range ps.offsets {
			if st.node == node && st.member == member && st.state >= stStaging && st.state <= stCommitted {
				n++
			}
		}
	}
	return n
}

// memberIdle: a member no heartbeat answer named for this long is gone and
// is forgotten. A live one heartbeats every few seconds; the broker fences
// one after its session timeout (share.session.timeout.ms, 45 s by default,
// at most group.share.max.session.timeout.ms, 60 s by default). A killed
// client never sends the leave (epoch -1) that would forget it otherwise.
const memberIdle = 3 * time.Minute

// txnIdleFloor: a transactional id with no InitProducerId, EndTxn or write
// seen for longer than its transaction timeout (from its InitProducerId) and
// this floor, and nothing staged, is forgotten: no transaction of it can
// still be open (transaction.max.timeout.ms is 15 minutes by default). Its
// next write or EndTxn teaches it again.
const txnIdleFloor = 15 * time.Minute

// MaxKeptIDBytes bounds the transactional ids, group ids and member ids the
// ledger keeps: a longer one is never learned (its TxnShareAcknowledge is
// refused with INVALID_REQUEST), so an id's size cannot grow the proxy.
const MaxKeptIDBytes = 1024

func keepable(ids ...string) bool {
	for _, id := range ids {
		if len(id) > MaxKeptIDBytes {
			return false
		}
	}
	return true
}

// SetTxnTimeout records the transaction timeout an InitProducerId of txnID
// asked for (Prune keeps the id at least that long after it was last seen).
func (l *Ledger) SetTxnTimeout(txnID string, timeout time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.txns[txnID]; ok {
		t.timeout = timeout
		l.txns[txnID] = t
	}
}

// Prune forgets acquired offsets whose lock expired long ago (they were
// redelivered or acked without the proxy seeing it), applied ones the client
// never acked, members and transactional ids gone idle, and the groups'
// principals and topics once nothing of the group is left: nothing the
// ledger holds outlives its owner.
func (l *Ledger) Prune(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := map[string]bool{}               // groups with a member or a share partition left
	readers := map[string]map[string]bool{} // group → principals with a member or acquisitions in it
	reads := func(group, ident string) {
		if readers[group] == nil {
			readers[group] = map[string]bool{}
		}
		readers[group][ident] = true
	}
	l.pruneDeferredLocked(now, time.Minute)
	staged := map[string]bool{} // transactional ids with offsets staged or committed, not applied
	for k, ps := range l.parts {
		for o, st := range ps.offsets {
			if (st.state == stAcquired || st.state == stApplied) && now.After(st.deadline.Add(time.Minute)) {
				ps.drop(o, st)
				continue
			}
			reads(k.group, st.ident)
			if st.call != nil {
				staged[st.call.txnID] = true
			}
		}
		ps.pruneAcq(now, time.Minute)
		ps.pruneOwed(now)
		if len(ps.offsets) == 0 && len(ps.acq) == 0 && len(ps.owed) == 0 {
			delete(l.parts, k)
			continue
		}
		for _, a := range ps.acq {
			reads(k.group, a.ident)
		}
		live[k.group] = true
	}
	for k, m := range l.members {
		if now.Sub(m.seen) > memberIdle {
			delete(l.members, k)
			continue
		}
		live[k.group] = true
		reads(k.group, m.ident)
	}
	for id, t := range l.txns {
		if now.Sub(t.seen) > max(t.timeout, txnIdleFloor)+time.Minute && !staged[id] {
			delete(l.txns, id)
		}
	}
	for g, r := range l.readers {
		if !live[g] {
			delete(l.readers, g)
			continue
		}
		for ident := range r {
			if !readers[g][ident] {
				delete(r, ident) // no member and no acquisition of it left in the group
			}
		}
	}
	for g := range l.topics {
		if !live[g] {
			delete(l.topics, g)
		}
	}
}
