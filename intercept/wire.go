package intercept

import (
	"encoding/binary"
	"errors"
	"math"
)

// errShort is returned by a reader that ran out of bytes or met a length
// that cannot fit in what is left.
var errShort = errors.New("message truncated or malformed")

// reader decodes the flexible (KIP-482) encoding for messages kmsg does not
// know, such as TxnShareAcknowledge. The first failure sticks: every later
// read returns zero values, and err reports it once at the end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() { r.err = errShort; r.b = nil }

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.fail()
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) int16() int16 {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(b))
}

func (r *reader) int32() int32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

func (r *reader) uuid() (u [16]byte) {
	copy(u[:], r.take(16))
	return u
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// compactLen reads a compact length (n+1; 0 is null) and returns n, or -1
// for null. A length longer than what is left (each element takes at least
// min bytes) fails, so a hostile length never allocates.
func (r *reader) compactLen(min int) int {
	v := r.uvarint()
	if r.err != nil {
		return 0
	}
	if v == 0 {
		return -1
	}
	n := v - 1
	if n > math.MaxInt32 || int(n)*max(min, 0) > len(r.b) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) compactString() string {
	n := r.compactLen(1)
	if n < 0 {
		r.fail() // not nullable
		return ""
	}
	return string(r.take(n))
}

func (r *reader) compactNullableString() *string {
	n := r.compactLen(1)
	if r.err != nil || n < 0 {
		return nil
	}
	s := string(r.take(n))
	return &s
}

// tags skips a tagged-field section.
func (r *reader) tags() {
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail()
			return
		}
		r.take(int(size))
	}
}
