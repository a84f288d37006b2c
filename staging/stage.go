package staging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ShadowWriter writes a shadow record inside a client's transaction.
type ShadowWriter interface {
	Write(ctx context.Context, txnID string, producerID int64, epoch int16, partition int32, rec *ShadowRecord) (int64, error)
}

type partResult struct {
	topic     [16]byte
	partition int32
	code      int16
	msg       string
}

// writeErrorCode maps a failed shadow write to the code a KIP-1289 client
// acts on correctly (docs/protocol.md): the broker's own verdict on the
// producer (fenced, wrong epoch or mapping, not authorised) and retriable
// codes pass through; anything else aborts the transaction, which is always
// safe, where a code the reference client does not know would be fatal.
func writeErrorCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping,
			kerr.TransactionalIDAuthorizationFailed, kerr.TransactionAbortable:
			return ke.Code
		}
		if ke.Retriable && !errors.Is(err, ErrOutcomeUnknown) {
			return ke.Code
		}
	}
	return kerr.TransactionAbortable.Code
}

// producersVerdict reports whether a failed shadow write failed for the
// state of the caller's producer or transaction (fenced, another epoch or
// mapping, the transaction ended or aborting): the client's doing, not a
// failure of the proxy's.
func producersVerdict(err error) bool {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping,
		kerr.InvalidTxnState, kerr.TransactionAbortable:
		return true
	}
	return false
}

// SetOnWriteFailure sets what Stage calls when writing a shadow record
// failed for something else than the caller's producer (producersVerdict):
// the proxy's own failure, which an alert counts. Before the Stager is used.
func (s *Stager) SetOnWriteFailure(f func()) { s.failed = f }

// Stager stages TxnShareAcknowledge calls (docs/design.md §4): it checks a
// call against the ledger and moves its offsets to STAGING, writes the
// shadow record inside the caller's transaction, and only then marks them
// TX_PENDING. It is built once the shadow topic is ready.
type Stager struct {
	ledger     *Ledger
	writer     ShadowWriter
	partitions int32 // of the shadow topic
	proxyID    string
	log        *slog.Logger

	mu    sync.Mutex
	rides map[string]*Ride // by transactional id: calls waiting for their transaction's Produce

	inFlight func(txnID string, pid int64, epoch int16) <-chan struct{} // SetInFlight
	failed   func()                                                     // SetOnWriteFailure
}

// NewStager stages into ledger, writing shadow records with w into a shadow
// topic of partitions partitions; proxyID names this process in them.
func NewStager(ledger *Ledger, w ShadowWriter, partitions int32, proxyID string, log *slog.Logger) *Stager {
	return &Stager{ledger: ledger, writer: w, partitions: partitions, proxyID: proxyID, log: log, rides: map[string]*Ride{}}
}

// Staged is a call the Stager staged: where its shadow record is, to be
// resolved by the record's transaction marker (markers.Resolver).
type Staged struct {
	Loc    Loc
	Call   *Call
	Rode   bool // the shadow record rode in the client's Produce (ride.go)
	Phases StagePhases
}

// StagePhases is where a staged call's time went in the proxy (the
// sharetx_stage_seconds histogram).
type StagePhases struct {
	Miss        string        // a RideProduce call that did not ride: why (a Miss reason; "" if it rode or not known)
	Validate    time.Duration // checking the call against the ledger, reserving its offsets
	WaitProduce time.Duration // a RideProduce call waiting for its transaction's Produce (0 otherwise)
	Write       time.Duration // the shadow record's write: the Produce it rode in, or a write of its own
}

// Stage answers a TxnShareAcknowledge from principal ident: all or
// nothing. On success the answer is OK and Staged is set.
func (s *Stager) Stage(ctx context.Context, req *kip1289.TxnShareAcknowledgeRequest, ident string) (*kip1289.TxnShareAcknowledgeResponse, *Staged) {
	l := s.ledger
	if r := announced(ctx); r != nil {
		defer s.withdraw(r) // whatever became of the call, it offers nothing after it
	}
	var ph StagePhases
	start := time.Now()
	resp, call := l.validateAndReserve(req, ident)
	if resp != nil {
		return resp, nil
	}
	if call.deferred {
		// Held, nothing written: a later call of the transaction stages
		// them (deferred.go).
		return okResponse(req), nil
	}
	ph.Validate = time.Since(start)
	rec := &ShadowRecord{
		Version: SignedShadowVersion, ProxyID: s.proxyID, TransactionalID: call.txnID,
		ProducerID: call.producerID, ProducerEpoch: call.epoch, GroupID: req.GroupID, MemberID: call.member,
	}
	rec.Topics = req.Topics // the request's acknowledgements, as they came
	part := ShadowPartitionFor(call.txnID, s.partitions)
	var off int64
	var err error
	rode := false
	if req.RideProduce {
		r := s.ride(ctx, call, rec, part)
		part, off, err, rode = r.part, r.off, r.err, r.rode
		ph.WaitProduce, ph.Write, ph.Miss = r.waited, r.write, r.miss
	}
	if !rode {
		part = ShadowPartitionFor(call.txnID, s.partitions)
		w := time.Now()
		off, err = s.writer.Write(ctx, call.txnID, call.producerID, call.epoch, part, rec)
		ph.Write = time.Since(w)
	}
	if err != nil {
		l.unstage(call)
		s.log.Info("TxnShareAcknowledge: the shadow write failed", "txn", call.txnID, "err", err)
		if s.failed != nil && !producersVerdict(err) {
			s.failed()
		}
		return ErrorResponse(req, writeErrorCode(err), "sharetx: writing the staged acknowledgements into the transaction failed: "+kerrName(err)), nil
	}
	loc := Loc{int64(part), off}
	l.markPending(call, loc, rec)
	return okResponse(req), &Staged{Loc: loc, Call: call, Rode: rode, Phases: ph}
}

// MarkFresh tells the shadow writer that the coordinator just gave
// producerID this epoch: its first shadow record starts at sequence 0.
func (s *Stager) MarkFresh(producerID int64, epoch int16) {
	if f, ok := s.writer.(interface{ MarkFresh(int64, int16) }); ok {
		f.MarkFresh(producerID, epoch)
	}
}

// kerrName names a failed write by its Kafka error only: the writer's own
// message may carry the broker's, which can name epochs and sequences.
func kerrName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return "see the proxy's log"
}

// ErrorResponse refuses a whole call: the reference layout has no top-level
// message, so the code stands on every partition of the request too (the
// reference client reads the top-level code first), and the message on the
// first only, so a refusal is no larger than the answer a well-formed
// request of the same partitions gets.
func ErrorResponse(req *kip1289.TxnShareAcknowledgeRequest, code int16, msg string) *kip1289.TxnShareAcknowledgeResponse {
	r := &kip1289.TxnShareAcknowledgeResponse{ErrorCode: code}
	first := true
	for _, t := range req.Topics {
		rt := kip1289.TxnShareAcknowledgeResponseTopic{TopicID: t.TopicID}
		for _, p := range t.Partitions {
			rp := kip1289.TxnShareAcknowledgeResponsePartition{Partition: p.Partition, ErrorCode: code}
			if first {
				m := msg
				rp.ErrorMessage = &m
				first = false
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	return r
}

// preParsed is one partition of a call, checked without any lock: its
// offsets and their types, or why the partition is refused.
type preParsed struct {
	topic [16]byte
	part  int32
	offs  []int64
	types []int8
	code  int16
	msg   string
}

// preParse bounds and expands a call before any state is looked at: the
// partition count and the offset count (without expanding) against the
// limits, then each batch (well-formed, no offset twice, transactional
// types only). Work and memory are bounded by kip1289.max_offsets_per_call.
func (l *Ledger) preParse(req *kip1289.TxnShareAcknowledgeRequest) ([]preParsed, *kip1289.TxnShareAcknowledgeResponse) {
	parts, offs := 0, int64(0)
	for _, t := range req.Topics {
		parts += len(t.Partitions)
		for _, p := range t.Partitions {
			for _, b := range p.AcknowledgementBatches {
				if b.FirstOffset < 0 || b.LastOffset < b.FirstOffset {
					continue // refused below, per partition
				}
				offs += b.LastOffset - b.FirstOffset + 1
				if offs > int64(l.cfg.MaxOffsetsPerCall) {
					return nil, ErrorResponse(req, kerr.InvalidRequest.Code, fmt.Sprintf("sharetx: more than kip1289.max_offsets_per_call=%d offsets in one call; stage them in several calls", l.cfg.MaxOffsetsPerCall))
				}
			}
		}
	}
	if parts > l.cfg.MaxPartitionsPerCall {
		return nil, ErrorResponse(req, kerr.InvalidRequest.Code, fmt.Sprintf("sharetx: more than kip1289.max_partitions_per_call=%d partitions in one call", l.cfg.MaxPartitionsPerCall))
	}
	out := make([]preParsed, 0, parts)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			out = append(out, preParsePartition(t.TopicID, p))
		}
	}
	return out, nil
}

func preParsePartition(topic [16]byte, p kip1289.TxnShareAcknowledgePartition) preParsed {
	pp := preParsed{topic: topic, part: p.Partition}
	var seen map[int64]bool
	if len(p.AcknowledgementBatches) > 1 {
		seen = map[int64]bool{}
	}
	for _, b := range p.AcknowledgementBatches {
		offs, types, ok := AckRange{b.FirstOffset, b.LastOffset, b.AcknowledgeTypes}.expand()
		if !ok {
			pp.code, pp.msg = kerr.InvalidRequest.Code, fmt.Sprintf("malformed batch %d-%d with %d types", b.FirstOffset, b.LastOffset, len(b.AcknowledgeTypes))
			return pp
		}
		for i, o := range offs {
			if seen != nil {
				if seen[o] {
					pp.code, pp.msg = kerr.InvalidRequest.Code, fmt.Sprintf("offset %d appears twice", o)
					return pp
				}
				seen[o] = true
			}
			if ty := types[i]; ty != kip1289.Accept && ty != kip1289.Reject && ty != kip1289.Gap {
				pp.code, pp.msg = kerr.InvalidRecordState.Code, fmt.Sprintf("acknowledge type %d at offset %d: only ACCEPT (1), REJECT (3) and gap (0) can be transactional", ty, o)
				return pp
			}
		}
		pp.offs = append(pp.offs, offs...)
		pp.types = append(pp.types, types...)
	}
	return pp
}

// validateAndReserve checks req and, if it is acceptable, moves its offsets
// to STAGING so no concurrent call or client ack can take them. It returns a
// response when the call is refused, or answered as already staged (a
// retry); the codes are the ones the reference broker sends, chosen by what
// the reference client does with them (docs/protocol.md). Messages name
// nothing the caller did not send: no epochs, no other member's offsets.
func (l *Ledger) validateAndReserve(req *kip1289.TxnShareAcknowledgeRequest, ident string) (*kip1289.TxnShareAcknowledgeResponse, *Call) {
	if req.TransactionalID == nil || *req.TransactionalID == "" {
		return ErrorResponse(req, kerr.InvalidRequest.Code, "sharetx: TxnShareAcknowledge needs a TransactionalId"), nil
	}
	if !keepable(*req.TransactionalID, req.GroupID, req.MemberID) {
		return ErrorResponse(req, kerr.InvalidRequest.Code, fmt.Sprintf("sharetx: the transactional id, group id and member id must each be at most %d bytes (sharetx keeps no longer ids)", MaxKeptIDBytes)), nil
	}
	pre, refused := l.preParse(req)
	if refused != nil {
		return refused, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	txnID := *req.TransactionalID
	pid, epoch := req.ProducerID, req.ProducerEpoch
	t, known := l.txns[txnID]
	if known && !t.ownedBy(ident) {
		// The broker accepted this transactional id's InitProducerId or
		// writes only from other principals: the caller has not shown
		// WRITE on it.
		return ErrorResponse(req, kerr.TransactionalIDAuthorizationFailed.Code, "sharetx: not authorized to use this transactional id through this proxy (its InitProducerId or writes reached the broker from another principal)"), nil
	}
	switch {
	case pid == -1 && epoch == -1:
		// sharetx extension: the producer id and epoch this proxy saw.
		if !known && !l.cfg.LearnOwnerFromProduce {
			// No write teaches it (kip1289.learn_owner_from_produce):
			// the transaction's EndTxn will.
			return ErrorResponse(req, kerr.TransactionAbortable.Code, "sharetx: ProducerId -1 asks the proxy for the transaction's producer id, and it has not seen this transactional id initialise or end through it yet; abort the transaction and retry"), nil
		}
		if !known {
			// Retriable: the proxy learns the transaction from the
			// client's next accepted transactional write (a restarted
			// proxy) or its InitProducerId.
			return ErrorResponse(req, kerr.CoordinatorLoadInProgress.Code, "sharetx: ProducerId -1 asks the proxy for the transaction's producer id, and it has not seen this transactional id initialise or write through it yet; retry after the transaction's first produce, or send the producer id and epoch"), nil
		}
		pid, epoch = t.producerID, t.epoch
		// The call names the touch it made, or one of its outputs: the
		// ids that record was written with are checked as if the caller
		// had sent them, so a zombie whose touch or output came just
		// before a newer instance's InitProducerId is fenced rather than
		// staged into the newer transaction.
		var by wroteBy
		var found bool
		what := ""
		switch {
		case req.TouchOffset != nil:
			what = "touch record"
			var ts touchSeen
			ts, found = t.touch(*req.TouchOffset)
			by = ts.wroteBy
		case req.OutputRecord != nil:
			what = "output record"
			var os outputSeen
			os, found = t.output(*req.OutputRecord)
			by = os.wroteBy
		}
		if what != "" {
			if !found || by.ident != ident {
				// Retriable: a record written through another sidecar,
				// or before a restart (an output batch not the
				// transaction's first in its partition, too); the client
				// touches, through this one.
				return ErrorResponse(req, kerr.CoordinatorLoadInProgress.Code, "sharetx: the "+what+" this call names was not written through this proxy (or is not kept); touch and retry"), nil
			}
			if by.producerID != t.producerID || by.epoch < t.epoch {
				return ErrorResponse(req, kerr.ProducerFenced.Code, "sharetx: the "+what+" this call names was written by an earlier producer of the transactional id"), nil
			}
		}
	case pid < 0 || epoch < 0:
		return ErrorResponse(req, kerr.InvalidRequest.Code, "sharetx: ProducerId and ProducerEpoch must both be set, or both be -1 (sharetx extension)"), nil
	case !known || (t.producerID == pid && epoch > t.epoch):
		// The proxy writes the shadow record with its own credentials, so
		// it stages only into transactions whose ids it saw the
		// coordinator hand out or accept through it. Not fatal: a
		// restarted proxy, or one that missed the epoch, learns it from
		// the client's next accepted transactional write or EndTxn, so
		// aborting this transaction is enough to go on.
		return ErrorResponse(req, kerr.TransactionAbortable.Code, "sharetx: this transaction's producer id and epoch were not seen initialising, producing or ending through this proxy (a restarted proxy learns them from the next accepted transactional write or EndTxn); abort the transaction and retry"), nil
	case t.producerID != pid:
		return ErrorResponse(req, kerr.InvalidProducerIDMapping.Code, "sharetx: the producer id is not the transactional id's"), nil
	case epoch < t.epoch:
		return ErrorResponse(req, kerr.ProducerFenced.Code, "sharetx: the producer epoch is not the transactional id's current one"), nil
	}
	if !l.readsGroupLocked(req.GroupID, ident) {
		return ErrorResponse(req, kerr.GroupAuthorizationFailed.Code, "sharetx: not authorized for this group through this proxy (no member of it fetched through this proxy as this principal)"), nil
	}
	member := req.MemberID
	if member != "" {
		mi, ok := l.members[memberKey{req.GroupID, member}]
		if !ok || mi.ident != ident {
			return ErrorResponse(req, kerr.UnknownMemberID.Code, "sharetx: the member is not known to the group through this proxy"), nil
		}
		if req.MemberEpoch != mi.epoch {
			return ErrorResponse(req, kerr.StaleMemberEpoch.Code, "sharetx: the member epoch is not the member's current one"), nil
		}
	}

	call := &Call{txnID: txnID, producerID: pid, epoch: epoch, group: req.GroupID, deferred: req.Defer}
	n := 0
	for _, pp := range pre {
		n += len(pp.offs)
	}
	call.offsets = make([]offRef, 0, n)
	var results []partResult
	failed := false
	total, retried := 0, 0
	for _, pp := range pre {
		code, msg := pp.code, pp.msg
		dup := 0
		if code == 0 {
			before := len(call.offsets)
			code, msg, call.offsets, dup = l.checkOffsets(req.GroupID, &member, ident, call, pp, call.offsets)
			total += len(call.offsets) - before
		}
		if code != 0 {
			failed = true
		}
		retried += dup
		results = append(results, partResult{pp.topic, pp.part, code, msg})
	}
	switch {
	case !failed && total == 0 && retried > 0:
		// A retry of a call that was staged (its answer was lost): the
		// same answer, nothing written twice.
		return okResponse(req), nil
	case !failed && retried > 0:
		return ErrorResponse(req, kerr.InvalidRecordState.Code, "sharetx: some of these offsets are already staged in this transaction by an earlier call, others not; send the earlier call again as it was, or the others alone"), nil
	case !failed && total == 0:
		return ErrorResponse(req, kerr.InvalidRequest.Code, "sharetx: no acknowledgements in the request"), nil
	case !failed && l.pending+total-adoptedIn(call.offsets) > l.cfg.MaxPendingRecords:
		// Abortable, not retriable: the held records belong to other
		// transactions, and the KIP's client retries a retriable code
		// without limit ahead of its EndTxn (design.md §4.1).
		return ErrorResponse(req, kerr.TransactionAbortable.Code, fmt.Sprintf("sharetx: the TX_PENDING limit (kip1289.max_pending_records=%d) is reached; abort this transaction and retry later, or raise the limit", l.cfg.MaxPendingRecords)), nil
	case failed:
		return partialFailure(results), nil
	}
	call.member = member
	state := stStaging
	if call.deferred {
		state = stDeferred
	}
	var from []*Call // deferred calls this one takes offsets over from
	for _, r := range call.offsets {
		if r.adopted && !slices.Contains(from, r.st.call) {
			from = append(from, r.st.call)
		}
		r.st.state, r.st.call, r.st.ackType = state, call, r.ackType
	}
	l.addPendingLocked(total)
	for _, d := range from {
		l.shrinkDeferredLocked(d)
	}
	if call.deferred {
		l.deferred[call.txnID] = append(l.deferred[call.txnID], call)
	}
	return nil, call
}

// partialFailure answers a call some partitions of which failed. The
// top-level code is the first failure's: the reference client acts on the
// top-level code first, and OPERATION_NOT_ATTEMPTED (on the partitions
// that were fine, without a message) is fatal there.
func partialFailure(results []partResult) *kip1289.TxnShareAcknowledgeResponse {
	resp := &kip1289.TxnShareAcknowledgeResponse{}
	byTopic := map[[16]byte]int{}
	messages := 0
	for _, r := range results {
		rp := kip1289.TxnShareAcknowledgeResponsePartition{Partition: r.partition, ErrorCode: r.code}
		if r.code != 0 {
			if resp.ErrorCode == 0 {
				resp.ErrorCode = r.code
			}
			// The first few failures say why; the rest carry their code
			// only, so the answer stays no larger than the request.
			if messages < maxMessages {
				m := r.msg
				rp.ErrorMessage = &m
				messages++
			}
		} else {
			rp.ErrorCode = kerr.OperationNotAttempted.Code
		}
		i, ok := byTopic[r.topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[r.topic] = i
			resp.Topics = append(resp.Topics, kip1289.TxnShareAcknowledgeResponseTopic{TopicID: r.topic})
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	return resp
}

// maxMessages bounds the error messages of one answer.
const maxMessages = 4

// okResponse is the answer to a staged call: every partition with code 0.
func okResponse(req *kip1289.TxnShareAcknowledgeRequest) *kip1289.TxnShareAcknowledgeResponse {
	ok := &kip1289.TxnShareAcknowledgeResponse{}
	for _, t := range req.Topics {
		rt := kip1289.TxnShareAcknowledgeResponseTopic{TopicID: t.TopicID}
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kip1289.TxnShareAcknowledgeResponsePartition{Partition: p.Partition})
		}
		ok.Topics = append(ok.Topics, rt)
	}
	return ok
}

// checkOffsets validates one partition's offsets against the ledger; l.mu
// is held. member is resolved from the first acquired offset when empty,
// among the acquisitions of the caller's principal (ident). The offsets to
// stage are appended to refs (on a refusal, refs comes back as it was
// given). dup counts offsets already staged with the same type by an
// earlier call of the same transaction (a retry).
func (l *Ledger) checkOffsets(group string, member *string, ident string, call *Call, pp preParsed, refs []offRef) (code int16, msg string, out []offRef, dup int) {
	const notAcquired = "offset %d is not acquired by this member through this proxy"
	given := len(refs)
	if !l.topics[group][pp.topic] {
		// Not UNKNOWN_TOPIC_ID: the reference client retries that (after a
		// metadata refresh), and no retry makes records acquired.
		return kerr.InvalidRecordState.Code, "sharetx: no records of this topic were acquired through this proxy for the group", refs, 0
	}
	k := partKey{group, pp.topic, pp.part}
	ps := l.parts[k]
	now := time.Now()
	for i, o := range pp.offs {
		var st *offState
		if ps != nil {
			st = ps.get(o)
		}
		// Whose the offset is comes first: a stranger learns nothing
		// about other members' offsets.
		if st == nil || st.ident != ident || (*member != "" && st.member != *member) {
			return kerr.InvalidRecordState.Code, fmt.Sprintf(notAcquired, o), refs[:given], 0
		}
		if *member == "" {
			*member = st.member
		}
		switch {
		case st.state == stTxPending && st.call != nil && st.call.txnID == call.txnID &&
			st.call.producerID == call.producerID && st.call.epoch == call.epoch && st.ackType == pp.types[i]:
			dup++
			continue
		case st.state == stDeferred && st.call != nil && st.call.Matches(call.txnID, call.producerID, call.epoch):
			// Deferred by an earlier call of this transaction: a repeat of
			// that call is answered as it was, a call that stages takes
			// the offset over (deferred.go).
			if call.deferred {
				if st.ackType != pp.types[i] {
					return kerr.InvalidRecordState.Code, fmt.Sprintf("offset %d is already deferred by this transaction with another acknowledgement type", o), refs[:given], 0
				}
				dup++
				continue
			}
			if now.After(st.deadline) {
				return kerr.InvalidRecordState.Code, fmt.Sprintf("offset %d: its acquisition lock expired", o), refs[:given], 0
			}
			refs = append(refs, offRef{part: k, node: st.node, offset: o, ackType: pp.types[i], st: st, adopted: true})
			continue
		case st.state != stAcquired:
			return kerr.InvalidRecordState.Code, fmt.Sprintf("offset %d is already %s", o, st.state), refs[:given], 0
		case now.After(st.deadline):
			return kerr.InvalidRecordState.Code, fmt.Sprintf("offset %d: its acquisition lock expired", o), refs[:given], 0
		}
		refs = append(refs, offRef{part: k, node: st.node, offset: o, ackType: pp.types[i], st: st})
	}
	return 0, "", refs, dup
}

// ShadowTopic is the shadow topic's id, when the writer knows it, and its
// partition count.
func (s *Stager) ShadowTopic() (id [16]byte, partitions int32, ok bool) {
	t, ok := s.writer.(interface{ TopicID() [16]byte })
	if !ok {
		return [16]byte{}, 0, false
	}
	return t.TopicID(), s.partitions, true
}
