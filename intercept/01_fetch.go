package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// Fetch v16+ carries KIP-951 NodeEndpoints (tag 0) when the leader moved.
func init() {
	register(kmsg.Fetch, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.FetchResponse)
		changed := false
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		return changed
	})
}
