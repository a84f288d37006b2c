package upstream

import (
	"encoding/binary"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The embedded cluster (franz-go's kfake) answers a few requests in ways
// Apache Kafka's brokers do not, and the Java client (kafka-clients 4.4)
// fails on them. Most are nulls: kfake leaves some lists and byte arrays
// nil, and kmsg encodes a nil as null where its schema allows one, where
// Kafka's brokers send an empty list:
//
//   - ShareFetch v1+ partition Records: non-nullable since v1 in Kafka's
//     schema (nullableVersions "0"); kmsg still has it nullable, so the Java
//     client's network thread fails the whole response ("non-nullable field
//     records was serialized as null") for every partition without records.
//   - CreateTopics v5+ topic Configs: nullable in the schema, but the Admin
//     client reads the created topic's configs and fails on a null list.
//   - DescribeTopicPartitions v0 partition EligibleLeaderReplicas and
//     LastKnownElr: nullable in the schema, but the Admin client
//     (describeTopics, which TopicCommand and ShareGroupCommand use) copies
//     them into its TopicPartitionInfo and fails on a null.
//   - DescribeClientQuotas Entries: nullable (null is for errors), but the
//     Admin client iterates the entries of a successful answer, and the
//     cluster leaves them null when no quota matches.
//
// And one is an error: OffsetFetch of a group the cluster does not know
// answers GROUP_ID_NOT_FOUND, where Kafka's group coordinator answers every
// requested partition with no committed offset (-1) unless the request
// names a member (KIP-848 consumers). A Java consumer that assigns its
// partitions and commits to a fresh group (TransactionalMessageCopier,
// ConsoleConsumer --group with --partition) fails on the error.
//
// The fix belongs to the embedded cluster, not to the proxy: the proxy stays
// byte-transparent in front of a real broker, and the embedded cluster is
// meant to behave like one. compatListen wraps the cluster's listeners
// (kfake.ListenFn): on each broker connection it notes the requests of the
// keys in compatFixes, and rewrites their responses as Kafka's brokers would
// send them. Every other response, and every response with nothing to fix,
// is written as the cluster wrote it. (The embedded cluster has no SASL, so
// every frame a client sends is a request with a header.)

// compatFix changes a decoded response of its key (req is the decoded
// request when wantsRequest, else nil) and reports whether it changed it.
type compatFix struct {
	wantsRequest bool
	fix          func(req kmsg.Request, resp kmsg.Response) bool
}

var compatFixes = map[int16]compatFix{
	int16(kmsg.CreateTopics): {fix: func(_ kmsg.Request, r kmsg.Response) bool {
		resp := r.(*kmsg.CreateTopicsResponse)
		changed := false
		if resp.Version < 5 {
			return false
		}
		for i := range resp.Topics {
			t := &resp.Topics[i]
			if t.Configs == nil {
				t.Configs, changed = []kmsg.CreateTopicsResponseTopicConfig{}, true
			}
		}
		return changed
	}},
	int16(kmsg.DescribeTopicPartitions): {fix: func(_ kmsg.Request, r kmsg.Response) bool {
		resp := r.(*kmsg.DescribeTopicPartitionsResponse)
		changed := false
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				if p.EligibleLeaderReplicas == nil {
					p.EligibleLeaderReplicas, changed = []int32{}, true
				}
				if p.LastKnownELR == nil {
					p.LastKnownELR, changed = []int32{}, true
				}
			}
		}
		return changed
	}},
	int16(kmsg.DescribeClientQuotas): {fix: func(_ kmsg.Request, r kmsg.Response) bool {
		resp := r.(*kmsg.DescribeClientQuotasResponse)
		if resp.ErrorCode != 0 || resp.Entries != nil {
			return false
		}
		resp.Entries = []kmsg.DescribeClientQuotasResponseEntry{}
		return true
	}},
	int16(kmsg.ShareFetch): {fix: func(_ kmsg.Request, r kmsg.Response) bool {
		resp := r.(*kmsg.ShareFetchResponse)
		changed := false
		if resp.Version < 1 {
			return false
		}
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				if p.Records == nil {
					p.Records, changed = []byte{}, true
				}
			}
		}
		return changed
	}},
	int16(kmsg.OffsetFetch): {wantsRequest: true, fix: fixOffsetFetchUnknownGroup},
}

// fixOffsetFetchUnknownGroup answers the groups the cluster does not know
// as Kafka does (OffsetMetadataManager.fetchOffsets): no error, and each
// requested partition with offset -1, leader epoch -1, metadata "" (all
// topics requested: none). A request naming a member keeps the error.
func fixOffsetFetchUnknownGroup(r kmsg.Request, s kmsg.Response) bool {
	req, resp := r.(*kmsg.OffsetFetchRequest), s.(*kmsg.OffsetFetchResponse)
	notFound := kerr.GroupIDNotFound.Code
	empty := ""
	if req.Version <= 7 {
		if resp.ErrorCode != notFound {
			return false
		}
		resp.ErrorCode, resp.Topics = 0, []kmsg.OffsetFetchResponseTopic{}
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetFetchResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewOffsetFetchResponseTopicPartition()
				sp.Partition, sp.Offset, sp.LeaderEpoch, sp.Metadata = p, -1, -1, &empty
				t.Partitions = append(t.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return true
	}
	changed := false
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if g.ErrorCode != notFound || i >= len(req.Groups) || req.Groups[i].Group != g.Group {
			continue
		}
		rg := req.Groups[i]
		if (rg.MemberID != nil && *rg.MemberID != "") || rg.MemberEpoch >= 0 {
			continue
		}
		g.ErrorCode, g.Topics, changed = 0, []kmsg.OffsetFetchResponseGroupTopic{}, true
		for _, rt := range rg.Topics {
			t := kmsg.NewOffsetFetchResponseGroupTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, p := range rt.Partitions {
				sp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				sp.Partition, sp.Offset, sp.LeaderEpoch, sp.Metadata = p, -1, -1, &empty
				t.Partitions = append(t.Partitions, sp)
			}
			g.Topics = append(g.Topics, t)
		}
	}
	return changed
}

// compatListen is a kfake.ListenFn whose connections rewrite the responses
// of the keys in compatFixes.
func compatListen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return compatListener{ln}, nil
}

type compatListener struct{ net.Listener }

func (l compatListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &compatConn{Conn: c, pending: map[int32]pendingReq{}}, nil
}

type pendingReq struct {
	key, version int16
	frame        []byte // after the correlation id, when the fix wants the request
}

// compatConn is one broker connection of the embedded cluster. Read sees
// the client's requests (the cluster reads them in pieces): it parses each
// frame's size, key, version and correlation id, and notes the requests of
// the keys in compatFixes (keeping the frame when the fix reads the
// request). Write sees the cluster's responses, one whole frame per call (it
// buffers a partial one); it rewrites the noted ones.
type compatConn struct {
	net.Conn

	// read side, used by one reading goroutine at a time
	hdr  [12]byte // size, key, version, correlation id
	nhdr int
	skip int         // bytes of the current request still to come
	keep *pendingReq // the current request, if its frame is kept
	corr int32

	mu      sync.Mutex
	pending map[int32]pendingReq // by correlation id

	// write side, used by one writing goroutine at a time
	wbuf []byte
}

func (c *compatConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.noteRequests(p[:n])
	return n, err
}

func (c *compatConn) noteRequests(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			if c.keep != nil {
				c.keep.frame = append(c.keep.frame, b[:k]...)
			}
			c.skip -= k
			b = b[k:]
			if c.skip == 0 && c.keep != nil {
				c.note(*c.keep)
				c.keep = nil
			}
			continue
		}
		k := copy(c.hdr[c.nhdr:], b)
		c.nhdr += k
		b = b[k:]
		if c.nhdr < len(c.hdr) {
			return
		}
		c.nhdr = 0
		size := int(int32(binary.BigEndian.Uint32(c.hdr[0:])))
		pr := pendingReq{
			key:     int16(binary.BigEndian.Uint16(c.hdr[4:])),
			version: int16(binary.BigEndian.Uint16(c.hdr[6:])),
		}
		c.corr = int32(binary.BigEndian.Uint32(c.hdr[8:]))
		c.skip = max(size-8, 0)
		fix, ok := compatFixes[pr.key]
		switch {
		case !ok:
		case fix.wantsRequest && c.skip > 0 && c.skip <= 1<<20:
			pr.frame = make([]byte, 0, c.skip)
			c.keep = &pr
		default:
			c.note(pr)
		}
	}
}

func (c *compatConn) note(pr pendingReq) {
	c.mu.Lock()
	c.pending[c.corr] = pr
	c.mu.Unlock()
}

func (c *compatConn) Write(p []byte) (int, error) {
	buf := p
	if len(c.wbuf) > 0 {
		c.wbuf = append(c.wbuf, p...)
		buf = c.wbuf
	}
	for len(buf) >= 8 {
		size := int(binary.BigEndian.Uint32(buf))
		if len(buf) < 4+size {
			break
		}
		frame := buf[:4+size]
		buf = buf[4+size:]
		if _, err := c.Conn.Write(c.fix(frame)); err != nil {
			c.wbuf = c.wbuf[:0]
			return 0, err
		}
	}
	c.wbuf = append(c.wbuf[:0], buf...)
	return len(p), nil
}

// fix returns the response frame rewritten, or frame itself.
func (c *compatConn) fix(frame []byte) []byte {
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	c.mu.Lock()
	pr, ok := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	if !ok {
		return frame
	}
	if out, changed := fixResponse(pr, frame); changed {
		return out
	}
	return frame
}

// fixResponse decodes a response frame (size and correlation id included)
// of the request pr, and re-encodes it if its fix changed it.
func fixResponse(pr pendingReq, frame []byte) ([]byte, bool) {
	fix, ok := compatFixes[pr.key]
	resp := kmsg.ResponseForKey(pr.key)
	if !ok || resp == nil {
		return frame, false
	}
	var req kmsg.Request
	if fix.wantsRequest {
		if req = decodeRequest(pr); req == nil {
			return frame, false
		}
	}
	resp.SetVersion(pr.version)
	body := frame[8:]
	flexible := resp.IsFlexible() && pr.key != int16(kmsg.ApiVersions)
	if flexible {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		if r.Complete() != nil {
			return frame, false
		}
		body = r.Src
	}
	if err := resp.ReadFrom(body); err != nil {
		return frame, false
	}
	if !fix.fix(req, resp) {
		return frame, false
	}
	out := append(make([]byte, 0, len(frame)+16), frame[:8]...)
	if flexible {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, true
}

// decodeRequest decodes a kept request frame (from the client id on), or
// returns nil.
func decodeRequest(pr pendingReq) kmsg.Request {
	req := kmsg.RequestForKey(pr.key)
	if req == nil {
		return nil
	}
	req.SetVersion(pr.version)
	r := kbin.Reader{Src: pr.frame}
	r.NullableString() // client id
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if r.Complete() != nil || req.ReadFrom(r.Src) != nil {
		return nil
	}
	return req
}
