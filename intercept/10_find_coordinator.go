package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// FindCoordinator v0-v3 names one coordinator at the top level; v4+ batches
// keys in Coordinators. Errors carry node id -1 and are left alone.
func init() {
	register(kmsg.FindCoordinator, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.FindCoordinatorResponse)
		changed := false
		if resp.Version < 4 && resp.ErrorCode == 0 {
			changed = advertise(env, resp.NodeID, &resp.Host, &resp.Port)
		}
		for i := range resp.Coordinators {
			c := &resp.Coordinators[i]
			if c.ErrorCode == 0 {
				changed = advertise(env, c.NodeID, &c.Host, &c.Port) || changed
			}
		}
		return changed
	})
}
