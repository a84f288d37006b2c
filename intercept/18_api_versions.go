package intercept

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	onResponse(kmsg.ApiVersions, apiVersionsResponse)
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

func apiVersionsResponse(env *Env, resp *kmsg.ApiVersionsResponse) bool {
	changed := upstreamVersions(env, resp)
	if resp.ErrorCode == 0 {
		changed = env.KIP.advertise(resp) || changed
	}
	return changed
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
