package staging

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// AppendRecordBatch appends a magic v2, uncompressed, transactional record
// batch holding one record (null key, the given value, no headers) to dst,
// encoded by kmsg's RecordBatch and Record. kmsg leaves the two derived
// fields to the caller: the record's length (of what follows it) and the
// batch's length (of what follows it) and CRC-32C (of attributes..end).
func AppendRecordBatch(dst []byte, pid int64, epoch int16, seq int32, tsMillis int64, value []byte) []byte {
	// Attributes 0, deltas 0, no headers; a nil Key encodes as null. The
	// length counts what follows it: the encoding less Length 0's 1 byte.
	rec := kmsg.Record{Value: value}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           0x0010, // transactional
		FirstTimestamp:       tsMillis,
		MaxTimestamp:         tsMillis,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           1,
		Records:              rec.AppendTo(nil),
	}
	start := len(dst)
	dst = b.AppendTo(dst)
	const lengthAt, crcAt, attributesAt = 8, 17, 21 // after base offset; after leader epoch and magic
	binary.BigEndian.PutUint32(dst[start+lengthAt:], uint32(len(dst)-start-12))
	binary.BigEndian.PutUint32(dst[start+crcAt:], crc32.Checksum(dst[start+attributesAt:], crc32c))
	return dst
}
