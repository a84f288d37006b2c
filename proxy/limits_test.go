package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
)

// forwarder relays every connection it accepts to target and counts them:
// it stands between the proxy and its upstream to see the proxy's dials.
type forwarder struct {
	ln       net.Listener
	accepted atomic.Int32
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

// startProxyVia runs a proxy whose bootstrap upstream is a forwarder to a
// kfake broker, marked ready as if discovery had answered.
func startProxyVia(t *testing.T, mod func(*configs.Config)) (*Server, *forwarder) {
	t.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	fwd := startForwarder(t, fake.ListenAddrs()[0])
	cfg := configs.Default()
	cfg.Listen.Bootstrap = "127.0.0.1:0"
	cfg.Listen.BrokerPortBase = 0
	cfg.Upstream.BootstrapServers = []string{fwd.ln.Addr().String()}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.ready.Store(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, fwd
}

func dialProxy(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func apiVersionsFrame(corr int32) []byte {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	return EncodeRequestFrame(corr, "limits", req)
}

// readCorr reads one response frame and returns its correlation id.
func readCorr(t *testing.T, c net.Conn) int32 {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := ReadFrame(c, 64<<20)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	return int32(binary.BigEndian.Uint32(f[4:]))
}

// TestNoUpstreamDialBeforeFirstRequest: connections that send nothing, or
// only part of a request, open no upstream connection; the one that sends a
// whole request does, and is served.
func TestNoUpstreamDialBeforeFirstRequest(t *testing.T) {
	s, fwd := startProxyVia(t, nil)
	for i := 0; i < 40; i++ {
		dialProxy(t, s)
	}
	partial := apiVersionsFrame(1)
	for i := 0; i < 10; i++ {
		dialProxy(t, s).Write(partial[:4+i])
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.ClientConns() < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy accepted %d of 50 connections", s.ClientConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := dialProxy(t, s)
	c.Write(apiVersionsFrame(7))
	if corr := readCorr(t, c); corr != 7 {
		t.Fatalf("correlation id %d, want 7", corr)
	}
	if n := fwd.accepted.Load(); n != 1 {
		t.Fatalf("the upstream saw %d connections from the proxy, want 1 (only the client that sent a request)", n)
	}
}
