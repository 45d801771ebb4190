"""Incremental allocation (KIP-1332): batches in pooled chunks, through the accumulator and the
real BufferPool. Every test checks the pool's books: what it has handed out is exactly what the
batches hold, and everything comes back."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.chunks import compress_chunks, largest_chunk_for, opening_chunk_size, scatter
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.codecs import CompressionType, lz4_compress, lz4_decompress
from aioaccum._core.futures import FutureRecordMetadata, RecordFuture
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool
from aioaccum.errors import BufferExhaustedError, ProducerClosedError

BATCH = 16384
CHUNK = 256
TS = 1_700_000_000_000
T0 = 1000.0
PARTITIONS = 40
CLUSTER = StaticCluster.uniform({"t": PARTITIONS}, nodes=1)
ALL = list(range(PARTITIONS))


def make(
    memory: int = 64 * CHUNK, codec: CompressionType = CompressionType.NONE
) -> tuple[RecordAccumulator, BufferPool]:
    pool = BufferPool(memory, CHUNK, largest_pooled=largest_chunk_for(CHUNK))  # as wired
    acc = RecordAccumulator(
        pool, batch_size=BATCH, linger=10.0, delivery_timeout=120.0, compression=codec,
        chunk_size=CHUNK,
    )
    return acc, pool


def books(acc: RecordAccumulator, pool: BufferPool) -> None:
    """The pool's invariant, and: allocated == the bytes the unfinished batches hold."""
    s = pool.statistics()
    assert (s.free_buffers * s.poolable_size + s.free_sized + s.unallocated + s.reserved
            + s.allocated == s.total)
    held = sum(len(c) for b in acc.incomplete_batches() if b.from_pool for c in b.builder.chunks)
    assert s.allocated == held


def put(
    acc: RecordAccumulator, partition: int, value: bytes, now: float = T0
) -> RecordFuture | BufferRequest:
    bound = estimate_size_in_bytes_upper_bound(None, value, [])
    return acc.append("t", partition, TS, None, value, [], bound, ALL, CLUSTER, now)


async def put_waiting(
    acc: RecordAccumulator, pool: BufferPool, partition: int, value: bytes, max_block_ms: float
) -> FutureRecordMetadata:
    got = put(acc, partition, value)
    if isinstance(got, BufferRequest):
        buffer = await pool.allocate(got.size, max_block_ms)
        bound = estimate_size_in_bytes_upper_bound(None, value, [])
        got = acc.append(
            "t", partition, TS, None, value, [], bound, ALL, CLUSTER, T0, granted=(got, buffer)
        )
    assert isinstance(got, FutureRecordMetadata)
    return got


def drain_all(acc: RecordAccumulator) -> list[ProducerBatch]:
    return [b for bs in acc.drain(CLUSTER, [0], 1 << 30, T0).values() for b in bs]


def test_an_open_batch_pins_one_chunk_not_batch_size() -> None:
    acc, pool = make(memory=PARTITIONS * CHUNK)  # 40 batch_size buffers would need 640 KiB
    for p in ALL:
        for _ in range(3):  # three 50-byte records: one chunk
            assert isinstance(put(acc, p, b"x" * 50), FutureRecordMetadata)
    assert pool.statistics().allocated == PARTITIONS * CHUNK
    books(acc, pool)


def test_a_batch_grows_by_doubling_chunks_up_to_batch_size() -> None:
    acc, pool = make(memory=BATCH * 2)
    n = 0
    while acc.queued_batches(TopicPartition("t", 0)) < 2:
        assert isinstance(put(acc, 0, b"y" * 100), FutureRecordMetadata)
        n += 1
    first = drain_all(acc)[0]
    assert first.estimated_size_in_bytes <= BATCH
    assert first.estimated_size_in_bytes > BATCH - 130  # filled, not cut at a chunk
    parts = first.record_parts()
    # Each chunk as large as the batch before it: 256 + 256 + 512 + ... + 8192 = 16 KiB.
    assert [len(c) for c in first.builder.chunks] == [CHUNK] + [CHUNK << k for k in range(6)]
    assert len(parts) == 7
    assert b"".join(parts) == bytes(first.records())
    assert [r.value for r in first.builder.iter_records()] == [b"y" * 100] * (n - 1)
    books(acc, pool)
    first.complete(0, -1)
    acc.deallocate(first)
    books(acc, pool)


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.GZIP])
def test_a_compressed_batch_gives_back_the_chunks_it_no_longer_fills(
    codec: CompressionType,
) -> None:
    acc, pool = make(memory=BATCH * 4, codec=codec)
    for _ in range(100):
        put(acc, 0, b"abcd" * 25)
    before = pool.statistics().allocated
    assert before >= 40 * CHUNK
    [batch] = drain_all(acc)  # closed: compressed back into its first chunks
    parts = batch.record_parts()
    assert len(batch.builder.chunks) == len(parts) < 4
    assert pool.statistics().allocated == sum(len(c) for c in batch.builder.chunks)
    assert sum(len(c) for c in batch.builder.chunks) <= 4 * CHUNK  # at most 256 + 256 + 512
    assert [r.value for r in batch.builder.iter_records()] == [b"abcd" * 25] * 100
    books(acc, pool)
    batch.complete(0, -1)
    acc.deallocate(batch)
    assert pool.statistics().allocated == 0
    books(acc, pool)


async def test_a_batch_that_cannot_grow_makes_way_for_a_waiter_in_fifo_order() -> None:
    acc, pool = make(memory=4 * CHUNK)
    for p in range(4):
        put(acc, p, b"z" * 100)  # four batches, one chunk each: the pool is empty
    assert pool.available_memory() == 0
    # Partition 0's batch needs a second chunk: refused without waiting, a new batch is asked for.
    request = put(acc, 0, b"z" * 150)
    assert isinstance(request, BufferRequest)
    assert request.size == CHUNK
    first = asyncio.ensure_future(put_waiting(acc, pool, 0, b"z" * 150, 10_000))
    await asyncio.sleep(0)
    assert pool.queued() == 1
    # A waiter is queued: no batch may take a chunk past it, even one that grows in place.
    assert isinstance(put(acc, 1, b"w" * 150), BufferRequest)
    second = asyncio.ensure_future(put_waiting(acc, pool, 1, b"w" * 150, 10_000))
    await asyncio.sleep(0)
    assert pool.queued() == 2
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}  # waiters: everything goes now
    batches = drain_all(acc)
    batches[0].complete(0, -1)
    acc.deallocate(batches[0])  # one chunk back: the head (partition 0) gets it
    await asyncio.sleep(0)
    assert first.done()
    assert not second.done()
    books(acc, pool)
    for b in batches[1:]:
        b.complete(0, -1)
        acc.deallocate(b)
    await second
    books(acc, pool)


async def test_cancelled_and_timed_out_chunk_waiters_leave_the_books_exact() -> None:
    acc, pool = make(memory=2 * CHUNK)
    put(acc, 0, b"a" * 100)
    put(acc, 1, b"a" * 100)
    cancelled = asyncio.ensure_future(put_waiting(acc, pool, 0, b"a" * 150, 10_000))
    await asyncio.sleep(0)
    with pytest.raises(BufferExhaustedError, match=f"Failed to allocate {CHUNK} bytes"):
        await put_waiting(acc, pool, 1, b"a" * 150, 0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert pool.queued() == 0
    books(acc, pool)
    for b in drain_all(acc):
        b.complete(0, -1)
        acc.deallocate(b)
    assert pool.statistics().allocated == 0
    books(acc, pool)


async def test_split_abort_and_close_return_every_chunk() -> None:
    acc, pool = make(memory=BATCH * 4, codec=CompressionType.LZ4)
    futures = [await put_waiting(acc, pool, 0, bytes([i]) * 300, 1000) for i in range(30)]
    [big] = drain_all(acc)
    assert acc.split_and_reenqueue(big, T0, 0.0) >= 2
    books(acc, pool)
    offset = 0
    while acc.queued_batches(TopicPartition("t", 0)):
        [part] = acc.drain(CLUSTER, [0], 1, T0 + 1)[0]
        part.complete(offset, -1)
        offset += part.record_count
        acc.deallocate(part)
    assert [f.result().offset for f in futures] == list(range(30))
    for p in range(5):
        put(acc, p, b"q" * 700)
    acc.abort_queued(ProducerClosedError("aborted"))
    assert pool.statistics().allocated == 0
    for p in range(5):
        put(acc, p, b"q" * 700)
    acc.close()
    acc.abort_unended(ProducerClosedError("closed"))
    assert pool.statistics().allocated == 0
    books(acc, pool)


class Run:
    def __init__(self) -> None:
        self.settled: list[tuple[int, int, int]] = []

    def settle_run(
        self, first: int, count: int, tp: TopicPartition, base_offset: int, log_append_time: int
    ) -> None:
        self.settled.append((first, count, base_offset))

    def fail_run(self, first: int, count: int, error: BaseException) -> None:
        raise AssertionError(error)

    def sink_for(self, index: int) -> Callable[[FutureRecordMetadata], object]:
        raise AssertionError(index)


async def test_bulk_appends_grow_the_batch_and_stop_where_the_pool_does() -> None:
    acc, pool = make(memory=8 * CHUNK)
    values = [b"v" * 100] * 500
    run = Run()
    assert isinstance(put(acc, 3, values[0]), FutureRecordMetadata)
    appended = acc.append_run("t", 3, TS, None, values, 1, run, ALL, CLUSTER)
    # Eight chunks of 256 bytes hold about 2048 - 61 bytes of ~104-byte records.
    assert 15 <= appended <= 19
    assert acc.append_run("t", 3, TS, None, values, 1 + appended, run, ALL, CLUSTER) == 0
    books(acc, pool)
    [batch] = drain_all(acc)
    assert batch.record_count == appended + 1
    batch.complete(10, -1)
    assert run.settled == [(1, appended, 11)]
    acc.deallocate(batch)
    books(acc, pool)


def test_a_thread_takes_its_first_chunk_in_the_same_queue() -> None:
    acc, pool = make(memory=2 * CHUNK)
    acc.enable_threads()
    put(acc, 0, b"a" * 100)
    put(acc, 1, b"a" * 100)
    request = put(acc, 2, b"a" * 100)
    assert isinstance(request, BufferRequest)
    with pytest.raises(BufferExhaustedError):
        pool.allocate_blocking(request.size, 0)
    for b in drain_all(acc):
        b.complete(0, -1)
        acc.deallocate(b)
    buffer = pool.allocate_blocking(request.size, 1000)
    bound = estimate_size_in_bytes_upper_bound(None, b"a" * 100, [])
    got = acc.append(
        "t", 2, TS, None, b"a" * 100, [], bound, ALL, CLUSTER, T0, granted=(request, buffer),
        for_thread=True,
    )
    assert not isinstance(got, BufferRequest)
    books(acc, pool)


def test_compressed_batches_of_falling_sizes_on_one_thread_read_back_whole() -> None:
    # The section a codec reads is copied into a scratch buffer kept by the thread: a smaller
    # batch after a larger one must read back its own records only, none of the larger's tail.
    acc, pool = make(memory=BATCH * 8, codec=CompressionType.LZ4)
    for count, fill in ((120, b"L"), (30, b"s"), (2, b"t")):
        for i in range(count):
            put(acc, 0, fill * 60 + str(i).encode())
        [batch] = drain_all(acc)
        assert [r.value for r in batch.builder.iter_records()] == [
            fill * 60 + str(i).encode() for i in range(count)
        ]
        batch.complete(0, -1)
        acc.deallocate(batch)
        books(acc, pool)
    assert pool.statistics().allocated == 0


def assert_lz4_laid_over(section: bytes, sizes: list[int]) -> None:
    """compress_chunks over chunks of ``sizes`` holding a batch header and ``section``: the frame
    one call makes, behind the header, and what the chunks cannot hold as the tail part."""
    header = bytes(range(61))
    stream = header + section
    chunks = [bytearray(n) for n in sizes]
    assert scatter(chunks, 0, stream) == 0
    size, tail, ratio = compress_chunks(CompressionType.LZ4, None, chunks, len(stream))
    expected = lz4_compress(section)
    assert size == len(header) + len(expected)
    assert ratio == len(expected) / len(section)
    laid = b"".join(chunks)
    assert laid[: len(header)] == header
    if size <= sum(sizes):
        assert tail is None
        assert laid[len(header) : size] == expected
    else:
        assert tail is not None
        assert laid[len(header) :] + tail == expected
    assert lz4_decompress(expected) == section


@pytest.mark.parametrize(
    ("kind", "room"),
    [("text", 50_000), ("random", 50_000), ("random", 0)],
)
def test_lz4_compressed_in_place_is_the_frame_one_call_makes(kind: str, room: int) -> None:
    # Above one 64 KiB block, LZ4 is compressed chunk by chunk and written back behind what
    # was read. Random bytes grow by the frame's headers, so output overtakes input; with no
    # room to spare, the last bytes come back as the tail part.
    rng = random.Random(11)
    section = (
        rng.randbytes(150_000) if kind == "random" else b"".join(
            b"record %d of a text that repeats; " % i for i in range(5_000))[:150_000]
    )
    sizes = [2048, 2048, 4096, 8192, 16384, 32768]
    while sum(sizes) < 61 + len(section) + room:
        sizes.append(65536)
    sizes[-1] -= sum(sizes) - (61 + len(section) + room)
    assert_lz4_laid_over(section, sizes)


@pytest.mark.parametrize(("kind", "room"), [("text", 2_000), ("random", 0)])
def test_lz4_section_within_one_block_spanning_chunks_is_compressed_at_once(
    kind: str, room: int
) -> None:
    # Up to one 64 KiB frame block the section is gathered and compressed in one call: the
    # same frame, written back over the chunks, the overflow of random bytes as the tail.
    rng = random.Random(12)
    section = (
        rng.randbytes(16_000) if kind == "random" else b"text that repeats itself " * 640
    )
    sizes = [2048, 2048, 4096]
    assert_lz4_laid_over(section, [*sizes, 61 + len(section) + room - sum(sizes)])


def test_a_first_record_above_a_chunk_opens_the_batch_with_a_kept_doubled_size() -> None:
    # A 1000-byte record bounds a batch of ~1070 bytes: the batch opens with room for two such
    # records, a 4096-byte chunk (256 doubled four times), which the pool keeps and hands to the
    # next such batch, rather than a fresh buffer of the record's odd size per batch.
    acc, pool = make(memory=64 * CHUNK)
    value = b"v" * 1000
    seen = []
    for round_ in range(3):
        got = put(acc, round_ % PARTITIONS, value)
        assert isinstance(got, FutureRecordMetadata)
        (batch,) = drain_all(acc)
        assert [len(c) for c in batch.builder.chunks] == [16 * CHUNK]
        seen.append(batch.builder.chunks[0])
        books(acc, pool)
        batch.complete(0, -1)
        acc.deallocate(batch)
        assert pool.statistics().free_sized == 16 * CHUNK
    assert seen[0] is seen[1] is seen[2]


def test_opening_chunk_size_holds_two_records_within_the_batch_and_the_pool() -> None:
    kib16, mib32 = 16 << 10, 32 << 20
    assert opening_chunk_size(2048, 4092, mib32, kib16) == 8192  # two 4 KB records
    assert opening_chunk_size(2048, 4092, mib32, 4096) == 4096  # the batch holds one
    assert opening_chunk_size(2048, 4092, 6000, kib16) == 4096  # two would not fit the pool
    assert opening_chunk_size(2048, 9000, mib32, kib16) == 16384  # within batch_size
    assert opening_chunk_size(2048, 9000, 10_000, kib16) == 9000  # 16 KiB would not fit the pool
    assert opening_chunk_size(2048, 30_000, mib32, 1 << 20) == 65536  # two, the largest kept
    assert opening_chunk_size(2048, 40_000, mib32, 1 << 20) == 65536  # one: two is past it
    assert opening_chunk_size(2048, 40_000, 50_000, 1 << 20) == 40_000  # one: 64 KiB too many
    assert opening_chunk_size(2048, 100_000, mib32, 1 << 20) == 100_000  # never twice a big one
    assert opening_chunk_size(2048, 100_000, mib32, kib16) == 100_000  # above the largest kept
