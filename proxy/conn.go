package proxy

import (
	"bufio"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pending is one request waiting for its response. Requests reach the
// client-order queue in the order the client sent them, and upstream
// answers in the order it received them, so responses go back in request
// order without any reordering buffer.
type pending struct {
	hdr   RequestHeader
	h     *Handler // the registry's for hdr.Key; nil for the proxy's own requests
	start time.Time
	local bool // answered by the proxy: frame is set once done is closed
	state any  // from the request hook, for the response rewriter

	upCorr  int32
	frame   []byte // the response frame, set before done is closed
	counted int    // bytes of frame counted in conn.buffered until written
	err     error
	done    chan struct{}

	// inject is set for the proxy's own requests: their responses go to it
	// and never to the client.
	inject func(frame []byte, err error)
}

func (p *pending) finish(frame []byte, err error) {
	if p.inject != nil {
		p.inject(frame, err)
		return
	}
	p.frame, p.err = frame, err
	close(p.done)
}

// conn is one client connection paired with one upstream connection. The
// upstream connection is dialed once the client's first request has arrived
// (attach); until then up is nil.
type conn struct {
	s        *Server
	client   net.Conn
	cr       *bufio.Reader // reads client
	first    []byte        // the client's first request, read before the dial
	upMu     sync.Mutex    // guards up against close while attach sets it
	up       net.Conn
	listener string
	node     int32 // upstream node id, -1 unknown
	log      *slog.Logger

	// wmu orders the upstream wire: a correlation id is taken, the request
	// queued in upq and written while it is held, so upq's order is the
	// wire's order even with injected requests interleaved.
	wmu      sync.Mutex
	nextCorr int32
	upDead   error // set under wmu once the upstream side failed
	upw      *bufio.Writer

	upq   chan *pending // written upstream, waiting for a response, FIFO
	order chan *pending // client requests in client order; closed by readClient

	closed    chan struct{}
	closeOnce sync.Once
	reason    atomic.Value // string: why the pair was closed
	draining  atomic.Bool
	// dlMu orders the read deadline's two writers: readRequestFrame sets
	// the next read's deadline, interruptRead (drain, Authenticated past
	// the principal's share) sets it to now from another goroutine. Without
	// it the reader could compute a deadline, the interrupt set now, and
	// the reader then overwrite now with its own (timeouts.client_idle
	// away), leaving a connection that was to close open for minutes.
	dlMu        sync.Mutex
	interrupted bool        // under dlMu: reads end now; set once, never cleared
	holding     atomic.Bool // the client is gone; the upstream stays open for its share sessions
	clientEOF   atomic.Bool // the client closed its side; the responses it is owed go out first

	// Admission (timeouts.client_authenticate,
	// limits.max_connections_per_principal): until the client sent its
	// first request and, where the upstream requires SASL, authenticated,
	// its reads have a deadline counted from accepted.
	accepted  time.Time
	admitted  atomic.Bool
	principal string // set once by Authenticated (a goroutine of run), read after run: counted in Server.principals while set

	saslMu sync.Mutex
	sasl   saslProgress // who the broker authenticated the client as (sasl.go)

	// Back-pressure on responses (limits.max_buffered_response_bytes):
	// readUpstream stops reading while buffered is at the limit, so a client
	// that does not read its responses leaves them in the broker's socket,
	// not in the proxy's memory.
	bufMu      sync.Mutex
	bufCond    sync.Cond // on bufMu: buffered fell, an injection started, or writing ended
	buffered   int       // bytes of responses read from upstream and not yet written to the client
	bufPeak    int       // the most buffered ever was
	pauses     int       // times readUpstream waited for the client
	writerDone bool      // writeClient stopped (or the pair closed): nothing is released any more
	injecting  int       // the proxy's own requests waiting for their response
}

func newConn(s *Server, client net.Conn, listener string, node int32) *conn {
	max := s.cfg.Limits.MaxInFlight
	c := &conn{
		s:        s,
		client:   client,
		cr:       bufio.NewReaderSize(client, 64<<10),
		listener: listener,
		node:     node,
		upq:      make(chan *pending, max+64),
		order:    make(chan *pending, max),
		closed:   make(chan struct{}),
		accepted: time.Now(),
	}
	c.bufCond.L = &c.bufMu
	c.log = s.log.With("client", client.RemoteAddr().String(), "listener", listener)
	return c
}

// attach pairs c with its upstream connection; node is the upstream's node
// id (-1 unknown). It returns false, closing up, when c was closed already.
// It runs before run's goroutines start.
func (c *conn) attach(up net.Conn, node int32) bool {
	c.upMu.Lock()
	defer c.upMu.Unlock()
	select {
	case <-c.closed:
		up.Close()
		return false
	default:
	}
	c.up = up
	c.node = node
	c.upw = bufio.NewWriterSize(up, 64<<10)
	c.log = c.log.With("upstream", up.RemoteAddr().String())
	return true
}

// run serves the pair until either side ends; it closes both. Without an
// upstream connection yet, it reads the client's first request, then dials
// (a client that connects and sends nothing costs the broker nothing).
func (c *conn) run() {
	defer func() {
		reason, _ := c.reason.Load().(string)
		c.s.metrics.ConnsClosed.WithLabelValues(reason).Inc()
	}()
	if c.up == nil {
		frame, err := c.readRequestFrame()
		if err != nil {
			c.clientReadError(err)
			reason, _ := c.reason.Load().(string)
			if reason == "" {
				reason = "client_closed"
			}
			c.close(reason)
			return
		}
		c.first = frame
		up, node, err := c.s.dialFor(c)
		if err != nil {
			c.close("upstream_dial_error")
			return
		}
		if !c.attach(up, node) {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.readClient() }()
	go func() { defer wg.Done(); c.readUpstream() }()
	go func() { defer wg.Done(); c.writeClient() }()
	wg.Wait()
}

// close ends the pair, recording the first reason given.
func (c *conn) close(reason string) {
	c.closeOnce.Do(func() {
		c.reason.Store(reason)
		close(c.closed)
		c.client.Close()
		c.upMu.Lock()
		if c.up != nil {
			c.up.Close()
		}
		c.upMu.Unlock()
		c.stopBackPressure()
	})
}

// drain stops reading requests; responses to those already read are still
// delivered, then the pair closes.
func (c *conn) drain() {
	c.draining.Store(true)
	c.interruptRead()
}

// interruptRead ends the client read under way, and every later one, at
// once: each sees a deadline in the past. The caller records why first
// (draining, stopReading), so the reader knows what its error means.
func (c *conn) interruptRead() {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.interrupted = true
	c.client.SetReadDeadline(time.Now())
}

// stopReading records why the pair will close once the responses already
// owed to the client are written.
func (c *conn) stopReading(reason string) {
	c.reason.CompareAndSwap(nil, reason)
}

// clientGone ends the pair when the client went away, unless a share
// session on this connection still has acknowledgements staged or committed
// and not yet applied: closing the upstream connection would end the
// session and the broker would release those records for redelivery. Then
// only the client side closes; the upstream stays open until they are
// applied (or the hold times out).
func (c *conn) clientGone(reason string) {
	f := c.s.filter
	if !f.HoldsSessionsOn(c) {
		c.close(reason)
		return
	}
	c.holding.Store(true)
	c.reason.CompareAndSwap(nil, reason+"_after_hold")
	c.client.Close()
	c.log.Info("client gone with acknowledgements of its share session not yet applied: keeping the upstream connection open until they are")
	go func() {
		f.WaitSessionsDrained(c)
		c.close(reason + "_after_hold")
	}()
}

// Authenticated is told (sasl.go) that the broker accepted the client's
// SASL authentication as principal, once, when it becomes known (a
// re-authentication keeps it, as the broker does). The connection is counted
// against the principal's share (limits.max_connections_per_principal);
// past it, it closes once the answer to the authentication is written.
func (c *conn) Authenticated(principal string) {
	c.admitted.Store(true)
	if !c.s.principals.enter(principal, c.s.cfg.Limits.MaxConnectionsPerPrincipal) {
		c.log.Warn("closing connection: limits.max_connections_per_principal are open for its principal already",
			"principal", principal, "limit", c.s.cfg.Limits.MaxConnectionsPerPrincipal)
		c.stopReading("max_connections_per_principal")
		c.interruptRead()
		return
	}
	c.principal = principal
}

// leavePrincipal gives the connection's place in its principal's share
// back, once the pair closed (run returned: no Authenticated can follow).
func (c *conn) leavePrincipal() {
	if c.principal != "" {
		c.s.principals.leave(c.principal)
		c.principal = ""
	}
}

// Node implements Conn.
func (c *conn) Node() int32 { return c.node }

// Done implements Conn.
func (c *conn) Done() <-chan struct{} { return c.closed }
