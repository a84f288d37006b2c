package intercept

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/markers"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// Start prepares the KIP-1289 path once the cluster answers: it creates the
// shadow topic when missing, reads it back for kip1289.recovery_lookback
// (docs/design.md §8.2), tails it for shadow records and control markers,
// installs the shadow writer and prunes every 30 s until ctx ends or Close.
// Until it returns TxnShareAcknowledge answers COORDINATOR_NOT_AVAILABLE
// (retriable), TRANSACTION_ABORTABLE once that has lasted
// kip1289.not_ready_retry_for. A failed Start leaves nothing running and
// may be called again; once it succeeded, not again.
func (e *KIP1289) Start(ctx context.Context, env proxy.StartEnv) error {
	cfg, cl := e.cfg, env.Client
	key, keySource, err := ShadowKey(e.full)
	if err != nil {
		return err
	}
	e.log.Info("shadow records are signed and verified", "key_from", keySource)
	if keySource == "fixed" {
		e.log.Warn("the shadow key is the fixed one of clusters without authentication: anyone who can write the shadow topic can stage acknowledgements. Set kip1289.shadow_key_file (the same secret on every sidecar) on a cluster with ACLs")
	}
	w := staging.NewWriter(cl.Client, cfg.ShadowTopic, key)
	n, err := w.EnsureTopic(ctx, int32(cfg.ShadowPartitions), int16(cfg.ShadowReplication))
	if err != nil {
		return fmt.Errorf("shadow topic %s: %w (the proxy's principal needs CREATE on it, or create it yourself)", cfg.ShadowTopic, err)
	}
	// Read back recovery_lookback: the staged and committed acknowledgements
	// of every proxy (this one before a restart included), to screen
	// redelivered records (docs/design.md §8.2).
	start, err := markers.OffsetsAfter(ctx, cl.Client, cfg.ShadowTopic, time.Now().Add(-cfg.RecoveryLookback))
	if err != nil {
		return fmt.Errorf("shadow topic %s offsets: %w", cfg.ShadowTopic, err)
	}
	ends, err := markers.EndOffsets(ctx, cl.Client, cfg.ShadowTopic)
	if err != nil {
		return fmt.Errorf("shadow topic %s end offsets: %w", cfg.ShadowTopic, err)
	}
	t, err := markers.Follow(append(slices.Clone(env.ClientOpts), upstream.Logger(e.log, "shadow-tail")), cfg.ShadowTopic, start, key, e.resolver)
	if err != nil {
		return fmt.Errorf("tailing shadow topic %s: %w", cfg.ShadowTopic, err)
	}
	var backlog int64
	for p, end := range ends {
		backlog += end - start[p]
	}
	t0 := time.Now()
	e.log.Info("reading the shadow topic back to recover staged and committed acknowledgements", "topic", cfg.ShadowTopic, "lookback", cfg.RecoveryLookback, "records", backlog)
	if err := t.WaitCaughtUp(ctx, ends); err != nil {
		t.Close()
		return fmt.Errorf("recovering from shadow topic %s: %w", cfg.ShadowTopic, err)
	}
	e.log.Info("shadow topic read", "records", backlog, "took", time.Since(t0).Round(time.Millisecond), "known", e.KnownRanges())
	if !e.keepTailer(t) { // closed meanwhile
		t.Close()
		return fmt.Errorf("sharetx is shutting down")
	}
	if e.reg != nil {
		registerOnce(e.reg,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sharetx", Name: "shadow_tail_lag_records",
				Help: "Records of the shadow topic the proxy's tailer has not read yet (as of the last high watermarks it fetched)."},
				func() float64 { return float64(t.Lag()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sharetx", Name: "shadow_unresolved_records",
				Help: "Shadow records of this proxy read from the shadow topic and waiting for their transaction's marker."},
				func() float64 { return float64(t.Pending()) }))
	}
	e.applier.CheckRenew(ctx, cl)
	e.install(w, n, func(ctx context.Context) error {
		ends, err := markers.EndOffsets(ctx, cl.Client, cfg.ShadowTopic)
		if err != nil {
			return err
		}
		return t.WaitCaughtUp(ctx, ends)
	})
	go e.pruneLoop(ctx, cl)
	return nil
}

// keepTailer makes t the feature's tailer, closed by Close; false when
// Close came first.
func (e *KIP1289) keepTailer(t *markers.Tailer) bool {
	e.tailMu.Lock()
	defer e.tailMu.Unlock()
	if e.ctx.Err() != nil {
		return false
	}
	e.tailer = t
	return true
}

// closeTailer closes the tailer Start kept, once.
func (e *KIP1289) closeTailer() {
	e.tailMu.Lock()
	t := e.tailer
	e.tailer = nil
	e.tailMu.Unlock()
	if t != nil {
		t.Close()
	}
}

// pruneLoop prunes the ledger, the sessions and the known ranges every 30 s
// (docs/design.md §8.4) until ctx ends or Close.
func (e *KIP1289) pruneLoop(ctx context.Context, cl *upstream.Client) {
	tk := time.NewTicker(30 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.ctx.Done():
			return
		case now := <-tk.C:
			e.Prune(now)
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := e.PruneKnown(pctx, func(ctx context.Context, groups []string) (map[string]map[[16]byte]map[int32]int64, error) {
				return upstream.StartOffsets(ctx, cl, groups)
			}); err != nil {
				e.log.Debug("pruning known shadow records: describing share-group offsets failed", "err", err)
			}
			cancel()
		}
	}
}

// ShadowKey returns the key shadow records are signed with, and where it
// came from: the shared secret of kip1289.shadow_key_file; else the proxy's
// own upstream SASL password or TLS client key, secrets of sharetx's
// principal that applications do not hold (every sidecar of a cluster uses
// the same principal); else, on a cluster without authentication, a fixed
// key (there any client may write anything anyway).
func ShadowKey(cfg configs.Config) ([]byte, string, error) {
	if f := cfg.KIP1289.ShadowKeyFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, "", &configs.Error{Key: "kip1289.shadow_key_file", Msg: err.Error()}
		}
		return staging.DeriveShadowKey(bytes.TrimSpace(b)), "shadow_key_file", nil
	}
	if pw := cfg.Upstream.SASL.Password; pw != "" {
		return staging.DeriveShadowKey([]byte("sasl:" + cfg.Upstream.SASL.Username + ":" + pw)), "upstream.sasl", nil
	}
	if f := cfg.Upstream.TLS.KeyFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, "", &configs.Error{Key: "upstream.tls.key_file", Msg: err.Error()}
		}
		return staging.DeriveShadowKey(append([]byte("tls:"), b...)), "upstream.tls.key_file", nil
	}
	return staging.DeriveShadowKey([]byte("sharetx: a cluster without authentication")), "fixed", nil
}

// registerOnce registers cs in r, keeping the first of a metric registered
// twice (a Start after a failed one).
func registerOnce(r prometheus.Registerer, cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}
