"""Kafka record batches (magic v2), encoded straight into pooled buffers.

Theory of operation
-------------------
This is Java's ``MemoryRecordsBuilder`` writing a ``DefaultRecordBatch`` of ``DefaultRecord``\\ s.
A builder is given a pooled ``bytearray`` and leaves its first 61 bytes for the batch header.
Each append encodes one record (length varint, attributes, timestamp delta, offset delta, key,
value, headers) and copies it in with one memoryview slice assignment. Nothing in the header can
be known before the batch ends (record count, max timestamp, CRC, and later the producer id and
sequence), so :meth:`MemoryRecordsBuilder.close` writes it, with the CRC-32C over everything from
the attributes field to the end.

Compression happens at close: the records are written uncompressed, then the records section is
compressed as a whole and placed after the header. Whether the next record fits is decided as
Java does: exactly for uncompressed batches; for compressed ones from the uncompressed size
times the topic's estimated compression ratio (times 1.05).

With incremental allocation (KIP-1332, see :mod:`aioaccum._core.chunks`) the builder is given
a first pooled chunk and a way to take more: the records are laid over the chunks in order,
straddling their boundaries, and nothing spills; the batch goes out as one view per chunk
(:meth:`~MemoryRecordsBuilder.build_parts`).

The pooled buffer never changes size. When an append needs more room than it has (a first record
larger than the buffer, or uncompressed records that a good compression ratio lets grow past
it), the written bytes move to a growable spill ``bytearray``, as Java's
``ByteBufferOutputStream`` expands. :meth:`~MemoryRecordsBuilder.build` returns a view of only
the bytes written, never the stale tail of a reused buffer, and :attr:`~MemoryRecordsBuilder.buffer`
stays the pooled buffer that goes back to the pool.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from aioaccum._core import chunks as _chunks
from aioaccum._core.codecs import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
    CompressionType,
    compress,
    decompress,
    validate_compression_level,
)
from aioaccum._core.varint import VARINT_CACHE_SIZE, VARINTS, decode_varint, encode_varint

__all__ = [
    "MAX_RECORD_OVERHEAD",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "RECORD_BATCH_OVERHEAD",
    "CompressionRatioEstimator",
    "CompressionType",
    "Header",
    "MemoryRecordsBuilder",
    "SimpleRecord",
    "estimate_size_in_bytes_upper_bound",
    "record_size_in_bytes",
]

Header = tuple[str, bytes | None]

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h,
# lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
# baseSequence i, recordsCount i
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
RECORD_BATCH_OVERHEAD = _HEADER.size
"""Size of the v2 batch header (61 bytes)."""
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_LOG_OVERHEAD = 12  # baseOffset + batchLength: not counted in batchLength
MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
_TRANSACTIONAL_FLAG = 0x10
MAX_RECORD_OVERHEAD = 21
"""Worst-case bytes of a record besides key, value and headers (Java's DefaultRecord)."""

_NO_LIMIT = sys.maxsize
_EMPTY_HEADERS = b"\x00"
_NULL = b"\x01"  # zig-zag -1: a null key, value or header value


class SimpleRecord(NamedTuple):
    """One record read back from a builder (Java's ``SimpleRecord``)."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


def _varint(n: int) -> bytes:
    return VARINTS[n] if 0 <= n < VARINT_CACHE_SIZE else encode_varint(n)


def _size_of_varint(n: int) -> int:
    z = n << 1 if n >= 0 else ((-n) << 1) - 1
    return max(1, (z.bit_length() + 6) // 7)


def _size_of_fields(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """Bytes of key, value and headers with their length prefixes (Java DefaultRecord.sizeOf)."""
    size = 1 if key is None else _size_of_varint(len(key)) + len(key)
    size += 1 if value is None else _size_of_varint(len(value)) + len(value)
    size += _size_of_varint(len(headers))
    for h_key, h_value in headers:
        n = len(h_key.encode())
        size += _size_of_varint(n) + n
        size += 1 if h_value is None else _size_of_varint(len(h_value)) + len(h_value)
    return size


def record_size_in_bytes(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> int:
    """Exact encoded size of one record, length prefix included (Java DefaultRecord.sizeInBytes)."""
    body = (
        1
        + _size_of_varint(offset_delta)
        + _size_of_varint(timestamp_delta)
        + _size_of_fields(key, value, headers)
    )
    return body + _size_of_varint(body)


def estimate_size_in_bytes_upper_bound(
    key: bytes | None, value: bytes | None, headers: Sequence[Header]
) -> int:
    """Upper bound of a batch holding just this record, uncompressed.

    Java's ``DefaultRecordBatch.estimateBatchSizeUpperBound``: the accumulator allocates
    ``max(batch_size, this)`` so that a first record always fits its buffer.
    """
    return RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + _size_of_fields(key, value, headers)


# Encoded "length + utf-8" of header keys seen recently: applications reuse a handful of keys,
# and encoding a str is the costliest step of a header. Bounded so odd keys cannot grow it.
_HEADER_KEYS: dict[str, bytes] = {}
_HEADER_KEYS_MAX = 1024


def _header_key(h_key: str) -> bytes:
    raw = h_key.encode()
    encoded = _varint(len(raw)) + raw
    if len(_HEADER_KEYS) >= _HEADER_KEYS_MAX:
        _HEADER_KEYS.clear()
    _HEADER_KEYS[h_key] = encoded
    return encoded


def encode_record(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    """One record, length prefix included (Java's ``DefaultRecord.writeTo``).

    The compiled builder writes the common cases straight into its buffer and calls this for
    the others, so both give the same bytes and fail the same way on odd input.
    """
    if key is None:
        key_len = _NULL
        key = b""
    else:
        size = len(key)
        key_len = VARINTS[size] if size < VARINT_CACHE_SIZE else encode_varint(size)
    if value is None:
        value_len = _NULL
        value = b""
    else:
        size = len(value)
        value_len = VARINTS[size] if size < VARINT_CACHE_SIZE else encode_varint(size)
    delta = timestamp_delta
    body = b"".join(
        (
            b"\x00",  # record attributes, unused
            VARINTS[delta] if 0 <= delta < VARINT_CACHE_SIZE else encode_varint(delta),
            VARINTS[offset_delta]
            if offset_delta < VARINT_CACHE_SIZE
            else encode_varint(offset_delta),
            key_len,
            key,
            value_len,
            value,
            _encode_headers(headers) if headers else _EMPTY_HEADERS,
        )
    )
    size = len(body)
    return (VARINTS[size] if size < VARINT_CACHE_SIZE else encode_varint(size)) + body


def _encode_headers(headers: Sequence[Header]) -> bytes:
    count = len(headers)
    parts = [VARINTS[count] if count < VARINT_CACHE_SIZE else encode_varint(count)]
    append = parts.append
    keys = _HEADER_KEYS
    for h_key, h_value in headers:
        append(keys.get(h_key) or _header_key(h_key))
        if h_value is None:
            append(_NULL)
        else:
            size = len(h_value)
            append(VARINTS[size] if size < VARINT_CACHE_SIZE else encode_varint(size))
            append(h_value)
    return b"".join(parts)


class MemoryRecordsBuilder:
    """Builds one v2 record batch in a pooled buffer (Java's ``MemoryRecordsBuilder``).

    Args:
        buffer: The pooled buffer to write into. It is never resized; see the module docs.
        compression: Codec applied to the records section at :meth:`close`.
        compression_level: Codec level, validated against Kafka's ranges; ``None`` = default.
        write_limit: ``batch_size``: appends after the first stop when the (estimated) batch
            size would exceed it.
        base_timestamp: Timestamp deltas are relative to this; ``None`` = the first record's.
        estimated_ratio: Expected compressed/uncompressed ratio, from
            :class:`~aioaccum._core.codecs.CompressionRatioEstimator`. Ignored without compression.
        chunk_size: Above 0: incremental allocation. ``buffer`` is the first chunk, and more
            come from ``chunk_source`` (at least ``chunk_size`` bytes each) as records need them.
        chunk_source: Gives a chunk without waiting, or ``None``: the record is then refused
            as if the batch were full.
        chunk_sink: Takes back the chunks a compressed batch no longer fills at close.

    Raises:
        ConfigError: ``compression_level`` is out of range for ``compression``.
    """

    __slots__ = (
        "_appends_closed",
        "_base_from_first",
        "_base_sequence",
        "_base_timestamp",
        "_buffer",
        "_capacity",
        "_chunk_size",
        "_chunks",
        "_ci",
        "_closed",
        "_compression",
        "_compression_ratio",
        "_end",
        "_est_factor",
        "_is_transactional",
        "_level",
        "_limit",
        "_max_timestamp",
        "_num_records",
        "_off",
        "_out",
        "_pos",
        "_producer_epoch",
        "_producer_id",
        "_sink",
        "_size",
        "_source",
        "_spill",
        "_tail",
        "_view",
        "_write_limit",
    )

    def __init__(
        self,
        buffer: bytearray,
        write_limit: int,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
        base_timestamp: int | None = None,
        estimated_ratio: float = 1.0,
        chunk_size: int = 0,
        chunk_source: Callable[[int], bytearray | None] | None = None,
        chunk_sink: Callable[[bytearray], None] | None = None,
    ) -> None:
        self._buffer = buffer
        self._compression = (
            compression if type(compression) is CompressionType else CompressionType(compression)
        )
        self._level = validate_compression_level(self._compression, compression_level)
        self._write_limit = write_limit
        self._limit = write_limit  # what appends are checked against; -1 once closed
        self._base_from_first = base_timestamp is None
        self._base_timestamp = 0 if base_timestamp is None else base_timestamp
        self._max_timestamp = -1
        self._est_factor = estimated_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        self._num_records = 0
        self._pos = RECORD_BATCH_OVERHEAD
        self._view = memoryview(buffer)
        self._capacity = len(buffer)
        self._spill: bytearray | None = None
        self._appends_closed = False
        self._closed = False
        self._out = buffer
        self._size = 0
        self._compression_ratio = 1.0
        self._producer_id = NO_PRODUCER_ID
        self._producer_epoch = NO_PRODUCER_EPOCH
        self._base_sequence = NO_SEQUENCE
        self._is_transactional = False
        # Chunked: the logical stream's offset of the chunk being written, and its end.
        self._off = 0
        self._end = self._capacity
        self._ci = 0
        self._chunk_size = chunk_size
        self._chunks: list[bytearray] | None = None
        self._source = chunk_source
        self._sink = chunk_sink
        self._tail: bytes | None = None  # compressed bytes the chunks could not hold
        if chunk_size > 0:
            if self._capacity < RECORD_BATCH_OVERHEAD:
                raise ValueError(
                    f"the first chunk holds the {RECORD_BATCH_OVERHEAD}-byte batch header; got "
                    f"{self._capacity} bytes"
                )
            self._chunks = [buffer]
        elif self._capacity < RECORD_BATCH_OVERHEAD:
            self._grow(RECORD_BATCH_OVERHEAD)

    # ------------------------------------------------------------------------------ appending

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> int:
        """Append a record if it fits, encoding it only once.

        The first record is always accepted (unless appends are closed); later ones only if
        the batch stays within ``write_limit`` (see :meth:`has_room_for`).

        Returns:
            The record's offset delta (0, 1, 2, ...), or -1 if it was not appended.
        """
        n = self._num_records
        if n:
            delta = timestamp - self._base_timestamp
        else:
            if self._appends_closed:
                return -1
            if self._base_from_first:
                self._base_timestamp = timestamp
            delta = timestamp - self._base_timestamp
        record = encode_record(delta, n, key, value, headers)
        pos = self._pos
        end = pos + len(record)
        if n:
            if self._compression:
                estimate = (
                    RECORD_BATCH_OVERHEAD
                    + int((pos - RECORD_BATCH_OVERHEAD) * self._est_factor)
                    + len(record)
                )
                if estimate > self._limit:
                    return -1
            elif end > self._limit:
                return -1
        # Room is made before anything changes: a chunk the pool cannot give refuses the record.
        if end > self._capacity:
            if self._chunks is None:
                self._grow(end)
            elif not self._add_chunks(end):
                return -1
        if not n or timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        if end <= self._end:
            off = self._off
            self._view[pos - off : end - off] = record
        else:
            self._straddle(pos, record)
        self._pos = end
        self._num_records = n + 1
        return n

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> int:
        """Append a record without checking ``write_limit`` (check :meth:`has_room_for` first).

        Returns:
            The record's offset delta.

        Raises:
            RuntimeError: Appends are closed.
        """
        if self._appends_closed:
            raise RuntimeError("cannot append: the batch is closed for appends")
        limit = self._limit
        self._limit = _NO_LIMIT
        try:
            return self.try_append(timestamp, key, value, headers)
        finally:
            self._limit = limit

    def has_room_for(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> bool:
        """Whether :meth:`try_append` would accept this record (Java's ``hasRoomFor``).

        True for the first record; otherwise true when the estimated batch size after the
        append stays within ``write_limit``. Like Java, the new record counts uncompressed.
        """
        if self._appends_closed:
            return False
        n = self._num_records
        if not n:
            return True
        size = record_size_in_bytes(n, timestamp - self._base_timestamp, key, value, headers)
        return self._estimated_bytes_written() + size <= self._write_limit

    def _estimated_bytes_written(self) -> int:
        if self._compression:
            uncompressed = self._pos - RECORD_BATCH_OVERHEAD
            return RECORD_BATCH_OVERHEAD + int(uncompressed * self._est_factor)
        return self._pos

    def _grow(self, needed: int) -> None:
        """Move the written bytes to a larger spill buffer; the pooled one is left as it is."""
        capacity = max(needed, self._capacity + (self._capacity >> 1), RECORD_BATCH_OVERHEAD)
        spill = bytearray(capacity)
        kept = min(self._pos, self._capacity)
        spill[:kept] = self._view[:kept]
        self._spill = spill
        self._view = memoryview(spill)
        self._capacity = capacity
        self._end = capacity

    def _add_chunks(self, needed: int) -> bool:
        """Take chunks until the stream holds ``needed`` bytes; False if the pool had none.

        Chunks taken before a refusal stay with the batch (and go back with it): the pool's
        accounting sees them as the batch's either way.
        """
        chunks = self._chunks
        assert chunks is not None
        source = self._source
        while self._capacity < needed:
            want = _chunks.next_chunk_size(self._chunk_size, self._capacity,
                                           needed - self._capacity)
            chunk = None if source is None else source(want)
            if chunk is None:
                return False
            chunks.append(chunk)
            self._capacity += len(chunk)
        return True

    def _straddle(self, pos: int, record: bytes) -> None:
        """Write a record that runs past the current chunk, moving on chunk by chunk."""
        chunks = self._chunks
        assert chunks is not None
        data = memoryview(record)
        start = 0
        while True:
            take = min(self._end - pos, len(data) - start)
            off = self._off
            self._view[pos - off : pos - off + take] = data[start : start + take]
            pos += take
            start += take
            if start == len(data):
                return
            self._ci += 1
            chunk = chunks[self._ci]
            self._off = self._end
            self._view = memoryview(chunk)
            self._end = self._off + len(chunk)

    def set_estimated_compression_ratio(self, ratio: float) -> None:
        """Replace the compression-ratio estimate used by the room checks."""
        self._est_factor = ratio * COMPRESSION_RATE_ESTIMATION_FACTOR

    # ------------------------------------------------------------------------------- closing

    def close_for_record_appends(self) -> None:
        """Refuse further appends, without building the batch yet (Java's same-named method)."""
        self._appends_closed = True
        self._limit = -1

    def set_producer_state(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        is_transactional: bool = False,
    ) -> None:
        """Set the idempotence/transaction fields of the header.

        May be called before or after :meth:`close`; after it, the header fields and the CRC
        are rewritten in place (a retried batch may need a new sequence after an epoch bump).

        Raises:
            ValueError: The combination is one Kafka rejects (as Java's validateProducerState).
        """
        validate_producer_state(producer_id, producer_epoch, base_sequence, is_transactional)
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._is_transactional = is_transactional
        if self._closed and self._num_records:
            self._write_header()

    def close(self) -> None:
        """Finish the batch: compress if configured, then write the header and CRC.

        Closing again does nothing. A batch without records builds to zero bytes.
        """
        if self._closed:
            return
        self.close_for_record_appends()
        n = self._num_records
        if not n:
            self._view.release()
            self._out = self._buffer
            self._size = 0
            self._closed = True
            if self._chunks is not None:
                _chunks.trim(self._chunks, 1, self._sink)
            return
        pos = self._pos
        if self._chunks is not None:
            self._view.release()
            if self._compression:
                self._size, self._tail, self._compression_ratio = _chunks.compress_chunks(
                    self._compression, self._level, self._chunks, pos
                )
            else:
                self._size = pos
            _chunks.trim(self._chunks, self._size, self._sink)
            self._closed = True
            self._write_header()
            return
        if self._compression:
            out, size, self._compression_ratio = compress_records(
                self._compression, self._level, self._view, pos, self._buffer
            )
            self._spill = None
        else:
            out = self._buffer if self._spill is None else self._spill
            size = pos
        # Drop the export that pinned the buffer's size; the bytes are final from here on.
        self._view.release()
        self._out = out
        self._size = size
        self._closed = True
        self._write_header()

    def _write_header(self) -> None:
        write_batch_header(
            self._out,
            self._size,
            self._compression,
            self._is_transactional,
            self._num_records,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            None if self._chunks is None else self._parts(),
        )

    def build(self) -> memoryview:
        """Close if needed and return a view of exactly the batch's bytes (chunked: joined,
        a copy: the send path takes :meth:`build_parts`)."""
        self.close()
        if self._chunks is None:
            return memoryview(self._out)[: self._size]
        batch_parts = self._parts()
        return batch_parts[0] if len(batch_parts) == 1 else memoryview(_chunks.joined(batch_parts))

    def build_parts(self) -> list[memoryview]:
        """Close if needed and return the batch's bytes as the buffers that hold them, in order
        (one per chunk; one in all without chunks): what goes to ``transport.writelines``."""
        self.close()
        if self._chunks is None:
            return [memoryview(self._out)[: self._size]]
        return self._parts()

    def _parts(self) -> list[memoryview]:
        chunks = self._chunks
        assert chunks is not None
        if not self._size:
            return [memoryview(self._buffer)[:0]]
        batch_parts = _chunks.parts(chunks, self._size)
        if self._tail is not None:
            batch_parts.append(memoryview(self._tail))
        return batch_parts

    # ------------------------------------------------------------------------------- reading

    def iter_records(self) -> Iterator[SimpleRecord]:
        """Yield the appended records in order, decoded from the written bytes.

        Meant for the rare re-read (splitting a batch the broker found too large), not for
        the hot path. Works before and after :meth:`close`.
        """
        if self._chunks is not None:
            if self._closed:
                if not self._size:
                    return
                section = closed_section(
                    self._compression, _chunks.joined(self._parts()), self._size
                )
            else:
                section = _chunks.joined(
                    _chunks.parts(self._chunks, self._pos), RECORD_BATCH_OVERHEAD
                )
        elif self._closed:
            if not self._size:
                return
            section = closed_section(self._compression, self._out, self._size)
        else:
            section = bytes(self._view[RECORD_BATCH_OVERHEAD : self._pos])
        yield from decode_records(section, self._num_records, self._base_timestamp)

    # ---------------------------------------------------------------------------- properties

    @property
    def buffer(self) -> bytearray:
        """The pooled buffer given at construction (return this one to the pool)."""
        return self._buffer

    @property
    def chunks(self) -> list[bytearray]:
        """Every pooled buffer the batch holds (return each to the pool): the one buffer
        given at construction, or the chunks."""
        return [self._buffer] if self._chunks is None else list(self._chunks)

    @property
    def compression(self) -> CompressionType:
        """The batch's codec."""
        return self._compression

    @property
    def write_limit(self) -> int:
        """The size appends are checked against (``batch_size``)."""
        return self._write_limit

    @property
    def num_records(self) -> int:
        """Records appended so far."""
        return self._num_records

    @property
    def base_timestamp(self) -> int:
        """The timestamp deltas are relative to (0 before the first record, if none was given)."""
        return self._base_timestamp

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp (-1 before the first record)."""
        return self._max_timestamp

    @property
    def uncompressed_size(self) -> int:
        """Header plus records before compression (Java's ``uncompressedBytesWritten``)."""
        return self._pos

    @property
    def estimated_size_in_bytes(self) -> int:
        """Exact size once closed; before that, the (estimated, if compressed) size so far."""
        return self._size if self._closed else self._estimated_bytes_written()

    @property
    def compression_ratio(self) -> float:
        """Compressed / uncompressed records size after :meth:`close` (1.0 until then)."""
        return self._compression_ratio

    @property
    def is_full(self) -> bool:
        """Closed for appends, or holding records and at or over ``write_limit`` (estimated)."""
        # Read after every append: _estimated_bytes_written is spelt out to save a call.
        if self._appends_closed:
            return True
        if not self._num_records:
            return False
        if self._compression:
            uncompressed = self._pos - RECORD_BATCH_OVERHEAD
            return self._write_limit <= RECORD_BATCH_OVERHEAD + int(uncompressed * self._est_factor)
        return self._write_limit <= self._pos

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` has built the batch."""
        return self._closed

    @property
    def producer_id(self) -> int:
        """Producer id in the header (-1 without idempotence)."""
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        """Producer epoch in the header (-1 without idempotence)."""
        return self._producer_epoch

    @property
    def base_sequence(self) -> int:
        """Sequence number of the first record (-1 without idempotence)."""
        return self._base_sequence

    @property
    def is_transactional(self) -> bool:
        """Whether the transactional attribute bit is set."""
        return self._is_transactional

    def __repr__(self) -> str:
        state = "closed" if self._closed else "full" if self.is_full else "open"
        return (
            f"<MemoryRecordsBuilder {state} records={self._num_records} "
            f"bytes={self.estimated_size_in_bytes} limit={self._write_limit} "
            f"compression={self._compression.kafka_name}>"
        )


# ----------------------------------------------------------- shared by both implementations
# The cold steps (closing, the header, reading back) are the same Python for the reference
# builder and the compiled one in _crecords.pyx, which calls these.


def validate_producer_state(
    producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
) -> None:
    """Refuse the combinations Kafka rejects (as Java's ``validateProducerState``).

    Raises:
        ValueError: Which field is wrong, with its value.
    """
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("a transactional batch needs a producer id")
    if producer_id != NO_PRODUCER_ID:
        if producer_epoch == NO_PRODUCER_EPOCH:
            raise ValueError(f"invalid producer epoch {producer_epoch} for a producer id")
        if base_sequence < 0:
            raise ValueError(f"invalid base sequence {base_sequence} for a producer id")


def compress_records(
    compression: CompressionType,
    level: int | None,
    written: memoryview,
    end: int,
    pooled: bytearray,
) -> tuple[bytearray, int, float]:
    """Compress the records section ``written[61:end]`` behind a space for the header.

    Returns:
        The buffer holding the batch (the pooled one when it fits, else a new one), the batch's
        size, and the compression ratio achieved.
    """
    compressed = compress(compression, written[RECORD_BATCH_OVERHEAD:end], level)
    size = RECORD_BATCH_OVERHEAD + len(compressed)
    out = pooled if size <= len(pooled) else bytearray(size)
    memoryview(out)[RECORD_BATCH_OVERHEAD:size] = compressed
    return out, size, len(compressed) / (end - RECORD_BATCH_OVERHEAD)


def write_batch_header(
    out: bytearray,
    size: int,
    compression: CompressionType,
    is_transactional: bool,
    num_records: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    batch_parts: list[memoryview] | None = None,
) -> None:
    """Write the v2 batch header into ``out[:61]``, then the CRC-32C over what it covers:
    ``out[21:size]``, or with ``batch_parts`` (``out`` is the first chunk) the stream they lay
    out from byte 21."""
    attributes = int(compression)
    if is_transactional:
        attributes |= _TRANSACTIONAL_FLAG
    _HEADER.pack_into(
        out,
        0,
        0,  # base offset: the broker assigns offsets
        size - _LOG_OVERHEAD,
        NO_PARTITION_LEADER_EPOCH,
        MAGIC,
        0,  # crc, filled in below once everything it covers is in place
        attributes,
        num_records - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        num_records,
    )
    if batch_parts is None:
        crc = crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:size])
    else:
        crc = _chunks.crc_of_parts(batch_parts, _ATTRIBUTES_OFFSET)
    _CRC.pack_into(out, _CRC_OFFSET, crc)


def closed_section(compression: CompressionType, out: bytearray | bytes, size: int) -> bytes:
    """The records section of a closed batch, decompressed."""
    section = bytes(memoryview(out)[RECORD_BATCH_OVERHEAD:size])
    return decompress(compression, section) if compression else section


def decode_records(section: bytes, count: int, base_timestamp: int) -> Iterator[SimpleRecord]:
    """The ``count`` records of an uncompressed records section, in order."""
    pos = 0
    for _ in range(count):
        record, pos = _decode_record(section, pos, base_timestamp)
        yield record


def _decode_record(buf: bytes, pos: int, base_timestamp: int) -> tuple[SimpleRecord, int]:
    length, pos = decode_varint(buf, pos)
    end = pos + length
    pos += 1  # attributes
    timestamp_delta, pos = decode_varint(buf, pos)
    _offset_delta, pos = decode_varint(buf, pos)
    key_len, pos = decode_varint(buf, pos)
    key = None
    if key_len >= 0:
        key = buf[pos : pos + key_len]
        pos += key_len
    value_len, pos = decode_varint(buf, pos)
    value = None
    if value_len >= 0:
        value = buf[pos : pos + value_len]
        pos += value_len
    count, pos = decode_varint(buf, pos)
    headers: list[Header] = []
    for _ in range(count):
        h_key_len, pos = decode_varint(buf, pos)
        h_key = buf[pos : pos + h_key_len].decode()
        pos += h_key_len
        h_value_len, pos = decode_varint(buf, pos)
        h_value = None
        if h_value_len >= 0:
            h_value = buf[pos : pos + h_value_len]
            pos += h_value_len
        headers.append((h_key, h_value))
    if pos != end:
        raise ValueError(f"record length {length} disagrees with its fields")
    return SimpleRecord(base_timestamp + timestamp_delta, key, value, headers), pos


# --------------------------------------------------------------------- which implementation
# The class above is the reference: it stays importable as PyMemoryRecordsBuilder, for the
# parity tests and for AIOACCUM_NO_EXTENSIONS=1. The public name is whichever builder
# aioaccum._speedups chose, once, at import; the compiled one has the same API (_crecords.pyi).
from aioaccum import _speedups  # noqa: E402  (must follow the reference class it aliases)

PyMemoryRecordsBuilder = MemoryRecordsBuilder

if _speedups.EXTENSIONS:
    from aioaccum._core._crecords import MemoryRecordsBuilder  # type: ignore[assignment]
