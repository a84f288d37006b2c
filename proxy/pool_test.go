package proxy

import (
	"bytes"
	"testing"
)

func TestFrameBufClasses(t *testing.T) {
	for _, tc := range []struct{ n, cap int }{
		{0, 0}, {100, 100}, {4095, 4095}, {4096, 4096}, {4097, 8192},
		{1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1},
	} {
		b := getFrameBuf(tc.n)
		if len(b) != tc.n || cap(b) != tc.cap {
			t.Errorf("getFrameBuf(%d): len %d cap %d, want cap %d", tc.n, len(b), cap(b), tc.cap)
		}
		putFrameBuf(b) // out-of-range capacities are ignored
	}
	// putFrameBuf refuses capacities that are not a class.
	putFrameBuf(make([]byte, 5000))
	if b := getFrameBuf(4500); cap(b) != 8192 {
		t.Fatalf("a 5000-byte buffer entered the 8 KiB class: cap %d", cap(b))
	}
}

// A pooled buffer is handed out again with the right length, and ReadFrame
// fills it completely (pooled buffers are not zeroed).
func TestReadFrameReusesPooledBuffers(t *testing.T) {
	frame := func(fill byte, n int) []byte {
		f := make([]byte, 4+n)
		f[0], f[1], f[2], f[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		for i := 4; i < len(f); i++ {
			f[i] = fill
		}
		return f
	}
	a, err := ReadFrame(bytes.NewReader(frame(0xaa, 6000)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	putFrameBuf(a)
	b, err := ReadFrame(bytes.NewReader(frame(0xbb, 5000)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 5004 || !bytes.Equal(b[4:], bytes.Repeat([]byte{0xbb}, 5000)) {
		t.Fatalf("frame read into a reused buffer: len %d", len(b))
	}
}
