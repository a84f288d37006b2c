package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// ShareAcknowledge carries NodeEndpoints when a partition's leader moved.
func init() {
	register(kmsg.ShareAcknowledge, func(env *Env, r kmsg.Response) bool {
		resp := r.(*kmsg.ShareAcknowledgeResponse)
		changed := false
		for i := range resp.NodeEndpoints {
			b := &resp.NodeEndpoints[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		return changed
	})
}
