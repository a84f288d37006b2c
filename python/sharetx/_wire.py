"""The Kafka protocol's primitive types, classic and flexible (KIP-482), for the few messages the
library sends on its own connection to the sidecar (the same encodings as the Java library's Wire)."""

from __future__ import annotations

import struct
import uuid
from typing import Optional

__all__ = ["Writer", "Reader", "MalformedResponse"]


class MalformedResponse(ValueError):
    """A response from the sidecar that does not decode: truncated, an impossible length, trailing
    bytes. Raised by every decoder instead of reading past the end or looping."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Writer:
    """A growing big-endian buffer."""

    def __init__(self) -> None:
        self._b = bytearray()

    def int8(self, v: int) -> "Writer":
        self._b += _I8.pack(v)
        return self

    def int16(self, v: int) -> "Writer":
        self._b += _I16.pack(v)
        return self

    def int32(self, v: int) -> "Writer":
        self._b += _I32.pack(v)
        return self

    def int64(self, v: int) -> "Writer":
        self._b += _I64.pack(v)
        return self

    def bool(self, v: bool) -> "Writer":
        return self.int8(1 if v else 0)

    def uvarint(self, v: int) -> "Writer":
        if v < 0:
            raise ValueError("uvarint of a negative number")
        while v & ~0x7F:
            self._b.append((v & 0x7F) | 0x80)
            v >>= 7
        self._b.append(v)
        return self

    def uuid(self, u: uuid.UUID) -> "Writer":
        self._b += u.bytes
        return self

    def raw(self, b: bytes) -> "Writer":
        self._b += b
        return self

    def string(self, s: Optional[str]) -> "Writer":
        """INT16-length STRING, -1 for None (classic encoding)."""
        if s is None:
            return self.int16(-1)
        b = s.encode("utf-8")
        return self.int16(len(b)).raw(b)

    def bytes_(self, b: bytes) -> "Writer":
        """INT32-length BYTES (classic encoding)."""
        return self.int32(len(b)).raw(b)

    def compact_string(self, s: Optional[str]) -> "Writer":
        """COMPACT_(NULLABLE_)STRING: uvarint length + 1, 0 for None."""
        if s is None:
            return self.uvarint(0)
        b = s.encode("utf-8")
        return self.uvarint(len(b) + 1).raw(b)

    def compact_array_len(self, n: int) -> "Writer":
        return self.uvarint(n + 1)

    def no_tags(self) -> "Writer":
        return self.uvarint(0)

    def getvalue(self) -> bytes:
        return bytes(self._b)


class Reader:
    """Reads a response; any short read or impossible length is a MalformedResponse."""

    def __init__(self, b: bytes, pos: int = 0) -> None:
        self._b = memoryview(b)
        self._pos = pos

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._b):
            raise MalformedResponse("message ends early (want %d bytes at %d of %d)" % (n, self._pos, len(self._b)))
        v = self._b[self._pos:self._pos + n]
        self._pos += n
        return v

    def int8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def bool(self) -> bool:
        return self.int8() != 0

    def uvarint(self) -> int:
        v = 0
        for shift in range(0, 35, 7):
            x = self._take(1)[0]
            v |= (x & 0x7F) << shift
            if not x & 0x80:
                return v
        raise MalformedResponse("varint too long")

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def raw(self, n: int) -> bytes:
        if n < 0 or n > self.remaining():
            raise MalformedResponse("length %d past the end of the message" % n)
        return bytes(self._take(n))

    def _text(self, n: int) -> str:
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedResponse("a string that is not UTF-8: %s" % e) from None

    def string(self) -> Optional[str]:
        n = self.int16()
        return None if n < 0 else self._text(n)

    def bytes_(self) -> Optional[bytes]:
        n = self.int32()
        return None if n < 0 else self.raw(n)

    def compact_string(self) -> Optional[str]:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def compact_array_len(self) -> int:
        """A compact array's length; -1 for null. A length beyond the bytes left is malformed
        (every element takes at least one byte), so no decoder loops on a forged count."""
        n = self.uvarint() - 1
        if n > self.remaining():
            raise MalformedResponse("array length %d past the end of the message" % n)
        return n

    def array_len(self, min_elem: int = 1) -> int:
        """A classic INT32 array length; -1 for null."""
        n = self.int32()
        if n > 0 and n * min_elem > self.remaining():
            raise MalformedResponse("array length %d past the end of the message" % n)
        return n

    def skip_tags(self) -> None:
        n = self.uvarint()
        if n > self.remaining():
            raise MalformedResponse("tag count %d past the end of the message" % n)
        for _ in range(n):
            self.uvarint()  # tag
            self.raw(self.uvarint())

    def remaining(self) -> int:
        return len(self._b) - self._pos

    def expect_end(self, what: str) -> None:
        if self.remaining() != 0:
            raise MalformedResponse("%d trailing bytes after %s" % (self.remaining(), what))
