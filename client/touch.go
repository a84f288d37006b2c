package client

import "github.com/sharetx/sharetx/staging"

// touchPartitionFor is the shadow partition a transactional producer writes
// its touch record to (staging.TouchPartitionFor): never the partition the
// proxy writes its own shadow records for that transactional id to, so the
// two never share producer sequence numbers.
func touchPartitionFor(transactionalID string, partitions int32) int32 {
	return staging.TouchPartitionFor(transactionalID, partitions)
}
