package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metrics are the proxy's Prometheus series, all under the sharetx_
// namespace. Per-API series are resolved once per key, on first use, so the
// hot path does no label lookups.
type Metrics struct {
	Registry *prometheus.Registry

	ConnsActive   *prometheus.GaugeVec
	ConnsTotal    *prometheus.CounterVec
	ConnsClosed   *prometheus.CounterVec
	UpstreamErrs  *prometheus.CounterVec
	Rewrites      *prometheus.CounterVec
	UpstreamNodes prometheus.Gauge
	Injected      prometheus.Counter

	requestsVec  *prometheus.CounterVec
	reqBytesVec  *prometheus.CounterVec
	respBytesVec *prometheus.CounterVec
	latencyVec   *prometheus.HistogramVec
	interceptVec *prometheus.HistogramVec
	perAPI       [kmsg.MaxKey + 1]atomic.Pointer[apiSeries]
}

// apiSeries are the series of one API key, resolved on its first request so
// /metrics lists only the APIs that were used.
type apiSeries struct {
	requests, reqBytes, respBytes prometheus.Counter
	latency                       prometheus.Observer
	// the proxy's own work on a request (its hook) and on a response
	// (decode, rewrite, encode), for the keys that have them
	hookRequest, hookResponse prometheus.Observer
}

// api returns the series of key, which must be known to kmsg.
func (m *Metrics) api(key int16) *apiSeries {
	if s := m.perAPI[key].Load(); s != nil {
		return s
	}
	name := kmsg.NameForKey(key)
	s := &apiSeries{
		requests:  m.requestsVec.WithLabelValues(name),
		reqBytes:  m.reqBytesVec.WithLabelValues(name),
		respBytes: m.respBytesVec.WithLabelValues(name),
		latency:   m.latencyVec.WithLabelValues(name),
		// Curried lazily: only keys with a hook or a rewriter get series.
		hookRequest:  lazyObserver(func() prometheus.Observer { return m.interceptVec.WithLabelValues(name, "request") }),
		hookResponse: lazyObserver(func() prometheus.Observer { return m.interceptVec.WithLabelValues(name, "response") }),
	}
	m.perAPI[key].CompareAndSwap(nil, s)
	return m.perAPI[key].Load()
}

// NewMetrics registers the proxy's metrics in a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r}
	m.ConnsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sharetx", Name: "client_connections_active",
		Help: "Client connections open now, by listener (bootstrap or broker node id)."}, []string{"listener"})
	m.ConnsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "client_connections_total",
		Help: "Client connections accepted, by listener."}, []string{"listener"})
	m.ConnsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "connections_closed_total",
		Help: "Connection pairs closed, by reason (client_closed, upstream_closed, frame_too_large, malformed_frame, unknown_api_key, idle, shutdown, max_connections, decoded_request_too_large, ...)."}, []string{"reason"})
	m.UpstreamErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "upstream_errors_total",
		Help: "The proxy's own errors talking to upstream brokers, by kind: dial, discovery, decode, and read or write while a request of the proxy's own was waiting on the connection (a broker closing a client's connection counts in connections_closed_total only)."}, []string{"kind"})
	m.Rewrites = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "rewrites_total",
		Help: "Responses the proxy re-encoded after rewriting them, by API."}, []string{"api"})
	m.UpstreamNodes = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "upstream_brokers",
		Help: "Upstream brokers the proxy knows and serves a listener for."})
	m.Injected = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sharetx", Name: "injected_requests_total",
		Help: "Requests the proxy sent upstream on a client's connection on its own behalf."})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "requests_total",
		Help: "Client requests, by API."}, []string{"api"})
	reqBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "request_bytes_total",
		Help: "Bytes of client requests, by API."}, []string{"api"})
	respBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "response_bytes_total",
		Help: "Bytes of responses sent to clients, by API."}, []string{"api"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sharetx", Name: "request_duration_seconds",
		Help:    "Time from reading a request to writing its response, by API.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"api"})
	intercept := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sharetx", Name: "intercept_seconds",
		Help:    "The proxy's own work on a request (its hook: the client-ack filter, epoch translation, relays) or a response (decode, rewrite — redelivery screening included —, encode), by API and direction; only APIs the proxy looks into.",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5, 15}}, []string{"api", "direction"})
	// The Go runtime's and the process's own (go_goroutines, go_memstats_*,
	// process_resident_memory_bytes, process_open_fds, ...), as every Go
	// service exposes them: make soak watches them for growth.
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.MustRegister(m.ConnsActive, m.ConnsTotal, m.ConnsClosed, m.UpstreamErrs, m.Rewrites, m.UpstreamNodes, m.Injected,
		requests, reqBytes, respBytes, latency, intercept)
	m.requestsVec, m.reqBytesVec, m.respBytesVec, m.latencyVec, m.interceptVec = requests, reqBytes, respBytes, latency, intercept
	return m
}

// lazyObserver resolves its series on the first observation, so /metrics
// lists only what happened.
func lazyObserver(get func() prometheus.Observer) prometheus.Observer {
	return &lazyObs{get: get}
}

type lazyObs struct {
	once sync.Once
	get  func() prometheus.Observer
	o    prometheus.Observer
}

func (l *lazyObs) Observe(v float64) {
	l.once.Do(func() { l.o = l.get() })
	l.o.Observe(v)
}
