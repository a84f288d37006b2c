package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// Produce v10+ carries KIP-951 NodeEndpoints (tag 0) when the leader moved:
// the client dials them directly, so they must name proxy listeners.
func init() {
	register(kmsg.Produce, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.ProduceResponse)
		changed := false
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		return changed
	})
}
