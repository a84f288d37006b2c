package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// Fetch v16+ carries KIP-951 NodeEndpoints (tag 0) when the leader moved
// (addresses.go).
func init() { onResponse(kmsg.Fetch, advertiseBrokers) }
