"""Confluent's wire format: what goes before the payload of every record.

::

    byte 0      magic byte, 0
    bytes 1-4   the schema's global id, big-endian unsigned
    (Protobuf)  the message's path in its .proto file: a count, then each index, as zigzag
                varints; the first message of the file, [0], is written as one 0 byte
    rest        the payload: Avro binary, Protobuf binary, or UTF-8 JSON

A serializer computes this prefix once per schema id and puts it before each payload, so
framing costs one bytes concatenation per record.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

__all__ = ["MAGIC_BYTE", "frame_header", "message_indexes", "read_header"]

MAGIC_BYTE: Final = 0
_HEADER: Final = struct.Struct(">bI")
_MAX_ID: Final = 0xFFFFFFFF


def _zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def message_indexes(indexes: Sequence[int]) -> bytes:
    """The Protobuf message-index part of the prefix for a message at path ``indexes``."""
    if list(indexes) == [0]:
        return b"\x00"  # the common case, shortened by the format itself
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def frame_header(schema_id: int, indexes: Sequence[int] | None = None) -> bytes:
    """The bytes before a payload written with schema ``schema_id``.

    Raises:
        ValueError: The id does not fit the format's 4 unsigned bytes.
    """
    if not 0 <= schema_id <= _MAX_ID:
        raise ValueError(f"schema id {schema_id} does not fit 4 unsigned bytes")
    header = _HEADER.pack(MAGIC_BYTE, schema_id)
    return header if indexes is None else header + message_indexes(indexes)


def read_header(data: bytes) -> tuple[int, bytes]:
    """(schema id, what follows the 5-byte prefix) of a framed record.

    Raises:
        ValueError: The data is shorter than the prefix or does not start with the magic byte.
    """
    if len(data) < _HEADER.size or data[0] != MAGIC_BYTE:
        raise ValueError(
            f"not Confluent's wire format: {len(data)} bytes starting {bytes(data[:5])!r}"
        )
    _, schema_id = _HEADER.unpack_from(data)
    return schema_id, bytes(data[_HEADER.size :])
