package e2e

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
)

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

// rawRequest builds a request frame by hand: header v1 (v2 when flexible,
// and for TxnShareAcknowledge, flexible from v0) with client id "raw", then
// body.
func rawRequest(key, version int16, corr int32, body []byte) []byte {
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 3)
	b = append(b, "raw"...)
	if r := kmsg.RequestForKey(key); r != nil {
		r.SetVersion(version)
		if r.IsFlexible() {
			b = append(b, 0)
		}
	} else if key == kip1289.DefaultKey {
		b = append(b, 0)
	}
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// readResponse reads one response frame and returns it without its size.
func readResponse(c net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, be32(size[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// expectClosed waits for the proxy to close c.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1024)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the proxy did not close the connection")
		}
		return
	}
}

// metadataWorks checks the proxy still serves a normal client.
func metadataWorks(t *testing.T, p *Proxy) {
	t.Helper()
	cl := p.NewClient(t, &DialRecorder{}, kgo.RequestRetries(2))
	req := kmsg.NewPtrMetadataRequest()
	if _, err := req.RequestWith(ctxT(t, 20*time.Second), cl); err != nil {
		t.Fatalf("after the bad input, a normal client fails: %v", err)
	}
}

func closedCount(p *Proxy, reason string) float64 {
	return testutil.ToFloat64(p.Metrics().ConnsClosed.WithLabelValues(reason))
}

// TestBadInput: each kind of bad input closes only the connection that sent
// it, with a log line and a metric, and the proxy goes on serving. Against
// kfake this also proves nothing bad was forwarded: kfake panics, taking the
// test process with it, on an unknown API key.
func TestBadInput(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds, func(c *configs.Config) { c.Limits.MaxFrameBytes = 1 << 20 })
		dial := func() net.Conn {
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		waitMetric := func(reason string, atLeast float64) {
			t.Helper()
			Wait(t, 10*time.Second, "connections_closed_total{reason="+reason+"}", func() bool { return closedCount(p, reason) >= atLeast })
		}

		t.Run("oversized", func(t *testing.T) {
			c := dial()
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], 1<<20+1)
			c.Write(hdr[:])
			expectClosed(t, c)
			waitMetric("frame_too_large", 1)
			if !p.Logs.Contains("request frame too large") {
				t.Error("no log line for the oversized frame")
			}
			metadataWorks(t, p)
		})
		t.Run("negative size", func(t *testing.T) {
			c := dial()
			c.Write([]byte{0xff, 0xff, 0xff, 0xf0})
			expectClosed(t, c)
			waitMetric("frame_too_large", 2)
			metadataWorks(t, p)
		})
		t.Run("truncated", func(t *testing.T) {
			c := dial()
			f := rawRequest(kmsg.Metadata.Int16(), 9, 1, []byte{1, 0, 0, 0})
			c.Write(f[:len(f)-3])
			c.(*net.TCPConn).CloseWrite()
			expectClosed(t, c)
			waitMetric("truncated_frame", 1)
			metadataWorks(t, p)
		})
		t.Run("header too short", func(t *testing.T) {
			c := dial()
			c.Write([]byte{0, 0, 0, 3, 0, 3, 0})
			expectClosed(t, c)
			waitMetric("malformed_frame", 1)
			metadataWorks(t, p)
		})
		t.Run("client id past the frame", func(t *testing.T) {
			c := dial()
			f := []byte{0, 0, 0, 10, 0, 3, 0, 9, 0, 0, 0, 1, 0x7f, 0x00}
			c.Write(f)
			expectClosed(t, c)
			waitMetric("malformed_frame", 2)
			metadataWorks(t, p)
		})
		t.Run("garbage", func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			for i := 0; i < 20; i++ {
				c := dial()
				g := make([]byte, 64+rng.Intn(512))
				rng.Read(g)
				c.Write(g)
				c.(*net.TCPConn).CloseWrite()
				expectClosed(t, c)
			}
			metadataWorks(t, p)
		})
		t.Run("unknown api key", func(t *testing.T) {
			c := dial()
			// A good request first: its response must still arrive before the
			// connection is closed for the unknown key that follows it.
			c.Write(append(rawRequest(kmsg.ApiVersions.Int16(), 0, 41, nil), rawRequest(999, 0, 42, []byte{1, 2, 3})...))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := readResponse(c)
			if err != nil {
				t.Fatalf("the response to the request before the unknown key was lost: %v", err)
			}
			if got := int32(be32(resp)); got != 41 {
				t.Fatalf("correlation id %d, want 41", got)
			}
			expectClosed(t, c)
			waitMetric("unknown_api_key", 1)
			if !p.Logs.Contains("does not forward") {
				t.Error("no log line for the unknown API key")
			}
			metadataWorks(t, p)
		})
		t.Run("disconnect mid-request", func(t *testing.T) {
			for i := 0; i < 5; i++ {
				c := dial()
				f := rawRequest(kmsg.Metadata.Int16(), 4, 1, []byte{0, 0, 0, 0, 1})
				c.Write(f[:6+i])
				c.Close()
			}
			// And with a request in flight: a long-poll fetch, then gone.
			c := dial()
			fetch := kmsg.NewPtrFetchRequest()
			fetch.Version = 4
			fetch.MaxWaitMillis = 2000
			fetch.MinBytes = 1
			fetch.MaxBytes = 1 << 20
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "no-such-topic"
			fetch.Topics = append(fetch.Topics, ft)
			c.Write(rawRequest(kmsg.Fetch.Int16(), 4, 5, fetch.AppendTo(nil)))
			time.Sleep(50 * time.Millisecond)
			c.Close()
			metadataWorks(t, p)
		})
	})
}

// TestUpstreamDownAtStart: the proxy starts while its upstream is down,
// refuses clients with a log line and a metric, and serves them once the
// cluster comes up.
func TestUpstreamDownAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	seed := ln.Addr().String()

	cfg := func(c *configs.Config) {}
	// StartProxy waits for discovery, so start the proxy by hand here.
	p := startProxyNoWait(t, []string{seed}, cfg)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	Wait(t, 10*time.Second, "a dial error metric", func() bool {
		return testutil.ToFloat64(p.Metrics().UpstreamErrs.WithLabelValues("dial")) >= 1
	})
	if ok, _ := p.Ready(); ok {
		t.Fatal("ready while the upstream is down")
	}
	if !p.Logs.Contains("cannot reach the upstream broker") {
		t.Error("no log line for the unreachable upstream")
	}

	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatalf("kfake on port %d: %v", port, err)
	}
	defer fake.Close()
	Wait(t, 20*time.Second, "discovery", func() bool {
		_, err := p.Discover(ctxT(t, 5*time.Second), p.Client)
		return err == nil
	})
	metadataWorks(t, p)
}

// TestUpstreamDiesMidStream: the broker goes away under a connected client:
// that client's connections close, the proxy stays up and says why.
func TestUpstreamDiesMidStream(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(rawRequest(kmsg.ApiVersions.Int16(), 0, 1, nil))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := readResponse(c); err != nil {
		t.Fatalf("first response: %v", err)
	}
	b.Fake.Close()
	expectClosed(t, c)
	Wait(t, 10*time.Second, "an upstream close metric", func() bool {
		return closedCount(p, "upstream_closed")+closedCount(p, "upstream_read_error") >= 1
	})
	// The process is alive and still accepting.
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatalf("the proxy stopped accepting: %v", err)
	}
	c2.Close()
	if !strings.Contains(p.Logs.String(), "upstream") {
		t.Error("nothing logged about the upstream going away")
	}
}

// TestShutdownDrains: on shutdown the proxy stops accepting, but a request
// already in flight (a long-poll fetch) still gets its response.
func TestShutdownDrains(t *testing.T) {
	b := FakeBackend(t, 1)
	p := StartProxy(t, b.Seeds)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 4
	fetch.MaxWaitMillis = 1500
	fetch.MinBytes = 1 << 20 // nothing will satisfy it: the broker waits the full time
	fetch.MaxBytes = 1 << 20
	c.Write(rawRequest(kmsg.Fetch.Int16(), 4, 11, fetch.AppendTo(nil)))
	time.Sleep(100 * time.Millisecond) // the request is upstream now
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- p.Shutdown(ctx)
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := readResponse(c)
	if err != nil {
		t.Fatalf("in-flight request lost on shutdown: %v", err)
	}
	if got := int32(be32(resp)); got != 11 {
		t.Fatalf("correlation id %d, want 11", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
	if closedCount(p, "shutdown") < 1 {
		t.Error("the drained connection was not counted as closed for shutdown")
	}
}
