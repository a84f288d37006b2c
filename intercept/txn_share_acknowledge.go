package intercept

// TxnShareAcknowledge, the key the proxy serves itself (kip1289.api_key,
// 95 by default, unknown to kmsg): advertised in ApiVersions, answered by
// the Stager off the connection's read loop.

import (
	"context"
	"fmt"
	"time"

	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/proxy"
	"github.com/sharetx/sharetx/staging"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertise adds TxnShareAcknowledge to an ApiVersions response, always at
// the same versions (v0), whether the shadow topic is ready or not: the
// KIP's client refuses the call itself, and its producer becomes unusable
// for good, once a node's ApiVersions lack the key. A broker that
// advertises the key itself (start-up refuses such a cluster, CheckUpstream;
// this is one that began to later, e.g. an upgrade) has its entry replaced
// by the proxy's: clients of this proxy keep the answers they started with,
// and the operator is told, once, to choose another key.
func (e *KIP1289) advertise(resp *kmsg.ApiVersionsResponse) bool {
	keep := resp.ApiKeys[:0]
	for _, k := range resp.ApiKeys {
		if k.ApiKey == e.key {
			if e.conflict.CompareAndSwap(false, true) {
				e.log.Error("a broker now advertises the API key configured for TxnShareAcknowledge; this proxy keeps serving it itself, so its clients stay consistent. Set kip1289.api_key to a key the cluster does not use, and roll the sidecars", "api_key", e.key)
			}
			continue
		}
		keep = append(keep, k)
	}
	k := kmsg.NewApiVersionsResponseApiKey()
	k.ApiKey, k.MinVersion, k.MaxVersion = e.key, 0, 0
	resp.ApiKeys = append(keep, k)
	return true
}

// CheckUpstream fails when the cluster advertises the TxnShareAcknowledge
// key itself.
func (e *KIP1289) CheckUpstream(resp *kmsg.ApiVersionsResponse) error {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == e.key {
			return fmt.Errorf("the upstream cluster advertises API key %d, which kip1289.api_key configures for TxnShareAcknowledge: choose a key the cluster does not use", e.key)
		}
	}
	return nil
}

// apiVersionsResponse adds TxnShareAcknowledge to every ApiVersions
// answer the broker gave without an error (advertise).
func (e *KIP1289) apiVersionsResponse(resp *kmsg.ApiVersionsResponse) bool {
	return resp.ErrorCode == 0 && e.advertise(resp)
}

// txnShareAcknowledgeRequest answers a TxnShareAcknowledge request, off the
// read loop. The key is the proxy's own for the life of the process (see
// advertise).
func (e *KIP1289) txnShareAcknowledgeRequest(r *proxy.Request) proxy.Action {
	req := &kip1289.TxnShareAcknowledgeRequest{APIKey: e.key, Version: r.Version}
	if r.Version != 0 {
		return proxy.Action{Local: &kip1289.TxnShareAcknowledgeResponse{APIKey: e.key, ErrorCode: kerr.UnsupportedVersion.Code}}
	}
	if err := req.ReadFrom(r.Body()); err != nil {
		// The reference layout has no top-level message, and a request
		// that does not decode names no partitions to carry one.
		e.log.Debug("malformed TxnShareAcknowledge", "err", err)
		return proxy.Action{Local: &kip1289.TxnShareAcknowledgeResponse{APIKey: e.key, ErrorCode: kerr.InvalidRequest.Code}}
	}
	// A broker whose listener requires SASL closes a connection that sends
	// anything but ApiVersions and SASL before authenticating; so does the
	// proxy, for the request it answers itself.
	if r.Conn.Authenticating() || (e.requireAuth && r.Conn.Principal() == "") {
		return proxy.Action{Close: "unauthenticated_txn_share_acknowledge"}
	}
	ident := r.Conn.Principal()
	ctx := staging.WithCaller(e.ctx, r.Conn)
	if s := e.stager.Load(); s != nil && req.RideProduce && !req.Defer && req.TransactionalID != nil {
		// Announced here, on the read loop: the Produce the client sends
		// right after the call may be read before the call is validated.
		ctx = s.Announce(ctx, *req.TransactionalID)
	}
	return proxy.Action{Async: func() kmsg.Response {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp := e.stage(ctx, req, ident)
		resp.APIKey = e.key
		return resp
	}}
}
