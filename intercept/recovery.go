package intercept

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/staging"
)

// Restart recovery and redelivery (DESIGN.md §4).
//
// Every proxy reads the shadow topic of every proxy. From it, it knows which
// share-partition offsets are staged in an open transaction and which were
// committed: the "known" ranges. A record the broker hands out again (its
// member's session closed because a proxy was killed, or its lock expired)
// whose acknowledgement was already committed must not reach an application
// a second time: the proxy that sees it in a ShareFetch response removes it
// from AcquiredRecords and acknowledges it itself, on the fetching member's
// session, with the committed type. One whose transaction is still open is
// removed too and held (its lock renewed) until the transaction ends: a
// commit acknowledges it, an abort releases it for redelivery.
//
// Known ranges are forgotten when this proxy applied them, when their
// transaction aborts, and when the share-partition start offset of the group
// passes them (PruneKnown): the broker never hands out offsets below it.

// knownRange is a run of offsets of one share partition staged by one
// shadow record.
type knownRange struct {
	first, last int64
	types       []int8 // one for the whole range, or one per offset
	loc         [2]int64
	open        bool // the transaction has not ended
}

func (r *knownRange) typeOf(o int64) int8 {
	if len(r.types) == 1 {
		return r.types[0]
	}
	if i := o - r.first; i >= 0 && i < int64(len(r.types)) {
		return r.types[i]
	}
	return 1
}

// knownRangeAt returns the range of rs that offset o lies in, or nil.
func knownRangeAt(rs []*knownRange, o int64) *knownRange {
	for _, r := range rs {
		if o >= r.first && o <= r.last {
			return r
		}
	}
	return nil
}

type knownRef struct {
	part partKey
	r    *knownRange
}

// redeliveryBarrierTimeout bounds how long a ShareFetch response with
// redelivered records waits for the shadow topic to be read to its end.
const redeliveryBarrierTimeout = 15 * time.Second

// SetBarrier installs the function that returns once every shadow record
// written before the call was read (the proxy lists the shadow topic's end
// offsets and waits for its tailer to reach them).
func (e *KIP1289) SetBarrier(fn func(ctx context.Context) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.barrier = fn
}

// MarkRecovered records that the shadow topic was read back (the proxy's
// start-up recovery): until then, redelivered records wait for it.
func (e *KIP1289) MarkRecovered() { e.recoveredOnce.Do(func() { close(e.recovered) }) }

// Recovered reports whether MarkRecovered was called.
func (e *KIP1289) Recovered() bool {
	select {
	case <-e.recovered:
		return true
	default:
		return false
	}
}

// OnShadowRecord learns a shadow record read from the shadow topic at
// partition/offset, its transaction not yet ended. Idempotent.
func (e *KIP1289) OnShadowRecord(partition int32, offset int64, rec *staging.ShadowRecord) {
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("shadow record read", "partition", partition, "offset", offset, "proxy", rec.ProxyID, "txn", rec.TransactionalID, "group", rec.GroupID, "topics", fmt.Sprint(rec.Topics))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.learnLocked([2]int64{int64(partition), offset}, rec)
}

func (e *KIP1289) learnLocked(loc [2]int64, rec *staging.ShadowRecord) {
	if _, ok := e.knownAt[loc]; ok || e.resolvedLocs[loc] {
		return
	}
	if reason := e.implausible(rec); reason != "" {
		e.rejectShadowLocked(int32(loc[0]), loc[1], "implausible_range", reason)
		return
	}
	var refs []knownRef
	for _, t := range rec.Topics {
		for _, p := range t.Partitions {
			k := partKey{rec.GroupID, t.TopicID, p.Partition}
			for _, b := range p.Batches {
				if b.FirstOffset > b.LastOffset || (len(b.AcknowledgeTypes) != 1 && int64(len(b.AcknowledgeTypes)) != b.LastOffset-b.FirstOffset+1) {
					continue
				}
				r := &knownRange{first: b.FirstOffset, last: b.LastOffset, types: b.AcknowledgeTypes, loc: loc, open: true}
				e.known[k] = append(e.known[k], r)
				refs = append(refs, knownRef{k, r})
			}
		}
	}
	e.knownAt[loc] = refs
	e.m.known.Set(float64(len(e.knownAt)))
}

// implausible says why rec could not have been staged by a sharetx process
// with this one's limits (defence in depth behind the signature): more
// partitions or offsets than one call may stage, or a malformed range.
func (e *KIP1289) implausible(rec *staging.ShadowRecord) string {
	parts, offs := 0, int64(0)
	for _, t := range rec.Topics {
		for _, p := range t.Partitions {
			parts++
			for _, b := range p.Batches {
				if b.FirstOffset < 0 || b.FirstOffset > b.LastOffset || (len(b.AcknowledgeTypes) != 1 && int64(len(b.AcknowledgeTypes)) != b.LastOffset-b.FirstOffset+1) {
					return "a malformed range"
				}
				offs += b.LastOffset - b.FirstOffset + 1
				if offs > int64(e.cfg.MaxOffsetsPerCall) {
					return fmt.Sprintf("more than kip1289.max_offsets_per_call=%d offsets", e.cfg.MaxOffsetsPerCall)
				}
			}
		}
	}
	if parts > e.cfg.MaxPartitionsPerCall {
		return fmt.Sprintf("more than kip1289.max_partitions_per_call=%d partitions", e.cfg.MaxPartitionsPerCall)
	}
	return ""
}

// RejectShadow counts a shadow record the tailer did not trust (reason: see
// markers.RejectReason); it changed nothing.
func (e *KIP1289) RejectShadow(partition int32, offset int64, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rejectShadowLocked(partition, offset, reason, "")
}

func (e *KIP1289) rejectShadowLocked(partition int32, offset int64, reason, detail string) {
	e.m.shadowRejected.WithLabelValues(reason).Inc()
	if now := time.Now(); now.Sub(e.lastRejectLog) > time.Minute {
		e.lastRejectLog = now
		e.log.Warn("ignored a shadow record sharetx did not write (or could not have staged); someone other than sharetx can write the shadow topic: restrict WRITE on it to sharetx's principal (docs/operations.md)",
			"partition", partition, "offset", offset, "reason", reason, "detail", detail)
	}
}

// resolveKnown applies a transaction's end to the known ranges of the
// shadow record at loc, and to the redelivered records held for it.
func (e *KIP1289) resolveKnown(loc [2]int64, commit bool) {
	e.mu.Lock()
	refs, ok := e.knownAt[loc]
	if !ok {
		// Resolved before it was read (the EndTxn fast path of another
		// connection, or a restarted tailer): remember, so reading it
		// later does not make it open again.
		e.markResolvedLocked(loc)
	}
	if commit {
		for _, ref := range refs {
			ref.r.open = false
		}
	} else {
		e.forgetKnownLocked(loc)
		e.markResolvedLocked(loc)
	}
	waiting := e.waiting[loc]
	delete(e.waiting, loc)
	for _, call := range waiting {
		for _, r := range call.offsets {
			st := e.parts[r.part].offsets[r.offset]
			if st == nil || st.call != call {
				continue
			}
			if commit {
				st.state = stCommitted
			} else {
				// Released below; no longer held, so the broker's
				// redelivery of it is recorded as a new acquisition
				// even before the release's answer is back.
				st.state, st.ackType = stAcquired, 2
			}
		}
		if commit {
			call.committed = time.Now()
		} else {
			for i := range call.offsets {
				call.offsets[i].ackType = 2 // RELEASE: the application never saw it
			}
		}
	}
	e.mu.Unlock()
	for _, call := range waiting {
		e.m.redelivered.WithLabelValues(map[bool]string{true: "held_then_committed", false: "held_then_aborted"}[commit]).Add(float64(len(call.offsets)))
		go e.apply(call)
	}
}

func (e *KIP1289) markResolvedLocked(loc [2]int64) {
	e.resolvedLocs[loc] = true
	e.resolvedOrder = append(e.resolvedOrder, loc)
	if len(e.resolvedOrder) > 1<<16 {
		for _, l := range e.resolvedOrder[:1<<15] {
			delete(e.resolvedLocs, l)
		}
		e.resolvedOrder = append([][2]int64(nil), e.resolvedOrder[1<<15:]...)
	}
}

// forgetKnownLocked drops the known ranges of the shadow record at loc.
func (e *KIP1289) forgetKnownLocked(loc [2]int64) {
	refs, ok := e.knownAt[loc]
	if !ok {
		return
	}
	delete(e.knownAt, loc)
	for _, ref := range refs {
		list := e.known[ref.part]
		for i, r := range list {
			if r == ref.r {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(e.known, ref.part)
		} else {
			e.known[ref.part] = list
		}
	}
	e.m.known.Set(float64(len(e.knownAt)))
}

// screenResponse removes from a ShareFetch response the redelivered records
// whose acknowledgement is committed or staged in an open transaction
// (see the top of this file). It reports whether it changed the response.
func (e *KIP1289) screenResponse(st *shareState, resp *kmsg.ShareFetchResponse, lock time.Duration) bool {
	redelivered := false
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.AcquiredRecords {
				if r.DeliveryCount > 1 {
					redelivered = true
				}
			}
		}
	}
	if redelivered && !e.Recovered() {
		// The proxy (re)started and has not read the shadow topic back
		// yet: these records may be a killed proxy's committed ones.
		t := time.NewTimer(e.waitRecovery)
		select {
		case <-e.recovered:
		case <-t.C:
		case <-e.applyCtx.Done():
		}
		t.Stop()
	}
	e.mu.Lock()
	barrier, none := e.barrier, len(e.known) == 0
	e.mu.Unlock()
	if redelivered && barrier == nil {
		e.m.redelivered.WithLabelValues("unverified").Inc()
		e.log.Warn("redelivered records handed to the client before the shadow topic was read back: a record whose acknowledgement a killed proxy committed may be processed again")
	}
	if redelivered && barrier != nil {
		// The records may have been staged through another proxy, or by
		// this one before it restarted: read the shadow topic to its end
		// first.
		ctx, cancel := context.WithTimeout(e.applyCtx, e.waitRecovery)
		err := barrier(ctx)
		cancel()
		if err != nil {
			e.m.redelivered.WithLabelValues("unverified").Inc()
			e.log.Warn("redelivered records handed to the client without checking the shadow topic (it could not be read to its end): a record whose acknowledgement another proxy committed may be processed again", "err", err)
		}
		e.mu.Lock()
		none = len(e.known) == 0
		e.mu.Unlock()
	}
	// A first delivery (DeliveryCount 1) is screened against what is known
	// without waiting: only a broker that lost a delivery count in a
	// failover hands out an acknowledged-elsewhere record that way.
	if none {
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
			if kept, ok := e.screen(st, t.TopicID, p.Partition, p.AcquiredRecords, lock); ok {
				p.AcquiredRecords = kept
				changed = true
			}
		}
	}
	return changed
}

// screen splits acquired ranges of one partition into what the client gets
// and what the proxy takes: known committed offsets are acknowledged now,
// known open ones are held for their transaction.
func (e *KIP1289) screen(st *shareState, topic [16]byte, partition int32, recs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, lock time.Duration) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, bool) {
	k := partKey{st.group, topic, partition}
	e.mu.Lock()
	known := e.known[k]
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("screening acquired records", "group", st.group, "partition", partition, "acquired", fmt.Sprint(recs), "known", len(known), "known_parts", len(e.known))
	}
	if len(known) == 0 {
		e.mu.Unlock()
		return nil, false
	}
	deadline := time.Now().Add(lock)
	var kept []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	var now *stagedCall
	held := map[[2]int64]*stagedCall{}
	taken := 0
	for _, ar := range recs {
		overlaps := false
		for _, r := range known {
			if r.first <= ar.LastOffset && r.last >= ar.FirstOffset {
				overlaps = true
				break
			}
		}
		if !overlaps { // the common case: nothing known in this range
			kept = append(kept, ar)
			continue
		}
		cur := kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{FirstOffset: -1, DeliveryCount: ar.DeliveryCount}
		flush := func() {
			if cur.FirstOffset >= 0 {
				kept = append(kept, cur)
				cur.FirstOffset = -1
			}
		}
		for o := ar.FirstOffset; o <= ar.LastOffset && o-ar.FirstOffset < 1<<20; o++ {
			r := knownRangeAt(known, o)
			if r == nil {
				if cur.FirstOffset < 0 {
					cur.FirstOffset = o
				}
				cur.LastOffset = o
				continue
			}
			flush()
			taken++
			var call *stagedCall
			state := stCommitted
			if r.open {
				state = stTxPending
				call = held[r.loc]
				if call == nil {
					call = &stagedCall{txnID: "(redelivered)", group: st.group, member: st.member, shadowPart: -1, redelivered: true}
					held[r.loc] = call
				}
			} else {
				if now == nil {
					now = &stagedCall{txnID: "(redelivered)", group: st.group, member: st.member, shadowPart: -1, committed: time.Now(), redelivered: true}
				}
				call = now
			}
			typ := r.typeOf(o)
			call.offsets = append(call.offsets, offRef{part: k, node: st.node, offset: o, ackType: typ})
			ps := e.parts[k]
			if ps == nil {
				ps = &partState{offsets: map[int64]*offState{}}
				e.parts[k] = ps
			}
			ps.offsets[o] = &offState{member: st.member, ident: st.ident, node: st.node, deadline: deadline, lock: lock, state: state, ackType: typ, call: call}
		}
		flush()
	}
	if taken == 0 {
		e.mu.Unlock()
		return nil, false
	}
	e.pending += taken
	e.m.pending.Set(float64(e.pending))
	for loc, call := range held {
		e.waiting[loc] = append(e.waiting[loc], call)
	}
	e.mu.Unlock()
	for _, call := range held {
		e.m.redelivered.WithLabelValues("held_open").Add(float64(len(call.offsets)))
	}
	if now != nil {
		e.m.redelivered.WithLabelValues("committed").Add(float64(len(now.offsets)))
		e.log.Info("redelivered records whose acknowledgement was already committed: acknowledging them, not handing them to the client",
			"group", st.group, "member", st.member, "partition", partition, "records", len(now.offsets))
		go e.apply(now)
	}
	if kept == nil {
		kept = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{}
	}
	return kept, true
}

// StartOffsets returns, per group, topic id and partition, the share-partition
// start offset (DescribeShareGroupOffsets).
type StartOffsets func(ctx context.Context, groups []string) (map[string]map[[16]byte]map[int32]int64, error)

// PruneKnown forgets known ranges below their group's share-partition start
// offset: the broker never hands those offsets out again.
func (e *KIP1289) PruneKnown(ctx context.Context, fetch StartOffsets) error {
	e.mu.Lock()
	groups := map[string]bool{}
	for k := range e.known {
		groups[k.group] = true
	}
	e.mu.Unlock()
	if len(groups) == 0 {
		return nil
	}
	list := make([]string, 0, len(groups))
	for g := range groups {
		list = append(list, g)
	}
	sort.Strings(list)
	starts, err := fetch(ctx, list)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var drop [][2]int64
	for loc, refs := range e.knownAt {
		below := true
		for _, ref := range refs {
			start, ok := starts[ref.part.group][ref.part.topic][ref.part.partition]
			if !ok || ref.r.last >= start {
				below = false
				break
			}
		}
		if below {
			drop = append(drop, loc)
		}
	}
	for _, loc := range drop {
		e.forgetKnownLocked(loc)
	}
	return nil
}

// KnownRanges is how many shadow records the proxy holds knowledge of.
func (e *KIP1289) KnownRanges() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.knownAt)
}

// RedeliveredMetric is the redelivered_records_total counter, by outcome.
func (e *KIP1289) RedeliveredMetric() *prometheus.CounterVec { return e.m.redelivered }
