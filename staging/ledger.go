package staging

import (
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/internal/promstat"
	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/upstream"
)

// Ledger is what the proxy knows of the records passing through it
// (docs/design.md §3): the members of each share group and the principals
// allowed to read it, the transactions and who may write them, every
// acquisition a ShareFetch response handed to a member, and the state of
// each offset the proxy holds (STAGING, TX_PENDING, COMMITTED, APPLIED) or
// knows from the shadow topic. Its methods are the state machine's
// transitions; one mutex guards it all, held for short, bounded sections and
// never across a network call.
type Ledger struct {
	cfg     configs.KIP1289
	log     *slog.Logger
	applier *upstream.Applier // releases of the records of a call that could not be staged

	mu       sync.Mutex
	members  map[memberKey]memberInfo
	readers  map[string]map[string]bool // group → principals the broker let fetch or heartbeat in it
	txns     map[string]txnInfo
	parts    map[partKey]*partState
	topics   map[string]map[[16]byte]bool // group → topic ids seen acquired
	pending  int                          // offsets DEFERRED..COMMITTED
	deferred map[string][]*Call           // transactional id → its deferred calls that still hold offsets (deferred.go)

	// Known from the shadow topic (known.go).
	known         map[partKey]*knownList
	knownSeq      uint64             // ranges learned so far (knownRange.seq)
	knownAt       map[Loc][]knownRef // shadow location → its ranges
	waiting       map[Loc][]*Call    // redelivered records held for an open transaction
	resolvedLocs  map[Loc]bool       // resolved before read; bounded by resolvedOrder
	resolvedOrder []Loc

	mPending  prometheus.Gauge
	mKnown    prometheus.Gauge
	mAbsorbed prometheus.Counter
}

// Loc is a shadow record's location: shadow partition, offset.
type Loc = [2]int64

// NewLedger builds an empty ledger; its metrics are registered in reg (nil:
// not registered). Records of aborted transactions are released through
// applier.
func NewLedger(cfg configs.KIP1289, log *slog.Logger, reg prometheus.Registerer, applier *upstream.Applier) *Ledger {
	l := &Ledger{cfg: cfg, log: log, applier: applier,
		members: map[memberKey]memberInfo{}, readers: map[string]map[string]bool{}, txns: map[string]txnInfo{},
		parts: map[partKey]*partState{}, topics: map[string]map[[16]byte]bool{}, deferred: map[string][]*Call{},
		known: map[partKey]*knownList{}, knownAt: map[Loc][]knownRef{}, waiting: map[Loc][]*Call{}, resolvedLocs: map[Loc]bool{},
		mPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "tx_pending_records",
			Help: "Records staged by TxnShareAcknowledge and not yet applied upstream (TX_PENDING or committed), and records deferred calls hold."}),
		mKnown: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "shadow_known_records",
			Help: "Shadow records (of any proxy) whose staged or committed acknowledgements the proxy remembers, to screen redelivered records."}),
		mAbsorbed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "client_acks_absorbed_total",
			Help: "Offsets a client acknowledged itself while they were TX_PENDING or committed; never forwarded."}),
	}
	if reg != nil {
		reg.MustRegister(l.mPending, l.mKnown, l.mAbsorbed)
	}
	return l
}

// CallLimits are the most offsets and partitions one TxnShareAcknowledge
// may stage (kip1289.max_offsets_per_call, max_partitions_per_call): a
// shadow record naming more is not plausible either (markers).
func (l *Ledger) CallLimits() (offsets, partitions int) {
	return l.cfg.MaxOffsetsPerCall, l.cfg.MaxPartitionsPerCall
}

// Pending is the number of offsets staged or committed, not yet applied.
func (l *Ledger) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// addPendingLocked moves the pending count by n.
func (l *Ledger) addPendingLocked(n int) {
	l.pending += n
	l.mPending.Set(float64(l.pending))
}

// recState is a record's state as the proxy sees it (docs/design.md §3.2).
type recState uint8

const (
	stAcquired  recState = iota // acquired by a member, lock held
	stDeferred                  // a deferred TxnShareAcknowledge (kip1289 Defer) holds it for a later call of its transaction; nothing written
	stStaging                   // a TxnShareAcknowledge is writing its shadow record
	stTxPending                 // staged in an open transaction
	stCommitted                 // the transaction committed; not yet applied upstream
	stApplied                   // acknowledged upstream on the member's session
)

func (s recState) String() string {
	return [...]string{"ACQUIRED", "DEFERRED", "STAGING", "TX_PENDING", "COMMITTED", "APPLIED"}[s]
}

// held reports whether a client's own acknowledgement of the offset must not
// reach the broker.
func (s recState) held() bool { return s >= stDeferred }

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
	seen  time.Time // the last heartbeat answer that named it (Prune forgets it after memberIdle)
}

// offState is one acquired offset.
type offState struct {
	member      string
	ident       string // the principal the records were handed to (identity.go)
	node        int32
	deadline    time.Time
	state       recState
	ackType     int8
	call        *Call
	lock        time.Duration // the acquisition lock duration the broker granted
	renewing    bool          // a RENEW of it is in flight
	clientAcked bool          // the client's own ack of it was absorbed
	releaseReq  bool          // ...and that ack was RELEASE: honour it if the transaction aborts
	// batch is the acquired batch the offset came in, as the ShareFetch
	// response gave it (the broker's in-flight batch); zero when not known.
	// Set once, when the entry is made, and never changed.
	batch Batch
	// gone: the entry left the map (drop) or was replaced (put). One that
	// is not gone is the map's entry for its offset, so a pointer kept
	// across an unlock (a call's offRef, an AckPlan) stands for a lookup.
	gone bool
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
	batch       Batch // the range as the response gave it, before any trim
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
			st := &offState{member: r.member, ident: r.ident, node: r.node, deadline: r.deadline, lock: r.lock, state: stAcquired, batch: r.batch}
			if ps.offsets == nil {
				ps.offsets = map[int64]*offState{}
			}
			ps.offsets[o] = st
			return st
		}
	}
	return nil
}

// drop takes offset o's entry st out of the map, detached from its call
// and marked gone (offRef's and AckPlan's invariant).
func (ps *partState) drop(o int64, st *offState) {
	st.call, st.gone = nil, true
	delete(ps.offsets, o)
}

// put makes st the entry of offset o, detaching the entry it replaces.
func (ps *partState) put(o int64, st *offState) {
	if ps.offsets == nil {
		ps.offsets = map[int64]*offState{}
	}
	if old := ps.offsets[o]; old != nil && old != st {
		old.call, old.gone = nil, true
	}
	ps.offsets[o] = st
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
func (ps *partState) settleMember(rs []AckRange, member string) {
	if len(ps.acq) == 0 || len(rs) == 0 {
		return
	}
	iv := make([]interval, 0, len(rs))
	for _, r := range rs {
		if r.First <= r.Last {
			iv = append(iv, interval{r.First, r.Last})
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

// Call is one successful TxnShareAcknowledge: the offsets it staged
// and the shadow record that made them part of the transaction.
type Call struct {
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
	// deferred: a call with kip1289 Defer (deferred.go): its offsets are
	// DEFERRED, held for a later call of the transaction, never written.
	deferred bool
}

// offRef is one offset of a call. st is its ledger entry, so the call's
// transitions reach it without a map lookup per offset (make bench: those
// lookups were a tenth of the proxy's CPU at 1000-record transactions).
// While st.call is the call, st is the entry ps.offsets holds for the
// offset: whatever takes an entry out of the map, or replaces it, clears its
// call first (partState.drop, put), so a transition that finds st.call !=
// call skips it exactly as a lookup that found no entry, or another one,
// would.
type offRef struct {
	part    partKey
	node    int32
	offset  int64
	ackType int8
	st      *offState
	// adopted: a deferred call of the same transaction held the offset
	// before this call took it over (deferred.go).
	adopted bool
}

type txnInfo struct {
	producerID int64
	epoch      int16
	owners     []string              // principals the broker accepted the id's InitProducerId or writes from
	seen       time.Time             // the last InitProducerId, EndTxn or write of it (Prune forgets it after max(timeout, txnIdleFloor))
	timeout    time.Duration         // the transaction timeout its InitProducerId asked for (0: not seen)
	touches    [maxTouches]touchSeen // the last touches relayed for it, newest at touchNext-1 (LearnTouch)
	touchNext  int
	outputs    map[outputKey]outputSeen // the first batch per partition of its open transaction's outputs (LearnOutputs)
}

// maxTouches is how many of a transactional id's touches the ledger keeps:
// a call names the touch it made just before (TouchOffset), so a few cover
// a client's retouches and a zombie's last touch beside its successor's.
const maxTouches = 4

// wroteBy is who wrote a record the broker accepted: the producer id and
// epoch of its batch, and the principal of the connection it came on.
type wroteBy struct {
	producerID int64
	epoch      int16
	ident      string
}

// touchSeen is a touch record the broker accepted: where, and who wrote it.
type touchSeen struct {
	offset int64
	wroteBy
	valid bool
}

// touch returns the touch at offset, if kept.
func (t *txnInfo) touch(offset int64) (touchSeen, bool) {
	for _, ts := range t.touches {
		if ts.valid && ts.offset == offset {
			return ts, true
		}
	}
	return touchSeen{}, false
}

// outputKey is a partition a transaction wrote outputs to, named as its
// Produce named it: by topic name before v13, by topic id from v13.
type outputKey struct {
	topic     string
	topicID   [16]byte
	partition int32
}

// outputSeen is the first batch of outputs of a transaction the broker
// accepted in a partition: its offsets, and who wrote it.
type outputSeen struct {
	first, last int64
	wroteBy
}

// MaxOutputPartitions bounds the partitions whose first output batch the
// ledger keeps per transaction, and those the proxy reads of one Produce;
// a call naming an output in another one is answered as one naming an
// output it does not know (the client touches).
const MaxOutputPartitions = 64

// output returns the kept batch holding the record ref names, looked up by
// topic id and by name (whichever the Produce used).
func (t *txnInfo) output(ref kip1289.OutputRef) (outputSeen, bool) {
	for _, k := range [2]outputKey{{topicID: ref.TopicID, partition: ref.Partition}, {topic: ref.Topic, partition: ref.Partition}} {
		if k.topic == "" && k.topicID == ([16]byte{}) {
			continue
		}
		if o, ok := t.outputs[k]; ok && o.first <= ref.Offset && ref.Offset <= o.last {
			return o, true
		}
	}
	return outputSeen{}, false
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

// AckRange is a run of offsets with one type per offset, as the broker takes
// them in AcknowledgementBatches.
type AckRange struct {
	First, Last int64
	Types       []int8 // len 1 for the whole range, or one per offset
}

// expand returns the type of each offset of r; ok is false when the batch
// is malformed (first > last, or a type list of the wrong length).
func (r AckRange) expand() (offs []int64, types []int8, ok bool) {
	if r.First > r.Last || r.First < 0 || r.Last-r.First > 1<<20 {
		return nil, nil, false
	}
	n := int(r.Last - r.First + 1)
	if len(r.Types) != 1 && len(r.Types) != n {
		return nil, nil, false
	}
	for i := 0; i < n; i++ {
		offs = append(offs, r.First+int64(i))
		if len(r.Types) == 1 {
			types = append(types, r.Types[0])
		} else {
			types = append(types, r.Types[i])
		}
	}
	return offs, types, true
}

// Matches reports whether c was staged in transaction txnID of producer id
// pid at epoch.
func (c *Call) Matches(txnID string, pid int64, epoch int16) bool {
	return c.txnID == txnID && c.producerID == pid && c.epoch == epoch
}

// TxnID is the call's transactional id ("(redelivered)" for records the
// proxy took out of a ShareFetch response).
func (c *Call) TxnID() string { return c.txnID }

// Group is the share group of the call's offsets.
func (c *Call) Group() string { return c.group }

// Member is the member that acquired the call's offsets.
func (c *Call) Member() string { return c.member }

// Len is the number of offsets of the call.
func (c *Call) Len() int { return len(c.offsets) }

// CommittedAt is when the call's transaction was seen committed (zero: not).
func (c *Call) CommittedAt() time.Time { return c.committed }

// Loc is where the call's shadow record is; ok is false for records the
// proxy took out of a ShareFetch response (redelivered), which have none of
// their own.
func (c *Call) Loc() (loc Loc, ok bool) {
	if c.redelivered || c.shadowPart < 0 || c.shadowOff < 0 {
		return Loc{}, false
	}
	return Loc{int64(c.shadowPart), c.shadowOff}, true
}

// runs calls f for each run of the call's offsets on one partition and
// node: a call's offsets come partition by partition, so each run needs one
// session key and one map, not one lookup per offset.
func (c *Call) runs(f func(k upstream.SessionKey, tp upstream.TopicPartition, refs []offRef)) {
	for i := 0; i < len(c.offsets); {
		first := c.offsets[i]
		j := i + 1
		for j < len(c.offsets) && c.offsets[j].part == first.part && c.offsets[j].node == first.node {
			j++
		}
		f(upstream.SessionKey{Node: first.node, Group: c.group, Member: c.member},
			upstream.TopicPartition{Topic: first.part.topic, Partition: first.part.partition}, c.offsets[i:j])
		i = j
	}
}

// Acks are the call's acknowledgements by share session, each run's map
// sized once (make bench: addRef per offset was most of a commit's
// allocations at 1000-record transactions).
func (c *Call) Acks() map[upstream.SessionKey]upstream.Acks {
	out := Releases{}
	c.runs(func(k upstream.SessionKey, tp upstream.TopicPartition, refs []offRef) {
		acks := out[k]
		if acks == nil {
			acks = upstream.Acks{}
			out[k] = acks
		}
		m := acks[tp]
		if m == nil {
			m = make(map[int64]int8, len(refs))
			acks[tp] = m
		}
		for _, r := range refs {
			m[r.offset] = r.ackType
		}
	})
	return out
}

// Batch is a range of offsets one ShareFetch response handed to a member
// as one acquired batch: the broker keeps its state as one in-flight batch
// until an acknowledgement covers only part of it, and per offset from then
// on (Kafka's SharePartition). The zero Batch is not known.
type Batch struct{ First, Last int64 }

// Known reports whether b names a batch.
func (b Batch) Known() bool { return b != Batch{} }

// Len is the number of offsets of b.
func (b Batch) Len() int64 { return b.Last - b.First + 1 }

// Batches lists, per share session and partition, the acquired batches of
// the call's offsets (each once, in the order the offsets first name them;
// offsets of no known batch name none).
func (c *Call) Batches() map[upstream.SessionKey]map[upstream.TopicPartition][]Batch {
	out := map[upstream.SessionKey]map[upstream.TopicPartition][]Batch{}
	c.runs(func(k upstream.SessionKey, tp upstream.TopicPartition, refs []offRef) {
		list := out[k][tp]
		var last Batch
		for _, r := range refs {
			if b := r.st.batch; b.Known() && b != last {
				if !slices.Contains(list, b) {
					list = append(list, b)
				}
				last = b
			}
		}
		if len(list) > 0 {
			if out[k] == nil {
				out[k] = map[upstream.TopicPartition][]Batch{}
			}
			out[k][tp] = list
		}
	})
	return out
}

// Absorbed counts the client acknowledgements absorbed so far.
func (l *Ledger) Absorbed() float64 { return promstat.Value(l.mAbsorbed) }

// Sizes is how much the ledger holds, by kind: what a long-running proxy
// must keep flat (make soak samples it through sharetx_ledger_entries).
type Sizes struct {
	Members        int // members with a known epoch
	Groups         int // groups with principals seen reading them
	Transactions   int // transactional ids with a known producer id and epoch
	SharePartition int // share partitions with acquisitions or held offsets
	HeldOffsets    int // offsets with an entry of their own (staged, held, applied, looked at)
	AcquiredRanges int // acquisitions kept as ranges
	OwedAcks       int // client acknowledgements still owed after an abort
	KnownRecords   int // shadow records known from the shadow topic
	Waiting        int // shadow records with redelivered records held for them
	Resolved       int // shadow locations resolved before they were read
	Pending        int // offsets STAGING..COMMITTED
}

// Sizes counts what the ledger holds (one pass over its share partitions).
func (l *Ledger) Sizes() Sizes {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Sizes{Members: len(l.members), Groups: len(l.readers), Transactions: len(l.txns), SharePartition: len(l.parts),
		KnownRecords: len(l.knownAt), Waiting: len(l.waiting), Resolved: len(l.resolvedLocs), Pending: l.pending}
	for _, ps := range l.parts {
		s.HeldOffsets += len(ps.offsets)
		s.AcquiredRanges += len(ps.acq)
		s.OwedAcks += len(ps.owed)
	}
	return s
}
