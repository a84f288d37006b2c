package intercept

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharetx/sharetx/kip1289"
)

// ApiVersions: keys kmsg does not know are removed (the proxy refuses to
// forward them: a broker closes the connection on a key it does not know,
// which would also end a share session), and keys the proxy decodes are
// capped to the versions kmsg can decode, so a newer broker never makes the
// proxy parse something it cannot. Everything else, notably the tagged
// SupportedFeatures / FinalizedFeatures that clients read transaction
// version 2 from, passes through: kmsg keeps unknown tags too.
//
// That much every proxy does (upstreamVersions); the KIP-1289 engine then
// adds the key it serves.
func init() {
	register(kmsg.ApiVersions, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.ApiVersionsResponse)
		changed := upstreamVersions(env, resp)
		if resp.ErrorCode == 0 {
			changed = env.KIP.advertise(resp) || changed
		}
		return changed
	})
	describe(kmsg.ApiVersions, func(h *Handler) {
		// Its responses use header v0 at every version, so a client can read
		// the answer to a version the broker does not support.
		h.ResponseHeaderV0 = true
		// A version newer than kmsg decodes: answer as a broker does, with
		// UNSUPPORTED_VERSION at v0 and the versions the proxy supports, so
		// the client retries with one it can rewrite.
		h.TooNew = func(int16) kmsg.Response {
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			k := kmsg.NewApiVersionsResponseApiKey()
			k.ApiKey, k.MaxVersion = kmsg.ApiVersions.Int16(), h.MaxVersion
			resp.ApiKeys = append(resp.ApiKeys, k)
			return resp
		}
		// Brokers answer an unsupported ApiVersions version at v0.
		h.ResponseVersion = func(version int16, body []byte) int16 {
			if len(body) >= 2 && int16(binary.BigEndian.Uint16(body)) == kerr.UnsupportedVersion.Code {
				return 0
			}
			return version
		}
	})
}

// upstreamVersions tells the proxy the keys the upstream broker supports,
// then caps them.
func upstreamVersions(env *Env, resp *kmsg.ApiVersionsResponse) bool {
	if env.UpstreamKeys != nil {
		env.UpstreamKeys.Note(resp)
	}
	return CapApiVersions(resp)
}

// CapApiVersions applies the proxy's version policy to resp in place.
func CapApiVersions(resp *kmsg.ApiVersionsResponse) bool {
	changed := false
	keep := resp.ApiKeys[:0]
	for _, k := range resp.ApiKeys {
		req := kmsg.RequestForKey(k.ApiKey)
		if req == nil {
			changed = true
			continue
		}
		if Decoded(k.ApiKey) {
			if max := req.MaxVersion(); k.MaxVersion > max {
				k.MaxVersion = max
				changed = true
			}
			if k.MinVersion > k.MaxVersion {
				changed = true
				continue
			}
		}
		keep = append(keep, k)
	}
	resp.ApiKeys = keep
	return changed
}

// advertise adds TxnShareAcknowledge to an ApiVersions response, unless the
// cluster itself uses the key: then the proxy must not answer that key, and
// says so loudly.
func (e *KIP1289) advertise(resp *kmsg.ApiVersionsResponse) bool {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == e.key {
			e.conflict.Store(true)
			e.log.Error("the upstream cluster advertises the API key configured for TxnShareAcknowledge; set kip1289.api_key to a key the cluster does not use", "api_key", e.key)
			return false
		}
	}
	k := kmsg.NewApiVersionsResponseApiKey()
	k.ApiKey, k.MinVersion, k.MaxVersion = e.key, 0, 0
	resp.ApiKeys = append(resp.ApiKeys, k)
	return true
}

// CheckUpstream fails when the cluster advertises the TxnShareAcknowledge
// key itself.
func (e *KIP1289) CheckUpstream(resp *kmsg.ApiVersionsResponse) error {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == e.key {
			e.conflict.Store(true)
			return fmt.Errorf("the upstream cluster advertises API key %d, which kip1289.api_key configures for TxnShareAcknowledge: choose a key the cluster does not use", e.key)
		}
	}
	return nil
}

// Serves reports whether the proxy answers key itself.
func (e *KIP1289) Serves(key int16) bool { return key == e.key && !e.conflict.Load() }

// TxnHook answers a TxnShareAcknowledge request, off the read loop.
func (e *KIP1289) TxnHook(r *Request) Action {
	req := &kip1289.TxnShareAcknowledgeRequest{APIKey: e.key, Version: r.Version}
	if r.Version != 0 {
		return Action{Local: &kip1289.TxnShareAcknowledgeResponse{APIKey: e.key, ErrorCode: kerr.UnsupportedVersion.Code}}
	}
	if err := req.ReadFrom(r.Body()); err != nil {
		// The reference layout has no top-level message, and a request
		// that does not decode names no partitions to carry one.
		e.log.Debug("malformed TxnShareAcknowledge", "err", err)
		return Action{Local: &kip1289.TxnShareAcknowledgeResponse{APIKey: e.key, ErrorCode: kerr.InvalidRequest.Code}}
	}
	// A broker whose listener requires SASL closes a connection that sends
	// anything but ApiVersions and SASL before authenticating; so does the
	// proxy, for the request it answers itself.
	if e.authenticating(r.Conn) || (e.requireAuth && e.identOf(r.Conn) == "") {
		return Action{Close: "unauthenticated_txn_share_acknowledge"}
	}
	ident := e.identOf(r.Conn)
	return Action{Async: func() kmsg.Response {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		resp := e.stage(ctx, req, ident)
		resp.APIKey = e.key
		return resp
	}}
}
