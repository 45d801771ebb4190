"""The part of the Spark sink that runs wherever records are sent: the driver or a Spark task.

Nothing here imports pyspark at module level, and the packer that Spark ships to the executors
for ``mode="driver"`` is built so that it needs only pyarrow there, not aioaccum.

Records travel as *chunks*: the key column, the value column and one column per header, each a
list of ``bytes | None`` of the same length. :func:`produce` takes a blocking iterator of chunks
(a Spark local iterator, or a task's Arrow input), pulls the next chunk in a worker thread while
the current one is being sent, and counts every record's outcome in a :class:`Tally` through a
done-callback, so that no future outlives its record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from aioaccum._core.batch import RecordMetadata
from aioaccum._core.futures import ThreadRecordFuture
from aioaccum.errors import AioAccumError, RecordTooLargeError
from aioaccum.producer import Producer
from aioaccum.sync import SyncProducer

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

__all__ = [
    "RESULT_DDL",
    "Chunk",
    "OnError",
    "Tally",
    "chunk_of",
    "make_packer",
    "produce",
    "produce_from_thread",
    "run_coroutine",
    "run_task",
    "unpack",
]

OnError = Literal["raise", "collect"]
Column = list[bytes | None]
Headers = list[tuple[str, bytes | None]]
T = TypeVar("T")

# One row per Spark task in mode="executors"; the driver adds them up.
RESULT_DDL = (
    "task int, records long, bytes long, failures long, first_error string, fatal boolean, "
    "kafka_partitions array<int>, kafka_counts array<long>"
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Up to one Arrow batch of records, already bytes."""

    keys: Column
    values: Column
    header_names: tuple[str, ...]
    header_columns: tuple[Column, ...]
    payload_bytes: int  # key and value bytes
    task: int = -1

    def __len__(self) -> int:
        return len(self.values)


def chunk_of(batch: pa.RecordBatch, header_names: Sequence[str], task: int = -1) -> Chunk:
    """Columns ``key``, ``value``, ``h0``… (all binary) of ``batch`` as Python lists."""
    keys, values = batch.column(0), batch.column(1)
    return Chunk(
        keys=keys.to_pylist(),
        values=values.to_pylist(),
        header_names=tuple(header_names),
        header_columns=tuple(batch.column(2 + i).to_pylist() for i in range(len(header_names))),
        payload_bytes=_data_bytes(keys) + _data_bytes(values),
        task=task,
    )


def _data_bytes(column: pa.Array) -> int:
    """Bytes of the values of a binary column, without offsets or validity bits."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    total = pc.sum(pc.binary_length(column)).as_py()
    return 0 if total is None else int(total)


def unpack(blob: bytes, header_names: Sequence[str], task: int = -1) -> Chunk:
    """The chunk inside one blob made by :func:`make_packer`'s function."""
    import pyarrow as pa

    with pa.ipc.open_stream(blob) as reader:
        batch = reader.read_next_batch()
    return chunk_of(batch, header_names, task)


def make_packer(
    target_bytes: int,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function turning each Arrow batch into rows of one IPC blob each.

    A blob holds at most about ``target_bytes`` of records (one record when a record alone is
    larger), so the driver never holds more than a few of them at once. The function is nested
    so that Spark pickles it by value: executors need pyarrow, not aioaccum.
    """

    def pack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        task = -1 if context is None else context.partitionId()
        for batch in batches:
            rows = batch.num_rows
            if rows == 0:
                continue
            # Even pieces: ceil(bytes / target) of them, not full ones and a sliver.
            pieces = max(1, -(-batch.nbytes // target_bytes))
            step = -(-rows // pieces)
            for start in range(0, rows, step):
                piece = batch.slice(start, step)
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, piece.schema) as writer:
                    writer.write_batch(piece)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([task], pa.int32()),
                        pa.array([piece.num_rows], pa.int64()),
                        pa.array([sink.getvalue().to_pybytes()], pa.binary()),
                    ],
                    names=["task", "rows", "blob"],
                )

    return pack


@dataclass(slots=True)
class Tally:
    """What happened to the records of one producer: counted as their futures end.

    ``stop`` turns true at the first failure when ``on_error == "raise"``, and at a failure
    that dooms every later record (``fatal``) whatever ``on_error`` says.
    """

    on_error: OnError = "raise"
    records: int = 0
    bytes: int = 0
    failures: int = 0
    first_error: str | None = None
    fatal: bool = False
    stop: bool = False
    sent: int = 0
    outstanding: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)

    def fail(self, exc: BaseException, *, fatal: bool) -> None:
        self.failures += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"
        if fatal:
            self.fatal = True
        if fatal or self.on_error == "raise":
            self.stop = True

    def on_done(self, future: asyncio.Future[RecordMetadata]) -> None:
        self.outstanding -= 1
        if future.cancelled():
            self.fail(asyncio.CancelledError("the record's future was cancelled"), fatal=False)
            return
        exc = future.exception()
        if exc is not None:
            self.fail(exc, fatal=False)
            return
        self.delivered(future.result())

    def settle(self, futures: Iterable[ThreadRecordFuture]) -> None:
        """Count the outcome of each record, waiting for those still on their way (delivery
        timeout bounds each)."""
        for future in futures:
            try:
                md = future.result()
            except AioAccumError as exc:
                self.fail(exc, fatal=False)
            else:
                self.delivered(md)

    def delivered(self, md: RecordMetadata) -> None:
        self.records += 1
        # A null key or value reports -1.
        self.bytes += max(md.serialized_key_size, 0) + max(md.serialized_value_size, 0)
        counts = self.per_partition
        counts[md.partition] = counts.get(md.partition, 0) + 1


def _refused(tally: Tally, exc: AioAccumError) -> bool:
    """Count a record ``send`` refused; whether to stop sending the chunk."""
    if isinstance(exc, RecordTooLargeError):
        tally.fail(exc, fatal=False)
        return False
    # Metadata that never came, a pool that never freed, a closed producer: the next record
    # would meet the same fate after the same wait.
    tally.fail(exc, fatal=True)
    return True


def _rows(chunk: Chunk) -> Iterator[tuple[bytes | None, bytes | None, Headers | None]]:
    """Each record of a chunk: key, value and headers."""
    names = chunk.header_names
    columns = chunk.header_columns
    for i, (key, value) in enumerate(zip(chunk.keys, chunk.values, strict=True)):
        headers = [(n, c[i]) for n, c in zip(names, columns, strict=True)] if names else None
        yield key, value, headers


async def _send_chunk(producer: Producer, topic: str, chunk: Chunk, tally: Tally) -> None:
    send = producer.send
    done = tally.on_done
    for key, value, headers in _rows(chunk):
        if tally.stop:
            return
        try:
            future = await send(topic, value, key, headers=headers)
        except AioAccumError as exc:
            if _refused(tally, exc):
                return
            continue
        tally.sent += 1
        tally.outstanding += 1
        future.add_done_callback(done)


def _send_chunk_from_thread(
    producer: SyncProducer, topic: str, chunk: Chunk, tally: Tally
) -> list[ThreadRecordFuture]:
    send = producer.send
    futures: list[ThreadRecordFuture] = []
    for key, value, headers in _rows(chunk):
        if tally.stop:
            break
        try:
            futures.append(send(topic, value, key, headers=headers))
        except AioAccumError as exc:
            if _refused(tally, exc):
                break
    tally.sent += len(futures)
    return futures


def produce_from_thread(
    chunks: Iterator[Chunk],
    topic: str,
    settings: Mapping[str, Any],
    tally: Tally,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> None:
    """:func:`produce` with a :class:`~aioaccum.sync.SyncProducer`: this thread takes each
    chunk and appends its records itself while the producer's loop thread sends, and counts
    a chunk's outcomes once the next chunk is appended (by then most have arrived)."""
    producer = SyncProducer(**settings)
    previous: list[ThreadRecordFuture] = []
    try:
        for chunk in chunks:
            futures = _send_chunk_from_thread(producer, topic, chunk, tally)
            tally.settle(previous)
            previous = futures
            if on_chunk is not None:
                on_chunk(chunk)
            if tally.stop:
                break
    finally:
        producer.close()  # delivers what it holds, so the last outcomes are in
        tally.settle(previous)


async def produce(
    chunks: Iterator[Chunk],
    topic: str,
    settings: Mapping[str, Any],
    tally: Tally,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> None:
    """Send every chunk through one producer, then close it (which delivers what it holds).

    The next chunk is fetched in a thread while the current one is sent, so Spark's transfer
    and the producer overlap; at most two chunks are held at a time. Errors from ``chunks``
    (a failed Spark job) propagate after the producer closed.
    """
    async with Producer(**settings) as producer:
        pending: asyncio.Future[Chunk | None] | None = None
        try:
            pending = asyncio.ensure_future(asyncio.to_thread(next, chunks, None))
            while True:
                chunk = await pending
                pending = None
                if chunk is None:
                    break
                pending = asyncio.ensure_future(asyncio.to_thread(next, chunks, None))
                await _send_chunk(producer, topic, chunk, tally)
                if on_chunk is not None:
                    on_chunk(chunk)
                if tally.stop:
                    break
        finally:
            if pending is not None:
                # A thread cannot be cancelled: let the fetch end before the iterator is dropped.
                await asyncio.wait({pending})
                if not pending.cancelled():
                    pending.exception()
    # Callbacks of the last futures are queued behind close(); let them run.
    for _ in range(1000):
        if tally.outstanding <= 0:
            break
        await asyncio.sleep(0)


def run_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a fresh event loop (uvloop when installed).

    Safe to call where a loop already runs in this thread (a notebook): the coroutine then
    runs on a loop of its own in a helper thread, and this call blocks until it ends.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(factory)
    import threading

    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(_run_here(factory))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name="aioaccum-spark-loop", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _run_here(factory: Callable[[], Awaitable[T]]) -> T:
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass

    async def main() -> T:
        return await factory()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


def run_task(
    batches: Iterable[pa.RecordBatch],
    topic: str,
    settings: Mapping[str, Any],
    header_names: Sequence[str],
    on_error: OnError,
) -> Iterator[pa.RecordBatch]:
    """One Spark task of ``mode="executors"``: send its rows, yield one row of counts.

    Kafka failures never fail the task (Spark would run it again and send its records twice);
    they are counted and the driver decides.
    """
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    tally = Tally(on_error)
    chunks = (chunk_of(batch, header_names) for batch in batches if batch.num_rows)
    run_coroutine(lambda: produce(chunks, topic, settings, tally))
    counts = sorted(tally.per_partition.items())
    yield pa.RecordBatch.from_pylist(
        [
            {
                "task": -1 if context is None else context.partitionId(),
                "records": tally.records,
                "bytes": tally.bytes,
                "failures": tally.failures,
                "first_error": tally.first_error,
                "fatal": tally.fatal,
                "kafka_partitions": [p for p, _ in counts],
                "kafka_counts": [n for _, n in counts],
            }
        ],
        schema=pa.schema(
            [
                ("task", pa.int32()),
                ("records", pa.int64()),
                ("bytes", pa.int64()),
                ("failures", pa.int64()),
                ("first_error", pa.string()),
                ("fatal", pa.bool_()),
                ("kafka_partitions", pa.list_(pa.int32())),
                ("kafka_counts", pa.list_(pa.int64())),
            ]
        ),
    )
