package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// ApiVersions: keys kmsg does not know are removed (the proxy refuses to
// forward them: a broker closes the connection on a key it does not know,
// which would also end a share session), and keys the proxy decodes are
// capped to the versions kmsg can decode, so a newer broker never makes the
// proxy parse something it cannot. Everything else, notably the tagged
// SupportedFeatures / FinalizedFeatures that clients read transaction
// version 2 from, passes through: kmsg keeps unknown tags too. What every
// proxy does; a filter's rewriter runs after it (and may add the key it
// serves). How the key's frames are read (header v0, a version too new) is
// in keys.go.

// apiVersionsResponse notes the keys the upstream broker supports, then
// caps them.
func (s *Server) apiVersionsResponse(resp *kmsg.ApiVersionsResponse) bool {
	s.upstreamKeys.Note(resp)
	return capApiVersions(resp, s.handlers.Decoded)
}

// capApiVersions applies the proxy's version policy to resp in place:
// decoded says which keys the proxy reads beyond their headers.
func capApiVersions(resp *kmsg.ApiVersionsResponse, decoded func(key int16) bool) bool {
	changed := false
	keep := resp.ApiKeys[:0]
	for _, k := range resp.ApiKeys {
		req := kmsg.RequestForKey(k.ApiKey)
		if req == nil {
			changed = true
			continue
		}
		if decoded(k.ApiKey) {
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
