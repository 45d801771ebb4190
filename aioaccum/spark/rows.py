"""The part of the Spark sink that runs wherever records are sent: the driver or a Spark task.

Nothing here imports pyspark at module level, and the packer that Spark ships to the executors
for ``mode="driver"`` is built so that it needs only pyarrow there, not aioaccum.

Records travel as *chunks*: an Arrow batch of columns ``key``, ``value`` and, with headers,
``headers`` (``list<struct<key, value>>``, built from one binary column per header), which
:meth:`~aioaccum.Producer.send_arrow` encodes from its buffers, one call and one future per
chunk. :func:`produce` takes a blocking iterator of chunks (a Spark local iterator, or a task's
Arrow input), pulls the next chunk in a worker thread while the current one is being sent, and
counts each chunk's outcome in a :class:`Tally` through a done-callback, so that no future
outlives its records. A chunk with a record too large goes record by record instead, so that
only that record fails.

With ``exactly_once=True`` each Spark partition's records go out in a transaction of their own
(:func:`produce_transaction`): the producer's transactional id is the write's prefix and the
partition index, so that its start fences any earlier attempt of the same partition (the broker
aborts what that attempt left open). The transaction is flushed and *prepared*, never committed
here: only the driver commits, once the whole Spark job has succeeded. A task cannot tell a
complete input from one cut off by a failure upstream (Spark 4.3 can end a Python step's Arrow
input early, without an exception, when an earlier Python step fails), so a task that committed
when its input ended could commit a partial attempt.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from aioaccum._core.batch import RecordMetadata
from aioaccum._core.futures import ThreadRecordFuture
from aioaccum.errors import (
    AioAccumError,
    InvalidTxnStateError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    TransactionFatalError,
)
from aioaccum.producer import Producer

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

    from aioaccum._runtime.transactions import PreparedTransaction

__all__ = [
    "RESULT_DDL",
    "Chunk",
    "OnError",
    "Tally",
    "chunk_of",
    "make_packer",
    "prepared_of",
    "produce",
    "produce_from_thread",
    "produce_partitions",
    "produce_transaction",
    "run_coroutine",
    "run_task",
    "unpack",
]

OnError = Literal["raise", "collect"]
Column = list[bytes | None]
Headers = list[tuple[str, bytes | None]]
T = TypeVar("T")

# One row per Spark task in mode="executors"; the driver adds them up. ``prepared`` is the
# task's PreparedTransaction, pickled (exactly_once=True), null when there is none.
RESULT_DDL = (
    "task int, records long, bytes long, failures long, first_error string, fatal boolean, "
    "kafka_partitions array<int>, kafka_counts array<long>, prepared binary"
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Up to one Arrow batch of records, in :meth:`~aioaccum.Producer.send_arrow`'s columns."""

    batch: pa.RecordBatch
    payload_bytes: int  # key and value bytes
    task: int = -1

    def __len__(self) -> int:
        return int(self.batch.num_rows)


def chunk_of(batch: pa.RecordBatch, header_names: Sequence[str], task: int = -1) -> Chunk:
    """Columns ``key``, ``value``, ``h0``… (all binary) of ``batch`` as a chunk: ``h0``… become
    one ``headers`` column, each row's headers named ``header_names`` in order."""
    import pyarrow as pa

    keys, values = batch.column(0), batch.column(1)
    columns = {"key": keys, "value": values}
    if header_names:
        columns["headers"] = _headers_column(
            [batch.column(2 + i) for i in range(len(header_names))], header_names
        )
    return Chunk(
        batch=pa.record_batch(columns),
        payload_bytes=_data_bytes(keys) + _data_bytes(values),
        task=task,
    )


def _headers_column(columns: Sequence[pa.Array], names: Sequence[str]) -> pa.Array:
    """One ``list<struct<key: string, value: binary>>`` column: row ``r`` holds
    ``(names[j], columns[j][r])`` for each ``j``, built with Arrow kernels, not per row."""
    import numpy as np
    import pyarrow as pa

    rows, width = len(columns[0]), len(names)
    # Row-major order of the column-major concatenation: header j of row r is at j * rows + r.
    order = (np.arange(width) * rows)[None, :] + np.arange(rows)[:, None]
    values = pa.concat_arrays([c.cast(pa.binary()) for c in columns]).take(
        pa.array(order.reshape(-1))
    )
    keys = pa.DictionaryArray.from_arrays(
        pa.array(np.tile(np.arange(width, dtype=np.int32), rows)), pa.array(list(names))
    ).cast(pa.string())
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, entries)


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

    def chunk_done(
        self, count: int, payload_bytes: int
    ) -> Callable[[asyncio.Future[Sequence[RecordMetadata]]], None]:
        """A done-callback for the one future of a chunk's ``count`` records (send_arrow's).

        When it fails, every record of the chunk counts as failed: the future names the first
        error only, and some of the records may have been delivered.
        """

        def done(future: asyncio.Future[Sequence[RecordMetadata]]) -> None:
            self.outstanding -= 1
            if future.cancelled():
                error: BaseException | None = asyncio.CancelledError("the chunk was cancelled")
            else:
                error = future.exception()
            if error is not None:
                self.fail(error, fatal=False)
                self.failures += count - 1
                return
            self.records += count
            self.bytes += payload_bytes
            counts = self.per_partition
            for partition, in_partition in partition_counts(future.result()).items():
                counts[partition] = counts.get(partition, 0) + in_partition

        return done

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


def partition_counts(results: Sequence[RecordMetadata]) -> dict[int, int]:
    """How many records of ``results`` went to each partition (send_arrow's result counts
    them from its batches)."""
    counted = getattr(results, "partition_counts", None)
    if counted is not None:
        return cast("dict[int, int]", counted())
    counts: dict[int, int] = {}
    for md in results:
        counts[md.partition] = counts.get(md.partition, 0) + 1
    return counts


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
    """Each record of a chunk: key, value and headers (for the record-by-record path)."""
    batch = chunk.batch
    keys = batch.column(0).to_pylist()
    values = batch.column(1).to_pylist()
    if batch.num_columns < 3:
        for key, value in zip(keys, values, strict=True):
            yield key, value, None
        return
    for key, value, headers in zip(keys, values, batch.column(2).to_pylist(), strict=True):
        yield key, value, [(h["key"], h["value"]) for h in headers]


async def _send_chunk(producer: Producer, topic: str, chunk: Chunk, tally: Tally) -> None:
    if tally.stop:
        return
    try:
        future = await producer.send_arrow(chunk.batch, topic)
    except RecordTooLargeError:
        # Only the records too large fail: the chunk goes record by record, refusing them.
        await _send_rows(producer, topic, chunk, tally)
        return
    except AioAccumError as exc:
        _refused(tally, exc)
        return
    tally.sent += len(chunk)
    tally.outstanding += 1
    future.add_done_callback(tally.chunk_done(len(chunk), chunk.payload_bytes))


async def _send_rows(producer: Producer, topic: str, chunk: Chunk, tally: Tally) -> None:
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


def produce_from_thread(
    chunks: Iterator[Chunk],
    topic: str,
    settings: Mapping[str, Any],
    tally: Tally,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> None:
    """:func:`produce`, run to its end from a thread without an event loop (the driver's)."""
    run_coroutine(lambda: produce(chunks, topic, settings, tally, on_chunk))


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
        await _pump(producer, chunks, topic, tally, on_chunk)
    await _run_callbacks(tally)


async def produce_transaction(
    chunks: Iterator[Chunk],
    topic: str,
    settings: Mapping[str, Any],
    tally: Tally,
    transactional_id: str,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> PreparedTransaction | None:
    """:func:`produce` inside one transaction of ``transactional_id``, prepared, not committed.

    Starting the producer fences every earlier producer of ``transactional_id`` (an earlier
    attempt of the same Spark partition) and aborts its open transaction. Once every chunk is
    sent, the transaction is flushed and prepared (:meth:`~aioaccum.Producer.prepare_transaction`)
    and the producer closed without ending it; the caller hands the result to the driver, the
    only one that commits.

    Returns:
        The prepared transaction (``empty`` when no record was sent), or ``None`` when it
        cannot commit (a record failed): closing the producer then aborted it. Whenever the
        tally counts a failure, the caller must commit nothing of the write.

    Raises:
        ProducerFencedError: A later producer took ``transactional_id`` (a newer attempt of
            the partition) or the broker aborted the transaction after
            ``transaction_timeout_ms``: this attempt must not be reported as done, and a new
            one may succeed.
    """
    failed_before = tally.failures
    prepared: PreparedTransaction | None = None
    producer = Producer(**settings, transactional_id=transactional_id)
    await producer.start()
    try:
        producer.begin_transaction()
        await _pump(producer, chunks, topic, tally, on_chunk)
        # Even after a failure: a fenced producer must raise (below), not count a failure.
        try:
            prepared = await producer.prepare_transaction()
        except ProducerFencedError:
            raise
        except (TransactionAbortableError, InvalidTxnStateError, TransactionFatalError) as exc:
            # A record failed (its own outcome names the cause), or the coordinator refused.
            await _run_callbacks(tally)
            if tally.failures == failed_before:
                tally.fail(exc, fatal=isinstance(exc, TransactionFatalError))
            tally.stop = True
    finally:
        await producer.close()  # aborts the transaction unless it was prepared
    await _run_callbacks(tally)
    return prepared


async def produce_partitions(
    chunks: Iterator[Chunk],
    topic: str,
    settings: Mapping[str, Any],
    tally: Tally,
    transactional_id_prefix: str,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> list[tuple[int, PreparedTransaction]]:
    """``mode="driver"`` with ``exactly_once=True``: each Spark partition's chunks (they come
    partition by partition) in a transaction of ``f"{transactional_id_prefix}-{partition}"``,
    each prepared, none committed.

    Stops at the first failure (the tally says which); returns each partition's index and
    its prepared transaction, until then.
    """
    groups = itertools.groupby(chunks, key=_task_of)
    prepared: list[tuple[int, PreparedTransaction]] = []
    while not tally.stop:
        group = await asyncio.to_thread(next, groups, None)
        if group is None:
            break
        task, partition_chunks = group
        done = await produce_transaction(
            partition_chunks,
            topic,
            settings,
            tally,
            f"{transactional_id_prefix}-{task}",
            on_chunk,
        )
        if done is not None:
            prepared.append((task, done))
    return prepared


def _task_of(chunk: Chunk) -> int:
    return chunk.task


async def _pump(
    producer: Producer,
    chunks: Iterator[Chunk],
    topic: str,
    tally: Tally,
    on_chunk: Callable[[Chunk], None] | None,
) -> None:
    """Send each chunk of ``chunks`` until they end or the tally says stop."""
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


async def _run_callbacks(tally: Tally) -> None:
    """Let the done-callbacks of ended futures run (they are queued behind close())."""
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
    transactional_id_prefix: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """One Spark task of ``mode="executors"``: send its rows, yield one row of counts.

    Kafka failures never fail the task (Spark would run it again and send its records twice);
    they are counted and the driver decides. With ``transactional_id_prefix``, the rows go out
    in the partition's transaction (:func:`produce_transaction`), prepared for the driver to
    commit, and the row names it; a fenced transaction does fail the task, so that Spark runs
    the partition again (the new attempt fences whatever took over).
    """
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    task = -1 if context is None else context.partitionId()
    tally = Tally(on_error)
    chunks = (chunk_of(batch, header_names) for batch in batches if batch.num_rows)
    prepared: PreparedTransaction | None = None
    if transactional_id_prefix is None:
        run_coroutine(lambda: produce(chunks, topic, settings, tally))
    else:
        if context is None:
            raise RuntimeError("exactly_once=True: run_task runs only inside a Spark task")
        transactional_id = f"{transactional_id_prefix}-{task}"
        prepared = run_coroutine(
            lambda: produce_transaction(chunks, topic, settings, tally, transactional_id)
        )
    counts = sorted(tally.per_partition.items())
    yield pa.RecordBatch.from_pylist(
        [
            {
                "task": task,
                "records": tally.records,
                "bytes": tally.bytes,
                "failures": tally.failures,
                "first_error": tally.first_error,
                "fatal": tally.fatal,
                "kafka_partitions": [p for p, _ in counts],
                "kafka_counts": [n for _, n in counts],
                "prepared": None if prepared is None else pickle.dumps(prepared),
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
                ("prepared", pa.binary()),
            ]
        ),
    )


def prepared_of(row: Any) -> PreparedTransaction | None:
    """The prepared transaction a task's row of counts (a Spark ``Row``) names, if any."""
    from aioaccum._runtime.transactions import PreparedTransaction

    blob = row["prepared"]
    if blob is None:
        return None
    # Made by run_task in this job's own tasks, which Spark already trusts with pickles.
    prepared = pickle.loads(blob)
    if not isinstance(prepared, PreparedTransaction):
        raise TypeError(f"a task handed back {type(prepared).__name__}, not a PreparedTransaction")
    return prepared
