"""Kafka's flexible request format, for the requests aioaccum writes by hand.

aiokafka's connections send any object that answers to its request protocol (``prepare``,
``build_request_header``, ``encode``, ``parse_response_header`` and ``RESPONSE_TYPE``):
:class:`Call` is one such request, with its body and its answer's reader given as functions.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiokafka.errors as kerr

from aioaccum._core.varint import encode_unsigned_varint as uvarint

__all__ = ["I8", "I16", "I32", "I64", "NO_TAGS", "Call", "Reader", "compact_array", "compact_str",
           "uvarint"]

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
NO_TAGS = b"\x00"

API_VERSIONS = 18


# --- flexible encoding


def compact_str(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def compact_array(items: Sequence[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


class Reader:
    """Reads a response body field by field."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, layout: struct.Struct) -> int:
        value: int = layout.unpack_from(self.data, self.pos)[0]
        self.pos += layout.size
        return value

    def int8(self) -> int:
        return self._take(I8)

    def int16(self) -> int:
        return self._take(I16)

    def int32(self) -> int:
        return self._take(I32)

    def int64(self) -> int:
        return self._take(I64)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_str(self) -> str | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw.decode()

    def compact_count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def tags(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            found[tag] = self.data[self.pos : self.pos + size]
            self.pos += size
        return found


# --- one request, as aiokafka's connection sends it


class _Header:
    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def encode(self) -> bytes:
        return self.raw


class _ResponseHeader:
    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class _Decoder:
    __slots__ = ("read",)

    def __init__(self, read: Callable[[Reader], Any]) -> None:
        self.read = read

    def decode(self, stream: Any) -> Any:
        data = stream.read() if hasattr(stream, "read") else bytes(stream)
        return self.read(Reader(data))


class Call:
    """One request in the versions this module writes; aiokafka's connection calls
    :meth:`prepare` with the versions the broker offers and sends what it returns.

    ``body(version)`` encodes the request, ``read(version, reader)`` its answer; every version
    listed is flexible (header v2, response header v1), except that ApiVersions always answers
    with header v0 so that any client can read it.
    """

    def __init__(
        self,
        api_key: int,
        versions: Sequence[int],
        body: Callable[[int], bytes],
        read: Callable[[int, Reader], Any],
    ) -> None:
        self.API_KEY = api_key
        self._versions = versions
        self._body = body
        self._read = read
        self.API_VERSION = -1
        self.FLEXIBLE_VERSION = True
        self.RESPONSE_TYPE: _Decoder | None = None

    def prepare(self, offered: Mapping[int, tuple[int, int]]) -> Call:
        low, high = offered.get(self.API_KEY, (0, -1))
        for version in self._versions:
            if low <= version <= high:
                self.API_VERSION = version
                self.RESPONSE_TYPE = _Decoder(functools.partial(self._read, version))
                return self
        raise kerr.IncompatibleBrokerVersion(
            f"the broker offers API {self.API_KEY} in versions {low}..{high}; aioaccum needs "
            f"one of {list(self._versions)}"
        )

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        raw = client_id.encode()
        return _Header(
            I16.pack(self.API_KEY)
            + I16.pack(self.API_VERSION)
            + I32.pack(correlation_id)
            + I16.pack(len(raw))
            + raw
            + NO_TAGS
        )

    def parse_response_header(self, stream: Any) -> _ResponseHeader:
        correlation_id = I32.unpack(stream.read(4))[0]
        if self.API_KEY != API_VERSIONS:
            tags = stream.read(1)
            if tags != NO_TAGS:  # no header tag is defined for any of these responses
                raise kerr.CorrelationIdError("unexpected tagged fields in a response header")
        return _ResponseHeader(correlation_id)

    def encode(self) -> bytes:
        return self._body(self.API_VERSION)

    def __repr__(self) -> str:
        return f"<Kafka API {self.API_KEY} v{self.API_VERSION}>"


