package upstream

import (
	"encoding/binary"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The embedded cluster (franz-go's kfake) leaves some lists and byte arrays
// of its responses nil, and kmsg encodes a nil as null where its schema
// allows one. Apache Kafka's brokers send an empty list there, and the Java
// client (kafka-clients 4.4) does not take the null:
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
// The fix belongs to the embedded cluster, not to the proxy: the proxy stays
// byte-transparent in front of a real broker, and the embedded cluster is
// meant to behave like one. nullFixListener wraps the cluster's listeners
// (kfake.ListenFn): on each broker connection it notes the key and version of
// the requests of the keys above, and rewrites their responses with the
// nulls replaced by empty lists. Every other response, and every response
// without such a null, is written as the cluster wrote it.

// fixNulls replaces the nulls above in a decoded response of its key and
// reports whether it changed anything.
var fixNulls = map[int16]func(kmsg.Response) bool{
	int16(kmsg.CreateTopics): func(r kmsg.Response) bool {
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
	},
	int16(kmsg.DescribeTopicPartitions): func(r kmsg.Response) bool {
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
	},
	int16(kmsg.DescribeClientQuotas): func(r kmsg.Response) bool {
		resp := r.(*kmsg.DescribeClientQuotasResponse)
		if resp.ErrorCode != 0 || resp.Entries != nil {
			return false
		}
		resp.Entries = []kmsg.DescribeClientQuotasResponseEntry{}
		return true
	},
	int16(kmsg.ShareFetch): func(r kmsg.Response) bool {
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
	},
}

// nullFixListen is a kfake.ListenFn whose connections rewrite the responses
// of the keys in fixNulls.
func nullFixListen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return nullFixListener{ln}, nil
}

type nullFixListener struct{ net.Listener }

func (l nullFixListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &nullFixConn{Conn: c, pending: map[int32]reqKey{}}, nil
}

type reqKey struct{ key, version int16 }

// nullFixConn is one broker connection of the embedded cluster. Read sees
// the client's requests (the cluster reads them in pieces): it parses each
// frame's size, key, version and correlation id, and notes the requests of
// the keys in fixNulls. Write sees the cluster's responses, one whole frame
// per call (it may buffer a partial one); it rewrites the noted ones.
type nullFixConn struct {
	net.Conn

	// read side, used by the cluster's reading goroutine only
	hdr  [12]byte // size, key, version, correlation id
	nhdr int
	skip int // bytes of the current request after its header

	mu      sync.Mutex
	pending map[int32]reqKey // correlation id → request of a fixed key

	// write side, used by the cluster's writing goroutine only
	wbuf []byte
}

func (c *nullFixConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.noteRequests(p[:n])
	return n, err
}

func (c *nullFixConn) noteRequests(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
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
		key := int16(binary.BigEndian.Uint16(c.hdr[4:]))
		version := int16(binary.BigEndian.Uint16(c.hdr[6:]))
		corr := int32(binary.BigEndian.Uint32(c.hdr[8:]))
		c.skip = max(size-8, 0)
		if _, ok := fixNulls[key]; ok {
			c.mu.Lock()
			c.pending[corr] = reqKey{key, version}
			c.mu.Unlock()
		}
	}
}

func (c *nullFixConn) Write(p []byte) (int, error) {
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

// fix returns the response frame with its nulls replaced, or frame itself.
func (c *nullFixConn) fix(frame []byte) []byte {
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	c.mu.Lock()
	rk, ok := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	if !ok {
		return frame
	}
	out, changed := fixResponse(rk.key, rk.version, frame)
	if !changed {
		return frame
	}
	return out
}

// fixResponse decodes a response frame (size and correlation id included)
// of key at version, and re-encodes it if fixNulls changed it.
func fixResponse(key, version int16, frame []byte) ([]byte, bool) {
	resp := kmsg.ResponseForKey(key)
	if resp == nil || fixNulls[key] == nil {
		return frame, false
	}
	resp.SetVersion(version)
	body := frame[8:]
	flexible := resp.IsFlexible() && key != int16(kmsg.ApiVersions)
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
	if !fixNulls[key](resp) {
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
