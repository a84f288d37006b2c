// Package proxy is the transparent Kafka proxy: a bootstrap listener plus
// one listener per upstream broker (port per broker), each client
// connection paired with one upstream connection to the broker its port
// names. Frames that no handler needs pass through byte for byte apart from
// the correlation id, which the proxy owns upstream.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/upstream"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Server is one running proxy.
type Server struct {
	cfg     configs.Config
	log     *slog.Logger
	metrics *Metrics
	dialer  *upstream.Dialer
	tls     *tls.Config
	// filter is the feature (the KIP-1289 engine, built by the NewFilter
	// New was given; noFilter for none) as the connections and the
	// server's life see it; handlers says what to do with each API key,
	// the transport's hooks and the filter's composed.
	filter   Filter
	handlers *Registry
	// advertise is Advertise, but for tests of the rewriters alone.
	advertise func(nodeID int32, host string, port int32) (string, int32)
	advHost   string
	bindHst   string

	mu          sync.Mutex
	nodes       map[int32]*node
	bootstrap   net.Listener
	metricsAddr string // where Run serves /metrics, empty for none
	conns       map[*conn]struct{}
	closing     bool
	wg          sync.WaitGroup

	// upstreamKeys is the union of API keys the upstream brokers advertised:
	// a key outside it is never forwarded.
	upstreamKeys UpstreamKeys
	ready        atomic.Bool
	up           atomic.Pointer[upstream.Client] // the proxy's own client, from startFilter
	lastErr      atomic.Value                    // string: last discovery error
	seedNext     atomic.Uint32

	// clientConns counts the client connections being served, from accept
	// until their pair is closed (limits.max_connections).
	clientConns atomic.Int64
	requireAuth bool   // the upstream requires SASL (upstream.sasl is set): clients must authenticate
	shares      shares // per source address (limits.max_connections_per_source)
	principals  shares // per authenticated principal (limits.max_connections_per_principal)
	refusedMu   sync.Mutex
	refused     int       // connections refused since the last log line
	refusedLog  time.Time // when that line was written
}

// node is one upstream broker and its proxy listener.
type node struct {
	id       int32
	upstream string // host:port of the real broker
	ln       net.Listener
	port     int32
}

// New builds a server; Run serves it (Start only opens its listeners).
// With no upstream brokers configured, Run starts an embedded cluster.
// newFilter builds the feature the transport serves (intercept.New, the
// KIP-1289 engine); nil serves none: a plain pass-through proxy.
func New(cfg configs.Config, log *slog.Logger, metrics *Metrics, newFilter NewFilter) (*Server, error) {
	d, err := upstream.NewDialer(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	stls, err := upstream.ServerTLS(cfg.Listen.TLS)
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	bindHost, _, _ := net.SplitHostPort(cfg.Listen.Bootstrap)
	if len(cfg.Upstream.BootstrapServers) == 0 {
		// The embedded cluster (Run starts it) does not authorise the
		// transactional id on Produce.
		cfg.KIP1289.LearnOwnerFromProduce = false
	}
	s := &Server{
		cfg:         cfg,
		log:         log,
		metrics:     metrics,
		dialer:      d,
		tls:         stls,
		advHost:     cfg.AdvertisedHost(),
		bindHst:     bindHost,
		nodes:       map[int32]*node{},
		conns:       map[*conn]struct{}{},
		requireAuth: cfg.Upstream.SASL.Mechanism != "",
		filter:      noFilter{},
	}
	s.advertise = s.Advertise
	var fh *Hooks
	if newFilter != nil {
		f, err := newFilter(FilterContext{Config: cfg, Log: log, Registry: metrics.Registry, Send: s.sideChannel, RequireAuth: s.requireAuth})
		if err != nil {
			return nil, err
		}
		s.filter, fh = f, &Hooks{}
		f.Register(fh)
	}
	s.handlers = NewRegistry(s.transportHooks(), fh)
	return s, nil
}

// startFilter hands the filter the proxy's own client once the cluster
// answers (the side channel from now on) and starts it (Filter.Start).
func (s *Server) startFilter(ctx context.Context, cl *upstream.Client) error {
	s.up.Store(cl)
	return s.filter.Start(ctx, StartEnv{Client: cl,
		ClientOpts: upstream.ClientOpts(s.cfg.Upstream.BootstrapServers, s.dialer, s.cfg.Upstream.SASL)})
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Start opens the bootstrap listener. Broker listeners open as brokers are
// discovered (Discover, or any Metadata-like response passing through).
func (s *Server) Start() error {
	if len(s.cfg.Upstream.BootstrapServers) == 0 {
		return &configs.Error{Key: "upstream.bootstrap_servers", Msg: "no upstream brokers configured"}
	}
	ln, err := net.Listen("tcp", s.cfg.Listen.Bootstrap)
	if err != nil {
		return &configs.Error{Key: "listen.bootstrap", Msg: fmt.Sprintf("cannot listen: %v", err)}
	}
	s.mu.Lock()
	s.bootstrap = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln, -1)
	return nil
}

// BootstrapAddr is the address the bootstrap listener is bound to.
func (s *Server) BootstrapAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bootstrap == nil {
		return ""
	}
	_, port, _ := net.SplitHostPort(s.bootstrap.Addr().String())
	return net.JoinHostPort(s.advHost, port)
}

// Broker describes one upstream broker and where the proxy serves it.
type Broker struct {
	NodeID   int32
	Upstream string
	Proxy    string
}

// Brokers lists the upstream brokers known now, by node id.
func (s *Server) Brokers() []Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Broker, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, Broker{NodeID: n.id, Upstream: n.upstream, Proxy: net.JoinHostPort(s.advHost, strconv.Itoa(int(n.port)))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Advertise records where node id lives
// upstream, opens its listener the first time, and returns the proxy's
// address for it. The listener is open before the rewritten response leaves
// the proxy, so a client can dial it at once.
func (s *Server) Advertise(id int32, host string, port int32) (string, int32) {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	if n == nil {
		n = &node{id: id, upstream: addr}
		s.nodes[id] = n
		s.metrics.UpstreamNodes.Set(float64(len(s.nodes)))
		if !s.closing {
			s.listenNode(n)
		}
	} else if n.upstream != addr {
		s.log.Info("upstream broker moved", "node", id, "from", n.upstream, "to", addr)
		n.upstream = addr
	}
	return s.advHost, n.port
}

// listenNode opens the listener of n; s.mu is held. A failure is logged and
// retried on the next Advertise of the node.
func (s *Server) listenNode(n *node) {
	want := s.cfg.BrokerPort(n.id)
	if want > 65535 {
		s.log.Error("no port for upstream broker: broker_port_base + node id is above 65535; set listen.broker_ports for it", "node", n.id)
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(s.bindHst, strconv.Itoa(want)))
	if err != nil {
		s.log.Error("cannot open the listener for upstream broker; clients cannot reach it through the proxy until it opens (set listen.broker_ports or free the port)",
			"node", n.id, "port", want, "err", err)
		return
	}
	n.ln = ln
	n.port = int32(ln.Addr().(*net.TCPAddr).Port)
	s.log.Info("serving upstream broker", "node", n.id, "upstream", n.upstream, "proxy", net.JoinHostPort(s.advHost, strconv.Itoa(int(n.port))))
	s.wg.Add(1)
	go s.accept(ln, n.id)
}

// accept serves one listener; node is -1 for the bootstrap listener.
func (s *Server) accept(ln net.Listener, nodeID int32) {
	defer s.wg.Done()
	label := "bootstrap"
	if nodeID >= 0 {
		label = strconv.Itoa(int(nodeID))
	}
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, do not spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", "listener", label, "err", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.metrics.ConnsTotal.WithLabelValues(label).Inc()
		src, ok := s.admit(c, label)
		if !ok {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.clientConns.Add(-1)
			defer s.shares.leave(src)
			s.serve(c, nodeID, label)
		}()
	}
}

// admit counts a new client connection against limits.max_connections and
// limits.max_connections_per_source; past either it closes the connection
// at once (before any TLS handshake, read or upstream dial) and returns
// false. src is the source the connection counts against until it closes.
func (s *Server) admit(c net.Conn, label string) (src string, ok bool) {
	limit := s.cfg.Limits.MaxConnections
	if s.clientConns.Add(1) > int64(limit) {
		s.clientConns.Add(-1)
		s.refuse(c, label, "max_connections", "limits.max_connections are open already", limit)
		return "", false
	}
	src = sourceOf(c.RemoteAddr())
	if !s.shares.enter(src, s.cfg.Limits.MaxConnectionsPerSource) {
		s.clientConns.Add(-1)
		s.refuse(c, label, "max_connections_per_source", "limits.max_connections_per_source are open from its address already", s.cfg.Limits.MaxConnectionsPerSource)
		return "", false
	}
	return src, true
}

// refuse closes a connection admit did not let in, counting it by reason.
// A flood of connections must not become a flood of log lines: one a
// second at most, with the count since the last.
func (s *Server) refuse(c net.Conn, label, reason, why string, limit int) {
	s.metrics.ConnsClosed.WithLabelValues(reason).Inc()
	s.refusedMu.Lock()
	s.refused++
	var n int
	if now := time.Now(); now.Sub(s.refusedLog) >= time.Second {
		n, s.refused, s.refusedLog = s.refused, 0, now
	}
	s.refusedMu.Unlock()
	if n > 0 {
		s.log.Warn("refusing client connection: "+why+" (closed at once; sharetx_connections_closed_total{reason=\""+reason+"\"})",
			"limit", limit, "client", c.RemoteAddr().String(), "listener", label, "refused_since_last_line", n)
	}
	c.Close() // after the metric and the log line: the client may look at them once it sees the close
}

// sourceOf is the source a connection counts against: its IP address.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// shares counts open client connections per key (a source address, or a
// principal): each key's count is bounded on its own, so one client holding
// its share leaves the others theirs. A key with no connection is
// forgotten.
type shares struct {
	mu sync.Mutex
	m  map[string]int
}

// enter counts one more connection of key, unless limit are open already.
func (sh *shares) enter(key string, limit int) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[key] >= limit {
		return false
	}
	if sh.m == nil {
		sh.m = map[string]int{}
	}
	sh.m[key]++
	return true
}

// leave counts one connection of key less.
func (sh *shares) leave(key string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[key]--; sh.m[key] <= 0 {
		delete(sh.m, key)
	}
}

// ClientConns is the number of client connections being served now (each
// counts against limits.max_connections until its pair is closed).
func (s *Server) ClientConns() int { return int(s.clientConns.Load()) }

func (s *Server) serve(client net.Conn, nodeID int32, label string) {
	if tc, ok := client.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if s.tls != nil {
		tconn := tls.Server(client, s.tls)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Upstream.DialTimeout)
		err := tconn.HandshakeContext(ctx)
		cancel()
		if err != nil {
			s.log.Warn("client TLS handshake failed", "client", client.RemoteAddr().String(), "err", err)
			s.metrics.ConnsClosed.WithLabelValues("client_tls_error").Inc()
			client.Close()
			return
		}
		client = tconn
	}
	c := newConn(s, client, label, nodeID)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		client.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	// The upstream is dialed once the client's first request has arrived
	// (conn.run), so a connection that sends nothing opens nothing upstream.
	// Until the cluster has answered once, each connection checks it at
	// once instead: a proxy that cannot reach (or verify) its cluster
	// refuses clients as they connect, saying why.
	if !s.ready.Load() {
		up, node, err := s.dialFor(c)
		if err != nil {
			c.close("upstream_dial_error")
			s.metrics.ConnsClosed.WithLabelValues("upstream_dial_error").Inc()
			return
		}
		if !c.attach(up, node) {
			return
		}
	}
	active := s.metrics.ConnsActive.WithLabelValues(label)
	active.Inc()
	c.run()
	c.leavePrincipal()
	active.Dec()
}

// dialFor connects c's upstream: the broker of its listener, or for the
// bootstrap listener the first bootstrap server that answers. It returns the
// upstream's node id (-1 unknown). A failure is counted and logged.
func (s *Server) dialFor(c *conn) (net.Conn, int32, error) {
	up, err := s.dialUpstream(c.node)
	if err != nil {
		s.metrics.UpstreamErrs.WithLabelValues("dial").Inc()
		s.log.Warn("closing client connection: cannot reach the upstream broker", "client", c.client.RemoteAddr().String(), "listener", c.listener, "err", err)
		return nil, 0, err
	}
	node := c.node
	if node < 0 {
		node = s.nodeForAddr(up.RemoteAddr().String())
	}
	return up, node, nil
}

// nodeForAddr finds the node id of an upstream address, -1 if unknown.
func (s *Server) nodeForAddr(addr string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.nodes {
		if n.upstream == addr {
			return id
		}
	}
	return -1
}

// dialUpstream connects to the broker of nodeID, or for the bootstrap
// listener to the first bootstrap server that answers.
func (s *Server) dialUpstream(nodeID int32) (net.Conn, error) {
	var addrs []string
	if nodeID >= 0 {
		s.mu.Lock()
		n := s.nodes[nodeID]
		if n != nil {
			addrs = []string{n.upstream}
		}
		s.mu.Unlock()
		if addrs == nil {
			return nil, fmt.Errorf("no upstream address known for node %d", nodeID)
		}
	} else {
		seeds := s.cfg.Upstream.BootstrapServers
		start := int(s.seedNext.Add(1)) % len(seeds)
		for i := range seeds {
			addrs = append(addrs, seeds[(start+i)%len(seeds)])
		}
	}
	var errs []error
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Upstream.DialTimeout)
		c, err := s.dialer.DialContext(ctx, "tcp", a)
		cancel()
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// forwardable reports whether requests of key, whose Handler is h, may go
// upstream: kmsg must know the key (the proxy must be able to parse the
// header) and, once the upstream told us its keys, one of its brokers must
// support it.
func (s *Server) forwardable(h *Handler, key int16) bool {
	return h.Known && s.upstreamKeys.Allows(key)
}

// Discover asks the cluster for its brokers once, opening listeners for new
// ones. The first success makes the server ready.
func (s *Server) Discover(ctx context.Context, cl *upstream.Client) ([]upstream.Broker, error) {
	brokers, versions, err := cl.Discover(ctx)
	if err != nil {
		s.metrics.UpstreamErrs.WithLabelValues("discovery").Inc()
		s.lastErr.Store(err.Error())
		return nil, err
	}
	for _, b := range brokers {
		s.Advertise(b.NodeID, b.Host, b.Port)
	}
	if versions != nil {
		s.upstreamKeys.Note(versions)
		if err := s.filter.CheckUpstream(versions); err != nil {
			s.lastErr.Store(err.Error())
			return nil, &FatalError{err}
		}
	}
	s.lastErr.Store("")
	s.ready.Store(true)
	return brokers, nil
}

// RunDiscovery refreshes the broker list every metadata_refresh until ctx
// ends.
func (s *Server) RunDiscovery(ctx context.Context, cl *upstream.Client) {
	t := time.NewTicker(s.cfg.Upstream.MetadataRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Upstream.DialTimeout)
		if _, err := s.Discover(dctx, cl); err != nil && ctx.Err() == nil {
			s.log.Warn("refreshing upstream brokers failed", "err", err)
		}
		cancel()
	}
}

// Ready reports whether the proxy is ready to serve: the upstream cluster
// has answered and the filter is ready (for the KIP-1289 engine: the shadow
// topic was read back, startFilter); otherwise it says why not.
func (s *Server) Ready() (bool, string) {
	if !s.ready.Load() {
		e, _ := s.lastErr.Load().(string)
		return false, "the upstream cluster has not answered yet: " + e
	}
	return s.filter.Ready()
}

// FatalError is a discovery result that retrying cannot fix.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// stopAcceptingLocked closes every listener; s.mu is held.
func (s *Server) stopAcceptingLocked() {
	s.closing = true
	if s.bootstrap != nil {
		s.bootstrap.Close()
	}
	for _, n := range s.nodes {
		if n.ln != nil {
			n.ln.Close()
		}
	}
}

// Kill stops the proxy the way a crashed process stops (kill -9), for tests
// and the chaos tool's in-process runs: nothing more is applied, renewed or
// drained; every listener and connection (so every upstream share session)
// closes at once.
func (s *Server) Kill() {
	s.filter.Close()
	s.mu.Lock()
	s.closing = true
	s.stopAcceptingLocked()
	for c := range s.conns {
		c.close("killed")
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, lets requests already read finish and their
// responses reach the clients, and closes every connection; whatever is
// still open when ctx ends is closed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	defer s.filter.Close()
	s.stopAcceptingLocked()
	for c := range s.conns {
		c.drain()
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	n := len(s.conns)
	for c := range s.conns {
		c.close("shutdown_forced")
	}
	s.mu.Unlock()
	<-done
	return fmt.Errorf("%d connections still busy after the shutdown grace period were closed", n)
}

// sideChannel sends req to broker node on the proxy's own client (the
// engine's side channel, upstream.SideChannel).
func (s *Server) sideChannel(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	cl := s.up.Load()
	if cl == nil {
		return nil, upstream.ErrNoSideChannel
	}
	return cl.Broker(int(node)).Request(ctx, req)
}
