package intercept

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeCluster lists brokers, which admin clients dial (addresses.go).
func init() { onResponse(kmsg.DescribeCluster, advertiseBrokers) }
