"""Kafka's primitive wire types: fixed-width big-endian integers, (compact) strings and arrays,
unsigned varints and tagged fields, as the protocol guide defines them.

"Compact" types (flexible versions) carry ``length + 1`` as an unsigned varint, 0 meaning null;
the classic ones an int16 (strings) or int32 (arrays, bytes) length, -1 meaning null.
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_I8, _I16, _I32, _I64 = (
    struct.Struct(">b"),
    struct.Struct(">h"),
    struct.Struct(">i"),
    struct.Struct(">q"),
)


class Malformed(ValueError):
    """The bytes do not decode as the message they claim to be."""


class Reader:
    """Reads primitives from the front of a buffer; raises ``Malformed`` past its end."""

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = data
        self.offset = offset

    def _take(self, size: int) -> bytes:
        if size < 0 or self.offset + size > len(self.data):
            raise Malformed(f"needs {size} bytes at offset {self.offset} of {len(self.data)}")
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def _unpack(self, fmt: struct.Struct) -> int:
        return int(fmt.unpack(self._take(fmt.size))[0])

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise Malformed("unsigned varint longer than 5 bytes")

    def nullable_string(self, *, compact: bool) -> str | None:
        size = self.uvarint() - 1 if compact else self.int16()
        if size < 0:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Malformed(f"string is not UTF-8: {exc}") from None

    def string(self, *, compact: bool) -> str:
        value = self.nullable_string(compact=compact)
        if value is None:
            raise Malformed("null where a string is required")
        return value

    def array(self, item: Callable[[], T], *, compact: bool) -> list[T]:
        count = self.uvarint() - 1 if compact else self.int32()
        if count < 0:
            return []  # a null array: treated as empty
        # Each item takes at least one byte: a count beyond the buffer is a lie.
        if count > len(self.data) - self.offset:
            raise Malformed(f"array of {count} items in {len(self.data) - self.offset} bytes")
        return [item() for _ in range(count)]

    def uuid(self) -> bytes:
        return self._take(16)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


class Writer:
    """Builds a message from primitives."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def bytes(self) -> bytes:
        return b"".join(self._parts)

    # ``builtins.bytes``: inside this class ``bytes`` names the method above.
    def raw(self, data: builtins.bytes) -> Writer:
        self._parts.append(data)
        return self

    def int8(self, value: int) -> Writer:
        return self.raw(_I8.pack(value))

    def int16(self, value: int) -> Writer:
        return self.raw(_I16.pack(value))

    def int32(self, value: int) -> Writer:
        return self.raw(_I32.pack(value))

    def int64(self, value: int) -> Writer:
        return self.raw(_I64.pack(value))

    def boolean(self, value: bool) -> Writer:
        return self.int8(1 if value else 0)

    def uvarint(self, value: int) -> Writer:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        out = bytearray()
        while value > 0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return self.raw(bytes(out))

    def nullable_string(self, value: str | None, *, compact: bool) -> Writer:
        if value is None:
            return self.uvarint(0) if compact else self.int16(-1)
        data = value.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        return self.raw(data)

    def string(self, value: str, *, compact: bool) -> Writer:
        return self.nullable_string(value, compact=compact)

    def array_length(self, count: int, *, compact: bool) -> Writer:
        return self.uvarint(count + 1) if compact else self.int32(count)

    def empty_tagged_fields(self) -> Writer:
        return self.uvarint(0)
