package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// advertiseBrokers rewrites every broker address resp names to the proxy
// listener serving that broker (Addresses.Advertise): the one place that
// knows where each response names brokers. Clients dial what they read in
// Metadata, FindCoordinator and DescribeCluster, and in the KIP-951
// NodeEndpoints of Produce, Fetch, ShareFetch and ShareAcknowledge (sent
// when a leader moved). It reports whether it changed anything.
func advertiseBrokers(env *Env, resp kmsg.Response) bool {
	changed := false
	adv := func(node int32, host *string, port *int32) {
		changed = advertise(env, node, host, port) || changed
	}
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			adv(r.Brokers[i].NodeID, &r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FindCoordinatorResponse:
		// v0-v3 name one coordinator at the top level, v4+ batch keys in
		// Coordinators; errors carry node id -1 and are left alone.
		if r.Version < 4 && r.ErrorCode == 0 {
			adv(r.NodeID, &r.Host, &r.Port)
		}
		for i := range r.Coordinators {
			if c := &r.Coordinators[i]; c.ErrorCode == 0 {
				adv(c.NodeID, &c.Host, &c.Port)
			}
		}
	case *kmsg.DescribeClusterResponse:
		// EndpointType 2 (controllers) is answered with an error by a
		// broker: only broker lists are rewritten.
		if r.EndpointType != 2 {
			for i := range r.Brokers {
				adv(r.Brokers[i].NodeID, &r.Brokers[i].Host, &r.Brokers[i].Port)
			}
		}
	case *kmsg.ProduceResponse:
		for i := range r.Brokers {
			adv(r.Brokers[i].NodeID, &r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FetchResponse:
		for i := range r.Brokers {
			adv(r.Brokers[i].NodeID, &r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.ShareFetchResponse:
		for i := range r.NodeEndpoints {
			adv(r.NodeEndpoints[i].NodeID, &r.NodeEndpoints[i].Host, &r.NodeEndpoints[i].Port)
		}
	case *kmsg.ShareAcknowledgeResponse:
		for i := range r.NodeEndpoints {
			adv(r.NodeEndpoints[i].NodeID, &r.NodeEndpoints[i].Host, &r.NodeEndpoints[i].Port)
		}
	}
	return changed
}

// advertise rewrites one broker address; node -1 (an error's) is left
// alone.
func advertise(env *Env, node int32, host *string, port *int32) bool {
	if node < 0 {
		return false
	}
	h, p := env.Addrs.Advertise(node, *host, *port)
	if h == *host && p == *port {
		return false
	}
	*host, *port = h, p
	return true
}
