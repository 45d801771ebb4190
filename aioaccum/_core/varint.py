"""Zig-zag variable-length integers, as Kafka's ``ByteUtils.writeVarint``/``writeVarlong``.

Every integer inside a v2 record (lengths, deltas, counts) is zig-zag encoded, so that small
negative numbers stay short, and then written seven bits per byte, low bits first, with the high
bit of a byte set while more bytes follow.

The record encoder looks small non-negative numbers up in :data:`VARINTS` instead of calling
:func:`encode_varint`: most lengths, offset deltas and timestamp deltas of a batch are small,
and a tuple index is several times cheaper than a Python-level loop.
"""

from __future__ import annotations

__all__ = [
    "VARINTS",
    "VARINT_CACHE_SIZE",
    "decode_varint",
    "encode_varint",
    "size_of_varint",
    "zigzag",
]

VARINT_CACHE_SIZE = 1 << 14
"""Numbers ``0 <= n < VARINT_CACHE_SIZE`` have a precomputed encoding in :data:`VARINTS`."""


def zigzag(n: int) -> int:
    """Map a signed integer to an unsigned one: 0, -1, 1, -2, ... become 0, 1, 2, 3, ..."""
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def encode_varint(n: int) -> bytes:
    """Encode ``n`` (any signed 64-bit value) as a zig-zag varint.

    Args:
        n: The number; Kafka's varints hold int32 and its varlongs int64 values.

    Returns:
        One to ten bytes.
    """
    return encode_unsigned_varint(n << 1 if n >= 0 else ((-n) << 1) - 1)


def encode_unsigned_varint(z: int) -> bytes:
    """Encode ``z`` >= 0 as an unsigned varint (the lengths of Kafka's flexible format)."""
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def size_of_varint(n: int) -> int:
    """Return how many bytes :func:`encode_varint` writes for ``n``."""
    z = n << 1 if n >= 0 else ((-n) << 1) - 1
    # Each byte carries seven bits; zero still takes one byte.
    return max(1, (z.bit_length() + 6) // 7)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode one zig-zag varint from ``buf`` at ``pos``.

    Returns:
        The signed value and the position just after it.

    Raises:
        ValueError: The varint runs past the end of ``buf`` or is longer than ten bytes.
    """
    z = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than ten bytes")
    return (z >> 1) ^ -(z & 1), pos


VARINTS: tuple[bytes, ...] = tuple(encode_varint(i) for i in range(VARINT_CACHE_SIZE))
"""``VARINTS[n] == encode_varint(n)`` for ``0 <= n < VARINT_CACHE_SIZE``."""
