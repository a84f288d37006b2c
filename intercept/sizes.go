package intercept

import (
	"github.com/prometheus/client_golang/prometheus"
)

// sizesCollector reports, at each scrape, how much state the feature holds
// (sharetx_ledger_entries by kind, sharetx_share_sessions,
// sharetx_staged_calls_open): the figures a proxy left running for days must
// keep flat. make soak fails when one keeps growing.
type sizesCollector struct {
	e        *KIP1289
	entries  *prometheus.Desc
	sessions *prometheus.Desc
	calls    *prometheus.Desc
}

func newSizesCollector(e *KIP1289) *sizesCollector {
	return &sizesCollector{e: e,
		entries: prometheus.NewDesc("sharetx_ledger_entries",
			"What the staging ledger holds, by kind: members, groups, transactions, share_partitions, held_offsets, acquired_ranges, owed_acks, known_records, waiting, resolved, pending.",
			[]string{"kind"}, nil),
		sessions: prometheus.NewDesc("sharetx_share_sessions", "Share sessions the proxy translates (members' sessions it may send on).", nil, nil),
		calls:    prometheus.NewDesc("sharetx_staged_calls_open", "TxnShareAcknowledge calls of this proxy whose transaction has not been resolved yet.", nil, nil),
	}
}

func (c *sizesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.sessions
	ch <- c.calls
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
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(kv.n), kv.kind)
	}
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(c.e.sessions.Len()))
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.GaugeValue, float64(c.e.resolver.Calls()))
}
