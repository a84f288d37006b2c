package main

import (
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// proxyProc is the sharetx process under test: a separate OS process in
// front of the cluster, configured by flags and SHARETX_* variables.
type proxyProc struct {
	*sim.Proc
	bootstrap string // where clients connect
	metrics   string // host:port of /metrics
	logPath   string
}

// startProxy starts bin in front of seeds and waits for "sharetx: ready".
// Port layout: base = bootstrap, base+1 = metrics, base+2+N = broker N.
// name names the process (its proxy id is bench-<pid>-<name>, its log
// <name>.log in dir).
func startProxy(bin string, seeds []string, dir, name, logLevel string, timeout time.Duration) (*proxyProc, error) {
	base, err := sim.FreePortBlock(16, rand.New(rand.NewSource(time.Now().UnixNano())).Intn)
	if err != nil {
		return nil, err
	}
	pp := &proxyProc{
		bootstrap: fmt.Sprintf("127.0.0.1:%d", base),
		metrics:   fmt.Sprintf("127.0.0.1:%d", base+1),
		logPath:   filepath.Join(dir, name+".log"),
	}
	env := append(os.Environ(),
		"SHARETX_LISTEN_ADVERTISED_HOST=127.0.0.1",
		"SHARETX_LISTEN_BROKER_PORT_BASE="+strconv.Itoa(base+2),
		"SHARETX_KIP1289_PROXY_ID=bench-"+strconv.Itoa(os.Getpid())+"-"+name,
		"SHARETX_LOG_LEVEL="+logLevel,
	)
	args := []string{"--upstream", strings.Join(seeds, ","), "--bootstrap", pp.bootstrap, "--metrics", pp.metrics}
	if pp.Proc, err = sim.StartSharetx(name, bin, args, env, pp.logPath, time.Now(), timeout); err != nil {
		return nil, err
	}
	return pp, nil
}

func (pp *proxyProc) pid() int { return pp.Pid() }

func (pp *proxyProc) alive() bool { return !pp.Exited() }

// stop sends SIGTERM (graceful shutdown) and, after 15 s, SIGKILL.
func (pp *proxyProc) stop() {
	pp.Signal(syscall.SIGTERM)
	pp.Wait(15 * time.Second)
}

// scrape reads the proxy's /metrics.
func (pp *proxyProc) scrape() (metrics, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + pp.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// usage is the proxy's CPU time, memory and traffic at one moment.
type usage struct {
	at     time.Time
	cpu    procCPU
	mem    procMem
	bytes  float64 // request + response bytes the proxy moved (its own counters)
	scrape metrics
}

func (pp *proxyProc) usage() (usage, error) {
	u := usage{at: time.Now()}
	var err error
	if u.cpu, err = readProcCPU(pp.pid()); err != nil {
		return u, err
	}
	if u.mem, err = readProcMem(pp.pid()); err != nil {
		return u, err
	}
	if u.scrape, err = pp.scrape(); err != nil {
		return u, err
	}
	u.bytes = u.scrape.sum("sharetx_request_bytes_total") + u.scrape.sum("sharetx_response_bytes_total")
	return u, nil
}

// proxyCost is what one proxied phase cost the proxy process.
type proxyCost struct {
	CPUSeconds   float64 `json:"cpu_seconds"`
	BytesMoved   float64 `json:"bytes_moved"`
	CPUSecPerGB  float64 `json:"cpu_seconds_per_gb"`
	MillicoresMB float64 `json:"millicores_per_mb_s"`
	RSSBytes     int64   `json:"rss_bytes_after"`
	HWMBytes     int64   `json:"hwm_bytes_after"`
}

func costBetween(a, b usage) proxyCost {
	c := proxyCost{CPUSeconds: b.cpu.Total() - a.cpu.Total(), BytesMoved: b.bytes - a.bytes, RSSBytes: b.mem.RSS, HWMBytes: b.mem.HWM}
	if c.BytesMoved > 0 {
		c.CPUSecPerGB = c.CPUSeconds / (c.BytesMoved / 1e9)
		// millicores per MB/s = (cpu_s/elapsed·1000) / (MB/elapsed) = cpu_ms per MB
		c.MillicoresMB = c.CPUSeconds * 1000 / (c.BytesMoved / 1e6)
	}
	return c
}
