package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/intercept"
)

// pending is one request waiting for its response. Requests reach the
// client-order queue in the order the client sent them, and upstream
// answers in the order it received them, so responses go back in request
// order without any reordering buffer.
type pending struct {
	hdr   RequestHeader
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
	holding   atomic.Bool // the client is gone; the upstream stays open for its share sessions
	clientEOF atomic.Bool // the client closed its side; the responses it is owed go out first

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

// awaitResponseRoom holds readUpstream back while the responses read and not
// yet written to the client reach limits.max_buffered_response_bytes. One
// response is always let in below the limit, so one larger than the limit
// still passes. The wait ends early while one of the proxy's own requests
// waits for its answer (it is behind the client's responses on the wire, and
// an acknowledgement being applied must not wait for a slow client) and when
// writeClient stops.
func (c *conn) awaitResponseRoom() {
	limit := c.s.cfg.Limits.MaxBufferedResponseBytes
	c.bufMu.Lock()
	defer c.bufMu.Unlock()
	paused := false
	for c.buffered >= limit && c.injecting == 0 && !c.writerDone {
		if !paused {
			paused = true
			c.pauses++
			if c.pauses == 1 {
				c.log.Info("pausing reads from the upstream broker: the responses this client has not read yet reached limits.max_buffered_response_bytes; the broker waits until it reads (logged once per connection)",
					"buffered_bytes", c.buffered, "limit", limit)
			}
		}
		c.bufCond.Wait()
	}
}

// countResponse adds a response read from upstream for the client.
func (c *conn) countResponse(p *pending) {
	c.bufMu.Lock()
	p.counted = len(p.frame)
	c.buffered += p.counted
	c.bufPeak = max(c.bufPeak, c.buffered)
	c.bufMu.Unlock()
}

// releaseResponse subtracts a response written to the client.
func (c *conn) releaseResponse(p *pending) {
	if p.counted == 0 {
		return
	}
	c.bufMu.Lock()
	c.buffered -= p.counted
	p.counted = 0
	c.bufCond.Broadcast()
	c.bufMu.Unlock()
}

// injected counts the proxy's own requests waiting for an answer (d is +1
// when one is sent, -1 when it is answered).
func (c *conn) injected(d int) {
	c.bufMu.Lock()
	c.injecting += d
	c.bufCond.Broadcast()
	c.bufMu.Unlock()
}

// stopBackPressure lets readUpstream read freely once nothing writes to the
// client any more (the pair is closing, or held for a gone client's share
// sessions).
func (c *conn) stopBackPressure() {
	c.bufMu.Lock()
	c.writerDone = true
	c.bufCond.Broadcast()
	c.bufMu.Unlock()
}

// drain stops reading requests; responses to those already read are still
// delivered, then the pair closes.
func (c *conn) drain() {
	c.draining.Store(true)
	c.client.SetReadDeadline(time.Now())
}

// readRequestFrame reads the client's next request frame, closing an idle
// client after timeouts.client_idle.
func (c *conn) readRequestFrame() ([]byte, error) {
	if idle := c.s.cfg.Timeouts.ClientIdle; idle > 0 && !c.draining.Load() {
		c.client.SetReadDeadline(time.Now().Add(idle))
		if c.draining.Load() { // drain raced with us: keep its deadline
			c.client.SetReadDeadline(time.Now())
		}
	}
	return ReadFrame(c.cr, c.s.cfg.Limits.MaxFrameBytes)
}

func (c *conn) readClient() {
	defer close(c.order)
	// Requests are written upstream unflushed while the client's next
	// request is already buffered (a pipelined burst becomes one write);
	// they are flushed before anything here can block.
	defer c.flushUp()
	for {
		frame := c.first
		c.first = nil
		if frame == nil {
			if !hasFullFrame(c.cr) {
				c.flushUp()
			}
			var err error
			if frame, err = c.readRequestFrame(); err != nil {
				c.clientReadError(err)
				return
			}
		}
		hdr, err := ParseRequestHeader(frame)
		if err != nil {
			c.log.Warn("closing connection: malformed request header", "err", err)
			c.stopReading("malformed_frame")
			return
		}
		var act intercept.Action
		kip := c.s.env.KIP
		switch {
		case kip != nil && kip.Serves(hdr.Key):
			// TxnShareAcknowledge: flexible from v0, so request header v2
			// (its tagged fields follow the client id), answered by the
			// proxy.
			n, err := skipTags(frame[hdr.BodyOffset:])
			if err != nil {
				c.log.Warn("closing connection: malformed TxnShareAcknowledge request header (v2 expected)", "err", err)
				c.stopReading("malformed_frame")
				return
			}
			hdr.BodyOffset += n
			hdr.Flexible = true
			if !c.decodable(hdr, frame) {
				return
			}
			act = kip.TxnHook(&intercept.Request{Conn: c, Key: hdr.Key, Version: hdr.Version, Frame: frame, BodyOffset: hdr.BodyOffset})
			if !c.handleLocal(hdr, act) {
				return
			}
			continue
		case !c.s.forwardable(hdr.Key):
			c.log.Warn("closing connection: request with an API key the proxy does not forward (a broker would close the connection too)",
				"api_key", hdr.Key, "version", hdr.Version, "client_id", deref(hdr.ClientID))
			c.stopReading("unknown_api_key")
			return
		}
		api := c.s.metrics.api(hdr.Key)
		api.requests.Inc()
		api.reqBytes.Add(float64(len(frame)))
		p := &pending{hdr: hdr, start: time.Now(), done: make(chan struct{})}

		if resp := c.answerLocally(hdr); resp != nil {
			p.local = true
			p.frame = resp
			close(p.done)
			if !c.enqueue(p) {
				return
			}
			continue
		}
		// Whether the frame's buffer may go back to the pool once it is
		// written upstream: not when a request hook saw it (it may keep a
		// part of it), except Produce's, which copies what it keeps.
		recycle := true
		if hook := intercept.Hook(hdr.Key); hook != nil {
			recycle = hdr.Key == kmsg.Produce.Int16()
			if !recycle && !c.decodable(hdr, frame) {
				return
			}
			act = hook(c.s.env, &intercept.Request{Conn: c, Key: hdr.Key, Version: hdr.Version, Frame: frame, BodyOffset: hdr.BodyOffset})
			if act.Local != nil || act.Async != nil || act.Close != "" {
				if !c.handleLocal(hdr, act) {
					return
				}
				continue
			}
			p.state = act.State
			if act.Body != nil {
				frame = rebuildFrame(frame[:hdr.BodyOffset], act.Body)
				recycle = false
			}
		}

		expectResponse := true
		if hdr.Key == kmsg.Produce.Int16() {
			acks, err := ProduceAcks(frame, hdr)
			if err != nil {
				c.log.Warn("closing connection: malformed produce request", "err", err)
				c.stopReading("malformed_frame")
				return
			}
			expectResponse = acks != 0
		}
		if expectResponse && !c.enqueue(p) {
			if act.After != nil {
				act.After()
			}
			return
		}
		err = c.send(frame, p, expectResponse)
		if act.After != nil {
			act.After()
		}
		if err != nil {
			return
		}
		if recycle {
			putFrameBuf(frame) // copied into upw or written out
		}
	}
}

// decodable reports whether a request the proxy decodes whole (one with a
// request hook, Produce aside, whose hook reads only a few fields; and
// TxnShareAcknowledge) is within limits.max_decoded_request_bytes. Decoded,
// a frame can take some sixteen times its size (arrays of nearly empty
// elements), and these requests are small in practice. A larger one closes
// the connection, once the responses owed to earlier requests are written,
// as a broker closes on a frame over its socket limit.
func (c *conn) decodable(hdr RequestHeader, frame []byte) bool {
	limit := c.s.cfg.Limits.MaxDecodedRequestBytes
	if len(frame)-4 <= limit {
		return true
	}
	api := kmsg.NameForKey(hdr.Key)
	if kip := c.s.env.KIP; kip != nil && kip.Serves(hdr.Key) {
		api = "TxnShareAcknowledge"
	}
	c.log.Warn("closing connection: a request the proxy decodes is larger than limits.max_decoded_request_bytes",
		"api", api, "api_key", hdr.Key, "version", hdr.Version, "bytes", len(frame)-4, "limit", limit, "client_id", deref(hdr.ClientID))
	c.stopReading("decoded_request_too_large")
	return false
}

// handleLocal carries out a hook's decision to answer (now or later) or to
// close instead of forwarding; it returns false when reading must stop.
func (c *conn) handleLocal(hdr RequestHeader, act intercept.Action) bool {
	if act.After != nil {
		defer act.After()
	}
	if act.Close != "" {
		c.log.Warn("closing connection", "reason", act.Close, "api_key", hdr.Key)
		c.stopReading(act.Close)
		return false
	}
	p := &pending{hdr: hdr, start: time.Now(), done: make(chan struct{}), local: true}
	switch {
	case act.Local != nil:
		p.frame = EncodeResponseFrame(hdr.CorrelationID, hdr.Key, act.Local)
		close(p.done)
	case act.Async != nil:
		go func() {
			resp := act.Async()
			p.frame = EncodeResponseFrame(hdr.CorrelationID, hdr.Key, resp)
			close(p.done)
		}()
	}
	return c.enqueue(p)
}

// rebuildFrame joins a request header (with its size prefix) and a new body.
func rebuildFrame(header, body []byte) []byte {
	f := make([]byte, 0, len(header)+len(body))
	f = append(f, header...)
	f = append(f, body...)
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f
}

// enqueue puts p in client order; it blocks while max_in_flight requests
// are waiting (back-pressure: the proxy stops reading from the client).
func (c *conn) enqueue(p *pending) bool {
	select {
	case c.order <- p:
		return true
	default:
	}
	c.flushUp() // about to wait for responses: what they answer must be on the wire
	select {
	case c.order <- p:
		return true
	case <-c.closed:
		return false
	}
}

// flushUp writes out requests buffered for upstream.
func (c *conn) flushUp() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.upDead != nil || c.upw.Buffered() == 0 {
		return
	}
	if err := c.upw.Flush(); err != nil {
		c.s.metrics.UpstreamErrs.WithLabelValues("write").Inc()
		c.log.Warn("closing connection: writing upstream failed", "err", err)
		c.upDead = err
		c.close("upstream_write_error")
	}
}

// send writes a request upstream under the proxy's own correlation id.
func (c *conn) send(frame []byte, p *pending, expectResponse bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.upDead != nil {
		if expectResponse {
			p.finish(nil, c.upDead)
		}
		return c.upDead
	}
	corr := c.nextCorr
	c.nextCorr++
	setCorrelationID(frame, reqCorrOffset, corr)
	if expectResponse {
		p.upCorr = corr
		c.upq <- p // cannot block: order bounds client requests, injections are bounded below
	}
	_, err := c.upw.Write(frame)
	if err != nil {
		c.s.metrics.UpstreamErrs.WithLabelValues("write").Inc()
		c.log.Warn("closing connection: writing upstream failed", "err", err)
		c.upDead = err
		c.close("upstream_write_error")
	}
	return err
}

func (c *conn) clientReadError(err error) {
	switch {
	case c.draining.Load():
		c.stopReading("shutdown")
	case errors.Is(err, io.EOF):
		// The client closed its side, or only its write side (TCP
		// half-close): the two look alike here. Stop reading, deliver the
		// responses it is owed (writeClient), then end as clientGone does;
		// a write that fails means it is gone for good.
		c.clientEOF.Store(true)
	case errors.Is(err, ErrFrameTooLarge):
		c.log.Warn("closing connection: request frame too large", "err", err, "limit", c.s.cfg.Limits.MaxFrameBytes)
		c.stopReading("frame_too_large")
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Info("closing idle connection", "idle", c.s.cfg.Timeouts.ClientIdle)
		c.stopReading("idle")
	case errors.Is(err, io.ErrUnexpectedEOF):
		c.log.Warn("closing connection: client sent a truncated frame")
		c.close("truncated_frame")
	default:
		c.clientGone("client_read_error")
	}
}

// clientGone ends the pair when the client went away, unless a share
// session on this connection still has acknowledgements staged or committed
// and not yet applied: closing the upstream connection would end the
// session and the broker would release those records for redelivery. Then
// only the client side closes; the upstream stays open until they are
// applied (or the hold times out).
func (c *conn) clientGone(reason string) {
	kip := c.s.env.KIP
	if kip == nil || !kip.HoldsSessionsOn(c) {
		c.close(reason)
		return
	}
	c.holding.Store(true)
	c.reason.CompareAndSwap(nil, reason+"_after_hold")
	c.client.Close()
	c.log.Info("client gone with acknowledgements of its share session not yet applied: keeping the upstream connection open until they are")
	go func() {
		if !kip.WaitSessionsDrained(c, c.s.cfg.KIP1289.CloseHold) {
			c.log.Warn("gave up holding the upstream connection of a gone client; its unapplied acknowledgements are lost and the records will be redelivered",
				"hold", c.s.cfg.KIP1289.CloseHold)
		}
		c.close(reason + "_after_hold")
	}()
}

// stopReading records why the pair will close once the responses already
// owed to the client are written.
func (c *conn) stopReading(reason string) {
	c.reason.CompareAndSwap(nil, reason)
}

// answerLocally returns a response frame for requests the proxy answers
// itself, or nil to forward the request.
func (c *conn) answerLocally(h RequestHeader) []byte {
	if h.Key == kmsg.ApiVersions.Int16() {
		// A version newer than kmsg decodes: answer as a broker does, with
		// UNSUPPORTED_VERSION at v0 and the versions we do support, so the
		// client retries with one we can rewrite.
		if max := (&kmsg.ApiVersionsRequest{}).MaxVersion(); h.Version > max {
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			k := kmsg.NewApiVersionsResponseApiKey()
			k.ApiKey, k.MaxVersion = kmsg.ApiVersions.Int16(), max
			resp.ApiKeys = append(resp.ApiKeys, k)
			return EncodeResponseFrame(h.CorrelationID, h.Key, resp)
		}
	}
	return nil
}

func (c *conn) readUpstream() {
	r := bufio.NewReaderSize(c.up, 64<<10)
	for {
		c.awaitResponseRoom()
		frame, err := readResponseFrame(r, c.s.cfg.Limits.MaxFrameBytes)
		if err == nil && len(frame) < 8 {
			err = ErrFrameTooSmall
		}
		var p *pending
		if err == nil {
			select {
			case p = <-c.upq:
				if got := int32(binary.BigEndian.Uint32(frame[respCorrOffset:])); got != p.upCorr {
					err = fmt.Errorf("upstream answered correlation id %d, expected %d", got, p.upCorr)
					p.finish(nil, err)
				}
			default:
				err = errors.New("upstream sent a response to no request")
			}
		}
		if err != nil {
			c.upstreamFailed(err)
			return
		}
		if p.inject != nil {
			c.injected(-1)
		} else {
			p.frame = frame
			c.countResponse(p)
		}
		p.finish(frame, nil)
	}
}

// upstreamFailed fails every request still waiting on the upstream side.
func (c *conn) upstreamFailed(err error) {
	c.wmu.Lock()
	c.upDead = err
	for {
		select {
		case p := <-c.upq:
			p.finish(nil, err)
			continue
		default:
		}
		break
	}
	c.wmu.Unlock()
	select {
	case <-c.closed: // we closed it ourselves
		return
	default:
	}
	if errors.Is(err, io.EOF) {
		c.log.Info("upstream closed the connection")
		c.close("upstream_closed")
		return
	}
	c.s.metrics.UpstreamErrs.WithLabelValues("read").Inc()
	c.log.Warn("closing connection: reading upstream failed", "err", err)
	c.close("upstream_read_error")
}

func (c *conn) writeClient() {
	w := bufio.NewWriterSize(c.client, 64<<10)
	delivered := false // every response owed was written
	defer c.stopBackPressure()
	defer func() {
		if err := w.Flush(); err != nil {
			delivered = false
		}
		if c.holding.Load() {
			return // clientGone closes the pair when the hold ends
		}
		reason, _ := c.reason.Load().(string)
		if reason == "" && delivered && c.clientEOF.Load() {
			c.clientGone("client_closed")
			return
		}
		if reason == "" {
			reason = "client_closed"
		}
		c.close(reason)
	}()
	m := c.s.metrics
	var next *pending // looked ahead: taken from order, not yet written
	for {
		p := next
		next = nil
		if p == nil {
			var ok bool
			if p, ok = <-c.order; !ok {
				delivered = true
				return
			}
		}
		select {
		case <-p.done:
		case <-c.closed:
			return
		}
		if p.err != nil {
			return
		}
		frame := p.frame
		if !p.local {
			var err error
			if frame, err = c.rewrite(p); err != nil {
				m.UpstreamErrs.WithLabelValues("decode").Inc()
				c.log.Warn("closing connection: could not decode an upstream response to rewrite it",
					"api", kmsg.NameForKey(p.hdr.Key), "version", p.hdr.Version, "err", err)
				c.stopReading("malformed_upstream_response")
				return
			}
			setCorrelationID(frame, respCorrOffset, p.hdr.CorrelationID)
		}
		if _, err := w.Write(frame); err != nil {
			c.clientWriteFailed()
			return
		}
		if !p.local {
			// Written (copied into w or out): neither the upstream frame
			// (a rewriter's decoded response may point into it, but none
			// keeps the response) nor the rewritten one is used again.
			if &frame[0] != &p.frame[0] {
				putFrameBuf(frame)
			}
			putFrameBuf(p.frame)
			p.frame = nil
			c.releaseResponse(p)
		}
		// Flush unless the next response can go out right behind this one.
		// (Waiting for the next request's response instead, as a check of
		// len(c.order) did, holds a finished response back for as long as
		// the broker takes with the next: with pipelined produce requests
		// every answer came one request late.)
		select {
		case next = <-c.order: // nil if order was closed
		default:
		}
		if next == nil || !isDone(next) {
			if err := w.Flush(); err != nil {
				c.clientWriteFailed()
				return
			}
		}
		if known(p.hdr.Key) {
			api := m.api(p.hdr.Key)
			api.respBytes.Add(float64(len(frame)))
			api.latency.Observe(time.Since(p.start).Seconds())
		}
	}
}

// isDone reports whether p's response is ready.
func isDone(p *pending) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (c *conn) clientWriteFailed() {
	if c.holding.Load() {
		return
	}
	c.clientGone("client_write_error")
}

// rewrite decodes, rewrites and re-encodes a response when its key has a
// rewriter; otherwise it returns the frame as it came.
func (c *conn) rewrite(p *pending) ([]byte, error) {
	fn := intercept.Rewriter(p.hdr.Key)
	if fn == nil {
		return p.frame, nil
	}
	frame := p.frame
	off, err := ResponseBodyOffset(frame, p.hdr.Key, p.hdr.Flexible)
	if err != nil {
		return nil, err
	}
	resp := kmsg.ResponseForKey(p.hdr.Key)
	resp.SetVersion(p.hdr.Version)
	if p.hdr.Key == kmsg.ApiVersions.Int16() && len(frame) >= off+2 &&
		int16(binary.BigEndian.Uint16(frame[off:])) == kerr.UnsupportedVersion.Code {
		resp.SetVersion(0) // brokers answer an unsupported ApiVersions version at v0
	}
	if err := resp.ReadFrom(frame[off:]); err != nil {
		return nil, err
	}
	if !fn(c.s.env, p.state, resp) {
		return frame, nil
	}
	c.s.metrics.Rewrites.WithLabelValues(kmsg.NameForKey(p.hdr.Key)).Inc()
	out := getFrameBuf(len(frame) + 64)[:off]
	copy(out, frame[:off])
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}

// Node implements intercept.Conn.
func (c *conn) Node() int32 { return c.node }

// Done implements intercept.Conn.
func (c *conn) Done() <-chan struct{} { return c.closed }

// Inject sends the proxy's own request upstream on this connection, after
// everything the client sent before it, and returns the response, which the
// client never sees.
func (c *conn) Inject(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	wait, err := c.StartInject(req)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// StartInject implements intercept.Conn: the request is on the wire (in
// order after what was written before) when it returns.
func (c *conn) StartInject(req kmsg.Request) (func(context.Context) (kmsg.Response, error), error) {
	type result struct {
		frame []byte
		err   error
	}
	ch := make(chan result, 1)
	p := &pending{hdr: RequestHeader{Key: req.Key(), Version: req.GetVersion(), Flexible: req.IsFlexible()},
		inject: func(f []byte, err error) { ch <- result{f, err} }}
	c.wmu.Lock()
	if c.upDead != nil {
		c.wmu.Unlock()
		return nil, c.upDead
	}
	corr := c.nextCorr
	c.nextCorr++
	p.upCorr = corr
	select {
	case c.upq <- p:
		c.injected(+1)
	default:
		c.wmu.Unlock()
		return nil, errors.New("too many requests in flight on this connection")
	}
	_, err := c.upw.Write(EncodeRequestFrame(corr, "sharetx", req))
	if err == nil {
		err = c.upw.Flush()
	}
	if err != nil {
		c.upDead = err
		c.wmu.Unlock()
		c.close("upstream_write_error")
		return nil, err
	}
	c.wmu.Unlock()
	c.s.metrics.Injected.Inc()
	return func(ctx context.Context) (kmsg.Response, error) {
		var res result
		select {
		case res = <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if res.err != nil {
			return nil, res.err
		}
		off, err := ResponseBodyOffset(res.frame, req.Key(), req.IsFlexible())
		if err != nil {
			return nil, err
		}
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		if err := resp.ReadFrom(res.frame[off:]); err != nil {
			return nil, err
		}
		return resp, nil
	}, nil
}

// hasFullFrame reports whether r already holds a whole next frame.
func hasFullFrame(r *bufio.Reader) bool {
	if r.Buffered() < 4 {
		return false
	}
	b, err := r.Peek(4)
	if err != nil {
		return false
	}
	n := int32(binary.BigEndian.Uint32(b))
	return n >= 0 && r.Buffered()-4 >= int(n)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
