package intercept

import (
	"github.com/prometheus/client_golang/prometheus"
)

// sizesCollector reports, at each scrape, how much state the feature holds
// (sharetx_ledger_entries by kind, sharetx_share_sessions,
// sharetx_staged_calls_open): the figures a proxy left running for days must
// keep flat. make soak fails when one keeps growing. The ledger is counted
// once per scrape, not once per series.
type sizesCollector struct {
	e        *KIP1289
	entries  *prometheus.GaugeVec
	sessions prometheus.Gauge
	calls    prometheus.Gauge
}

func newSizesCollector(e *KIP1289) *sizesCollector {
	return &sizesCollector{e: e,
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sharetx", Name: "ledger_entries",
			Help: "What the staging ledger holds, by kind: members, groups, transactions, share_partitions, held_offsets, acquired_ranges, owed_acks, known_records, waiting, resolved, pending."},
			[]string{"kind"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "share_sessions",
			Help: "Share sessions the proxy translates (members' sessions it may send on)."}),
		calls: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sharetx", Name: "staged_calls_open",
			Help: "TxnShareAcknowledge calls of this proxy whose transaction has not been resolved yet."}),
	}
}

func (c *sizesCollector) Describe(ch chan<- *prometheus.Desc) {
	c.entries.Describe(ch)
	c.sessions.Describe(ch)
	c.calls.Describe(ch)
}

func (c *sizesCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.ledger.Sizes()
	for _, kv := range []struct {
		kind string
		n    int
	}{
		{"members", s.Members}, {"groups", s.Groups}, {"transactions", s.Transactions}, {"share_partitions", s.SharePartition},
		{"held_offsets", s.HeldOffsets}, {"acquired_ranges", s.AcquiredRanges}, {"owed_acks", s.OwedAcks},
		{"known_records", s.KnownRecords}, {"waiting", s.Waiting}, {"resolved", s.Resolved}, {"pending", s.Pending},
	} {
		c.entries.WithLabelValues(kv.kind).Set(float64(kv.n))
	}
	c.sessions.Set(float64(c.e.sessions.Len()))
	c.calls.Set(float64(c.e.resolver.Calls()))
	c.entries.Collect(ch)
	c.sessions.Collect(ch)
	c.calls.Collect(ch)
}
