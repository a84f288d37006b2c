package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// FindCoordinator names the coordinators clients dial (addresses.go).
func init() { onResponse(kmsg.FindCoordinator, advertiseBrokers) }
