package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
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
