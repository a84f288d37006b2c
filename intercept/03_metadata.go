package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// Metadata is where clients learn the brokers; every one must be a proxy
// listener (addresses.go). Advertise also opens the listener of a broker
// seen for the first time, before the client can dial it.
func init() { onResponse(kmsg.Metadata, advertiseBrokers) }
