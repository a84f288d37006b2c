package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/intercept"
	"github.com/sharetx/sharetx/markers"
	"github.com/sharetx/sharetx/staging"
	"github.com/sharetx/sharetx/upstream"
)

// KIP returns the transactional-acknowledgement engine.
func (s *Server) KIP() *intercept.KIP1289 { return s.env.KIP }

// StartKIP prepares the KIP-1289 path once the cluster answers: it checks
// the cluster does not use the TxnShareAcknowledge key itself, creates the
// shadow topic when missing, and tails it for control markers from its
// current end. Until it returns TxnShareAcknowledge answers
// COORDINATOR_NOT_AVAILABLE (retriable).
func (s *Server) StartKIP(ctx context.Context, cl *upstream.Client) error {
	kip := s.env.KIP
	if kip == nil {
		return nil
	}
	cfg := s.cfg.KIP1289
	w := staging.NewWriter(cl.Client, cfg.ShadowTopic)
	n, err := w.EnsureTopic(ctx, int32(cfg.ShadowPartitions), int16(cfg.ShadowReplication))
	if err != nil {
		return fmt.Errorf("shadow topic %s: %w (the proxy's principal needs CREATE on it, or create it yourself)", cfg.ShadowTopic, err)
	}
	// Read back recovery_lookback: the staged and committed acknowledgements
	// of every proxy (this one before a restart included), to screen
	// redelivered records (DESIGN.md §4).
	start, err := markers.OffsetsAfter(ctx, cl.Client, cfg.ShadowTopic, time.Now().Add(-cfg.RecoveryLookback))
	if err != nil {
		return fmt.Errorf("shadow topic %s offsets: %w", cfg.ShadowTopic, err)
	}
	ends, err := markers.EndOffsets(ctx, cl.Client, cfg.ShadowTopic)
	if err != nil {
		return fmt.Errorf("shadow topic %s end offsets: %w", cfg.ShadowTopic, err)
	}
	t, err := markers.Start(upstream.ClientOpts(s.cfg.Upstream.BootstrapServers, s.dialer, s.cfg.Upstream.SASL), cfg.ShadowTopic, start, markers.Handlers{
		OnStaged:  func(st markers.Staged) { kip.OnShadowRecord(st.Partition, st.Offset, st.Record) },
		OnResolve: func(r markers.Resolution) { kip.Resolve(r.Partition, r.Offset, r.Commit) },
	})
	if err != nil {
		return fmt.Errorf("tailing shadow topic %s: %w", cfg.ShadowTopic, err)
	}
	var backlog int64
	for p, e := range ends {
		backlog += e - start[p]
	}
	t0 := time.Now()
	s.log.Info("reading the shadow topic back to recover staged and committed acknowledgements", "topic", cfg.ShadowTopic, "lookback", cfg.RecoveryLookback, "records", backlog)
	if err := t.WaitCaughtUp(ctx, ends); err != nil {
		t.Close()
		return fmt.Errorf("recovering from shadow topic %s: %w", cfg.ShadowTopic, err)
	}
	s.log.Info("shadow topic read", "records", backlog, "took", time.Since(t0).Round(time.Millisecond), "known", kip.KnownRanges())
	kip.SetBarrier(func(ctx context.Context) error {
		ends, err := markers.EndOffsets(ctx, cl.Client, cfg.ShadowTopic)
		if err != nil {
			return err
		}
		return t.WaitCaughtUp(ctx, ends)
	})
	kip.MarkRecovered()
	s.mu.Lock()
	s.tailer = t
	s.mu.Unlock()
	s.checkRenew(ctx, cl)
	kip.SetWriter(w, n)
	kip.SetSideChannel(func(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
		return cl.Broker(int(node)).Request(ctx, req)
	})
	go func() {
		tk := time.NewTicker(30 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tk.C:
				kip.Prune(now)
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := kip.PruneKnown(pctx, shareStartOffsets(cl)); err != nil {
					s.log.Debug("pruning known shadow records: describing share-group offsets failed", "err", err)
				}
				cancel()
			}
		}
	}()
	return nil
}

// shareStartOffsets describes the share-partition start offsets of groups.
func shareStartOffsets(cl *upstream.Client) intercept.StartOffsets {
	adm := kadm.NewClient(cl.Client)
	return func(ctx context.Context, groups []string) (map[string]map[[16]byte]map[int32]int64, error) {
		d, err := adm.DescribeShareGroupOffsets(ctx, groups...)
		if err != nil && len(d) == 0 {
			return nil, err
		}
		out := map[string]map[[16]byte]map[int32]int64{}
		for g, gd := range d {
			if gd.Err != nil {
				continue
			}
			m := map[[16]byte]map[int32]int64{}
			for _, ps := range gd.Offsets {
				for p, o := range ps {
					if o.Err != nil || o.StartOffset < 0 {
						continue
					}
					id := [16]byte(o.TopicID)
					if m[id] == nil {
						m[id] = map[int32]int64{}
					}
					m[id][p] = o.StartOffset
				}
			}
			out[g] = m
		}
		return out, nil
	}
}

// checkRenew says at start-up whether the cluster can keep the locks of
// staged records alive (ShareAcknowledge v2 RENEW, Kafka 4.2+).
func (s *Server) checkRenew(ctx context.Context, cl *upstream.Client) {
	r, err := cl.Client.Request(ctx, kmsg.NewPtrApiVersionsRequest())
	resp, ok := r.(*kmsg.ApiVersionsResponse)
	if err != nil || !ok {
		s.log.Warn("could not ask the cluster whether it can renew acquisition locks", "err", err)
		return
	}
	var max int16 = -1
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.ShareAcknowledge.Int16() {
			max = k.MaxVersion
		}
	}
	s.env.KIP.SetRenewSupported(max >= 2)
	if max < 2 {
		s.log.Warn("the cluster cannot renew acquisition locks (ShareAcknowledge v2 RENEW needs Kafka 4.2+): a transaction must commit within the share group's record lock duration (group.share.record.lock.duration.ms, 30 s by default), or its records are redelivered and its acknowledgements fail",
			"share_acknowledge_max_version", max)
	}
}
