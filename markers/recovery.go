package markers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/internal/promstat"
	"github.com/sharetx/sharetx/staging"
)

// Restart recovery and redelivery (docs/design.md §8).
//
// Every proxy reads the shadow topic of every proxy. From it, it knows which
// share-partition offsets are staged in an open transaction and which were
// committed: the "known" ranges, kept in the ledger. A record the broker
// hands out again (its member's session closed because a proxy was killed,
// or its lock expired) whose acknowledgement was already committed must not
// reach an application a second time: the proxy that sees it in a
// ShareFetch response removes it from AcquiredRecords and acknowledges it
// itself, on the fetching member's session, with the committed type. One
// whose transaction is still open is removed too and held (its lock renewed)
// until the transaction ends: a commit acknowledges it, an abort releases it
// for redelivery.

// Recovered records that the shadow topic was read back (the proxy's
// start-up recovery); barrier returns once every shadow record written
// before its call was read (the proxy lists the shadow topic's end offsets
// and waits for its tailer to reach them). Until then, ShareFetch responses
// with redelivered records wait for it (up to 15 s). Once only.
func (r *Resolver) Recovered(barrier func(ctx context.Context) error) {
	r.recoveredOnce.Do(func() {
		r.mu.Lock()
		r.barrier = barrier
		r.mu.Unlock()
		close(r.recovered)
	})
}

// IsRecovered reports whether Recovered was called.
func (r *Resolver) IsRecovered() bool {
	select {
	case <-r.recovered:
		return true
	default:
		return false
	}
}

// OnShadowRecord learns a shadow record read from the shadow topic at
// partition/offset, its transaction not yet ended. Idempotent.
func (r *Resolver) OnShadowRecord(partition int32, offset int64, rec *staging.ShadowRecord) {
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("shadow record read", "partition", partition, "offset", offset, "proxy", rec.ProxyID, "txn", rec.TransactionalID, "group", rec.GroupID, "topics", fmt.Sprint(rec.Topics))
	}
	if reason := r.implausible(rec); reason != "" {
		r.reject(partition, offset, "implausible_range", reason)
		return
	}
	r.ledger.Learn(staging.Loc{int64(partition), offset}, rec)
}

// implausible says why rec could not have been staged by a sharetx process
// with this one's limits (defence in depth behind the signature): more
// partitions or offsets than one call may stage, or a malformed range.
func (r *Resolver) implausible(rec *staging.ShadowRecord) string {
	maxOffsets, maxPartitions := r.ledger.CallLimits()
	parts, offs := 0, int64(0)
	for _, t := range rec.Topics {
		for _, p := range t.Partitions {
			parts++
			for _, b := range p.AcknowledgementBatches {
				if b.FirstOffset < 0 || b.FirstOffset > b.LastOffset || (len(b.AcknowledgeTypes) != 1 && int64(len(b.AcknowledgeTypes)) != b.LastOffset-b.FirstOffset+1) {
					return "a malformed range"
				}
				offs += b.LastOffset - b.FirstOffset + 1
				if offs > int64(maxOffsets) {
					return fmt.Sprintf("more than kip1289.max_offsets_per_call=%d offsets", maxOffsets)
				}
			}
		}
	}
	if parts > maxPartitions {
		return fmt.Sprintf("more than kip1289.max_partitions_per_call=%d partitions", maxPartitions)
	}
	return ""
}

// RejectShadow counts a shadow record the tailer did not trust (reason: see
// RejectReason); it changed nothing.
func (r *Resolver) RejectShadow(partition int32, offset int64, reason string) {
	r.reject(partition, offset, reason, "")
}

func (r *Resolver) reject(partition int32, offset int64, reason, detail string) {
	r.mRejected.WithLabelValues(reason).Inc()
	r.mu.Lock()
	now := time.Now()
	warn := now.Sub(r.lastRejectLog) > time.Minute
	if warn {
		r.lastRejectLog = now
	}
	r.mu.Unlock()
	if warn {
		r.log.Warn("ignored a shadow record sharetx did not write (or could not have staged); someone other than sharetx can write the shadow topic: restrict WRITE on it to sharetx's principal (docs/operations.md)",
			"partition", partition, "offset", offset, "reason", reason, "detail", detail)
	}
}

// Screen removes from a ShareFetch response, fetched by f, the redelivered
// records whose acknowledgement is committed or staged in an open
// transaction (see the top of this file). It reports whether it changed the
// response. lock is the response's acquisition lock.
//
// A response with redelivered records first waits for the read-back and
// the barrier, until deadline at the latest (the time the client still
// waits for its fetch; zero: none) and never longer than waitRecovery. A
// response held past the client's wait helps nobody: the client gives the
// fetch up and closes its connection, which ends its share session, and the
// broker hands the records out again with one more delivery, until
// share.delivery.count.limit archives them unprocessed.
func (r *Resolver) Screen(f staging.Fetcher, resp *kmsg.ShareFetchResponse, lock time.Duration, deadline time.Time) bool {
	redelivered := false
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, ar := range p.AcquiredRecords {
				if ar.DeliveryCount > 1 {
					redelivered = true
				}
			}
		}
	}
	if redelivered {
		r.verify(deadline)
	}
	// A first delivery (DeliveryCount 1) is screened against what is known
	// without waiting: only a broker that lost a delivery count in a
	// failover hands out an acknowledged-elsewhere record that way.
	if !r.ledger.KnowsAny() {
		return false
	}
	changed := false
	for ti := range resp.Topics {
		t := &resp.Topics[ti]
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			if p.ErrorCode != 0 || len(p.AcquiredRecords) == 0 {
				continue
			}
			sc := r.ledger.Screen(f, t.TopicID, p.Partition, p.AcquiredRecords, lock)
			if !sc.Changed {
				continue
			}
			p.AcquiredRecords = sc.Kept
			changed = true
			for _, call := range sc.Held {
				r.mRedelivered.WithLabelValues("held_open").Add(float64(call.Len()))
			}
			if sc.Now != nil {
				r.mRedelivered.WithLabelValues("committed").Add(float64(sc.Now.Len()))
				r.log.Info("redelivered records whose acknowledgement was already committed: acknowledging them, not handing them to the client",
					"group", f.Group, "member", f.Member, "partition", p.Partition, "records", sc.Now.Len())
				go r.apply(sc.Now)
			}
		}
	}
	return changed
}

// verify waits, for a response with redelivered records, until the shadow
// topic was read back and then read to its current end (the barrier), until
// deadline (zero: none) and waitRecovery at the latest; when it could not,
// the response goes to the client screened against what is known so far,
// counted and logged as unverified.
func (r *Resolver) verify(deadline time.Time) {
	start := time.Now()
	until := start.Add(r.waitRecovery)
	if !deadline.IsZero() && deadline.Before(until) {
		until = deadline
	}
	ctx, cancel := context.WithDeadline(r.ctx, until)
	defer cancel()
	if !r.IsRecovered() {
		// The proxy (re)started and has not read the shadow topic back
		// yet: these records may be a killed proxy's committed ones.
		select {
		case <-r.recovered:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	barrier := r.barrier
	r.mu.Unlock()
	if barrier == nil {
		r.mRedelivered.WithLabelValues("unverified").Inc()
		r.log.Warn("redelivered records handed to the client before the shadow topic was read back: a record whose acknowledgement a killed proxy committed may be processed again",
			"waited", time.Since(start).Round(time.Millisecond), "client_deadline", until.Equal(deadline))
		return
	}
	// The records may have been staged through another proxy, or by this
	// one before it restarted: read the shadow topic to its end first.
	if err := barrier(ctx); err != nil {
		r.mRedelivered.WithLabelValues("unverified").Inc()
		r.log.Warn("redelivered records handed to the client without checking the shadow topic (it could not be read to its end in time): a record whose acknowledgement another proxy committed may be processed again",
			"err", err, "waited", time.Since(start).Round(time.Millisecond), "client_deadline", until.Equal(deadline))
	}
}

// StartOffsets returns, per group, topic id and partition, the share-partition
// start offset (DescribeShareGroupOffsets).
type StartOffsets func(ctx context.Context, groups []string) (map[string]map[[16]byte]map[int32]int64, error)

// PruneKnown forgets known ranges below their group's share-partition start
// offset: the broker never hands those offsets out again.
func (r *Resolver) PruneKnown(ctx context.Context, fetch StartOffsets) error {
	groups := r.ledger.KnownGroups()
	if len(groups) == 0 {
		return nil
	}
	starts, err := fetch(ctx, groups)
	if err != nil {
		return err
	}
	r.ledger.ForgetBelow(starts)
	return nil
}

// Redelivered counts the redelivered records taken out of ShareFetch
// responses with outcome (see redelivered_records_total).
func (r *Resolver) Redelivered(outcome string) float64 {
	return promstat.Sum(r.mRedelivered, outcome)
}
