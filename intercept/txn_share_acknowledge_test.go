package intercept

import (
	"context"
	"testing"
	"time"

	"github.com/sharetx/sharetx/configs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertised returns the versions of key in resp, and how many entries it has.
func advertised(resp *kmsg.ApiVersionsResponse, key int16) (min, max int16, n int) {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == key {
			min, max, n = k.MinVersion, k.MaxVersion, n+1
		}
	}
	return min, max, n
}

// TestAdvertiseKeepsTheKey: the KIP's client gives up on a producer for good
// once a node's ApiVersions lack key 95, so the proxy advertises it at the
// same versions on every answer, also once a broker starts to advertise the
// key itself (then the broker's entry is replaced, and the proxy keeps
// serving the key).
func TestAdvertiseKeepsTheKey(t *testing.T) {
	e := testEngine()
	key := e.Key()
	broker := func(withKey bool) *kmsg.ApiVersionsResponse {
		resp := kmsg.NewPtrApiVersionsResponse()
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MaxVersion = kmsg.Produce.Int16(), 12
		resp.ApiKeys = append(resp.ApiKeys, k)
		if withKey {
			k := kmsg.NewApiVersionsResponseApiKey()
			k.ApiKey, k.MinVersion, k.MaxVersion = key, 1, 3
			resp.ApiKeys = append(resp.ApiKeys, k)
		}
		return resp
	}
	for i, withKey := range []bool{false, true, false, true} {
		resp := broker(withKey)
		if !e.advertise(resp) {
			t.Fatalf("answer %d: advertise reported no change", i)
		}
		if min, max, n := advertised(resp, key); n != 1 || min != 0 || max != 0 {
			t.Fatalf("answer %d (broker advertises the key: %v): key %d listed %d times at v%d-v%d, want once at v0-v0", i, withKey, key, n, min, max)
		}
		if _, _, n := advertised(resp, kmsg.Produce.Int16()); n != 1 {
			t.Fatalf("answer %d: the broker's other keys were dropped: %+v", i, resp.ApiKeys)
		}
	}
	if err := e.CheckUpstream(broker(true)); err == nil {
		t.Error("start-up check: a cluster that advertises the key must be refused")
	}
	if err := e.CheckUpstream(broker(false)); err != nil {
		t.Errorf("start-up check of a cluster without the key: %v", err)
	}
}

// TestNotReadyIsRetriableForABoundedTime: before the shadow topic is ready
// TxnShareAcknowledge is answered COORDINATOR_NOT_AVAILABLE (retriable) for
// kip1289.not_ready_retry_for after start, then TRANSACTION_ABORTABLE, so
// the KIP's client, which retries a retriable code without limit ahead of
// its EndTxn, can still end the transaction.
func TestNotReadyIsRetriableForABoundedTime(t *testing.T) {
	cfg := configs.Default().KIP1289
	cfg.NotReadyRetryFor = 300 * time.Millisecond
	e := engineWith(t, cfg)
	defer e.Close()
	req := kip1289Request()
	code := func() int16 { return topCode(e.stage(context.Background(), req, "")) }
	if got := code(); got != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("right after start: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(got))
	}
	time.Sleep(cfg.NotReadyRetryFor + 50*time.Millisecond)
	if got := code(); got != kerr.TransactionAbortable.Code {
		t.Fatalf("%s after start, still not ready: %v, want TRANSACTION_ABORTABLE", cfg.NotReadyRetryFor, kerr.ErrorForCode(got))
	}
}
