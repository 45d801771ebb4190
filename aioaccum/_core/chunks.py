"""Batches in pooled chunks: the byte moves shared by both record builders (KIP-1332).

Theory of operation
-------------------
With ``buffer_memory_allocation_strategy='incremental'`` a batch does not take ``batch_size``
bytes when it opens. It takes one chunk (:data:`CHUNK_SIZE` bytes, or a first record's size if
that is larger) and asks the pool for another, without waiting, each time the records outgrow
what it holds; ``batch_size`` still bounds the batch. So an open batch with a few records pins
one small chunk, and memory follows the data rather than the number of partitions with data.

A batch that keeps filling grows by chunks that double (:func:`next_chunk_size`): each new one
as large as the batch so far, up to :data:`LARGEST_CHUNK`. A 1 MiB batch is then 21 chunks, not
512 of 2 KiB: with 1 KB and 4 KB records, 2 KiB chunks cost a chunk taken from the pool every
record or two, a record straddling nearly every boundary, and a view per chunk in the socket
write, which made incremental allocation 2x slower than ``full``. A quiet batch still holds 2 KiB,
and a busy one wastes at most its last chunk's tail. The pool keeps a free list per size.

A batch's bytes are one logical stream laid over its chunks in order: the 61-byte header at the
front of the first chunk, then the records, which may straddle a chunk boundary (nothing is
wasted at a chunk's tail, and a record larger than a chunk simply spans several). At close,
an uncompressed batch is already final; a compressed one has its records section compressed and
written back over the same chunks, and the chunks it no longer fills go back to the pool at once.
The bytes go to the socket as one memoryview per chunk (:func:`parts`), never joined; the
CRC-32C of the header runs across all of them (:func:`crc_of_parts`).

The functions here are the steps once per batch (chunk bookkeeping at close, the views for the
socket, the CRC, reading back); the hot step, writing a record, lives in each builder. With keys
spread over many partitions a batch holds a few records, so these are compiled too (``chunks.pxd``)
and the compiled builder reads the CRC straight from its chunks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from crc32c import crc32c

from aioaccum._core.codecs import CompressionType, compress, lz4_compressor

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = [
    "CHUNK_SIZE",
    "LARGEST_CHUNK",
    "MIN_CHUNK_SIZE",
    "ChunkSink",
    "ChunkSource",
    "chunk_size_for",
    "compress_chunks",
    "crc_of_parts",
    "joined",
    "largest_chunk_for",
    "next_chunk_size",
    "opening_chunk_size",
    "parts",
    "scatter",
    "trim",
]

CHUNK_SIZE = 2048
"""Bytes per pooled chunk, whatever ``batch_size`` is (Java's first cut uses 16 KiB, which at
the default ``batch_size`` is no better than ``full``). Measured with the accumulator alone
(compiled, 100-byte records, 16 KiB batches, 6 partitions, a sweep of sizes): 512-byte chunks
cost about 30% of the appends per second and 1 KiB about 20% (a chunk taken every 5 to 10
records, and a record straddling each boundary), while 2 KiB and 4 KiB were within the noise of
``full``. The smallest size that costs nothing measurable, so that an open batch of a few
records (or a batch in flight with one or two) holds 2 KiB rather than ``batch_size``: 6000
partitions with data hold 12 MiB of the default 32 MiB pool."""

LARGEST_CHUNK = 64 * 1024
"""The bound on the chunks a growing batch takes (see :func:`next_chunk_size`): 16 per 1 MiB
batch, few enough that per-chunk costs vanish beside the records' bytes, small enough that the
unused tail of a batch's last chunk stays a small part of ``buffer_memory``."""

_HEADER_SIZE = 61  # records.RECORD_BATCH_OVERHEAD, which imports this module

_LZ4_STREAM_ABOVE = 64 * 1024
"""LZ4 sections up to one frame block are copied and compressed in one call, larger ones are
streamed over the chunks (:func:`_lz4_in_place`). Streaming pays off only across blocks: within
one, the compressor buffers the pieces (a copy anyway) and each call reserves a block's worth of
output. Measured on a 16 KiB batch of four chunks: 24 µs streamed against 17 µs copied and
compressed at once; at 256 KiB, 203 against 441 µs."""

MIN_CHUNK_SIZE = 64
"""The first chunk holds the whole 61-byte batch header (the CRC is written into it)."""

ChunkSource = Callable[[int], "bytearray | None"]
"""Gives a chunk of at least the size asked for without waiting (the pool's
``allocate_nowait``), or ``None`` when there is none to give now."""

ChunkSink = Callable[[bytearray], None]
"""Takes back a chunk the batch no longer needs (the pool's ``deallocate``)."""


def chunk_size_for(batch_size: int) -> int:
    """The chunk size for ``batch_size``: :data:`CHUNK_SIZE`, or ``batch_size`` if smaller
    (a batch never needs a chunk larger than itself)."""
    return max(MIN_CHUNK_SIZE, min(CHUNK_SIZE, batch_size))


def largest_chunk_for(chunk_size: int) -> int:
    """The largest size a batch's chunks double to from ``chunk_size``: ``chunk_size`` times
    the largest power of two that keeps it within :data:`LARGEST_CHUNK` (the pool keeps a free
    list for each of these sizes)."""
    # A local copy: compiled, the loop then compares C integers, not a boxed one per turn.
    largest = LARGEST_CHUNK
    size = chunk_size
    while size * 2 <= largest:
        size *= 2
    return size


def next_chunk_size(chunk_size: int, capacity: int, short: int) -> int:
    """The size of the next chunk a batch takes: it holds ``capacity`` bytes in chunks that
    started at ``chunk_size``, and needs ``short`` more for its next record.

    The batch doubles: the next chunk is as large as the batch so far, within
    :func:`largest_chunk_for`. A record larger than that gets the smallest of those sizes that
    holds it, or its own size beyond the largest (a buffer the pool does not keep).
    """
    largest = largest_chunk_for(chunk_size)
    size = chunk_size
    while size * 2 <= capacity and size < largest:
        size *= 2
    while size < short and size < largest:
        size *= 2
    return size if size >= short else short


def opening_chunk_size(
    chunk_size: int, record_size: int, total_memory: int, batch_size: int
) -> int:
    """The first chunk of a batch whose first record (``record_size`` bounds the batch of it
    alone) outgrows ``chunk_size``: the smallest doubled size that holds two such records
    (within ``batch_size``) if the pool keeps that size on a free list and it fits
    ``total_memory``; else the smallest that holds the one record; else the record's own size.

    Two, because a batch of large records that opens with room for one takes a chunk for each
    of its next two records, and each of those records straddles a boundary (4 KB records at
    16 KiB batches: chunks of 4, 4 and 8 KiB, two records split); with room for two it takes
    chunks of 8 and 8 KiB and splits one. A partition that gets one large record and no more
    holds up to one record's worth more than it needs (8 KiB for one 4 KB record).
    At the record's own size, an odd one, it was a fresh buffer per batch, and the pool gave up
    kept chunks to find its bytes (a 4092-byte buffer per batch, a fifth of each record's
    cost)."""
    if batch_size > record_size:
        size = next_chunk_size(chunk_size, 0, min(2 * record_size, batch_size))
        if size <= largest_chunk_for(chunk_size) and size <= total_memory:
            return size  # a size the pool keeps
    size = next_chunk_size(chunk_size, 0, record_size)
    return size if size <= total_memory else record_size


def parts(chunks: list[bytearray], size: int) -> list[memoryview]:
    """The first ``size`` bytes of the stream laid over ``chunks``, one view per chunk."""
    out: list[memoryview] = []
    left = size
    for chunk in chunks:
        if left <= 0:
            break
        n = len(chunk)
        out.append(memoryview(chunk)[:left] if left < n else memoryview(chunk))
        left -= n
    if cython.compiled:
        # Kept while its batch is in flight (_cgc.pxd says why it leaves the collector).
        gc_untrack(out)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
    return out


def trim(chunks: list[bytearray], size: int, sink: ChunkSink | None) -> None:
    """Give back (to ``sink``) every chunk after the one holding byte ``size - 1``; the first
    chunk is always kept."""
    kept = 0
    total = 0
    for chunk in chunks:
        kept += 1
        total += len(chunk)
        if total >= size:
            break
    while len(chunks) > kept:
        chunk = chunks.pop()
        if sink is not None:
            sink(chunk)


def scatter(chunks: list[bytearray], offset: int, data: bytes | memoryview) -> int:
    """Write ``data`` at logical ``offset`` across ``chunks``; returns the bytes that did not
    fit (written nowhere: the caller keeps them as a tail part)."""
    view = memoryview(data)
    start = 0
    for chunk in chunks:
        n = len(chunk)
        if offset >= n:
            offset -= n
            continue
        take = min(n - offset, len(view) - start)
        chunk[offset : offset + take] = view[start : start + take]
        start += take
        offset = 0
        if start == len(view):
            return 0
    return len(view) - start


def crc_of_parts(batch_parts: list[memoryview], start: int) -> int:
    """CRC-32C of the stream ``batch_parts`` from byte ``start`` (inside the first part)."""
    crc = crc32c(batch_parts[0][start:])
    for part in batch_parts[1:]:
        crc = crc32c(part, crc)
    return crc


def joined(batch_parts: list[memoryview], start: int = 0) -> bytes:
    """The stream from byte ``start`` as one ``bytes`` (cold: splits, reading back, codecs)."""
    if len(batch_parts) == 1:
        return bytes(batch_parts[0][start:])
    if start:
        return b"".join([batch_parts[0][start:], *batch_parts[1:]])  # one copy, not two
    return b"".join(batch_parts)


# One scratch buffer per thread for the records section of a compressed batch that spans chunks
# (the codecs take contiguous input). Joined into fresh bytes (and sliced, a second copy), a
# 1 MiB lz4 batch took 44% of a run's CPU, most of it in page faults: the allocator hands such
# large blocks back to the system once freed, so each batch touched new pages twice. The buffer
# grows to the largest section compressed on its thread and is kept.
_scratch = threading.local()


def _section(batch_parts: list[memoryview], start: int) -> memoryview:
    """The stream from byte ``start`` (inside the first part) copied into this thread's
    scratch buffer: a view the caller releases before the thread compresses again."""
    size = sum(len(part) for part in batch_parts) - start
    buffer: bytearray | None = getattr(_scratch, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _scratch.buffer = bytearray(size)
    view = memoryview(buffer)
    first = batch_parts[0][start:]
    pos = len(first)
    view[:pos] = first
    for part in batch_parts[1:]:
        n = len(part)
        view[pos : pos + n] = part
        pos += n
    return view[:size]


def _lz4_in_place(
    level: int | None, batch_parts: list[memoryview], chunks: list[bytearray], end: int
) -> tuple[int, bytes | None, float]:
    """:func:`compress_chunks` for LZ4, chunk by chunk, with no copy of the section.

    LZ4 frames of independent blocks can be made piece by piece (see
    :func:`~aioaccum._core.codecs.lz4_compressor`). Each piece of output is written back over
    the chunks once the compressor has read past the bytes it covers; output that would overtake
    the input waits in a list (the frame's header and block headers make incompressible data a
    few bytes longer than it was read). For a 1 MiB batch this spares the section's copy and a
    1 MiB output, both in new pages.
    """
    compressor = lz4_compressor(level)
    waiting: list[bytes] = [compressor.begin()]
    written = read = _HEADER_SIZE  # stream offsets: output written up to, input read up to
    for index, part in enumerate(batch_parts):
        piece = part[_HEADER_SIZE:] if index == 0 else part
        out = compressor.compress(piece)
        read += len(piece)
        if out:
            waiting.append(out)
        while waiting and written + len(waiting[0]) <= read:
            first = waiting.pop(0)
            scatter(chunks, written, first)  # within what was read: it fits
            written += len(first)
    waiting.append(compressor.flush())
    rest = b"".join(waiting)
    left = scatter(chunks, written, rest)
    size = written + len(rest)
    return (
        size,
        rest[len(rest) - left :] if left else None,
        (size - _HEADER_SIZE) / (end - _HEADER_SIZE),
    )


def compress_chunks(
    compression: CompressionType, level: int | None, chunks: list[bytearray], end: int
) -> tuple[int, bytes | None, float]:
    """Compress the records section (bytes 61 to ``end`` of the stream over ``chunks``) and
    write it back over the same chunks, behind the header.

    The codec reads the section in one piece (a copy into a scratch buffer when it spans
    chunks; the codecs take contiguous input); what goes to the socket stays in the chunks.

    Returns:
        The batch's size, the compressed bytes the chunks could not hold (an incompressible
        section grows by the codec's framing; ``None`` when all fit), and the ratio achieved.
    """
    batch_parts = parts(chunks, end)
    if (
        len(batch_parts) > 1
        and compression is CompressionType.LZ4
        and end - _HEADER_SIZE > _LZ4_STREAM_ABOVE
    ):
        return _lz4_in_place(level, batch_parts, chunks, end)
    section = (
        batch_parts[0][_HEADER_SIZE:]
        if len(batch_parts) == 1
        else _section(batch_parts, _HEADER_SIZE)
    )
    compressed = compress(compression, section, level)
    section.release()
    left = scatter(chunks, _HEADER_SIZE, compressed)
    tail = compressed[len(compressed) - left :] if left else None
    return (
        _HEADER_SIZE + len(compressed),
        tail,
        len(compressed) / (end - _HEADER_SIZE),
    )
