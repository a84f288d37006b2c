package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// ApiVersions: keys kmsg does not know are removed (the proxy refuses to
// forward them: a broker closes the connection on a key it does not know,
// which would also end a share session), and keys the proxy decodes are
// capped to the versions kmsg can decode, so a newer broker never makes the
// proxy parse something it cannot. Everything else, notably the tagged
// SupportedFeatures / FinalizedFeatures that clients read transaction
// version 2 from, passes through: kmsg keeps unknown tags too.
func init() {
	register(kmsg.ApiVersions, func(env *Env, r kmsg.Response) bool {
		resp := r.(*kmsg.ApiVersionsResponse)
		if env.UpstreamVersions != nil {
			env.UpstreamVersions(resp)
		}
		return CapApiVersions(resp)
	})
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
		if Decoded(k.ApiKey) || k.ApiKey == kmsg.ApiVersions.Int16() {
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
