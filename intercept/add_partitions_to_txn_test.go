package intercept

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/proxy"
)

// coordinatorConn is a client connection whose upstream coordinator answers
// the proxy's AddPartitionsToTxn with the codes of answers, one per request
// (the last one again once they are used up).
type coordinatorConn struct {
	fakeConn
	mu        sync.Mutex
	answers   []int16
	sent      []*kmsg.AddPartitionsToTxnRequest
	clientIDs []string
	onSend    func(n int) // after request n (from 1) is sent
	failAt    int         // StartInject of request failAt fails (0: none)
}

func (c *coordinatorConn) StartInject(kmsg.Request) (func(context.Context) (kmsg.Response, error), error) {
	return nil, errors.New("coordinatorConn: the client's request must keep the client's id")
}

func (c *coordinatorConn) StartInjectAs(r kmsg.Request, clientID string) (func(context.Context) (kmsg.Response, error), error) {
	req := r.(*kmsg.AddPartitionsToTxnRequest)
	c.mu.Lock()
	c.clientIDs = append(c.clientIDs, clientID)
	n := len(c.sent) + 1
	if n == c.failAt {
		c.mu.Unlock()
		return nil, errors.New("coordinatorConn: too many requests in flight")
	}
	c.sent = append(c.sent, req)
	code := c.answers[min(n, len(c.answers))-1]
	c.mu.Unlock()
	if c.onSend != nil {
		c.onSend(n)
	}
	return func(context.Context) (kmsg.Response, error) {
		return addPartitionsError(req, code), nil
	}, nil
}

func (c *coordinatorConn) sends() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

// addPartitionsFrame is a client's AddPartitionsToTxn of version v for two
// partitions of one topic, as the hook sees it.
func addPartitionsFrame(c proxy.Conn, v int16) *proxy.Request {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = v
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = "txn-a", 7, 1
	t := kmsg.NewAddPartitionsToTxnRequestTopic()
	t.Topic, t.Partitions = "out", []int32{0, 1}
	req.Topics = append(req.Topics, t)
	frame := proxy.EncodeRequestFrame(9, "app-1", req)
	hdr, _ := proxy.ParseRequestHeader(frame)
	return &proxy.Request{Conn: c, Key: kmsg.AddPartitionsToTxn.Int16(), Version: v, Frame: frame, BodyOffset: hdr.BodyOffset, ClientID: hdr.ClientID}
}

func answerCodes(resp kmsg.Response) []int16 {
	var codes []int16
	for _, t := range resp.(*kmsg.AddPartitionsToTxnResponse).Topics {
		for _, p := range t.Partitions {
			codes = append(codes, p.ErrorCode)
		}
	}
	return codes
}

func concurrentEngine(t *testing.T, budget time.Duration) (*KIP1289, *proxy.Registry) {
	kcfg := configs.Default().KIP1289
	kcfg.ConcurrentTxnRetry = budget
	e := engineWith(t, kcfg)
	return e, feature(e)
}

// TestConcurrentTransactionsRetried: the coordinator answers
// CONCURRENT_TRANSACTIONS twice; the proxy asks again on the client's
// connection and the client gets the third answer, as if it had asked
// once. The request sent again is the client's own.
func TestConcurrentTransactionsRetried(t *testing.T) {
	e, reg := concurrentEngine(t, 200*time.Millisecond)
	c := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})},
		answers: []int16{kerr.ConcurrentTransactions.Code, kerr.ConcurrentTransactions.Code, 0}}
	act := reg.For(kmsg.AddPartitionsToTxn.Int16()).Hook(addPartitionsFrame(c, 3))
	if act.Async == nil {
		t.Fatalf("the hook did not take the request: %+v", act)
	}
	if c.sends() != 1 {
		t.Fatalf("the first attempt must be on the wire when the hook returns (the client's order); sent %d", c.sends())
	}
	resp := act.Async()
	if got := answerCodes(resp); len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Fatalf("the client got %v, want the coordinator's third answer (no error) for both partitions", got)
	}
	if resp.GetVersion() != 3 {
		t.Errorf("answer version %d, want the request's 3", resp.GetVersion())
	}
	if c.sends() != 3 {
		t.Fatalf("sent %d requests, want 3", c.sends())
	}
	for i, id := range c.clientIDs {
		if id != "app-1" {
			t.Errorf("request %d went with client id %q, want the client's app-1", i+1, id)
		}
	}
	for i, r := range c.sent {
		if r.TransactionalID != "txn-a" || r.ProducerID != 7 || r.ProducerEpoch != 1 || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 2 {
			t.Errorf("request %d is not the client's: %+v", i+1, r)
		}
	}
	if n := testutil.ToFloat64(e.mConcurrentRetries.WithLabelValues("answered")); n != 1 {
		t.Errorf("answered %v, want 1", n)
	}
	if len(e.txnRetries.running) != 0 {
		t.Errorf("retry marks left: %v", e.txnRetries.running)
	}
}

// TestConcurrentTransactionsBudget: a coordinator that keeps answering
// CONCURRENT_TRANSACTIONS gets asked again only within the budget; then the
// client gets CONCURRENT_TRANSACTIONS, and backs off itself.
func TestConcurrentTransactionsBudget(t *testing.T) {
	e, reg := concurrentEngine(t, 20*time.Millisecond)
	c := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})}, answers: []int16{kerr.ConcurrentTransactions.Code}}
	act := reg.For(kmsg.AddPartitionsToTxn.Int16()).Hook(addPartitionsFrame(c, 1))
	start := time.Now()
	resp := act.Async()
	took := time.Since(start)
	if got := answerCodes(resp); got[0] != kerr.ConcurrentTransactions.Code {
		t.Fatalf("the client got %v, want CONCURRENT_TRANSACTIONS", got)
	}
	// Pauses of 1, 2, 3, 4, 5 ms fit in 20 ms (15 ms), a sixth does not.
	if n := c.sends(); n < 2 || n > 6 {
		t.Errorf("sent %d requests within a 20 ms budget, want 2..6", n)
	}
	if took > time.Second {
		t.Errorf("took %v", took)
	}
	if n := testutil.ToFloat64(e.mConcurrentRetries.WithLabelValues("passed_on")); n != 1 {
		t.Errorf("passed_on %v, want 1", n)
	}
}

// TestConcurrentTransactionsStopAtEndTxn: the client's EndTxn of the same
// transactional id, read while the proxy retries, ends the retries: a retry
// that reached the coordinator after it would add partitions to a
// transaction the client has moved past. So does an InitProducerId.
func TestConcurrentTransactionsStopAtEndTxn(t *testing.T) {
	for _, moveOn := range []string{"EndTxn", "InitProducerId"} {
		t.Run(moveOn, func(t *testing.T) {
			e, reg := concurrentEngine(t, 10*time.Second)
			c := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})}, answers: []int16{kerr.ConcurrentTransactions.Code}}
			c.onSend = func(n int) {
				if n != 2 {
					return
				}
				// The client's next request, read while the proxy waits.
				if moveOn == "EndTxn" {
					end := kmsg.NewPtrEndTxnRequest()
					end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch = 3, "txn-a", 7, 1
					reg.For(kmsg.EndTxn.Int16()).Hook(&proxy.Request{Conn: &c.fakeConn, Key: kmsg.EndTxn.Int16(), Version: 3, Frame: end.AppendTo(nil)})
				} else {
					init := kmsg.NewPtrInitProducerIDRequest()
					init.Version, init.TransactionalID = 4, kmsg.StringPtr("txn-a")
					reg.For(kmsg.InitProducerID.Int16()).Hook(&proxy.Request{Conn: &c.fakeConn, Key: kmsg.InitProducerID.Int16(), Version: 4, Frame: init.AppendTo(nil)})
				}
			}
			act := reg.For(kmsg.AddPartitionsToTxn.Int16()).Hook(addPartitionsFrame(c, 2))
			done := make(chan kmsg.Response, 1)
			go func() { done <- act.Async() }()
			select {
			case resp := <-done:
				if got := answerCodes(resp); got[0] != kerr.ConcurrentTransactions.Code {
					t.Fatalf("the client got %v, want CONCURRENT_TRANSACTIONS", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("still retrying after the client's %s (sent %d)", moveOn, c.sends())
			}
			if n := c.sends(); n != 2 {
				t.Errorf("sent %d requests, want 2: none after the client's %s", n, moveOn)
			}
			if n := testutil.ToFloat64(e.mConcurrentRetries.WithLabelValues("passed_on")); n != 1 {
				t.Errorf("passed_on %v, want 1", n)
			}
		})
	}
}

// TestAddPartitionsForwardedWhenNotTaken: the brokers' batched form (v4+),
// a request the proxy cannot send itself, and every request with the
// setting at 0 go upstream as they came; a first answer that is not
// CONCURRENT_TRANSACTIONS is the client's after one request.
func TestAddPartitionsForwardedWhenNotTaken(t *testing.T) {
	_, reg := concurrentEngine(t, 15*time.Millisecond)
	hook := reg.For(kmsg.AddPartitionsToTxn.Int16()).Hook
	c := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})}, answers: []int16{0}}
	if act := hook(&proxy.Request{Conn: c, Key: kmsg.AddPartitionsToTxn.Int16(), Version: 4, Frame: kmsg.NewPtrAddPartitionsToTxnRequest().AppendTo(nil)}); act.Async != nil || act.Local != nil || act.Body != nil {
		t.Errorf("v4 was not forwarded as it came: %+v", act)
	}
	failing := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})}, answers: []int16{0}, failAt: 1}
	if act := hook(addPartitionsFrame(failing, 3)); act.Async != nil || act.Body != nil {
		t.Errorf("a request the proxy could not send was not forwarded as it came: %+v", act)
	}
	act := hook(addPartitionsFrame(c, 0))
	if got := answerCodes(act.Async()); got[0] != 0 || c.sends() != 1 {
		t.Errorf("an answer without CONCURRENT_TRANSACTIONS: client got %v after %d requests, want no error after 1", got, c.sends())
	}

	_, off := concurrentEngine(t, 0)
	if h := off.For(kmsg.AddPartitionsToTxn.Int16()); h.Hook != nil || h.Rewrite != nil {
		t.Error("kip1289.concurrent_transactions_retry 0: AddPartitionsToTxn must pass through untouched")
	}
}

// FuzzAddPartitionsHook: any bytes as a client's AddPartitionsToTxn of any
// version are forwarded as they came or taken; a taken one is answered, at
// the request's version, with one answer per partition the request named,
// and the answer encodes and decodes.
func FuzzAddPartitionsHook(f *testing.F) {
	for v := int16(0); v <= 4; v++ {
		r := addPartitionsFrame(nil, min(v, 3))
		f.Add(v, r.Body(), int16(0))
		f.Add(v, r.Body(), kerr.ConcurrentTransactions.Code)
	}
	kcfg := configs.Default().KIP1289
	kcfg.ConcurrentTxnRetry = 3 * time.Millisecond
	e, _ := New(fakeContext(kcfg))
	defer e.Close()
	hook := feature(e).For(kmsg.AddPartitionsToTxn.Int16()).Hook
	f.Fuzz(func(t *testing.T, version int16, body []byte, code int16) {
		if version < 0 || version > kmsg.NewPtrAddPartitionsToTxnRequest().MaxVersion() {
			return
		}
		c := &coordinatorConn{fakeConn: fakeConn{done: make(chan struct{})}, answers: []int16{code, 0}}
		// The client's header (id "app-1"; v3+ flexible, its empty tags),
		// then the bytes.
		frame := binary.BigEndian.AppendUint16(make([]byte, 4), uint16(kmsg.AddPartitionsToTxn))
		frame = binary.BigEndian.AppendUint16(frame, uint16(version))
		frame = binary.BigEndian.AppendUint32(frame, 9)
		frame = append(binary.BigEndian.AppendUint16(frame, 5), "app-1"...)
		if version >= 3 {
			frame = append(frame, 0)
		}
		off := len(frame)
		frame = append(frame, body...)
		binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
		act := hook(&proxy.Request{Conn: c, Key: kmsg.AddPartitionsToTxn.Int16(), Version: version, Frame: frame, BodyOffset: off, ClientID: kmsg.StringPtr("app-1")})
		if act.Async == nil {
			if c.sends() != 0 || act.Local != nil || act.Body != nil {
				t.Fatalf("v%d: neither forwarded as it came nor taken: %+v, %d sent", version, act, c.sends())
			}
			return
		}
		req := c.sent[0]
		resp := act.Async()
		if resp.GetVersion() != version {
			t.Fatalf("answer v%d to a v%d request", resp.GetVersion(), version)
		}
		parts := 0
		for _, tp := range req.Topics {
			parts += len(tp.Partitions)
		}
		if got := len(answerCodes(resp)); got != parts {
			t.Fatalf("v%d: %d answers for %d partitions", version, got, parts)
		}
		back := kmsg.NewPtrAddPartitionsToTxnResponse()
		back.SetVersion(version)
		if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
			t.Fatalf("v%d: the answer does not decode: %v", version, err)
		}
	})
}
