package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// Metadata is where clients learn the brokers; every one must be a proxy
// listener. Advertise also opens the listener of a broker seen for the first
// time, before the client can dial it.
func init() {
	register(kmsg.Metadata, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.MetadataResponse)
		changed := false
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		return changed
	})
}
