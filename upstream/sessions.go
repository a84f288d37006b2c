package upstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Share sessions (docs/design.md §6): the broker numbers a member's
// requests on a share session 0, 1, 2, … and refuses any other epoch. The
// proxy sends requests of its own on a member's session (committed
// acknowledgements, releases, RENEWs), so it keeps, per session, how many it
// added (delta) and translates every client epoch before it goes upstream.

// errRenewUnsupported: the member's session speaks ShareAcknowledge < v2,
// which has no RENEW (Kafka 4.2+).
var errRenewUnsupported = errors.New("the share session uses ShareAcknowledge < v2, which cannot renew acquisition locks (Kafka 4.2+ and a client using v2 are needed)")

// Conn is a client connection as a share session uses it: the proxy can
// write a request of its own on it, after everything written so far.
type Conn interface {
	// StartInject writes req upstream on this connection and returns a
	// function that waits for the response (which the client never sees).
	StartInject(req kmsg.Request) (wait func(context.Context) (kmsg.Response, error), err error)
	// Done is closed when the connection pair has closed.
	Done() <-chan struct{}
}

// SideChannel sends a request to broker node on the proxy's own
// connection. The broker takes a member's ShareAcknowledge on any
// connection when the member id and session epoch are right, so committed
// acknowledgements need not wait behind a long-poll ShareFetch on the
// client's connection.
// It returns ErrNoSideChannel while the proxy has no connection of its own
// yet: the request then goes on the client's connection.
type SideChannel func(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error)

// ErrNoSideChannel: the proxy has no connection of its own to the cluster
// yet (SideChannel).
var ErrNoSideChannel = errors.New("the proxy's own connection to the cluster is not ready yet")

// SessionKey names a member's share session on one broker.
type SessionKey struct {
	Node          int32
	Group, Member string
}

// Session is a member's share session on one broker, as the proxy
// translates it. Its mu is held across assigning an upstream epoch and
// writing the request that carries it (client request or the proxy's), so
// epochs reach the broker in the order they were assigned.
type Session struct {
	mu       sync.Mutex
	delta    int32
	last     int32 // upstream epoch of the last request written; -1 none
	conn     Conn
	owned    bool         // ident is set: the session was opened through the proxy
	ident    string       // the principal whose connection opened it
	version  int16        // ShareAcknowledge version to send
	inflight atomic.Int32 // client requests on the session still waiting for their response
	rider    *Rider       // the proxy's acknowledgements waiting for the member's next ShareFetch
	// fetching is the partitions in the session's fetch set as the
	// client's ShareFetch requests made it (listed, not forgotten since): a
	// rider rides only on those, as a partition a ShareFetch lists joins the
	// set and would bring records the client did not ask for.
	fetching map[TopicPartition]bool
}

// A Rider is acknowledgements of the proxy's own (a committed call's, an
// aborted one's releases) waiting to ride in the member's next ShareFetch
// on the session (docs/design.md §6.4): the broker applies them with that
// fetch, so the fetch does not wait behind a request of the proxy's.
type Rider struct {
	Acks   Acks
	conn   Conn // the connection whose ShareFetch carries it, once taken
	result chan RideResult
}

// RideResult is the broker's answer to a rider: per partition, the
// acknowledgement error code of the fetch that carried it. Err is set
// when that fetch was refused as a whole (nothing was applied).
type RideResult struct {
	Codes map[TopicPartition]int16
	Err   error
}

// Answer hands the rider the answer of the fetch that carried it.
func (r *Rider) Answer(res RideResult) {
	select {
	case r.result <- res:
	default:
	}
}

// Sessions holds the share sessions of the members whose requests pass
// through the proxy, and sends the proxy's own requests on them.
type Sessions struct {
	ctx  context.Context // ends when the proxy stops
	side SideChannel
	log  *slog.Logger

	mu sync.Mutex
	m  map[SessionKey]*Session
}

// NewSessions builds the table; side is the proxy's own connection to the
// brokers (nil: the proxy's requests go on the clients' connections only).
// Requests stop being retried when ctx ends.
func NewSessions(ctx context.Context, side SideChannel, log *slog.Logger) *Sessions {
	return &Sessions{ctx: ctx, side: side, log: log, m: map[SessionKey]*Session{}}
}

// Get returns the share session k, created empty when unknown.
func (ss *Sessions) Get(k SessionKey) *Session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[k]
	if s == nil {
		s = &Session{last: -1}
		ss.m[k] = s
	}
	return s
}

// Step is what Begin decided for one client request on a session.
type Step struct {
	Epoch   int32 // the upstream epoch to send
	Foreign bool  // another principal's request: passed as it came, changes nothing
	InStep  bool  // the client's own numbering was in step: an epoch error is the proxy's
	Counted bool  // counted in flight: Responded must be called
	// Waited is how long the request waited for the session, held by a
	// request of the proxy's own (a committed acknowledgement, a release,
	// a RENEW on the side channel): 0 when it was free.
	Waited time.Duration

	held *Session // locked by Begin until Written; nil when Foreign
}

// Written releases the session Begin locked: the request that carries the
// epoch is on the wire (or will never be). Call it once, from whatever
// learns that (the transport, through proxy.Action.Written); it does
// nothing for a Foreign step. Taken in Begin and released here, the lock
// stays in this package: no other code unlocks it.
func (st Step) Written() {
	if st.held != nil {
		st.held.mu.Unlock()
	}
}

// TakeRider hands the caller, between Begin and Written, the
// acknowledgements waiting to ride in this request, when can says the
// request can carry them: the caller then adds them to the request and
// answers the rider with the response. nil when there is none, the step is
// Foreign, or the request opens or closes the session.
func (st Step) TakeRider(conn Conn, can func(Acks) bool) *Rider {
	s := st.held
	if s == nil || s.rider == nil || st.Epoch <= 0 || !can(s.rider.Acks) {
		return nil
	}
	for tp := range s.rider.Acks {
		if !s.fetching[tp] {
			return nil
		}
	}
	r := s.rider
	s.rider, r.conn = nil, conn
	return r
}

// Fetching notes what a client ShareFetch does to the session's fetch set
// (between Begin and Written): listed partitions join it, forgotten ones
// leave it; a request that opens the session (epoch 0) starts it anew.
func (st Step) Fetching(listed, forgotten []TopicPartition) {
	s := st.held
	if s == nil {
		return
	}
	if st.Epoch == 0 || s.fetching == nil {
		s.fetching = map[TopicPartition]bool{}
	}
	for _, tp := range listed {
		s.fetching[tp] = true
	}
	for _, tp := range forgotten {
		delete(s.fetching, tp)
	}
}

// Begin translates a client request's session epoch on connection conn of
// principal ident. Unless Foreign, the session stays locked until
// Step.Written, so no request of the proxy's takes an epoch meanwhile.
func (s *Session) Begin(conn Conn, ident string, clientEpoch int32, version int16) Step {
	var waited time.Duration
	if !s.mu.TryLock() {
		t := time.Now()
		s.mu.Lock()
		waited = time.Since(t)
	}
	if s.owned && s.ident != ident {
		// Another principal naming this member's session: the broker
		// decides (it authorises the caller and checks the epoch); the
		// proxy's view of the session — the epoch translation and the
		// connection it applies acknowledgements on — is not the caller's
		// to move.
		s.mu.Unlock()
		return Step{Epoch: clientEpoch, Foreign: true, Waited: waited}
	}
	if !s.owned || clientEpoch == 0 {
		s.owned, s.ident = true, ident
	}
	prev := s.last
	up := s.translate(conn, clientEpoch, version)
	st := Step{Epoch: up, Waited: waited, held: s}
	// The client's own numbering was in step (a new session, a close, or
	// the next epoch after the last one written): an epoch error is then
	// the proxy's to count; one the client got by skipping or repeating an
	// epoch is not.
	st.InStep = clientEpoch <= 0 || (prev >= 0 && up == prev+1)
	if up >= 0 {
		s.inflight.Add(1)
		st.Counted = true
	}
	return st
}

// translate maps the client's session epoch to the upstream one; s.mu is
// held.
func (s *Session) translate(conn Conn, clientEpoch int32, version int16) int32 {
	s.conn = conn
	if version > 2 {
		version = 2
	}
	s.version = version
	switch {
	case clientEpoch == 0: // a new session
		s.delta = 0
		s.last = 0
		s.inflight.Store(0)
		return 0
	case clientEpoch < 0: // closing
		s.last = -1
		return clientEpoch
	}
	up := clientEpoch + s.delta
	s.last = up
	return up
}

// Responded marks a counted client request of the session answered. It
// does not take the session's mu: the connection's read loop may hold it
// while it waits for the response path to make room (max_in_flight).
func (s *Session) Responded() {
	for {
		n := s.inflight.Load()
		if n <= 0 || s.inflight.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// Peek returns the last upstream epoch and the delta, or -2, -2 when the
// session is busy (it never waits: see Responded).
func (s *Session) Peek() (last, delta int32) {
	if !s.mu.TryLock() {
		return -2, -2
	}
	defer s.mu.Unlock()
	return s.last, s.delta
}

// Close writes the client's closing request req (epoch -1) on conn and
// waits for the broker's answer.
func (s *Session) Close(ctx context.Context, conn Conn, req *kmsg.ShareAcknowledgeRequest) (*kmsg.ShareAcknowledgeResponse, error) {
	s.mu.Lock()
	wait, err := conn.StartInject(req)
	if err == nil {
		s.last = -1
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out, err := wait(ctx)
	if err != nil {
		return nil, err
	}
	return out.(*kmsg.ShareAcknowledgeResponse), nil
}

// On lists the share sessions whose last request came on c.
func (ss *Sessions) On(c Conn) []SessionKey {
	ss.mu.Lock()
	all := make(map[SessionKey]*Session, len(ss.m))
	for k, s := range ss.m {
		all[k] = s
	}
	ss.mu.Unlock()
	var out []SessionKey
	for k, s := range all {
		// Never wait for a session here: the caller may be the response
		// path, which the read loop (holding a session) may wait on. A
		// busy session counts as on c, which can only make a hold longer.
		on := true
		if s.mu.TryLock() {
			on = s.conn == c && s.last >= 0
			s.mu.Unlock()
		}
		if on {
			out = append(out, k)
		}
	}
	return out
}

// InFlight counts client share-session requests waiting for their response.
func (ss *Sessions) InFlight() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for _, s := range ss.m {
		n += int(s.inflight.Load())
	}
	return n
}

// Prune forgets sessions whose connection closed: the broker dropped them
// too (a new connection opens a new session at epoch 0).
func (ss *Sessions) Prune() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		if s.mu.TryLock() {
			closed := false
			if s.conn != nil {
				select {
				case <-s.conn.Done():
					closed = true
				default:
				}
			}
			s.mu.Unlock()
			if closed {
				delete(ss.m, k)
			}
		}
	}
}

// Ride offers acks to the member's next ShareFetch on session k for up to
// wait (docs/design.md §6.4) and returns the broker's answer to the fetch
// that carried them. ok is false when they did not ride: the session has
// a client request in flight (a request of the proxy's goes behind it on
// the client's connection without holding the session), another rider
// waits, or no ShareFetch came in time; the caller then sends them itself.
func (ss *Sessions) Ride(k SessionKey, acks Acks, wait time.Duration) (res RideResult, ok bool) {
	sess := ss.Get(k)
	sess.mu.Lock()
	if sess.conn == nil || sess.last < 0 || sess.rider != nil || sess.inflight.Load() > 0 {
		sess.mu.Unlock()
		return RideResult{}, false
	}
	r := &Rider{Acks: acks, result: make(chan RideResult, 1)}
	sess.rider = r
	sess.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case res := <-r.result:
		return res, true
	case <-timer.C:
	case <-ss.ctx.Done():
	}
	sess.mu.Lock()
	if sess.rider == r {
		sess.rider = nil
		sess.mu.Unlock()
		return RideResult{}, false
	}
	conn := r.conn
	sess.mu.Unlock()
	// Taken by a fetch: its answer says what the broker did.
	long := time.NewTimer(30 * time.Second)
	defer long.Stop()
	select {
	case res := <-r.result:
		return res, true
	case <-conn.Done():
	case <-ss.ctx.Done():
	case <-long.C:
	}
	select {
	case res := <-r.result:
		return res, true
	default:
	}
	return RideResult{Err: errors.New("the ShareFetch carrying the acknowledgements was not answered")}, true
}

// RiderWaiting reports whether acknowledgements wait on session k for the
// member's next ShareFetch.
func (ss *Sessions) RiderWaiting(k SessionKey) bool {
	sess := ss.Get(k)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.rider != nil
}

// Send sends req on the share session k with the session's next epoch,
// retrying an epoch the broker is not at yet.
func (ss *Sessions) Send(k SessionKey, req *kmsg.ShareAcknowledgeRequest) (*kmsg.ShareAcknowledgeResponse, error) {
	sess := ss.Get(k)
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ss.ctx.Done():
				return nil, ss.ctx.Err()
			case <-time.After(time.Duration(attempt*attempt) * 2 * time.Millisecond):
			}
		}
		sess.mu.Lock()
		conn := sess.conn
		if conn == nil || sess.last < 0 {
			sess.mu.Unlock()
			lastErr = errors.New("the member has no open share session through this proxy")
			continue
		}
		select {
		case <-conn.Done():
			sess.mu.Unlock()
			lastErr = errors.New("the member's share session connection closed (its records were released)")
			continue
		default:
		}
		req.Version = sess.version
		if req.IsRenewAck && req.Version < 2 {
			sess.mu.Unlock()
			return nil, errRenewUnsupported
		}
		epoch := sess.last + 1
		req.ShareSessionEpoch = epoch
		if ss.side != nil && sess.inflight.Load() == 0 && attempt < 8 {
			// On the proxy's own connection, holding the session so no
			// client request takes the epoch meanwhile. Only while no
			// client request of the session is in flight: a real broker
			// answers a waiting long-poll ShareFetch with
			// INVALID_SHARE_SESSION_EPOCH once another request moved the
			// session on. (Behind a pending fetch, the request goes on the
			// client's own connection below: the broker reads it only
			// after answering the fetch.) A client request still on its way
			// makes ours early: the broker answers
			// INVALID_SHARE_SESSION_EPOCH, changes nothing, and we retry.
			ctx, cancel := context.WithTimeout(ss.ctx, 10*time.Second)
			r, err := ss.side(ctx, k.Node, req)
			cancel()
			if errors.Is(err, ErrNoSideChannel) {
				goto inject // still holding the session
			}
			resp, _ := r.(*kmsg.ShareAcknowledgeResponse)
			if err == nil && resp != nil && resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
				sess.last = epoch
				sess.delta++
			}
			sess.mu.Unlock()
			switch {
			case err != nil:
				lastErr = err
				continue
			case resp == nil:
				lastErr = errors.New("unexpected response type")
				continue
			case resp.ErrorCode == kerr.InvalidShareSessionEpoch.Code:
				ss.log.Debug("sending on a share session: epoch not yet current, retrying", "node", k.Node, "member", k.Member, "epoch", epoch, "attempt", attempt)
				lastErr = kerr.ErrorForCode(resp.ErrorCode)
				continue
			}
			return resp, nil
		}
	inject:
		wait, err := conn.StartInject(req)
		if err == nil {
			sess.last = epoch
			sess.delta++
		}
		sess.mu.Unlock()
		if err != nil {
			lastErr = err
			continue
		}
		ctx, cancel := context.WithTimeout(ss.ctx, 30*time.Second)
		r, err := wait(ctx)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		resp := r.(*kmsg.ShareAcknowledgeResponse)
		if resp.ErrorCode == kerr.InvalidShareSessionEpoch.Code {
			// The broker did not count it: undo our step and retry.
			sess.mu.Lock()
			if sess.last == epoch {
				sess.last--
				sess.delta--
			}
			sess.mu.Unlock()
			lastErr = kerr.ErrorForCode(resp.ErrorCode)
			continue
		}
		return resp, nil
	}
	return nil, lastErr
}

// Len is how many share sessions the table holds.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
