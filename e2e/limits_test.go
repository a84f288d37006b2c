package e2e

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
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
