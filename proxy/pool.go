package proxy

import (
	"math/bits"
	"sync"
)

// Frame buffers of 4 KiB to 16 MiB are pooled by power-of-two size class:
// produce requests and fetch responses are mostly hundreds of KiB, and a
// fresh buffer for each costs the allocation, the zeroing, the page faults
// of a growing heap and the GC's work (together about a fifth of the
// proxy's CPU in `make bench --perf` before pooling). Smaller frames are
// cheap to allocate; larger ones are rare.
//
// A frame goes back to the pool only where nothing can refer to it any more:
// a forwarded request once it is written upstream (for keys whose request
// hook keeps nothing of the frame), and a response once it is written to the
// client. A frame never returned is simply collected.
const (
	minPoolShift = 12
	maxPoolShift = 24
)

var framePools [maxPoolShift + 1]sync.Pool // *[]byte, cap exactly 1<<index

// getFrameBuf returns a buffer of length n, pooled when n is in range. Its
// contents are not zeroed.
func getFrameBuf(n int) []byte {
	if n < 1<<minPoolShift || n > 1<<maxPoolShift {
		return make([]byte, n)
	}
	shift := bits.Len(uint(n - 1)) // the smallest power of two >= n
	if v := framePools[shift].Get(); v != nil {
		return (*v.(*[]byte))[:n]
	}
	return make([]byte, n, 1<<shift)
}

// putFrameBuf returns a buffer from getFrameBuf to its pool. Buffers of other
// capacities are left to the GC. The caller must hold no other reference.
func putFrameBuf(b []byte) {
	c := cap(b)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	b = b[:0]
	framePools[bits.Len(uint(c))-1].Put(&b)
}

// NewBuffer returns an empty buffer of capacity at least n from the frame
// pool (not zeroed), for a request hook's new body (Action.BodyPooled).
func NewBuffer(n int) []byte { return getFrameBuf(n)[:0] }
