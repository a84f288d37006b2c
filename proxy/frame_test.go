package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func frameOf(req kmsg.Request, corr int32, clientID string) []byte {
	return EncodeRequestFrame(corr, clientID, req)
}

func TestReadFrame(t *testing.T) {
	f := frameOf(kmsg.NewPtrMetadataRequest(), 5, "c")
	got, err := ReadFrame(bytes.NewReader(f), 1<<20)
	if err != nil || !bytes.Equal(got, f) {
		t.Fatalf("ReadFrame = %x, %v; want %x", got, err, f)
	}
	if _, err := ReadFrame(bytes.NewReader(f), len(f)-5); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the limit: %v, want ErrFrameTooLarge", err)
	}
	if _, err := ReadFrame(bytes.NewReader(f[:len(f)-1]), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v, want ErrUnexpectedEOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader(nil), 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("empty: %v, want EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0x80, 0, 0, 0}), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("negative size: %v, want ErrFrameTooLarge", err)
	}
}

func TestParseRequestHeader(t *testing.T) {
	for _, tc := range []struct {
		req      kmsg.Request
		version  int16
		flexible bool
	}{
		{kmsg.NewPtrMetadataRequest(), 8, false},
		{kmsg.NewPtrMetadataRequest(), 12, true},
		{kmsg.NewPtrProduceRequest(), 8, false},
		{kmsg.NewPtrProduceRequest(), 11, true},
		{kmsg.NewPtrShareFetchRequest(), 1, true},
		{kmsg.NewPtrApiVersionsRequest(), 3, true},
	} {
		tc.req.SetVersion(tc.version)
		f := frameOf(tc.req, 77, "client-x")
		h, err := ParseRequestHeader(f)
		if err != nil {
			t.Fatalf("%s v%d: %v", kmsg.NameForKey(tc.req.Key()), tc.version, err)
		}
		if h.Key != tc.req.Key() || h.Version != tc.version || h.CorrelationID != 77 || h.Flexible != tc.flexible ||
			h.ClientID == nil || *h.ClientID != "client-x" {
			t.Fatalf("%s v%d: header %+v", kmsg.NameForKey(tc.req.Key()), tc.version, h)
		}
		// The body decodes from BodyOffset.
		back := kmsg.RequestForKey(h.Key)
		back.SetVersion(h.Version)
		if err := back.ReadFrom(f[h.BodyOffset:]); err != nil {
			t.Fatalf("%s v%d: body does not decode from BodyOffset: %v", kmsg.NameForKey(h.Key), h.Version, err)
		}
	}
}

func TestResponseBodyOffset(t *testing.T) {
	resp := kmsg.NewPtrMetadataResponse()
	resp.Version = 12
	f := EncodeResponseFrame(3, kmsg.Metadata.Int16(), resp)
	off, err := ResponseBodyOffset(f, kmsg.Metadata.Int16(), true)
	if err != nil || off != 9 {
		t.Fatalf("offset %d, %v; want 9", off, err)
	}
	av := kmsg.NewPtrApiVersionsResponse()
	av.Version = 3
	f = EncodeResponseFrame(3, kmsg.ApiVersions.Int16(), av)
	if off, _ := ResponseBodyOffset(f, kmsg.ApiVersions.Int16(), true); off != 8 {
		t.Fatalf("ApiVersions responses use header v0: offset %d, want 8", off)
	}
	if got := int32(binary.BigEndian.Uint32(f[4:])); got != 3 {
		t.Fatalf("correlation id %d", got)
	}
}

// FuzzReadFrame: any byte stream gives frames or an error, never a panic or
// an allocation past the limit; the frames are the stream's bytes, whether
// they fit the first buffer or it had to grow (growing from 16 bytes here).
func FuzzReadFrame(f *testing.F) {
	f.Add(frameOf(kmsg.NewPtrMetadataRequest(), 1, "c"))
	f.Add([]byte{0, 0, 0, 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{0, 0, 0, 40}, bytes.Repeat([]byte{7}, 50)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, growFrom := range []int{frameGrowFrom, 16} {
			r := bytes.NewReader(b)
			off := 0
			for {
				fr, err := readFrame(iotest.HalfReader(r), 4096, growFrom)
				if err != nil {
					break
				}
				if len(fr) > 4096+4 {
					t.Fatalf("frame of %d bytes past the 4096 limit", len(fr))
				}
				if want := b[off : off+len(fr)]; !bytes.Equal(fr, want) || int(binary.BigEndian.Uint32(fr)) != len(fr)-4 {
					t.Fatalf("frame %x is not the stream's %x", fr, want)
				}
				off += len(fr)
			}
		}
	})
}

// allocatedBy returns the bytes fn allocated (the whole process's, so other
// goroutines add a little noise).
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A peer that announces a frame of limits.max_frame_bytes and sends nothing
// more (or a part of it) makes ReadFrame allocate about what it sent, not
// what it announced: a thousand connections sending just a size prefix used
// to reserve 100 GiB.
func TestReadFrameReservesWhatArrives(t *testing.T) {
	const announced = 100 << 20
	prefix := binary.BigEndian.AppendUint32(nil, announced)
	for _, tc := range []struct {
		sent, maxAlloc int
	}{
		{0, 1 << 20},          // the size prefix only: one first buffer
		{3 << 20, 12 << 20},   // 3 MiB of it: doubling buffers up to 4 MiB
		{40 << 20, 160 << 20}, // 40 MiB: still not the announced 100
	} {
		stream := append(append([]byte(nil), prefix...), make([]byte, tc.sent)...)
		var err error
		got := allocatedBy(func() { _, err = ReadFrame(bytes.NewReader(stream), announced) })
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("sent %d bytes: %v, want ErrUnexpectedEOF", tc.sent, err)
		}
		if got > uint64(tc.maxAlloc) {
			t.Errorf("a frame announcing %d bytes of which %d arrived allocated %d bytes, want at most %d",
				announced, tc.sent, got, tc.maxAlloc)
		}
	}
}

// A frame larger than the first buffer arrives whole and intact, in a buffer
// of its pool class, however the reader splits it.
func TestReadFrameGrows(t *testing.T) {
	for _, n := range []int{frameGrowFrom - 4, frameGrowFrom - 3, frameGrowFrom, 300 << 10, 1 << 20, 17 << 20} {
		f := make([]byte, 4+n)
		binary.BigEndian.PutUint32(f, uint32(n))
		for i := 4; i < len(f); i++ {
			f[i] = byte(i * 7)
		}
		readers := map[string]io.Reader{
			"whole": bytes.NewReader(f),
			"half":  iotest.HalfReader(bytes.NewReader(f)),
		}
		if n <= 300<<10 {
			readers["one byte at a time"] = iotest.OneByteReader(bytes.NewReader(f))
		}
		for name, r := range readers {
			got, err := ReadFrame(r, 32<<20)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", n, name, err)
			}
			if !bytes.Equal(got, f) {
				t.Fatalf("%d bytes, %s: frame differs", n, name)
			}
			if c := cap(getFrameBuf(len(f))); cap(got) != c {
				t.Errorf("%d bytes, %s: buffer of capacity %d, want the pool class %d", n, name, cap(got), c)
			}
			putFrameBuf(got)
		}
	}
}

// FuzzParseRequestHeader: any frame parses or errors; BodyOffset never
// points past the frame; the registry's Responds (Produce's acks) never
// panics.
func FuzzParseRequestHeader(f *testing.F) {
	for _, req := range []kmsg.Request{kmsg.NewPtrMetadataRequest(), kmsg.NewPtrProduceRequest(), kmsg.NewPtrShareFetchRequest()} {
		f.Add(frameOf(req, 1, "c"))
		req.SetVersion(req.MaxVersion())
		f.Add(frameOf(req, 1, "client"))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseRequestHeader(b)
		if err != nil {
			return
		}
		if h.BodyOffset > len(b) {
			t.Fatalf("body offset %d past frame of %d", h.BodyOffset, len(b))
		}
		if responds := keyOf(h.Key).Responds; responds != nil {
			responds(&Request{Key: h.Key, Version: h.Version, Frame: b, BodyOffset: h.BodyOffset})
		}
		ResponseBodyOffset(b, h.Key, h.Flexible)
	})
}
