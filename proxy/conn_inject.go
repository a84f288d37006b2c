package proxy

// The proxy's own requests on a client's upstream connection.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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

// StartInject implements Conn: the request is on the wire (in
// order after what was written before) when it returns.
func (c *conn) StartInject(req kmsg.Request) (func(context.Context) (kmsg.Response, error), error) {
	return c.StartInjectAs(req, "sharetx")
}

// StartInjectAs implements Conn: StartInject under the client id given.
func (c *conn) StartInjectAs(req kmsg.Request, clientID string) (func(context.Context) (kmsg.Response, error), error) {
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
	_, err := c.upw.Write(EncodeRequestFrame(corr, clientID, req))
	if err == nil {
		err = c.upw.Flush()
	}
	if err != nil {
		c.upDead = err
		c.wmu.Unlock()
		c.countUpstreamErr("write")
		c.log.Warn("closing connection: writing a request of the proxy's own upstream failed", "err", err)
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
