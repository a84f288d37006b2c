package intercept

import (
	"sort"
	"time"
)

// recState is a record's state as the proxy sees it (DESIGN.md §3.5).
type recState uint8

const (
	stAcquired  recState = iota // acquired by a member, lock held
	stStaging                   // a TxnShareAcknowledge is writing its shadow record
	stTxPending                 // staged in an open transaction
	stCommitted                 // the transaction committed; not yet applied upstream
	stApplied                   // acknowledged upstream on the member's session
)

func (s recState) String() string {
	return [...]string{"ACQUIRED", "STAGING", "TX_PENDING", "COMMITTED", "APPLIED"}[s]
}

// held reports whether a client's own acknowledgement of the offset must not
// reach the broker.
func (s recState) held() bool { return s >= stStaging }

type partKey struct {
	group     string
	topic     [16]byte
	partition int32
}

type memberKey struct{ group, member string }

// memberInfo is a member's current epoch and the principal whose
// heartbeat the broker accepted.
type memberInfo struct {
	epoch int32
	ident string
}

// offState is one acquired offset.
type offState struct {
	member      string
	ident       string // the principal the records were handed to (identity.go)
	node        int32
	deadline    time.Time
	state       recState
	ackType     int8
	call        *stagedCall
	lock        time.Duration // the acquisition lock duration the broker granted
	renewing    bool          // a RENEW of it is in flight
	clientAcked bool          // the client's own ack of it was absorbed
	releaseReq  bool          // ...and that ack was RELEASE: honour it if the transaction aborts
}

// partState holds the offsets of one share partition the proxy has seen
// acquired.
//
// Acquisitions are kept as ranges (acq), as the ShareFetch response gives
// them: a consumer that never binds acks to a transaction costs the proxy
// a slice append per fetched range and a range trim per ack, not a map entry
// per record (make bench: per-record entries were the largest cost of the
// proxy's share-consume path after the copies). An offset gets an entry in
// offsets when it leaves the plain acquired state (staged, held, applied) or
// is looked at one by one (get); an entry there shadows the ranges.
//
// Invariant: an entry is deleted from offsets only when its offset is in no
// live range (the client's ack settled it, it was never in one, or its
// range expired), so a deleted entry never resurfaces as "acquired".
type partState struct {
	offsets map[int64]*offState
	acq     []acqRange // oldest first
	owed    map[int64]owedAck
}

// owedAck is the client acknowledgement a member still owes for a delivery
// whose transaction aborted: the proxy released the record upstream at once
// (abortCall), but the client acknowledges what it polled all the same. That
// one acknowledgement is absorbed; one after it is of a later delivery and
// goes upstream. until bounds how long it is owed (the delivery's lock, twice
// over), so a client that never sends it keeps nothing forever.
type owedAck struct {
	member string
	until  time.Time
}

func (ps *partState) oweAck(o int64, member string, until time.Time) {
	if ps.owed == nil {
		ps.owed = map[int64]owedAck{}
	}
	ps.owed[o] = owedAck{member, until}
}

// takeOwed reports whether member owed an acknowledgement of offset o, and
// clears it.
func (ps *partState) takeOwed(o int64, member string, now time.Time) bool {
	ow, ok := ps.owed[o]
	if !ok || ow.member != member {
		return false
	}
	delete(ps.owed, o)
	return now.Before(ow.until)
}

func (ps *partState) pruneOwed(now time.Time) {
	for o, ow := range ps.owed {
		if !now.Before(ow.until) {
			delete(ps.owed, o)
		}
	}
}

// acqRange is a range of offsets one ShareFetch response handed to member.
type acqRange struct {
	first, last int64
	member      string
	ident       string
	node        int32
	deadline    time.Time
	lock        time.Duration
}

// get returns the state of offset o: its entry, or (materialized as an
// entry) the newest acquisition range holding it, or nil.
func (ps *partState) get(o int64) *offState {
	if st := ps.offsets[o]; st != nil {
		return st
	}
	for i := len(ps.acq) - 1; i >= 0; i-- {
		r := &ps.acq[i]
		if o >= r.first && o <= r.last {
			st := &offState{member: r.member, ident: r.ident, node: r.node, deadline: r.deadline, lock: r.lock, state: stAcquired}
			if ps.offsets == nil {
				ps.offsets = map[int64]*offState{}
			}
			ps.offsets[o] = st
			return st
		}
	}
	return nil
}

// settle removes [first, last] from the acquisition ranges: the client
// acknowledged (or released) those offsets itself.
func (ps *partState) settle(first, last int64) {
	if len(ps.acq) == 0 || first > last {
		return
	}
	out := ps.acq[:0:0]
	changed := false
	for _, r := range ps.acq {
		if r.last < first || r.first > last {
			out = append(out, r)
			continue
		}
		changed = true
		if r.first < first {
			lo := r
			lo.last = first - 1
			out = append(out, lo)
		}
		if r.last > last {
			hi := r
			hi.first = last + 1
			out = append(out, hi)
		}
	}
	if changed {
		ps.acq = out
	}
}

// settleMember removes the ranges rs (any order) from member's acquisition
// ranges: the broker accepted member's acknowledgement of them. Another
// member's acquisitions of the same offsets stand.
func (ps *partState) settleMember(rs []ackRange, member string) {
	if len(ps.acq) == 0 || len(rs) == 0 {
		return
	}
	iv := make([]interval, 0, len(rs))
	for _, r := range rs {
		if r.first <= r.last {
			iv = append(iv, interval{r.first, r.last})
		}
	}
	iv = mergeIntervals(iv)
	out := ps.acq[:0:0]
	changed := false
	for _, a := range ps.acq {
		if a.member != member {
			out = append(out, a)
			continue
		}
		i := sort.Search(len(iv), func(i int) bool { return iv[i].last >= a.first })
		if i == len(iv) || iv[i].first > a.last {
			out = append(out, a)
			continue
		}
		changed = true
		next := a.first
		for ; i < len(iv) && iv[i].first <= a.last; i++ {
			if iv[i].first > next {
				lo := a
				lo.first, lo.last = next, iv[i].first-1
				out = append(out, lo)
			}
			next = max(next, iv[i].last+1)
		}
		if next <= a.last {
			hi := a
			hi.first = next
			out = append(out, hi)
		}
	}
	if changed {
		ps.acq = out
	}
}

// pruneAcq drops acquisition ranges whose lock expired more than grace
// ago (the records were redelivered or acked without the proxy seeing it).
func (ps *partState) pruneAcq(now time.Time, grace time.Duration) {
	n := 0
	for _, r := range ps.acq {
		if !now.After(r.deadline.Add(grace)) {
			ps.acq[n] = r
			n++
		}
	}
	clear(ps.acq[n:])
	ps.acq = ps.acq[:n]
}

// stagedCall is one successful TxnShareAcknowledge: the offsets it staged
// and the shadow record that made them part of the transaction.
type stagedCall struct {
	txnID      string
	producerID int64
	epoch      int16
	group      string
	member     string
	offsets    []offRef
	shadowPart int32
	shadowOff  int64
	committed  time.Time
	// redelivered: the proxy took these offsets out of a ShareFetch
	// response (recovery.go); the client never saw them.
	redelivered bool
}

type offRef struct {
	part    partKey
	node    int32
	offset  int64
	ackType int8
}

type txnInfo struct {
	producerID int64
	epoch      int16
	owners     []string // principals the broker accepted the id's InitProducerId or writes from
}

// own records that the broker accepted a write of the transaction from
// ident (it has WRITE on the transactional id).
func (t *txnInfo) own(ident string) {
	if t.ownedBy(ident) {
		return
	}
	if len(t.owners) >= maxReaders {
		t.owners = t.owners[1:]
	}
	t.owners = append(t.owners, ident)
}

func (t txnInfo) ownedBy(ident string) bool {
	for _, o := range t.owners {
		if o == ident {
			return true
		}
	}
	return false
}

// ackRange is a run of offsets with one type per offset, as the broker takes
// them in AcknowledgementBatches.
type ackRange struct {
	first, last int64
	types       []int8 // len 1 for the whole range, or one per offset
}

// expand returns the type of each offset of r; ok is false when the batch
// is malformed (first > last, or a type list of the wrong length).
func (r ackRange) expand() (offs []int64, types []int8, ok bool) {
	if r.first > r.last || r.first < 0 || r.last-r.first > 1<<20 {
		return nil, nil, false
	}
	n := int(r.last - r.first + 1)
	if len(r.types) != 1 && len(r.types) != n {
		return nil, nil, false
	}
	for i := 0; i < n; i++ {
		offs = append(offs, r.first+int64(i))
		if len(r.types) == 1 {
			types = append(types, r.types[0])
		} else {
			types = append(types, r.types[i])
		}
	}
	return offs, types, true
}
