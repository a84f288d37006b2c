package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// advertiseBrokers rewrites every broker address resp names to the proxy
// listener serving that broker (Server.Advertise): the one place that
// knows where each response names brokers. Clients dial what they read in
// Metadata, FindCoordinator and DescribeCluster, and in the KIP-951
// NodeEndpoints of Produce, Fetch, ShareFetch and ShareAcknowledge (sent
// when a leader moved). It reports whether it changed anything.
func (s *Server) advertiseBrokers(resp kmsg.Response) bool {
	changed := false
	adv := func(node int32, host *string, port *int32) {
		changed = s.advertiseOne(node, host, port) || changed
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
func (s *Server) advertiseOne(node int32, host *string, port *int32) bool {
	if node < 0 {
		return false
	}
	h, p := s.advertise(node, *host, *port)
	if h == *host && p == *port {
		return false
	}
	*host, *port = h, p
	return true
}

// transportHooks are the transport's own hooks: broker addresses in every
// response that names brokers, the version policy, SASL identity.
func (s *Server) transportHooks() *Hooks {
	h := &Hooks{}
	// Metadata (where clients learn the brokers; Advertise also opens the
	// listener of a broker seen for the first time, before the client can
	// dial it), FindCoordinator, DescribeCluster (admin clients), and the
	// KIP-951 NodeEndpoints of Produce v10+, Fetch v16+, ShareFetch and
	// ShareAcknowledge.
	OnResponse(h, kmsg.Metadata, func(r *kmsg.MetadataResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.FindCoordinator, func(r *kmsg.FindCoordinatorResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.DescribeCluster, func(r *kmsg.DescribeClusterResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.Produce, func(r *kmsg.ProduceResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.Fetch, func(r *kmsg.FetchResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.ShareFetch, func(r *kmsg.ShareFetchResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.ShareAcknowledge, func(r *kmsg.ShareAcknowledgeResponse) bool { return s.advertiseBrokers(r) })
	OnResponse(h, kmsg.ApiVersions, s.apiVersionsResponse)
	On(h, kmsg.SASLHandshake, saslHandshakeRequest, s.saslHandshakeResponse)
	On(h, kmsg.SASLAuthenticate, saslAuthenticateRequest, s.saslAuthenticateResponse)
	return h
}
