package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Frame errors. Each one closes the connection that sent the frame and
// nothing else.
var (
	ErrFrameTooLarge = errors.New("frame larger than limits.max_frame_bytes")
	ErrFrameTooSmall = errors.New("frame shorter than a request header")
	ErrBadHeader     = errors.New("malformed request header")
)

// ReadFrame reads one size-prefixed Kafka frame. The returned slice holds the
// 4-byte size prefix too, so the frame can be written on with one Write. Its
// buffer may come from the frame pool (putFrameBuf returns it there).
//
// The buffer grows with the bytes that actually arrive, not with the size the
// peer announced: a frame up to frameGrowFrom bytes gets its buffer at once; a
// larger one starts there and doubles as it fills, so a peer that sends only a
// size prefix of limits.max_frame_bytes holds frameGrowFrom bytes, and one that
// sent n bytes of a frame at most 2n (the final buffer is the pool class of the
// whole frame, as for a small one). Requests from clients are read so.
func ReadFrame(r io.Reader, maxBytes int) ([]byte, error) {
	return readFrame(r, maxBytes, frameGrowFrom)
}

// readResponseFrame reads a frame from an upstream broker, whose announced
// size is backed by the data it is sending (a fetch response of many MiB is
// common): its buffer is allocated whole at once, saving the copies of
// growing it.
func readResponseFrame(r io.Reader, maxBytes int) ([]byte, error) {
	return readFrame(r, maxBytes, maxBytes+4)
}

// frameGrowFrom is the most ReadFrame reserves ahead of the bytes it has: as
// much as a connection's bufio reader holds.
const frameGrowFrom = 64 << 10

func readFrame(r io.Reader, maxBytes, growFrom int) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || int(n) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, uint32(n))
	}
	total := 4 + int(n)
	buf := getFrameBuf(min(total, max(growFrom, 4)))
	copy(buf, size[:])
	filled := 4
	for {
		if _, err := io.ReadFull(r, buf[filled:]); err != nil {
			putFrameBuf(buf)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		filled = len(buf)
		if filled == total {
			return buf, nil
		}
		// Full and the frame goes on: double it (the bytes so far arrived).
		grow := min(total, 2*filled)
		if grow <= cap(buf) {
			buf = buf[:grow]
			continue
		}
		next := getFrameBuf(grow)
		copy(next, buf)
		putFrameBuf(buf)
		buf = next
	}
}

// RequestHeader is the part of a request header the proxy reads. Offsets
// are into the frame including its 4-byte size prefix.
type RequestHeader struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      *string
	Flexible      bool // header v2: tagged fields follow the client id
	BodyOffset    int  // where the request body starts
}

// corrOffset is where the correlation id sits in a request or response
// frame (after the size prefix, and in requests after key and version).
const (
	reqCorrOffset  = 4 + 2 + 2
	respCorrOffset = 4
)

// ParseRequestHeader reads the header of a request frame. Whether the header
// is flexible depends on the key and version; for a key kmsg does not know
// the header is parsed as v1 and Flexible is false.
func ParseRequestHeader(frame []byte) (RequestHeader, error) {
	var h RequestHeader
	if len(frame) < 4+2+2+4+2 {
		return h, ErrFrameTooSmall
	}
	h.Key = int16(binary.BigEndian.Uint16(frame[4:]))
	h.Version = int16(binary.BigEndian.Uint16(frame[6:]))
	h.CorrelationID = int32(binary.BigEndian.Uint32(frame[8:]))
	off := 12
	l := int(int16(binary.BigEndian.Uint16(frame[off:])))
	off += 2
	if l >= 0 {
		if off+l > len(frame) {
			return h, fmt.Errorf("%w: client id length %d past the frame", ErrBadHeader, l)
		}
		s := string(frame[off : off+l])
		h.ClientID = &s
		off += l
	} else if l != -1 {
		return h, fmt.Errorf("%w: client id length %d", ErrBadHeader, l)
	}
	// ControlledShutdown v0 (broker to controller only) has header v0;
	// the proxy never sees it from clients.
	h.Flexible = FlexibleRequest(h.Key, h.Version)
	if h.Flexible {
		n, err := skipTags(frame[off:])
		if err != nil {
			return h, fmt.Errorf("%w: %v", ErrBadHeader, err)
		}
		off += n
	}
	h.BodyOffset = off
	return h, nil
}

// ResponseBodyOffset returns where the body of a response frame starts: after
// the correlation id, and for flexible responses after the header's tagged
// fields. Some keys' responses (ApiVersions') always use header v0.
func ResponseBodyOffset(frame []byte, key int16, flexible bool) (int, error) {
	if len(frame) < 8 {
		return 0, ErrFrameTooSmall
	}
	if !ResponseHeaderFlexible(key, flexible) {
		return 8, nil
	}
	n, err := skipTags(frame[8:])
	if err != nil {
		return 0, err
	}
	return 8 + n, nil
}

// skipTags returns the length of a tagged-field section.
func skipTags(b []byte) (int, error) {
	num, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, errors.New("bad tag count")
	}
	off := n
	for i := uint64(0); i < num; i++ {
		if _, n = binary.Uvarint(b[off:]); n <= 0 {
			return 0, errors.New("bad tag key")
		}
		off += n
		size, n := binary.Uvarint(b[off:])
		if n <= 0 || size > uint64(len(b)) {
			return 0, errors.New("bad tag size")
		}
		off += n
		if off+int(size) > len(b) {
			return 0, errors.New("tag past the frame")
		}
		off += int(size)
	}
	return off, nil
}

// setCorrelationID overwrites the correlation id of a frame in place.
func setCorrelationID(frame []byte, offset int, id int32) {
	binary.BigEndian.PutUint32(frame[offset:], uint32(id))
}

// EncodeResponseFrame builds a complete response frame (size prefix,
// correlation id, header tags when flexible, body).
func EncodeResponseFrame(corr int32, key int16, resp kmsg.Response) []byte {
	buf := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(buf[4:], uint32(corr))
	if ResponseHeaderFlexible(key, resp.IsFlexible()) {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

// EncodeRequestFrame builds a complete request frame for the proxy's own
// requests on an upstream connection.
func EncodeRequestFrame(corr int32, clientID string, req kmsg.Request) []byte {
	buf := make([]byte, 4, 64)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(clientID)))
	buf = append(buf, clientID...)
	if req.IsFlexible() {
		buf = append(buf, 0)
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}
