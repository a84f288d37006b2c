package proxy

import (
	"context"
	"fmt"
	"time"

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
	start, err := markers.EndOffsets(ctx, cl.Client, cfg.ShadowTopic)
	if err != nil {
		return fmt.Errorf("shadow topic %s end offsets: %w", cfg.ShadowTopic, err)
	}
	t, err := markers.NewTailer(upstream.ClientOpts(s.cfg.Upstream.BootstrapServers, s.dialer, s.cfg.Upstream.SASL), cfg.ShadowTopic, kip.ProxyID(), start,
		func(r markers.Resolution) { kip.Resolve(r.Partition, r.Offset, r.Commit) })
	if err != nil {
		return fmt.Errorf("tailing shadow topic %s: %w", cfg.ShadowTopic, err)
	}
	s.mu.Lock()
	s.tailer = t
	s.mu.Unlock()
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
			}
		}
	}()
	return nil
}
