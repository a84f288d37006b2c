package staging

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Riding (docs/design.md §4.4): a TxnShareAcknowledge whose caller is about
// to flush outputs of the same transaction (kip1289 RideProduce, sent by the
// sharetx client libraries only) waits, at most RideWait, for that Produce;
// the proxy appends the shadow record's batch to it, for a shadow partition
// led by the broker the Produce goes to, and answers the call once the
// Produce's answer says the batch was appended. One request adds every
// partition to the transaction: no write of the proxy's own, no second
// implicit AddPartitionsToTxn racing the first one into the broker's
// CONCURRENT_TRANSACTIONS back-off. No Produce in time, or one the record
// cannot ride (another broker, an epoch whose sequence the writer would
// have to ask for, a busy partition): the record is written on its own, as
// without the flag.
//
// The call is announced (Announce) on the connection's read loop, before
// it is validated off it: the Produce its client sends right after the call
// may be read before the validation ran, and then waits for it, at most
// RideReadyWait.

// RideWait bounds how long a call waits for its transaction's Produce.
const RideWait = 10 * time.Millisecond

// RideReadyWait bounds how long a Produce waits for an announced call to be
// validated.
const RideReadyWait = 5 * time.Millisecond

// Ride is a staged call's shadow record waiting for a Produce of its
// transaction.
type Ride struct {
	txnID string
	// Set before ready is closed (filled: the call was validated and
	// offers the ride; otherwise it was withdrawn).
	filled        bool
	pid           int64
	epoch         int16
	rec           *ShadowRecord
	prefer, avoid int32
	caller        any // the call's connection: a Produce on it cannot carry the ride
	ready         chan struct{}
	readyOnce     sync.Once

	taken atomic.Bool   // by a Produce (TakeRide), or withdrawn by the call
	took  chan struct{} // closed when a Produce took it
	res   *Reservation
	out   chan RideOutcome
}

func newRide(txnID string) *Ride {
	return &Ride{txnID: txnID, ready: make(chan struct{}), took: make(chan struct{}), out: make(chan RideOutcome, 1)}
}

func (r *Ride) markReady() { r.readyOnce.Do(func() { close(r.ready) }) }

// RideOutcome is what became of the Produce a record rode on.
type RideOutcome struct {
	Offset  int64 // the batch's base offset, when Code is 0
	Code    int16 // the broker's error code for the shadow partition
	Msg     string
	NotSent bool // the Produce was not sent with the batch after all
}

// Reservation is the ride's batch, once taken.
func (r *Ride) Reservation() *Reservation { return r.res }

// Finish reports the Produce's outcome for the ride (once; never blocks).
func (r *Ride) Finish(o RideOutcome) {
	select {
	case r.out <- o:
	default:
	}
}

type rideKey struct{}

// Announce registers, before the call of transactional id txnID is
// validated, that it will offer a ride; the context carries it to Stage.
// Nothing is announced (ctx as it came) while another call of the
// transaction is announced or waiting.
func (s *Stager) Announce(ctx context.Context, txnID string) context.Context {
	r := newRide(txnID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rides[txnID] != nil {
		return ctx
	}
	s.rides[txnID] = r
	return context.WithValue(ctx, rideKey{}, r)
}

// withdraw takes an announced or waiting ride out of the table.
func (s *Stager) withdraw(r *Ride) {
	s.mu.Lock()
	if s.rides[r.txnID] == r {
		delete(s.rides, r.txnID)
	}
	s.mu.Unlock()
	r.markReady()
}

// Waiting reports whether a call of txnID is announced or waiting for a
// ride (a cheap look before a Produce is examined).
func (s *Stager) Waiting(txnID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rides[txnID] != nil
}

// TakeRide hands the Produce hook the ride waiting for transaction txnID at
// producer id and epoch, with its batch reserved for a shadow partition led
// by node, or nil. An announced call not validated yet is waited for, at
// most RideReadyWait.
//
// conn is the Produce's connection: responses go out in request order, so
// a Produce on the call's own connection would be answered only after the
// call, which waits for it.
//
// When it returns nil for a waiting call, miss says why (one of the Miss
// reasons below); "" when no call waited or it was withdrawn.
func (s *Stager) TakeRide(txnID string, pid int64, epoch int16, node int32, conn any) (ride *Ride, miss string) {
	w, ok := s.writer.(*Writer)
	if !ok {
		return nil, ""
	}
	s.mu.Lock()
	r := s.rides[txnID]
	s.mu.Unlock()
	if r == nil {
		return nil, ""
	}
	t := time.NewTimer(RideReadyWait)
	select {
	case <-r.ready:
		t.Stop()
	case <-t.C:
		return nil, MissNotReady
	}
	if !r.filled {
		return nil, "" // withdrawn: it offers nothing
	}
	if r.pid != pid || r.epoch != epoch || (r.caller != nil && r.caller == conn) {
		return nil, MissOther
	}
	s.mu.Lock()
	if s.rides[txnID] != r {
		s.mu.Unlock()
		return nil, "" // taken by another Produce, or withdrawn
	}
	delete(s.rides, txnID)
	s.mu.Unlock()
	res, ok := w.Reserve(txnID, pid, epoch, node, r.prefer, r.avoid, r.rec)
	if !ok {
		s.putBack(r)
		return nil, MissNoPartition
	}
	r.res = res
	if !r.taken.CompareAndSwap(false, true) { // the call gave up meanwhile
		res.Cancel()
		return nil, ""
	}
	close(r.took)
	return r, ""
}

// Why a Produce did not carry a waiting call's shadow record, or a call
// that offered a ride was not carried (sharetx_ride_misses_total).
const (
	// MissNotReady: the call was not validated within RideReadyWait of
	// the Produce's arrival.
	MissNotReady = "not_ready"
	// MissNoPartition: no shadow partition led by the Produce's broker
	// could take the batch now (another write of the producer to it
	// unsettled, or its sequence unknown).
	MissNoPartition = "no_partition"
	// MissOther: another producer id or epoch, or the call's own
	// connection.
	MissOther = "other"
	// MissProduceFirst: the transaction's Produce passed before the call
	// was announced; the call wrote on its own once it was answered.
	MissProduceFirst = "produce_first"
	// MissNoProduce: no Produce of the transaction took the ride within
	// RideWait.
	MissNoProduce = "no_produce"
	// MissNotSent: the Produce that took it was not sent with it.
	MissNotSent = "not_sent"
)

// putBack returns an untaken ride to the table (another Produce may take it).
func (s *Stager) putBack(r *Ride) {
	s.mu.Lock()
	if s.rides[r.txnID] == nil && !r.taken.Load() {
		s.rides[r.txnID] = r
	}
	s.mu.Unlock()
}

// announced is the ride Announce put in ctx, if any.
func announced(ctx context.Context) *Ride {
	r, _ := ctx.Value(rideKey{}).(*Ride)
	return r
}

// rideResult is what ride did with a call's record: rode is false when no
// Produce carried it (write it on its own); waited is how long the call
// waited for a Produce, write how long the one it rode in took.
type rideResult struct {
	part          int32
	off           int64
	err           error
	rode          bool
	waited, write time.Duration
	miss          string // why it did not ride, when it offered and waited (a Miss reason)
}

// ride offers rec to a Produce of the call's transaction.
func (s *Stager) ride(ctx context.Context, call *Call, rec *ShadowRecord, prefer int32) rideResult {
	r := announced(ctx)
	if _, ok := s.writer.(*Writer); !ok || s.partitions < 2 {
		if r != nil {
			s.withdraw(r)
		}
		return rideResult{}
	}
	if r == nil {
		r = newRide(call.txnID)
		s.mu.Lock()
		if s.rides[r.txnID] != nil {
			s.mu.Unlock()
			return rideResult{} // another call of the transaction is waiting
		}
		s.rides[r.txnID] = r
		s.mu.Unlock()
	}
	r.filled, r.pid, r.epoch, r.rec, r.prefer = true, call.producerID, call.epoch, rec, prefer
	r.avoid, r.caller = TouchPartitionFor(call.txnID, s.partitions), ctx.Value(callerKey{})
	start := time.Now()
	r.markReady()
	t := time.NewTimer(RideWait)
	defer t.Stop()
	var idle <-chan struct{}
	if f := s.inFlight; f != nil {
		// A Produce of the transaction that passed before the call was
		// announced: the outputs left already, and none may follow. Write
		// on its own once it is answered (its partitions added: no
		// concurrent first writes), unless a later Produce takes the ride.
		idle = f(call.txnID, call.producerID, call.epoch)
	}
	miss := ""
	select {
	case <-r.took:
	case <-t.C:
		miss = MissNoProduce
	case <-idle:
		miss = MissProduceFirst
	case <-ctx.Done():
	}
	took := time.Now()
	if r.taken.CompareAndSwap(false, true) { // withdrawn: nothing took it
		s.withdraw(r)
		return rideResult{waited: took.Sub(start), miss: miss}
	}
	res := r.res
	rode := func(off int64, err error) rideResult {
		return rideResult{part: res.Partition, off: off, err: err, rode: true, waited: took.Sub(start), write: time.Since(took)}
	}
	var o RideOutcome
	select {
	case o = <-r.out:
	case <-ctx.Done():
		res.Unknown()
		return rode(-1, &WriteError{Topic: res.Topic, Partition: res.Partition, Err: fmt.Errorf("%w: the Produce it rode on was not answered", ErrOutcomeUnknown)})
	}
	if o.NotSent {
		res.Cancel()
		return rideResult{waited: took.Sub(start), miss: MissNotSent}
	}
	if o.Code == 0 {
		res.Done()
		return rode(o.Offset, nil)
	}
	kerrv := kerr.ErrorForCode(o.Code)
	if retriable(kerrv) {
		off, err := res.Retry(ctx)
		return rode(off, err)
	}
	res.settle(kerrv)
	return rode(-1, &WriteError{Topic: res.Topic, Partition: res.Partition, Err: kerrv, Message: o.Msg})
}

// InFlight, when set, returns a channel closed once no Produce of the
// transaction (transactional id, producer id, epoch) is in flight through
// the proxy, or nil when none is.
func (s *Stager) SetInFlight(f func(txnID string, pid int64, epoch int16) <-chan struct{}) {
	s.inFlight = f
}

type callerKey struct{}

// WithCaller tells Stage which connection a call came on (any comparable
// value): a Produce on the same connection never carries its ride.
func WithCaller(ctx context.Context, conn any) context.Context {
	return context.WithValue(ctx, callerKey{}, conn)
}
