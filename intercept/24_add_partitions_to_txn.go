package intercept

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/proxy"
)

// AddPartitionsToTxn (v0–v3, a client adding partitions to its transaction
// itself, as librdkafka and clients before transaction version 2 do):
// retried by the proxy while the coordinator answers
// CONCURRENT_TRANSACTIONS, for at most kip1289.concurrent_transactions_retry
// (docs/design.md §5.4).
//
// Under transaction version 1 an EndTxn is answered once the coordinator
// wrote PREPARE_COMMIT; it writes the markers after that, and until they are
// written every AddPartitionsToTxn of the producer's next transaction is
// answered CONCURRENT_TRANSACTIONS. librdkafka then waits 20 ms
// (rdkafka_txnmgr.c) before it asks again, and nothing of the new
// transaction can be produced meanwhile; the markers usually take a
// millisecond or two. The proxy asks again on the client's own connection
// (same principal, so the broker authorises it as the client) after 1, 2, 3,
// ... ms, and answers the client with the first answer that is not
// CONCURRENT_TRANSACTIONS, or with the last one when the budget is spent.
//
// A retry is the client's request sent again while the client still waits
// for its answer, so the coordinator sees nothing a client could not have
// sent. One thing could change: the first attempt goes out in the client's
// order, the retries after requests the client sent meanwhile. A retry that
// reached the coordinator after the client's EndTxn or InitProducerId of the
// same transactional id would add partitions to a transaction the client
// has moved past; so such a request stops the retries (the client gets the
// CONCURRENT_TRANSACTIONS it would have got).

// concurrentTxnRetries are the transactional ids with a retry in progress,
// and whether an EndTxn or InitProducerId of theirs came since: bounded by
// the AddPartitionsToTxn requests waiting for their answers.
type concurrentTxnRetries struct {
	mu      sync.Mutex
	running map[string]*retryMark
}

type retryMark struct {
	n       int  // retry loops of the id running
	stopped bool // an EndTxn or InitProducerId of the id came since they started
}

func (c *concurrentTxnRetries) begin(txnID string) *retryMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[string]*retryMark{}
	}
	m := c.running[txnID]
	if m == nil {
		m = &retryMark{}
		c.running[txnID] = m
	}
	m.n++
	return m
}

func (c *concurrentTxnRetries) end(txnID string, m *retryMark) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.n--; m.n == 0 && c.running[txnID] == m {
		delete(c.running, txnID)
	}
}

// stop ends the retries of txnID: a request that moves its transaction on
// is on its way to the coordinator.
func (c *concurrentTxnRetries) stop(txnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.running[txnID]; m != nil {
		m.stopped = true
		delete(c.running, txnID) // a later AddPartitionsToTxn starts afresh
	}
}

func (c *concurrentTxnRetries) isStopped(m *retryMark) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.stopped
}

// concurrentRetryPause is the pause before retry n (from 1): 1, 2, 3, 4, 5,
// 5, ... ms.
func concurrentRetryPause(n int) time.Duration {
	return time.Duration(min(n, 5)) * time.Millisecond
}

func (e *KIP1289) addPartitionsToTxnRequest(r *proxy.Request) (proxy.Action, *struct{}) {
	if r.Version > 3 { // v4+ is the brokers' batched form
		return proxy.Action{}, nil
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = r.Version
	if req.ReadFrom(r.Body()) != nil || len(req.Topics) == 0 {
		return proxy.Action{}, nil // the broker answers it
	}
	clientID := deref(r.ClientID)
	mark := e.txnRetries.begin(req.TransactionalID)
	// The first attempt goes out now, in the client's order, under the
	// client's id: the broker sees the client's request.
	wait, err := r.Conn.StartInjectAs(req, clientID)
	if err != nil {
		e.txnRetries.end(req.TransactionalID, mark)
		return proxy.Action{}, nil // forwarded as it came
	}
	conn := r.Conn
	return proxy.Action{Async: func() kmsg.Response {
		defer e.txnRetries.end(req.TransactionalID, mark)
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
		defer cancel()
		go func() {
			select {
			case <-conn.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
		return e.retryConcurrent(ctx, conn, req, clientID, wait, mark)
	}}, nil
}

// keepAddPartitionsAnswer: an AddPartitionsToTxn the hook forwarded (v4+,
// one it could not decode or send itself) is answered as the broker answers.
func keepAddPartitionsAnswer(*struct{}, *kmsg.AddPartitionsToTxnResponse) bool { return false }

// retryConcurrent waits for the first answer and asks again while it is
// CONCURRENT_TRANSACTIONS, within the budget and until the transaction
// moves on; it returns the answer the client gets.
func (e *KIP1289) retryConcurrent(ctx context.Context, conn proxy.Conn, req *kmsg.AddPartitionsToTxnRequest, clientID string,
	wait func(context.Context) (kmsg.Response, error), mark *retryMark) kmsg.Response {
	start := time.Now()
	resp, err := wait(ctx)
	if err != nil {
		// The connection is closing (or the broker sent garbage, which
		// closes it): whatever is answered is not read.
		return addPartitionsError(req, kerr.CoordinatorNotAvailable.Code)
	}
	retried := false
	for n := 1; allConcurrent(resp.(*kmsg.AddPartitionsToTxnResponse)); n++ {
		pause := concurrentRetryPause(n)
		if time.Since(start)+pause > e.cfg.ConcurrentTxnRetry || !sleep(ctx, pause) || e.txnRetries.isStopped(mark) {
			if ctx.Err() == nil { // not a connection that closed
				e.mConcurrentRetries.WithLabelValues("passed_on").Inc()
			}
			return resp
		}
		w, err := conn.StartInjectAs(req, clientID)
		if err != nil {
			return resp
		}
		next, err := w(ctx)
		if err != nil {
			return resp
		}
		resp, retried = next, true
	}
	if retried {
		e.mConcurrentRetries.WithLabelValues("answered").Inc()
	}
	return resp
}

// sleep pauses for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// allConcurrent reports whether every partition of the answer is
// CONCURRENT_TRANSACTIONS (the coordinator refuses a request whole).
func allConcurrent(resp *kmsg.AddPartitionsToTxnResponse) bool {
	n := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != kerr.ConcurrentTransactions.Code {
				return false
			}
			n++
		}
	}
	return n > 0
}

// addPartitionsError answers every partition of req with code.
func addPartitionsError(req *kmsg.AddPartitionsToTxnRequest, code int16) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	resp.SetVersion(req.Version)
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func newConcurrentRetriesMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sharetx", Name: "concurrent_transactions_retries_total",
		Help: "Client AddPartitionsToTxn requests (v0-v3) the coordinator answered CONCURRENT_TRANSACTIONS and the proxy asked again (kip1289.concurrent_transactions_retry), by outcome: answered (a later attempt got another answer, which the client got) or passed_on (the budget was spent, or the client's EndTxn or InitProducerId came meanwhile: the client got CONCURRENT_TRANSACTIONS)."}, []string{"outcome"})
}
