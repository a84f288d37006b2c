package staging

import (
	"encoding/binary"
	"hash/crc32"
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// AppendRecordBatch appends a magic v2, uncompressed, transactional record
// batch holding one record (null key, the given value, no headers) to dst.
//
//	baseOffset int64 (0) | batchLength int32 | partitionLeaderEpoch int32 (-1)
//	magic int8 (2) | crc uint32 (CRC-32C of attributes..end)
//	attributes int16 (0x10: transactional) | lastOffsetDelta int32 (0)
//	baseTimestamp int64 | maxTimestamp int64 | producerId int64
//	producerEpoch int16 | baseSequence int32 | recordCount int32 (1) | record
func AppendRecordBatch(dst []byte, pid int64, epoch int16, seq int32, tsMillis int64, value []byte) []byte {
	be := binary.BigEndian
	start := len(dst)
	dst = be.AppendUint64(dst, 0)                // base offset
	dst = be.AppendUint32(dst, 0)                // batch length, below
	dst = be.AppendUint32(dst, 0xffffffff)       // partition leader epoch -1
	dst = append(dst, 2)                         // magic
	dst = be.AppendUint32(dst, 0)                // crc, below
	crcFrom := len(dst)                          //
	dst = be.AppendUint16(dst, 0x0010)           // attributes: transactional
	dst = be.AppendUint32(dst, 0)                // last offset delta
	dst = be.AppendUint64(dst, uint64(tsMillis)) // base timestamp
	dst = be.AppendUint64(dst, uint64(tsMillis)) // max timestamp
	dst = be.AppendUint64(dst, uint64(pid))      // producer id
	dst = be.AppendUint16(dst, uint16(epoch))    // producer epoch
	dst = be.AppendUint32(dst, uint32(seq))      // base sequence
	dst = be.AppendUint32(dst, 1)                // record count

	// Record: attributes int8, timestampDelta varlong, offsetDelta varint,
	// keyLength varint (-1: null), valueLength varint, value,
	// headerCount varint; preceded by its length as a varint.
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, -1)
	body = binary.AppendVarint(body, int64(len(value)))
	body = append(body, value...)
	body = binary.AppendVarint(body, 0)
	dst = binary.AppendVarint(dst, int64(len(body)))
	dst = append(dst, body...)

	be.PutUint32(dst[start+8:], uint32(len(dst)-start-12))
	be.PutUint32(dst[crcFrom-4:], crc32.Checksum(dst[crcFrom:], crc32c))
	return dst
}
