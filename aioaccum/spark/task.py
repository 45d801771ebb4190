"""One Spark task of the ``aioaccum`` data source: its rows into Kafka through one producer.

``at_least_once``: the rows are sent and the task ends once every record is acknowledged; a
failed record fails the task, and Spark runs it again (the rows already sent are then sent
twice, as with Spark's own Kafka sink).

``exactly_once``: the rows go out in one transaction of ``f"{prefix}-{partition}"``, flushed
and prepared, never committed here: the driver commits in the writer's ``commit``. Starting
the producer fences every earlier attempt of the partition (the broker aborts what it left
open). In a stream the task then reads its partition's marker (:mod:`aioaccum.spark.markers`)
and, when this micro-batch is already committed, writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aioaccum.producer import Producer
from aioaccum.spark.arrow_rows import content_digest, produce_arrow
from aioaccum.spark.markers import (
    Marker,
    check_replay,
    group_of,
    must_write,
    read_marker,
)
from aioaccum.spark.rows import run_coroutine

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

    from aioaccum._core.batch import RecordMetadata
    from aioaccum._runtime.transactions import PreparedTransaction
    from aioaccum.spark.options import SinkOptions

__all__ = ["TaskResult", "write_partition"]

# Futures of calls already acknowledged are dropped once this many are held.
_KEEP_FUTURES = 64


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What one task did, as its commit message carries it to the driver."""

    partition: int
    records: int
    started: float
    """``time.time()`` when the task began (the driver's commit deadline counts from it)."""
    batch_id: int | None = None
    prepared: PreparedTransaction | None = None
    skipped: bool = False
    """Exactly-once streaming: the micro-batch was already committed for this partition."""


def write_partition(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    partition: int,
    batch_id: int | None,
) -> TaskResult:
    """Write one Spark partition's rows (``batch_id``: the micro-batch, ``None`` in a batch
    job); blocks until done. Raises what failed, which fails the task."""
    started = time.time()
    return run_coroutine(lambda: _write(options, batches, partition, batch_id, started))


async def _write(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    partition: int,
    batch_id: int | None,
    started: float,
) -> TaskResult:
    if options.guarantee == "at_least_once":
        async with Producer(config=options.config()) as producer:
            records, _ = await _pump(producer, batches, options.topic)
        return TaskResult(partition, records, started, batch_id)
    transactional_id = options.transactional_id(partition)
    producer = Producer(config=options.config(transactional_id))
    await producer.start()  # fences every earlier attempt of this partition
    try:
        marker: Marker | None = None
        if batch_id is not None:
            assert options.marker_topic is not None
            marker = await read_marker(transactional_id, options.marker_topic, options.settings())
            if not must_write(marker, batch_id, transactional_id):
                assert marker is not None
                rows, digest = await asyncio.to_thread(_digest_of, batches)
                check_replay(marker, digest, rows, transactional_id)
                return TaskResult(partition, 0, started, batch_id, skipped=True)
        producer.begin_transaction()
        records, digest = await _pump(producer, batches, options.topic)
        if batch_id is not None and records:
            assert options.marker_topic is not None
            offset = Marker(batch_id, digest).offset()
            await producer.send_offsets_to_transaction(
                {(options.marker_topic, 0): offset}, group_of(transactional_id)
            )
        prepared = await producer.prepare_transaction()
    finally:
        await producer.close()  # aborts the transaction unless it was prepared
    return TaskResult(partition, records, started, batch_id, prepared=prepared)


def _digest_of(batches: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    rows = digest = 0
    for batch in batches:
        rows += batch.num_rows
        digest = content_digest(batch, digest)
    return rows, digest


async def _pump(
    producer: Producer, batches: Iterator[pa.RecordBatch], topic: str | None
) -> tuple[int, int]:
    """Send every batch; returns the rows sent and their digest once all are acknowledged.

    The next batch is pulled from Spark in a thread while the current one is sent.
    """
    pending: list[asyncio.Future[Sequence[RecordMetadata]]] = []
    rows = digest = 0
    fetch = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
    try:
        while True:
            batch = await fetch
            if batch is None:
                break
            fetch = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
            pending.append(await produce_arrow(producer, batch, topic))
            rows += batch.num_rows
            digest = content_digest(batch, digest)
            if len(pending) > _KEEP_FUTURES:
                pending = _settled(pending)
    finally:
        if not fetch.done():
            await asyncio.wait({fetch})  # a thread cannot be cancelled: let it end first
    await producer.flush()
    for future in pending:
        await future  # raises the first failed record's error, which fails the task
    return rows, digest


def _settled(pending: list[asyncio.Future[Sequence[RecordMetadata]]]) -> list[
    asyncio.Future[Sequence[RecordMetadata]]
]:
    """The futures still open; raises the error of one that failed."""
    left = []
    for future in pending:
        if future.done():
            future.result()
        else:
            left.append(future)
    return left
