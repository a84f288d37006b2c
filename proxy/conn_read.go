package proxy

// The client read path: requests are read, handed to their handler, and
// queued in client order or written upstream.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"
)

// readRequestFrame reads the client's next request frame, closing an idle
// client after timeouts.client_idle, and one that has not sent its first
// request (or, where the upstream requires SASL, authenticated) within
// timeouts.client_authenticate of being accepted.
func (c *conn) readRequestFrame() ([]byte, error) {
	c.dlMu.Lock()
	if deadline := c.readDeadline(); !deadline.IsZero() && !c.interrupted {
		c.client.SetReadDeadline(deadline)
	}
	c.dlMu.Unlock()
	frame, err := ReadFrame(c.cr, c.s.cfg.Limits.MaxFrameBytes)
	if err == nil && !c.s.requireAuth {
		c.admitted.Store(true) // nothing to authenticate: the first request admits it
	}
	return frame, err
}

// readDeadline is when the next read gives up: the idle limit, or sooner
// the admission limit of a connection not admitted yet; zero for none.
func (c *conn) readDeadline() time.Time {
	var d time.Time
	if idle := c.s.cfg.Timeouts.ClientIdle; idle > 0 {
		d = time.Now().Add(idle)
	}
	if auth := c.s.cfg.Timeouts.ClientAuthenticate; auth > 0 && !c.admitted.Load() {
		if a := c.accepted.Add(auth); d.IsZero() || a.Before(d) {
			d = a
		}
	}
	return d
}

// unadmittedTooLong reports whether the connection is past
// timeouts.client_authenticate without being admitted.
func (c *conn) unadmittedTooLong() bool {
	auth := c.s.cfg.Timeouts.ClientAuthenticate
	return auth > 0 && !c.admitted.Load() && !time.Now().Before(c.accepted.Add(auth))
}

// readClient reads the client's requests and does with each what the
// registry's Handler of its key says: answer it here, now or later; close;
// or forward it, maybe changed, to the upstream broker.
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
		h := c.s.handlers.For(hdr.Key)
		if !hdr.Flexible && h.FlexibleRequest(hdr.Version) {
			// A key kmsg does not know (the one the proxy serves itself)
			// with a flexible header (v2): its tagged fields follow the
			// client id.
			n, err := skipTags(frame[hdr.BodyOffset:])
			if err != nil {
				c.log.Warn("closing connection: malformed request header (v2 expected)", "api", h.Name, "err", err)
				c.stopReading("malformed_frame")
				return
			}
			hdr.BodyOffset += n
			hdr.Flexible = true
		}
		if !h.Served && !c.s.forwardable(h, hdr.Key) {
			c.log.Warn("closing connection: request with an API key the proxy does not forward (a broker would close the connection too)",
				"api_key", hdr.Key, "version", hdr.Version, "client_id", deref(hdr.ClientID))
			c.stopReading("unknown_api_key")
			return
		}
		if h.Known {
			api := c.s.metrics.api(hdr.Key)
			api.requests.Inc()
			api.reqBytes.Add(float64(len(frame)))
		}
		p := &pending{hdr: hdr, h: h, start: time.Now(), done: make(chan struct{})}

		if h.TooNew != nil && hdr.Version > h.MaxVersion {
			p.local = true
			p.frame = EncodeResponseFrame(hdr.CorrelationID, hdr.Key, h.TooNew(hdr.Version))
			close(p.done)
			if !c.enqueue(p) {
				return
			}
			continue
		}
		// Whether the frame's buffer may go back to the pool once it is
		// written upstream: not when a request hook saw it (it may keep a
		// part of it), unless the hook keeps nothing.
		recycle := h.Hook == nil || h.HookKeepsNothing
		if !recycle && !c.decodable(h, hdr, frame) {
			return
		}
		expectResponse := true
		if h.Responds != nil {
			// Read before a hook runs: no hook changes what decides it
			// (Produce's acks).
			if expectResponse, err = h.Responds(&Request{Conn: c, Key: hdr.Key, Version: hdr.Version, Frame: frame, BodyOffset: hdr.BodyOffset, ClientID: hdr.ClientID}); err != nil {
				c.log.Warn("closing connection: malformed request", "api", h.Name, "err", err)
				c.stopReading("malformed_frame")
				return
			}
		}
		// The request takes its place in the client's order before any
		// hook runs: enqueue can wait (limits.max_in_flight responses
		// owed), and a hook may hold a lock of its filter's until the
		// request is written (Action.Written, a share session's), which
		// must never span that wait.
		if expectResponse && !c.enqueue(p) {
			return
		}
		var act Action
		if h.Hook != nil {
			t := time.Now()
			act = h.Hook(&Request{Conn: c, Key: hdr.Key, Version: hdr.Version, Frame: frame, BodyOffset: hdr.BodyOffset, ClientID: hdr.ClientID})
			if h.Known && !h.Served {
				c.s.metrics.api(hdr.Key).hookRequest.Observe(time.Since(t).Seconds())
			}
			if h.Served || act.Local != nil || act.Async != nil || act.Close != "" {
				if !c.handleLocal(p, act, expectResponse) {
					return
				}
				continue
			}
			p.state = act.state
			if act.Body != nil {
				nf := rebuildFrame(frame[:hdr.BodyOffset], act.Body)
				if act.BodyPooled {
					putFrameBuf(act.Body)
					if recycle {
						// A hook that keeps nothing and built its body
						// in a buffer of its own: no part of the frame
						// is left anywhere. (Other new bodies may be
						// encodings of a request decoded from the
						// frame, whose state keeps parts of it.)
						putFrameBuf(frame)
					}
				}
				frame, recycle = nf, true // the new frame is the transport's alone
			}
		}
		err = c.send(frame, p, expectResponse)
		if act.Written != nil {
			act.Written()
		}
		if err != nil {
			return
		}
		if recycle {
			putFrameBuf(frame) // copied into upw or written out
		}
	}
}

// decodable reports whether a request the proxy decodes whole (one whose
// hook does not keep to a few fields) is within
// limits.max_decoded_request_bytes. Decoded, a frame can take some sixteen
// times its size (arrays of nearly empty elements), and these requests are
// small in practice. A larger one closes the connection, once the responses
// owed to earlier requests are written, as a broker closes on a frame over
// its socket limit.
func (c *conn) decodable(h *Handler, hdr RequestHeader, frame []byte) bool {
	limit := c.s.cfg.Limits.MaxDecodedRequestBytes
	if len(frame)-4 <= limit {
		return true
	}
	c.log.Warn("closing connection: a request the proxy decodes is larger than limits.max_decoded_request_bytes",
		"api", h.Name, "api_key", hdr.Key, "version", hdr.Version, "bytes", len(frame)-4, "limit", limit, "client_id", deref(hdr.ClientID))
	c.stopReading("decoded_request_too_large")
	return false
}

// handleLocal carries out a hook's decision to answer p (now or later) or
// to close instead of forwarding it; it returns false when reading must
// stop. p is in the client's order already when a response was expected
// (enqueued); otherwise it takes its place now.
func (c *conn) handleLocal(p *pending, act Action, enqueued bool) bool {
	if act.Written != nil {
		defer act.Written()
	}
	p.local = true
	if act.Close != "" {
		c.log.Warn("closing connection", "reason", act.Close, "api_key", p.hdr.Key)
		c.stopReading(act.Close)
		if enqueued {
			close(p.done) // no answer: nothing is written for it, the pair closes after the answers before it
		}
		return false
	}
	switch {
	case act.Local != nil:
		p.frame = EncodeResponseFrame(p.hdr.CorrelationID, p.hdr.Key, act.Local)
		close(p.done)
	case act.Async != nil:
		go func() {
			resp := act.Async()
			p.frame = EncodeResponseFrame(p.hdr.CorrelationID, p.hdr.Key, resp)
			close(p.done)
		}()
	default: // a served key's hook decided nothing: a hook's bug, answered by closing
		c.log.Error("closing connection: the hook of a served key neither answered nor closed", "api_key", p.hdr.Key)
		c.stopReading("malformed_frame")
		if enqueued {
			close(p.done)
		}
		return false
	}
	return enqueued || c.enqueue(p)
}

// rebuildFrame joins a request header (with its size prefix) and a new body,
// in a buffer of the frame pool.
func rebuildFrame(header, body []byte) []byte {
	f := getFrameBuf(len(header) + len(body))[:0]
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
	case errors.Is(err, os.ErrDeadlineExceeded) && c.reason.Load() != nil:
		// A reason was given already (max_connections_per_principal): the
		// deadline was set to stop reading.
	case errors.Is(err, os.ErrDeadlineExceeded) && c.unadmittedTooLong():
		what := "sent no request"
		if c.s.requireAuth {
			what = "did not authenticate"
		}
		c.log.Info("closing connection: it "+what+" within timeouts.client_authenticate", "limit", c.s.cfg.Timeouts.ClientAuthenticate)
		c.stopReading("unauthenticated_timeout")
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
