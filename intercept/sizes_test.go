package intercept

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sharetx/sharetx/configs"
)

// TestSizesCollector: the ledger's sizes are scraped by kind, and they
// follow what the ledger holds (a member and a transaction learned show up).
func TestSizesCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	fc := fakeContext(configs.Default().KIP1289)
	fc.Registry = reg
	e, _ := New(fc)
	defer e.Close()
	entries := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "sharetx_ledger_entries":
					got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
				case "sharetx_share_sessions", "sharetx_staged_calls_open":
					got[mf.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	before := entries()
	for _, k := range []string{"members", "groups", "transactions", "share_partitions", "held_offsets", "acquired_ranges",
		"owed_acks", "known_records", "waiting", "resolved", "pending", "sharetx_share_sessions", "sharetx_staged_calls_open"} {
		if v, ok := before[k]; !ok || v != 0 {
			t.Errorf("%s: %v (present %v), want 0 on a new ledger", k, v, ok)
		}
	}
	e.ledger.SetMember("User:a", "g", "m1", 3)
	e.ledger.SetTxn("User:a", "t1", 7, 0)
	after := entries()
	if after["members"] != 1 || after["transactions"] != 1 {
		t.Errorf("after a member and a transaction: %v", after)
	}
}
