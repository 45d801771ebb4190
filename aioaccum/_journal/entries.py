"""The byte layout of journal segments and their entries, with no file access.

A segment starts with a 16-byte header (magic, format version, the journal sequence number of
its first record). Entries follow back to back::

    length: u32   bytes of the payload
    crc:    u32   CRC-32C of the kind byte and the payload
    kind:   u8
    payload

Segments are preallocated, so the first nine zero bytes after the last entry mark the end. A
write torn by a crash leaves an entry whose CRC does not match, followed only by zeros.

Kinds:
    TOPIC   topic id (u32) and name: written in each segment before its first use of the topic,
            so that every segment can be read without its predecessors.
    RECORD  one accepted record: its journal sequence number, partition, timestamp, key, value
            and headers.
    SEAL    the records of one partition from ``first_seq`` to ``last_seq`` went into a batch
            under a producer id, epoch and base sequence (so a restart re-sends the same batch
            and the broker can recognise a copy it already has).
    DONE    those records have an outcome (acknowledged, or failed for good): never send again.

All integers are big-endian, as in Kafka's own formats.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

__all__ = [
    "DONE",
    "DONE_FIELDS",
    "ENTRY_HEADER",
    "RECORD",
    "SEAL",
    "SEAL_FIELDS",
    "SEGMENT_HEADER",
    "TOPIC",
    "Done",
    "EntryError",
    "Record",
    "Seal",
    "decode",
    "encode_done",
    "encode_record",
    "encode_seal",
    "encode_topic",
    "entry_crc",
]

MAGIC = b"AAJ1"
VERSION = 1
SEGMENT_HEADER = struct.Struct(">4sB3xq")  # magic, version, padding, first sequence number
ENTRY_HEADER = struct.Struct(">IIB")  # payload length, CRC-32C, kind

TOPIC = 1
RECORD = 2
SEAL = 3
DONE = 4
KINDS = frozenset((TOPIC, RECORD, SEAL, DONE))

_TOPIC = struct.Struct(">I")
_RECORD = struct.Struct(">qIiq")  # seq, topic id, partition, timestamp
_LENGTH = struct.Struct(">i")
_COUNT = struct.Struct(">H")
# A SEAL's and a DONE's payloads, packed straight from their fields by the journal (one of
# each per batch) and through Seal and Done by the encoders below.
SEAL_FIELDS = struct.Struct(">qqIiIqhi")  # first, last, topic id, partition, count, pid, epoch,
# base sequence
DONE_FIELDS = struct.Struct(">qqIiI")  # first, last, topic id, partition, count

Header = tuple[str, bytes | None]


class EntryError(ValueError):
    """An entry's payload does not decode: the file holds something this format never wrote."""


class Record(NamedTuple):
    seq: int
    topic_id: int
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class Seal(NamedTuple):
    first_seq: int
    last_seq: int
    topic_id: int
    partition: int
    records: int
    producer_id: int
    epoch: int
    base_sequence: int


class Done(NamedTuple):
    first_seq: int
    last_seq: int
    topic_id: int
    partition: int
    records: int


def entry_crc(kind: int, payload: bytes | memoryview) -> int:
    return crc32c(payload, crc32c(bytes((kind,))))


def encode_topic(topic_id: int, name: str) -> bytes:
    return _TOPIC.pack(topic_id) + name.encode()


def _field(data: bytes | None) -> bytes:
    if data is None:
        return _LENGTH.pack(-1)
    return _LENGTH.pack(len(data)) + data


def encode_record(
    seq: int,
    topic_id: int,
    partition: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    parts = [_RECORD.pack(seq, topic_id, partition, timestamp), _field(key), _field(value),
             _COUNT.pack(len(headers))]
    for name, data in headers:
        parts.append(_field(name.encode()))
        parts.append(_field(data))
    return b"".join(parts)


def encode_seal(seal: Seal) -> bytes:
    return SEAL_FIELDS.pack(*seal)


def encode_done(done: Done) -> bytes:
    return DONE_FIELDS.pack(*done)


def decode(kind: int, payload: bytes) -> tuple[int, str] | Record | Seal | Done:
    """One entry's payload, as written by the encoders above.

    Raises:
        EntryError: The payload is cut short, too long or of an unknown kind.
    """
    try:
        if kind == TOPIC:
            (topic_id,) = _TOPIC.unpack_from(payload)
            return topic_id, payload[_TOPIC.size:].decode()
        if kind == RECORD:
            return _decode_record(payload)
        if kind == SEAL:
            _exact(payload, SEAL_FIELDS.size)
            return Seal(*SEAL_FIELDS.unpack(payload))
        if kind == DONE:
            _exact(payload, DONE_FIELDS.size)
            return Done(*DONE_FIELDS.unpack(payload))
    except (struct.error, UnicodeDecodeError) as exc:
        raise EntryError(f"entry of kind {kind} does not decode: {exc}") from None
    raise EntryError(f"unknown entry kind {kind}")


def _exact(payload: bytes, size: int) -> None:
    if len(payload) != size:
        raise EntryError(f"entry payload is {len(payload)} bytes, its kind has {size}")


def _decode_record(payload: bytes) -> Record:
    seq, topic_id, partition, timestamp = _RECORD.unpack_from(payload)
    pos = _RECORD.size
    key, pos = _read_field(payload, pos)
    value, pos = _read_field(payload, pos)
    (count,) = _COUNT.unpack_from(payload, pos)
    pos += _COUNT.size
    headers: list[Header] = []
    for _ in range(count):
        name, pos = _read_field(payload, pos)
        data, pos = _read_field(payload, pos)
        if name is None:
            raise EntryError("a record header has no name")
        headers.append((name.decode(), data))
    if pos != len(payload):
        raise EntryError(f"record entry has {len(payload) - pos} byte(s) after its last field")
    return Record(seq, topic_id, partition, timestamp, key, value, tuple(headers))


def _read_field(payload: bytes, pos: int) -> tuple[bytes | None, int]:
    (length,) = _LENGTH.unpack_from(payload, pos)
    pos += _LENGTH.size
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(payload):
        raise EntryError(f"a field of {length} bytes runs past the entry's end")
    return payload[pos:end], end
