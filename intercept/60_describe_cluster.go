package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeCluster lists brokers (admin clients dial them). With
// EndpointType 2 (controllers) a broker answers an error, so only broker
// lists reach here.
func init() {
	register(kmsg.DescribeCluster, func(env *Env, _ any, r kmsg.Response) bool {
		resp := r.(*kmsg.DescribeClusterResponse)
		if resp.EndpointType == 2 {
			return false
		}
		changed := false
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			changed = advertise(env, b.NodeID, &b.Host, &b.Port) || changed
		}
		return changed
	})
}
