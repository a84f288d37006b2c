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
