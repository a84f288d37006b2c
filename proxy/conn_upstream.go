package proxy

// The upstream side: requests written under the proxy's correlation ids,
// responses matched to them in order.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FlushUpstream: Conn's.
func (c *conn) FlushUpstream() { c.flushUp() }

// flushUp writes out requests buffered for upstream.
func (c *conn) flushUp() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.upDead != nil || c.upw.Buffered() == 0 {
		return
	}
	if err := c.upw.Flush(); err != nil {
		c.countUpstreamErr("write")
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
		c.countUpstreamErr("write")
		c.log.Warn("closing connection: writing upstream failed", "err", err)
		c.upDead = err
		c.close("upstream_write_error")
	}
	return err
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

// countUpstreamErr counts a failed read or write of the pair's upstream
// side in upstream_errors_total, which an alert reads, only when it is the
// proxy's own failure: a request of its own was waiting on the connection,
// or the client is gone and the proxy holds the connection for its share
// sessions. Otherwise the broker may have closed it for what the client
// sent (a malformed request makes it reset): that counts in
// connections_closed_total only (upstream_read_error, upstream_write_error).
func (c *conn) countUpstreamErr(kind string) {
	c.bufMu.Lock()
	own := c.injecting > 0
	c.bufMu.Unlock()
	if own || c.holding.Load() {
		c.s.metrics.UpstreamErrs.WithLabelValues(kind).Inc()
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
	c.countUpstreamErr("read")
	c.log.Warn("closing connection: reading upstream failed", "err", err)
	c.close("upstream_read_error")
}
