package intercept

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
)

// The shadow record riding in the client's own transactional Produce
// (staging/ride.go, docs/design.md §4.4): the request hook appends the
// reserved batch as one more topic of the request, the response rewriter
// takes its answer out before the client sees it and hands it to the
// waiting TxnShareAcknowledge.

// rideState is a Produce request that carries a shadow batch.
type rideState struct {
	txn  produceTxnState
	ride *staging.Ride
}

// rideOn appends the shadow batch of a TxnShareAcknowledge waiting for this
// transaction (if any, and if the request can carry it) and returns the
// action, or nil to forward the request as it came.
func (e *KIP1289) rideOn(r *proxy.Request, t produceTxnState) (*proxy.Action, *rideState) {
	s := e.stager.Load()
	if s == nil || r.Version < 12 || !s.Waiting(t.txnID) {
		return nil, nil // the common case: a map lookup, nothing walked
	}
	body := r.Body()
	if h, err := proxy.WalkProduce(body, r.Version, nil, nil); err != nil || h.Acks != -1 {
		return nil, nil
	}
	if _, _, ok := e.shadowTopicID(); !ok {
		return nil, nil // (a request naming the shadow topic never gets here: shadowWrites took it)
	}
	ride, miss := s.TakeRide(t.txnID, t.producerID, t.epoch, r.Conn.Node(), r.Conn)
	if ride == nil {
		if miss != "" {
			e.mRideMiss.WithLabelValues(miss).Inc()
		}
		return nil, nil
	}
	out, ok := spliceProduceTopic(body, r.Version, ride.Reservation())
	if !ok {
		ride.Finish(staging.RideOutcome{NotSent: true})
		return nil, nil
	}
	return &proxy.Action{Body: out, BodyPooled: true}, &rideState{txn: t, ride: ride}
}

// spliceProduceTopic returns a flexible (v12+) Produce request body with
// one more topic first in its topics: the reservation's partition and batch.
func spliceProduceTopic(body []byte, version int16, res *staging.Reservation) ([]byte, bool) {
	h, err := proxy.WalkProduce(body, version, nil, nil)
	if err != nil {
		return nil, false
	}
	pos := h.TopicsAt
	n, w := binary.Uvarint(body[pos:])
	if w <= 0 || n == 0 { // a null topics array cannot be
		return nil, false
	}
	out := proxy.NewBuffer(len(body) + len(res.Batch) + 64)
	out = append(out, body[:pos]...)
	out = binary.AppendUvarint(out, n+1) // one more topic
	if version >= 13 {
		out = append(out, res.TopicID[:]...)
	} else {
		out = binary.AppendUvarint(out, uint64(len(res.Topic))+1)
		out = append(out, res.Topic...)
	}
	out = binary.AppendUvarint(out, 2) // one partition
	out = binary.BigEndian.AppendUint32(out, uint32(res.Partition))
	out = binary.AppendUvarint(out, uint64(len(res.Batch))+1)
	out = append(out, res.Batch...)
	out = append(out, 0, 0) // the partition's and the topic's tagged fields
	out = append(out, body[pos+w:]...)
	return out, true
}

// rideAnswered takes the shadow partition's answer out of the Produce
// response and hands it to the waiting call.
func (e *KIP1289) rideAnswered(st *rideState, resp *kmsg.ProduceResponse) {
	res := st.ride.Reservation()
	o := staging.RideOutcome{Code: kerr.RequestTimedOut.Code} // missing: retriable, resent with its sequence
	keep := resp.Topics[:0]
	for _, t := range resp.Topics {
		if !(t.TopicID == res.TopicID && t.TopicID != [16]byte{}) && t.Topic != res.Topic {
			keep = append(keep, t)
			continue
		}
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			if p.Partition != res.Partition {
				parts = append(parts, p)
				continue
			}
			o = staging.RideOutcome{Code: p.ErrorCode, Offset: p.BaseOffset}
			if p.ErrorMessage != nil {
				o.Msg = *p.ErrorMessage
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			keep = append(keep, t)
		}
	}
	resp.Topics = keep
	st.ride.Finish(o)
}

// produces counts the transactional Produce requests in flight through the
// proxy per transactional id (producer id and epoch: a new epoch starts
// over, so one never answered — its connection closed — is forgotten with
// its transaction).
type produces struct {
	mu sync.Mutex
	m  map[string]*inflight
}

type inflight struct {
	pid   int64
	epoch int16
	n     int
	last  time.Time // the last start
	idle  chan struct{}
}

// producesForgetAfter is how long after its last Produce started a
// transaction's in-flight count is dropped although not every Produce was
// answered: their connections closed first (a client killed mid-request).
// No Produce waits for its answer that long (request timeouts are seconds),
// and a call waiting on the count (idleOf) is let go.
const producesForgetAfter = 5 * time.Minute

func (p *produces) start(t produceTxnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*inflight{}
	}
	f := p.m[t.txnID]
	if f == nil || f.pid != t.producerID || f.epoch != t.epoch {
		if f != nil && f.n > 0 {
			close(f.idle)
		}
		f = &inflight{pid: t.producerID, epoch: t.epoch, idle: make(chan struct{})}
		p.m[t.txnID] = f
	}
	f.n++
	f.last = time.Now()
}

// prune drops the counts of transactions whose last Produce started more
// than producesForgetAfter before now.
func (p *produces) prune(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, f := range p.m {
		if now.Sub(f.last) > producesForgetAfter {
			close(f.idle)
			delete(p.m, id)
		}
	}
}

func (p *produces) done(t produceTxnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.m[t.txnID]
	if f == nil || f.pid != t.producerID || f.epoch != t.epoch {
		return
	}
	if f.n--; f.n <= 0 {
		close(f.idle)
		delete(p.m, t.txnID)
	}
}

// idle is closed once no Produce of the transaction is in flight; nil when
// none is.
func (p *produces) idleOf(txnID string, pid int64, epoch int16) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.m[txnID]
	if f == nil || f.pid != pid || f.epoch != epoch {
		return nil
	}
	return f.idle
}
