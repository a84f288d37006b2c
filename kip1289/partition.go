package kip1289

import "hash/fnv"

// ShadowPartition returns the shadow partition of a transactional id: the
// partition of the proxy's shadow topic it stages that id's
// acknowledgements on. It is FNV-1a (32 bit) of the id, modulo partitions.
// The proxy and clients compute the same value, so it must never change. It
// returns 0 if partitions <= 0.
func ShadowPartition(transactionalID string, partitions int32) int32 {
	if partitions <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(transactionalID))
	return int32(h.Sum32() % uint32(partitions))
}

// The touch record: value TouchValue, one header TouchHeader=TouchHeaderValue.
// The proxy relays nothing else a client writes to the shadow topic.
const (
	TouchValue       = "sharetx-touch"
	TouchHeader      = "sharetx"
	TouchHeaderValue = "touch"
)

// TouchPartition returns (ShadowPartition+1) % partitions: a partition of
// the shadow topic, different from the shadow partition when partitions >=
// 2, where a client may write a filler ("touch") record so that its
// transaction has a partition of its own (franz-go sends no EndTxn for a
// transaction in which the client produced nothing). The filler must never
// go to the shadow partition itself: the client and the proxy's shadow
// writer would then both use sequence numbers from 0 for the same (producer
// id, epoch, partition), and the broker would drop one batch as a
// duplicate. It returns 0 if partitions <= 0.
func TouchPartition(transactionalID string, partitions int32) int32 {
	if partitions <= 0 {
		return 0
	}
	return (ShadowPartition(transactionalID, partitions) + 1) % partitions
}
