"""``format("aioaccum-failing")``: the ``aioaccum`` data source with a failure injected into
one task, inside the sink, after the rows it passed on are in the topic.

Between Spark and the sink, attempt 0 of Spark partition 1 passes half its rows on, waits until
the sink has them in the topic (inside its open transaction for ``exactly_once``, as a
read_uncommitted consumer shows), then raises: the task fails mid-partition with rows really
written. Spark retries the task where the master allows it (``local[2,4]``) and fails the job
where it does not (``local[2]``).

:func:`register` makes the classes travel to the Python workers by value (the workers cannot
import a test module).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from aiokafka import AIOKafkaConsumer, TopicPartition
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from aioaccum.spark.datasource import (
    AioAccumBatchWriter,
    AioAccumCommitMessage,
    AioAccumDataSource,
    AioAccumStreamWriter,
)

WRITTEN_WITHIN_S = 30.0
FAILING_PARTITION = 1


def register(spark: SparkSession) -> None:
    """Register ``format("aioaccum-failing")`` (after ``aioaccum.spark.register``)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark.dataSource.register(FailingSource)


def failing_once(
    bootstrap: str, topic: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The sink's rows, passed on; attempt 0 of partition 1 raises half-way, once the rows it
    passed are in the topic."""
    from pyspark import TaskContext

    context = TaskContext.get()
    fail = (
        context is not None
        and context.partitionId() == FAILING_PARTITION
        and context.attemptNumber() == 0
    )
    held = list(batches)
    total = sum(b.num_rows for b in held)
    starts = asyncio.run(_end_offsets(bootstrap, topic)) if fail else {}
    passed = 0
    sent: set[bytes] = set()
    for batch in held:
        yield batch
        passed += batch.num_rows
        sent.update(v.encode() for v in batch.column("value").to_pylist())
        if fail and passed * 2 >= total and total:
            # The sink pulls the next rows in a thread while its loop sends these.
            asyncio.run(_until_written(bootstrap, topic, starts, sent))
            raise RuntimeError(f"injected failure half-way through partition {FAILING_PARTITION}")


class FailingBatchWriter(AioAccumBatchWriter):
    """The ``aioaccum`` batch writer with :func:`failing_once` between Spark and the sink."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AioAccumCommitMessage:
        return super().write(failing_once(*_where(self), iterator))


class FailingStreamWriter(AioAccumStreamWriter):
    """The ``aioaccum`` stream writer with :func:`failing_once` between Spark and the sink."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AioAccumCommitMessage:
        return super().write(failing_once(*_where(self), iterator))


def _where(writer: AioAccumBatchWriter | AioAccumStreamWriter) -> tuple[str, str]:
    options = writer.options
    assert options.topic is not None, "the failing source needs the topic option"
    return str(options.properties["bootstrap.servers"]), options.topic


class FailingSource(AioAccumDataSource):
    """``format("aioaccum-failing")``."""

    @classmethod
    def name(cls) -> str:
        return "aioaccum-failing"

    def writer(self, schema: StructType, overwrite: bool) -> FailingBatchWriter:
        return FailingBatchWriter(super().writer(schema, overwrite).options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FailingStreamWriter:
        return FailingStreamWriter(super().streamWriter(schema, overwrite).options)


async def _end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends: dict[TopicPartition, Any] = await consumer.end_offsets(tps)
        return {tp: int(offset) for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def _until_written(
    bootstrap: str, topic: str, starts: dict[TopicPartition, int], values: set[bytes]
) -> None:
    """Waits (at most WRITTEN_WITHIN_S) until every one of ``values`` is in the topic past
    ``starts``, as read_uncommitted shows them."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_uncommitted"
    )
    await consumer.start()
    try:
        consumer.assign(list(starts))
        for tp, offset in starts.items():
            consumer.seek(tp, offset)
        missing = set(values)
        deadline = time.monotonic() + WRITTEN_WITHIN_S
        while missing:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(missing)} of {len(values)} rows sent by the sink were not in the "
                    f"topic within {WRITTEN_WITHIN_S} s"
                )
            for records in (await consumer.getmany(timeout_ms=200)).values():
                missing.difference_update(r.value for r in records)
    finally:
        await consumer.stop()
