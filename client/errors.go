package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PartitionError is the failure of one partition of a TxnShareAcknowledge.
type PartitionError struct {
	Topic     string
	TopicID   [16]byte
	Partition int32
	// Err is the kerr error of the partition's error code, e.g.
	// kerr.InvalidRecordState, kerr.UnknownTopicID, kerr.InvalidRequest or
	// kerr.OperationNotAttempted.
	Err error
	// Message is the proxy's error message, if any.
	Message string
}

func (e PartitionError) String() string {
	s := fmt.Sprintf("%s[%d]: %v", e.Topic, e.Partition, e.Err)
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

// PartitionErrors is returned by SendShareAcknowledgementsToTransaction when
// the proxy rejected partitions. A TxnShareAcknowledge is all-or-nothing:
// nothing of the call was staged, and partitions that were fine report
// kerr.OperationNotAttempted. The transaction itself is still usable; it is
// up to the application to retry with corrected acknowledgements or abort.
//
// errors.Is(err, kerr.InvalidRecordState) and the like work on it.
type PartitionErrors struct {
	Errors []PartitionError
}

// Failed returns the partitions that really failed, leaving out those that
// answered OPERATION_NOT_ATTEMPTED.
func (e *PartitionErrors) Failed() []PartitionError {
	var out []PartitionError
	for _, pe := range e.Errors {
		if !errors.Is(pe.Err, kerr.OperationNotAttempted) {
			out = append(out, pe)
		}
	}
	return out
}

func (e *PartitionErrors) Error() string {
	failed := e.Failed()
	parts := make([]string, 0, len(failed))
	for _, pe := range failed {
		parts = append(parts, pe.String())
	}
	s := "sharetx: TxnShareAcknowledge rejected " + strings.Join(parts, "; ")
	if n := len(e.Errors) - len(failed); n > 0 {
		s += fmt.Sprintf("; %d other partition(s) OPERATION_NOT_ATTEMPTED", n)
	}
	return s + " (all-or-nothing: no acknowledgement of this call was staged)"
}

// Unwrap returns the distinct partition errors, for errors.Is.
func (e *PartitionErrors) Unwrap() []error {
	var out []error
	seen := make(map[error]bool)
	for _, pe := range e.Errors {
		if pe.Err != nil && !seen[pe.Err] {
			seen[pe.Err] = true
			out = append(out, pe.Err)
		}
	}
	return out
}

// errNotAdvertised is returned when the cluster the client talks to does not
// advertise TxnShareAcknowledge, i.e. the client is not connected through
// sharetx (or the API keys differ).
type errNotAdvertised struct{ key int16 }

func (e *errNotAdvertised) Error() string {
	return fmt.Sprintf("sharetx: connect through sharetx: the cluster does not advertise TxnShareAcknowledge (key %d)", e.key)
}

// ErrNotAdvertised matches (errors.Is) the error returned when the cluster
// does not advertise TxnShareAcknowledge.
var ErrNotAdvertised = errors.New("sharetx: TxnShareAcknowledge not advertised")

func (e *errNotAdvertised) Is(target error) bool { return target == ErrNotAdvertised }

// The kinds of *TransactionError, matched with errors.Is. Every error that
// TransactionalShareAcknowledger's Flush, Commit, Abort and Close return,
// other than ErrClosed, is a *TransactionError of exactly one of
// ErrRetriable, ErrRejected and ErrTerminal; ErrFenced is a kind of
// ErrTerminal.
var (
	// ErrRetriable: the failure was transient (coordinator or proxy not
	// available; TRANSACTION_ABORTABLE, which the proxy also answers at its
	// TX_PENDING limit; a network error or timeout; a canceled
	// context; a commit whose outcome is unknown, see
	// TransactionError.MaybeCommitted). The transaction was aborted
	// (TransactionError.AbortErr says if that failed too), and every
	// acknowledgement it carried is back in the acknowledger's buffer,
	// their records ACQUIRED by the share consumer again. Flush or Commit
	// again (after a back-off) may succeed.
	ErrRetriable = errors.New("sharetx: retriable transaction failure")

	// ErrRejected: the proxy refused some acknowledgements themselves (a
	// *PartitionErrors: offsets not acquired by the member, because their
	// acquisition lock expired and they went to another member, or because
	// they are already staged or committed; an unknown topic id; a
	// malformed range). The transaction was aborted. The acknowledgements
	// of the refused partitions were dropped and their records released
	// (TransactionError.Dropped); every other one is back in the buffer, and
	// Flush or Commit again stages them.
	ErrRejected = errors.New("sharetx: acknowledgements rejected")

	// ErrTerminal: the acknowledger can commit nothing any more: the
	// producer was fenced (ErrFenced) or is otherwise in a fatal state, the
	// cluster is not reached through sharetx (ErrNotAdvertised), the proxy
	// does not know the producer (INVALID_PRODUCER_ID_MAPPING: it
	// initialized elsewhere, or the proxy restarted), an authorization
	// failed, or the ShareGroupMetadata names a member that is gone
	// (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH). The transaction was aborted
	// (if it could be), the acknowledgements stay in the buffer and every
	// later Flush, Commit and Acknowledge returns the same error. Close the
	// acknowledger, which releases their records, and start over with a new
	// producer.
	ErrTerminal = errors.New("sharetx: terminal transaction failure")

	// ErrFenced: terminal (errors.Is(err, ErrTerminal) holds too). A newer
	// producer with the same transactional id initialized, so this one is a
	// zombie: the coordinator aborted its open transaction and refuses it
	// everything. The new instance owns the work now.
	ErrFenced = errors.New("sharetx: transactional producer fenced")

	// ErrClosed is returned by every method of a closed
	// TransactionalShareAcknowledger but Close.
	ErrClosed = errors.New("sharetx: acknowledger closed")
)

type errKind uint8

const (
	kindRetriable errKind = iota
	kindRejected
	kindTerminal
	kindFenced // a terminal kind
)

// TransactionError is the error of a TransactionalShareAcknowledger's Flush,
// Commit, Abort or Close. errors.Is matches its kind (ErrRetriable,
// ErrRejected, ErrTerminal, ErrFenced) and also reaches its causes: kerr
// errors (errors.Is(err, kerr.ProducerFenced)), *PartitionErrors
// (errors.As), context errors.
type TransactionError struct {
	// Op is what failed: "flush", "commit", "abort" or "close".
	Op string
	// Err is the cause.
	Err error
	// AbortErr is non-nil when aborting the transaction after the failure
	// failed too. The acknowledger retries the abort before anything else
	// on the next Flush, Commit, Abort or Close; if nothing ends it, the
	// coordinator aborts the transaction when it times out.
	AbortErr error
	// MaybeCommitted is set when the commit's outcome is unknown: EndTxn
	// was sent and its answer was lost (a network error, a timeout,
	// UNKNOWN_SERVER_ERROR). The staged acknowledgements are in Released
	// like after any abort: if the transaction did commit they took
	// effect; if it aborted, the proxy released their records and they
	// are redelivered. Either way each acknowledgement takes effect at
	// most once.
	MaybeCommitted bool
	// Kept is the number of acknowledgements in the buffer after the
	// failure (Len).
	Kept int
	// Dropped are the records whose acknowledgements the proxy refused
	// (ErrRejected); they were released for redelivery.
	Dropped []*kgo.Record
	// Released are the records whose acknowledgements were staged in the
	// transaction that failed and was aborted: the proxy released them
	// upstream (as a broker with KIP-1289 does), so they are no longer
	// this consumer's and come back in a later poll, possibly to another
	// member. They are not kept in the buffer.
	Released []*kgo.Record

	kind errKind
}

func (e *TransactionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sharetx: %s: %s", e.Op, strings.TrimPrefix(fmt.Sprint(e.Err), "sharetx: "))
	if e.AbortErr != nil {
		fmt.Fprintf(&b, "; aborting the transaction failed too: %v", e.AbortErr)
	}
	switch e.kind {
	case kindRetriable:
		b.WriteString(" (retriable")
	case kindRejected:
		b.WriteString(" (rejected")
	case kindFenced:
		b.WriteString(" (terminal: fenced by a newer producer with the same transactional id")
	default:
		b.WriteString(" (terminal: the acknowledger can no longer commit")
	}
	if e.MaybeCommitted {
		b.WriteString("; the commit's outcome is unknown")
	}
	if len(e.Dropped) > 0 {
		fmt.Fprintf(&b, "; %d acknowledgement(s) dropped", len(e.Dropped))
	}
	fmt.Fprintf(&b, "; %d acknowledgement(s) kept)", e.Kept)
	return b.String()
}

// Is matches the error's kind.
func (e *TransactionError) Is(target error) bool {
	switch target {
	case ErrRetriable:
		return e.kind == kindRetriable
	case ErrRejected:
		return e.kind == kindRejected
	case ErrTerminal:
		return e.kind >= kindTerminal
	case ErrFenced:
		return e.kind == kindFenced
	}
	return false
}

// Unwrap returns the cause and the abort's error, for errors.Is and
// errors.As.
func (e *TransactionError) Unwrap() []error {
	out := make([]error, 0, 2)
	for _, err := range []error{e.Err, e.AbortErr} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
