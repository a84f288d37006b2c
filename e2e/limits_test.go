package e2e

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
)

// roundTrip sends an ApiVersions v0 request on c and reads its answer.
func roundTrip(t *testing.T, c net.Conn, corr int32) {
	t.Helper()
	if _, err := c.Write(rawRequest(kmsg.ApiVersions.Int16(), 0, corr, nil)); err != nil {
		t.Fatalf("request %d: %v", corr, err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := readResponse(c)
	if err != nil {
		t.Fatalf("response %d: %v", corr, err)
	}
	if got := int32(be32(resp)); got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
}

// TestMaxConnections: with limits.max_connections open, the next client
// connection is closed at once, with a log line and a metric; once some
// close, new ones are served again.
func TestMaxConnections(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.Limits.MaxConnections = 3 })
	var open []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		roundTrip(t, c, int32(i+1)) // served, so counted
		open = append(open, c)
	}
	extra, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	expectClosed(t, extra)
	Wait(t, 10*time.Second, "connections_closed_total{reason=max_connections}", func() bool { return closedCount(p, "max_connections") >= 1 })
	if n := closedCount(p, "max_connections"); n != 1 {
		t.Errorf("connections_closed_total{reason=max_connections} = %v, want 1", n)
	}
	if !p.Logs.Contains("limits.max_connections") {
		t.Error("no log line naming limits.max_connections")
	}
	// The connections within the limit are still served.
	roundTrip(t, open[0], 10)

	open[1].Close()
	open[2].Close()
	Wait(t, 10*time.Second, "the proxy to see two clients go", func() bool { return p.ClientConns() == 1 })
	metadataWorks(t, p) // a franz-go client: a bootstrap and a broker connection
}

// TestHalfClosedClientGetsItsResponses: a client that pipelines requests and
// then shuts down its write side (TCP half-close) still gets every response
// it is owed, the last one a long-poll fetch the broker answers only after
// its wait, and then the proxy closes the connection.
func TestHalfClosedClientGetsItsResponses(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 40
	var burst []byte
	for i := int32(0); i < n; i++ {
		if i%2 == 0 {
			burst = append(burst, rawRequest(kmsg.ApiVersions.Int16(), 0, 100+i, nil)...)
		} else {
			burst = append(burst, rawRequest(kmsg.Metadata.Int16(), 4, 100+i, []byte{0, 0, 0, 0, 0})...)
		}
	}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 4
	fetch.MaxWaitMillis = 500
	fetch.MinBytes = 1 << 20 // nothing satisfies it: the broker waits the full time
	fetch.MaxBytes = 1 << 20
	burst = append(burst, rawRequest(kmsg.Fetch.Int16(), 4, 100+n, fetch.AppendTo(nil))...)
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := int32(0); i <= n; i++ {
		resp, err := readResponse(c)
		if err != nil {
			t.Fatalf("response %d of %d after the half-close: %v", i+1, n+1, err)
		}
		if got := int32(be32(resp)); got != 100+i {
			t.Fatalf("response %d has correlation id %d, want %d", i+1, got, 100+i)
		}
	}
	expectClosed(t, c)
	Wait(t, 10*time.Second, "connections_closed_total{reason=client_closed}", func() bool { return closedCount(p, "client_closed") >= 1 })
}

// heartbeatFrame is a ShareGroupHeartbeat (decoded by the proxy) joining
// group g with topics subscribed topics: its size grows with them.
func heartbeatFrame(corr int32, g string, topics int) []byte {
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.SetVersion(1)
	hb.GroupID, hb.MemberID, hb.MemberEpoch = g, "m-limits-0123456789abcdef", 0
	for i := 0; i < topics; i++ {
		hb.SubscribedTopicNames = append(hb.SubscribedTopicNames, "topic-with-a-long-name-"+strconv.Itoa(i))
	}
	return rawRequest(kmsg.ShareGroupHeartbeat.Int16(), 1, corr, hb.AppendTo(nil))
}

// TestMaxDecodedRequestBytes: a request the proxy decodes whole that is
// larger than limits.max_decoded_request_bytes closes its connection, after
// the response owed to the request before it, with a log line and a metric;
// one within the limit and a larger Produce (not decoded whole) pass.
func TestMaxDecodedRequestBytes(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.Limits.MaxDecodedRequestBytes = 4096 })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("within the limit", func(t *testing.T) {
		c := dial()
		f := heartbeatFrame(5, Unique("g"), 10)
		if len(f)-4 > 4096 {
			t.Fatalf("the small heartbeat is %d bytes", len(f)-4)
		}
		c.Write(f)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := readResponse(c); err != nil || int32(be32(resp)) != 5 {
			t.Fatalf("a heartbeat within the limit was not answered: %v", err)
		}
		// Produce is not decoded whole: one over the limit passes (and is
		// answered, here with an unknown topic).
		prod := kmsg.NewPtrProduceRequest()
		prod.SetVersion(7)
		prod.Acks, prod.TimeoutMillis = 1, 5000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = Unique("no-such-topic")
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = make([]byte, 8000)
		pt.Partitions = append(pt.Partitions, pp)
		prod.Topics = append(prod.Topics, pt)
		c.Write(rawRequest(kmsg.Produce.Int16(), 7, 6, prod.AppendTo(nil)))
		if resp, err := readResponse(c); err != nil || int32(be32(resp)) != 6 {
			t.Fatalf("a produce request over the limit was not forwarded and answered: %v", err)
		}
	})
	t.Run("heartbeat over the limit", func(t *testing.T) {
		c := dial()
		big := heartbeatFrame(8, Unique("g"), 200)
		if len(big)-4 <= 4096 {
			t.Fatalf("the big heartbeat is only %d bytes", len(big)-4)
		}
		c.Write(append(rawRequest(kmsg.ApiVersions.Int16(), 0, 7, nil), big...))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := readResponse(c); err != nil || int32(be32(resp)) != 7 {
			t.Fatalf("the response owed before the refused request was lost: %v", err)
		}
		expectClosed(t, c)
		Wait(t, 10*time.Second, "connections_closed_total{reason=decoded_request_too_large}", func() bool {
			return closedCount(p, "decoded_request_too_large") >= 1
		})
		if !p.Logs.Contains("limits.max_decoded_request_bytes") {
			t.Error("no log line naming limits.max_decoded_request_bytes")
		}
	})
	t.Run("TxnShareAcknowledge over the limit", func(t *testing.T) {
		c := dial()
		c.Write(rawRequest(kip1289.DefaultKey, 0, 9, make([]byte, 5000)))
		expectClosed(t, c)
		Wait(t, 10*time.Second, "a second decoded_request_too_large close", func() bool {
			return closedCount(p, "decoded_request_too_large") >= 2
		})
	})
	metadataWorks(t, p)
}

// TestMaxConnectionsPerSource: with limits.max_connections_per_source open
// from one address, its next connection is closed at once, with a metric,
// while another address is still served.
func TestMaxConnectionsPerSource(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.Limits.MaxConnectionsPerSource = 2 })
	from := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range 2 {
		roundTrip(t, from("127.0.0.1"), int32(i+1))
	}
	expectClosed(t, from("127.0.0.1"))
	Wait(t, 10*time.Second, "connections_closed_total{reason=max_connections_per_source}", func() bool {
		return closedCount(p, "max_connections_per_source") >= 1
	})
	if n := closedCount(p, "max_connections_per_source"); n != 1 {
		t.Errorf("connections_closed_total{reason=max_connections_per_source} = %v, want 1", n)
	}
	if !p.Logs.Contains("limits.max_connections_per_source") {
		t.Error("no log line naming limits.max_connections_per_source")
	}
	roundTrip(t, from("127.0.0.2"), 5) // another source has its own share
}

// TestClientAuthenticateDeadline: a connection that sends nothing is closed
// at timeouts.client_authenticate; one that sent its first request (no SASL
// upstream: nothing to authenticate) is not.
func TestClientAuthenticateDeadline(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.Timeouts.ClientAuthenticate = 500 * time.Millisecond })
	silent, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	talking, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer talking.Close()
	roundTrip(t, talking, 1)
	expectClosed(t, silent)
	Wait(t, 10*time.Second, "connections_closed_total{reason=unauthenticated_timeout}", func() bool {
		return closedCount(p, "unauthenticated_timeout") == 1
	})
	time.Sleep(time.Second) // past the deadline
	roundTrip(t, talking, 2)
}
