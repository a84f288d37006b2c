package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// proxyProc is one sharetx process; a restart keeps its ports and id.
type proxyProc struct {
	idx       int // 1-based
	id        string
	bootstrap string // 127.0.0.1:port
	portBase  int
	metrics   string
	p         *sim.Proc
	starts    int
}

// proxyEnv is the configuration of proxy pp: everything through SHARETX_*
// variables (configs/sharetx.yaml lists the keys). Later entries win.
func proxyEnv(pp *proxyProc, level string) []string {
	return append(os.Environ(),
		"SHARETX_LISTEN_BOOTSTRAP="+pp.bootstrap,
		"SHARETX_LISTEN_ADVERTISED_HOST=127.0.0.1",
		"SHARETX_LISTEN_BROKER_PORT_BASE="+strconv.Itoa(pp.portBase),
		"SHARETX_METRICS_ADDRESS="+pp.metrics,
		"SHARETX_KIP1289_PROXY_ID="+pp.id,
		"SHARETX_LOG_LEVEL="+level,
	)
}

// start starts (or restarts) the proxy and waits until it says ready.
func (pp *proxyProc) start(bin string, seeds []string, logLevel, dir string, t0 time.Time, timeout time.Duration) error {
	pp.starts++
	p, err := sim.StartSharetx(pp.id, bin, []string{"--upstream", strings.Join(seeds, ",")}, proxyEnv(pp, logLevel),
		filepath.Join(dir, fmt.Sprintf("proxy-%d.log", pp.idx)), t0, timeout)
	if p != nil {
		pp.p = p
	}
	return err
}

// scrape reads the proxy's Prometheus metrics: series (with labels) → value.
func (pp *proxyProc) scrape() (map[string]float64, error) {
	return sim.Scrape(pp.metrics, "sharetx_")
}

// kipSummary is the line of a proxy's KIP-1289 counters printed after a phase.
func kipSummary(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		for _, pre := range []string{"sharetx_txn_share_acknowledge_total", "sharetx_markers_total", "sharetx_upstream_ack_failures_total",
			"sharetx_client_acks_absorbed_total", "sharetx_client_share_session_epoch_errors_total", "sharetx_lock_renewals_total",
			"sharetx_tx_pending_records", "sharetx_commit_to_applied_seconds_count"} {
			if strings.HasPrefix(k, pre) {
				parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimPrefix(k, "sharetx_"), v))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
