package proxy

// The response path: responses written to the client in request order,
// rewritten when their key has a rewriter, and the back-pressure that keeps
// unread responses in the broker's socket rather than the proxy's memory.

import (
	"bufio"
	"encoding/binary"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
					"api", p.h.Name, "version", p.hdr.Version, "err", err)
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
		if p.h.Known {
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
	fn := p.h.Rewrite
	if fn == nil {
		return p.frame, nil
	}
	if p.h.Known {
		defer func(t time.Time) { c.s.metrics.api(p.hdr.Key).hookResponse.Observe(time.Since(t).Seconds()) }(time.Now())
	}
	frame := p.frame
	off, err := ResponseBodyOffset(frame, p.hdr.Key, p.hdr.Flexible)
	if err != nil {
		return nil, err
	}
	resp := kmsg.ResponseForKey(p.hdr.Key)
	version := p.hdr.Version
	if p.h.ResponseVersion != nil {
		version = p.h.ResponseVersion(version, frame[off:])
	}
	resp.SetVersion(version)
	if err := resp.ReadFrom(frame[off:]); err != nil {
		return nil, err
	}
	if !fn(p.state, resp) {
		return frame, nil
	}
	c.s.metrics.Rewrites.WithLabelValues(p.h.Name).Inc()
	out := getFrameBuf(len(frame) + 64)[:off]
	copy(out, frame[:off])
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
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
