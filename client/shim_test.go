package client

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

// fakeSharetx stands in for the proxy in tests: installed as the kgo dialer,
// it wraps every connection to a kfake cluster, adds the TxnShareAcknowledge
// key to ApiVersions responses and answers TxnShareAcknowledge requests
// itself (kfake panics on keys it does not know). Everything else goes to
// kfake unchanged.
type fakeSharetx struct {
	key    int16
	mu     sync.Mutex
	reqs   []*kip1289.TxnShareAcknowledgeRequest
	answer func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse
}

func (f *fakeSharetx) requests() []*kip1289.TxnShareAcknowledgeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*kip1289.TxnShareAcknowledgeRequest(nil), f.reqs...)
}

func (f *fakeSharetx) setAnswer(fn func(*kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse) {
	f.mu.Lock()
	f.answer = fn
	f.mu.Unlock()
}

func (f *fakeSharetx) handle(req *kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	answer := f.answer
	f.mu.Unlock()
	if answer != nil {
		return answer(req)
	}
	resp := &kip1289.TxnShareAcknowledgeResponse{APIKey: req.APIKey}
	for _, t := range req.Topics {
		rt := kip1289.TxnShareAcknowledgeResponseTopic{TopicID: t.TopicID}
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kip1289.TxnShareAcknowledgeResponsePartition{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (f *fakeSharetx) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	sc := &shimConn{Conn: c, f: f, pr: pr, pw: pw, queue: make(chan pending, 64), done: make(chan struct{})}
	go sc.respond()
	return sc, nil
}

type pending struct {
	local   []byte // a response we made; nil: read the next one from kfake
	patchAV bool
	version int16
}

type shimConn struct {
	net.Conn
	f      *fakeSharetx
	wbuf   []byte
	pr     *io.PipeReader
	pw     *io.PipeWriter
	queue  chan pending
	done   chan struct{}
	closed sync.Once
}

func (c *shimConn) Read(p []byte) (int, error) { return c.pr.Read(p) }

func (c *shimConn) Close() error {
	c.closed.Do(func() { close(c.done) })
	c.pw.CloseWithError(net.ErrClosed)
	return c.Conn.Close()
}

func (c *shimConn) Write(p []byte) (int, error) {
	c.wbuf = append(c.wbuf, p...)
	for len(c.wbuf) >= 4 {
		n := int(binary.BigEndian.Uint32(c.wbuf))
		if len(c.wbuf) < 4+n {
			break
		}
		frame := c.wbuf[:4+n]
		c.wbuf = append([]byte(nil), c.wbuf[4+n:]...)
		if err := c.request(frame); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *shimConn) enqueue(p pending) error {
	select {
	case c.queue <- p:
		return nil
	case <-c.done:
		return net.ErrClosed
	}
}

func (c *shimConn) request(frame []byte) error {
	r := kbin.Reader{Src: frame[4:]}
	key, version, corr := r.Int16(), r.Int16(), r.Int32()
	r.NullableString() // client id
	if key != c.f.key {
		if _, err := c.Conn.Write(frame); err != nil {
			return err
		}
		return c.enqueue(pending{patchAV: key == 18, version: version})
	}
	kmsg.SkipTags(&r) // flexible request header
	req := &kip1289.TxnShareAcknowledgeRequest{APIKey: key, Version: version}
	if err := req.ReadFrom(r.Src); err != nil {
		return err
	}
	resp := c.f.handle(req)
	body := binary.BigEndian.AppendUint32(nil, uint32(corr))
	body = append(body, 0) // flexible response header: no tags
	body = resp.AppendTo(body)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return c.enqueue(pending{local: append(out, body...)})
}

// respond writes the responses to the reader in request order.
func (c *shimConn) respond() {
	for {
		var p pending
		select {
		case p = <-c.queue:
		case <-c.done:
			return
		}
		out := p.local
		if out == nil {
			var size [4]byte
			if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
				c.pw.CloseWithError(err)
				return
			}
			out = make([]byte, 4+binary.BigEndian.Uint32(size[:]))
			copy(out, size[:])
			if _, err := io.ReadFull(c.Conn, out[4:]); err != nil {
				c.pw.CloseWithError(err)
				return
			}
			if p.patchAV {
				out = c.patchApiVersions(out, p.version)
			}
		}
		if _, err := c.pw.Write(out); err != nil {
			return
		}
	}
}

func (c *shimConn) patchApiVersions(frame []byte, version int16) []byte {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	if err := resp.ReadFrom(frame[8:]); err != nil || resp.ErrorCode != 0 {
		return frame
	}
	k := kmsg.NewApiVersionsResponseApiKey()
	k.ApiKey, k.MinVersion, k.MaxVersion = c.f.key, 0, 0
	resp.ApiKeys = append(resp.ApiKeys, k)
	body := resp.AppendTo(append([]byte(nil), frame[4:8]...)) // correlation id
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}
