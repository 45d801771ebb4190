"""The produce request and its answer on the wire, encoded and read in one pass.

aiokafka's generic encoder walks the request's schema field by field (about 18 us a request) and
its reader likewise (about 13 us); the produce request is the one sent per batch of batches, so
versions 3 to 7 (one layout) get a one-pass encoder and reader here, plugged into aiokafka's own
request classes so that version negotiation stays aiokafka's. Version 12 (KIP-890 transactions,
flexible format) is written with :mod:`aioaccum._kafka.wire`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka.protocol.produce import (
    ProduceRequest,
    ProduceRequest_v3,
    ProduceRequest_v4,
    ProduceRequest_v5,
    ProduceRequest_v6,
    ProduceRequest_v7,
)

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.answers import PartitionResponse, ProduceAnswers, batch_bytes_of
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum._kafka.wire import I32, NO_TAGS, Call, Reader, compact_str, uvarint

__all__ = [
    "FAST_STRUCTS",
    "FastProduceRequest",
    "PartitionResponse",
    "ProduceAnswers",
    "ProduceResponse",
    "answers_from",
    "encode_produce",
    "produce_v12",
    "read_answers",
    "read_produce",
    "request_parts",
]


_PRODUCE = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_AND_TIMEOUT = struct.Struct(">hi")
_PARTITION_AND_SIZE = struct.Struct(">ii")


def encode_produce(request: Any) -> bytes:
    """Produce request v3 to v7 (one layout): aiokafka's generic field-by-field encoder costs
    about 18 us a request, most of it walking the schema; this joins the pieces once."""
    transactional_id = request.transactional_id
    if transactional_id is None:
        parts = [b"\xff\xff"]  # a null string
    else:
        raw = transactional_id.encode()
        parts = [_INT16.pack(len(raw)), raw]
    parts.append(_ACKS_AND_TIMEOUT.pack(request.required_acks, request.timeout))
    parts.append(_INT32.pack(len(request.topics)))
    for topic, partitions in request.topics:
        raw = topic.encode()
        parts += (_INT16.pack(len(raw)), raw, _INT32.pack(len(partitions)))
        for partition, records in partitions:
            parts += (_PARTITION_AND_SIZE.pack(partition, len(records)), records)
    return b"".join(parts)


_TOPIC_PARTITION_HEADER = struct.Struct(">ihqq")  # partition, error code, offset, timestamp


class ProduceResponse:
    """A produce response v3 to v7, read in one pass (aiokafka's generic reader: about 13 us).

    ``topics`` has aiokafka's shape: ``[(topic, [(partition, error_code, offset, timestamp,
    ...)])]``; v5 and later add the log start offset, which is skipped.
    """

    __slots__ = ("throttle_time_ms", "topics")

    def __init__(self, topics: list[tuple[str, list[tuple[int, ...]]]], throttle: int) -> None:
        self.topics = topics
        self.throttle_time_ms = throttle

    @classmethod
    def reader(cls, version: int) -> Callable[[Any], ProduceResponse]:
        skip = 8 if version >= 5 else 0  # log_start_offset

        def decode(stream: Any) -> ProduceResponse:
            data = stream.read() if hasattr(stream, "read") else bytes(stream)
            pos = 4
            topics = []
            for _ in range(_INT32.unpack_from(data, 0)[0]):
                size = _INT16.unpack_from(data, pos)[0]
                topic = data[pos + 2 : pos + 2 + size].decode()
                pos += 2 + size
                count = _INT32.unpack_from(data, pos)[0]
                pos += 4
                partitions = []
                for _ in range(count):
                    partitions.append(_TOPIC_PARTITION_HEADER.unpack_from(data, pos))
                    pos += _TOPIC_PARTITION_HEADER.size + skip
                topics.append((topic, partitions))
            return cls(topics, _INT32.unpack_from(data, pos)[0])

        return decode


def _fast_struct(cls: type[Any]) -> type[Any]:
    response = type(
        f"Fast{cls.RESPONSE_TYPE.__name__}",
        (),
        {"decode": staticmethod(ProduceResponse.reader(cls.API_VERSION))},
    )
    return type(
        f"Fast{cls.__name__}", (cls,), {"encode": encode_produce, "RESPONSE_TYPE": response}
    )


# The request classes aiokafka negotiates, with the one-pass encoder and reader; other versions
# (none a Kafka 4 broker accepts) keep aiokafka's.
FAST_STRUCTS: dict[type[Any], type[Any]] = {
    cls: _fast_struct(cls)
    for cls in (
        ProduceRequest_v3,
        ProduceRequest_v4,
        ProduceRequest_v5,
        ProduceRequest_v6,
        ProduceRequest_v7,
    )
}


class FastProduceRequest(ProduceRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's ProduceRequest (same version negotiation, same response parsing), whose
    request body is encoded by :func:`encode_produce`."""

    def build(self, request_struct_class: type[Any]) -> Any:
        return super().build(FAST_STRUCTS.get(request_struct_class, request_struct_class))


# --- produce v12, for KIP-890 transactions (flexible format)


def produce_v12(
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    by_topic: Mapping[str, list[tuple[int, memoryview]]],
) -> Call:
    """Produce v12: the first version whose partitions join a transaction by themselves
    (KIP-890); v13 names topics by id instead."""

    def body(_version: int) -> bytes:
        parts: list[bytes | memoryview] = [
            compact_str(transactional_id), _ACKS_AND_TIMEOUT.pack(acks, timeout_ms)
        ]
        parts.append(uvarint(len(by_topic) + 1))
        for topic, partitions in by_topic.items():
            parts += (compact_str(topic), uvarint(len(partitions) + 1))
            for partition, records in partitions:
                parts += (I32.pack(partition), uvarint(len(records) + 1), records, NO_TAGS)
            parts.append(NO_TAGS)
        parts.append(NO_TAGS)
        return b"".join(parts)

    return Call(_PRODUCE, (12,), body, lambda _version, r: read_v12(r))


def read_v12(r: Reader) -> ProduceResponse:
    """A produce response v12 (flexible), from its body."""
    topics = []
    for _ in range(r.compact_count()):
        topic = r.compact_str() or ""
        partitions: list[tuple[Any, ...]] = []
        for _ in range(r.compact_count()):
            partition, code, offset, timestamp = r.int32(), r.int16(), r.int64(), r.int64()
            r.int64()  # log start offset
            for _ in range(r.compact_count()):  # per-record errors: the message says it
                r.int32()
                r.compact_str()
                r.tags()
            message = r.compact_str()
            r.tags()
            partitions.append((partition, code, offset, timestamp, -1, None, message))
        r.tags()
        topics.append((topic, partitions))
    return ProduceResponse(topics, r.int32())



# --- on aioaccum's own connection: the request as a list of buffers, the answer from bytes

_SIZE_KEY_VERSION_ID = struct.Struct(">ihhi")  # frame size, api key, version, correlation id


def request_parts(
    version: int,
    correlation_id: int,
    client_id: bytes,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    by_topic: Mapping[str, Sequence[tuple[int, Sequence[memoryview]]]],
) -> list[bytes | memoryview]:
    """A whole produce request, size prefix included, as buffers for ``writelines``.

    Each record batch is a list of buffers (its pooled chunks, the header first), put in as
    they are: never copied or joined; its size in the request is the sum of theirs. The small
    pieces between two batches are joined into one ``bytes``. Version 12 is the flexible layout
    (KIP-890), 3 to 7 the classic one. ``client_id`` is encoded.
    """
    flexible = version >= 9
    head = bytearray(_SIZE_KEY_VERSION_ID.pack(0, _PRODUCE, version, correlation_id))
    head += _INT16.pack(len(client_id))
    head += client_id
    if flexible:
        head += NO_TAGS
        head += compact_str(transactional_id)
    elif transactional_id is None:
        head += b"\xff\xff"  # a null string
    else:
        raw = transactional_id.encode()
        head += _INT16.pack(len(raw))
        head += raw
    head += _ACKS_AND_TIMEOUT.pack(acks, timeout_ms)
    head += uvarint(len(by_topic) + 1) if flexible else _INT32.pack(len(by_topic))
    parts: list[bytes | memoryview] = []
    size = 0
    for topic, partitions in by_topic.items():
        if flexible:
            head += compact_str(topic)
            head += uvarint(len(partitions) + 1)
        else:
            raw = topic.encode()
            head += _INT16.pack(len(raw))
            head += raw
            head += _INT32.pack(len(partitions))
        for partition, chunks in partitions:
            if len(chunks) == 1:
                length = len(chunks[0])
            else:
                length = 0
                for chunk in chunks:
                    length += len(chunk)
            if flexible:
                head += I32.pack(partition)
                head += uvarint(length + 1)
            else:
                head += _PARTITION_AND_SIZE.pack(partition, length)
            parts.append(bytes(head))
            parts.extend(chunks)
            size += len(head) + length
            head = bytearray(NO_TAGS) if flexible else bytearray()
        if flexible:
            head += NO_TAGS  # the topic's tags
    if flexible:
        head += NO_TAGS  # the request's tags
    if head:
        parts.append(bytes(head))
        size += len(head)
    first = bytearray(parts[0])
    _INT32.pack_into(first, 0, size - 4)
    parts[0] = bytes(first)
    return parts


def read_produce(version: int, body: bytes) -> ProduceResponse:
    """A produce response's body (after its header), in the version it was asked in."""
    if version >= 9:
        return read_v12(Reader(body))
    return _READERS[version](body)


_READERS = {version: ProduceResponse.reader(version) for version in range(3, 8)}


def read_answers(
    version: int, body: bytes, batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]]
) -> ProduceAnswers:
    """A produce response's body (after its header) read straight into the sender's answers:
    for versions 3 to 7, one pass with no topic lists or response object in between (version
    12 goes through :func:`read_v12`)."""
    if version >= 9:
        return answers_from(read_v12(Reader(body)), batches)
    skip = _TOPIC_PARTITION_HEADER.size + (8 if version >= 5 else 0)  # log_start_offset
    unpack = _TOPIC_PARTITION_HEADER.unpack_from
    out = ProduceAnswers()
    pos = 4
    for _ in range(_INT32.unpack_from(body, 0)[0]):
        size = _INT16.unpack_from(body, pos)[0]
        topic = body[pos + 2 : pos + 2 + size].decode()
        pos += 2 + size
        count = _INT32.unpack_from(body, pos)[0]
        pos += 4
        for _ in range(count):
            partition, code, offset, timestamp = unpack(body, pos)
            pos += skip
            error = None
            if code:
                error = broker_error_for_code(
                    code, None, topic=topic, batch_bytes=batch_bytes_of(batches, topic, partition)
                )
            out[TopicPartition(topic, partition)] = PartitionResponse(error, offset, timestamp)
    out.throttle_time_ms = _INT32.unpack_from(body, pos)[0]
    return out


def answers_from(
    response: ProduceResponse, batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]]
) -> ProduceAnswers:
    """The sender's answers (one :class:`PartitionResponse` per batch) from a response."""
    out = ProduceAnswers()
    out.throttle_time_ms = int(response.throttle_time_ms or 0)
    for topic, partitions in response.topics:
        for info in partitions:
            partition, code, offset, timestamp = info[0], info[1], info[2], info[3]
            message: Any = info[6] if len(info) > 6 else None
            error = (
                broker_error_for_code(
                    code, message, topic=topic,
                    batch_bytes=batch_bytes_of(batches, topic, partition),
                )
                if code
                else None
            )
            out[TopicPartition(topic, partition)] = PartitionResponse(
                error, int(offset), int(timestamp)
            )
    return out


# The pure-Python framing stays as the reference, for the parity tests and for
# AIOACCUM_NO_EXTENSIONS=1; the public names are whichever aioaccum._speedups chose, once.
from aioaccum import _speedups  # noqa: E402  (must follow the reference functions it aliases)

py_request_parts = request_parts
py_read_answers = read_answers

if _speedups.EXTENSIONS:
    from aioaccum._kafka._cproduce import read_answers as _c_read_answers
    from aioaccum._kafka._cproduce import request_parts

    def read_answers(
        version: int, body: bytes, batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]]
    ) -> ProduceAnswers:
        if version >= 9:  # v12 (transactions) stays in Python: rarer, and flexible
            return py_read_answers(version, body, batches)
        return _c_read_answers(version, body, batches)
