"""``format("aioaccum")``: a PySpark data source writing DataFrames and streams to Kafka.

::

    import aioaccum.spark
    aioaccum.spark.register(spark)
    df.write.format("aioaccum").option("kafka.bootstrap.servers", "b1:9092") \\
        .option("topic", "events").save()

The columns and options are those of Spark's own Kafka sink (:mod:`aioaccum.spark.options`),
plus ``delivery.guarantee`` (``at_least_once`` or ``exactly_once``). Spark calls ``writer`` or
``streamWriter`` on the driver before any task starts, so a bad option or column fails the
write there; each task then writes its partition through one producer
(:mod:`aioaccum.spark.task`) and hands a :class:`AioAccumCommitMessage` to the driver, where
``commit`` ends the prepared transactions (exactly-once) or does nothing (at-least-once).

This module imports pyspark; ``import aioaccum.spark`` does not import it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from aioaccum._runtime.transactions import (
    PreparedTransaction,
    abort_transactional_ids,
    commit_prepared,
)
from aioaccum.errors import AioAccumError, ConfigError, TransactionError
from aioaccum.spark.markers import Marker, SparkReplayError, read_marker
from aioaccum.spark.options import SinkOptions, check_columns
from aioaccum.spark.rows import run_coroutine
from aioaccum.spark.task import TaskResult, write_partition
from aioaccum.spark.transactions import CommitFailed, Transactions

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["AioAccumCommitMessage", "AioAccumDataSource", "register"]

# Micro-batch id of the running task: Spark sets it on every job of a micro-batch
# (MicroBatchExecution.BATCH_ID_KEY).
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_INVALID_TRANSACTION_TIMEOUT = 50
_checked_timeouts: set[tuple[str, int]] = set()


def register(spark: SparkSession) -> None:
    """Make ``format("aioaccum")`` known to ``spark`` (once per session is enough)."""
    spark.dataSource.register(AioAccumDataSource)


@dataclass(frozen=True)
class AioAccumCommitMessage(WriterCommitMessage):
    """One task's outcome, for the driver's ``commit`` or ``abort``."""

    result: TaskResult


class AioAccumDataSource(DataSource):
    """The ``aioaccum`` data source: write-only, batch and streaming."""

    @classmethod
    def name(cls) -> str:
        return "aioaccum"

    def writer(self, schema: StructType, overwrite: bool) -> AioAccumBatchWriter:
        return AioAccumBatchWriter(_checked(self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> AioAccumStreamWriter:
        return AioAccumStreamWriter(_checked(self.options, schema, overwrite, streaming=True))


def _checked(
    raw: Any, schema: StructType, overwrite: bool, *, streaming: bool
) -> SinkOptions:
    if overwrite and not streaming:
        raise ConfigError(
            "the aioaccum sink appends records to Kafka topics and cannot overwrite them: "
            "use .mode('append')"
        )
    options = SinkOptions.parse(dict(raw))
    check_columns(schema, options, streaming=streaming)
    if options.guarantee == "exactly_once":
        _check_timeout(options)
    return options


def _check_timeout(options: SinkOptions) -> None:
    """Whether the brokers take the transaction timeout (their ``transaction.max.timeout.ms``).

    InitProducerId with an id of the prefix that no task uses, so that nothing open is
    aborted: Spark also builds the writer on the driver before each micro-batch's commit.
    """
    timeout = options.transaction_timeout_ms
    key = (options.properties["bootstrap.servers"], timeout)
    if key in _checked_timeouts:
        return
    settings = options.settings()
    settings["transaction_timeout_ms"] = timeout
    check_id = f"{options.prefix}-timeout-check"
    try:
        run_coroutine(lambda: abort_transactional_ids([check_id], **settings))
    except TransactionError as exc:
        if exc.errno != _INVALID_TRANSACTION_TIMEOUT:
            raise
        raise ConfigError(
            f"delivery.guarantee=exactly_once: the brokers refuse kafka.transaction.timeout.ms="
            f"{timeout}, above their transaction.max.timeout.ms (900000 unless changed). A "
            "transaction stays open from a task's first row until the driver commits the job "
            "or micro-batch; pass a timeout the brokers allow, or raise their "
            "transaction.max.timeout.ms"
        ) from exc
    _checked_timeouts.add(key)


def _task() -> tuple[int, int | None]:
    """The running task's partition and micro-batch id (``None`` outside a stream)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the aioaccum sink's write() runs only inside a Spark task")
    batch = context.getLocalProperty(_BATCH_ID_PROPERTY)
    return context.partitionId(), None if batch is None else int(batch)


def _results(messages: list[WriterCommitMessage | None]) -> list[TaskResult]:
    results = []
    for message in messages:
        if message is None:
            continue  # a task that failed
        if not isinstance(message, AioAccumCommitMessage):
            raise TypeError(f"a task handed back {type(message).__name__}, not its outcome")
        results.append(message.result)
    return results


class AioAccumBatchWriter(DataSourceArrowWriter):
    """``df.write.format("aioaccum")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AioAccumCommitMessage:
        partition, _ = _task()
        return AioAccumCommitMessage(write_partition(self.options, iterator, partition, None))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        options = self.options
        if options.guarantee != "exactly_once":
            return
        results = _results(messages)
        started = min((r.started for r in results), default=time.time())
        assert options.prefix is not None
        txns = Transactions(
            options.prefix,
            {**options.settings(), "transaction_timeout_ms": options.transaction_timeout_ms},
            time.monotonic() - max(time.time() - started, 0.0),
        )
        txns.partitions = len(messages)
        txns.prepared = [(r.partition, r.prepared) for r in results if r.prepared is not None]
        try:
            txns.commit()
        except CommitFailed as exc:
            txns.abort_after(exc)
            raise

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort_all(self.options, len(messages))


def _abort_all(options: SinkOptions, partitions: int) -> None:
    """Abort what every partition's transactional id has open (a task that failed may have
    left its transaction open; a later attempt's would be fenced anyway)."""
    if options.guarantee != "exactly_once" or not partitions:
        return
    ids = [options.transactional_id(i) for i in range(partitions)]
    settings = options.settings()
    run_coroutine(lambda: abort_transactional_ids(ids, **settings))


class AioAccumStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("aioaccum")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AioAccumCommitMessage:
        partition, batch_id = _task()
        if batch_id is None:
            raise RuntimeError(
                f"Spark set no {_BATCH_ID_PROPERTY} for this streaming task; the exactly-once "
                "markers need the micro-batch id"
            )
        return AioAccumCommitMessage(write_partition(self.options, iterator, partition, batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        options = self.options
        if options.guarantee != "exactly_once":
            return
        results = _results(messages)
        for result in results:
            if result.batch_id != batchId:
                raise SparkReplayError(
                    f"partition {result.partition} wrote micro-batch {result.batch_id}, but "
                    f"Spark commits batch {batchId}; nothing of batch {batchId} was committed"
                )
        prepared = sorted(
            (r.partition, r.prepared)
            for r in results
            if r.prepared is not None and not r.prepared.empty
        )
        run_coroutine(lambda: _commit_batch(options, [p for _, p in prepared], batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort_all(self.options, len(messages))


async def _commit_batch(
    options: SinkOptions, prepared: list[PreparedTransaction], batch_id: int
) -> None:
    """Commit a micro-batch's prepared transactions. One that cannot be committed is checked
    against its marker: committed already (Spark calls ``commit`` again for a batch whose
    first commit ended before its checkpoint did) is fine; anything else raises, and the
    query fails and replays the batch, whose committed partitions are then skipped."""
    settings = options.settings()
    left = list(prepared)
    while left:
        done: list[PreparedTransaction] = []
        try:
            await commit_prepared(left, on_committed=done.append, **settings)
            return
        except AioAccumError as exc:
            failed = left[len(done)]
            assert options.marker_topic is not None
            marker = await read_marker(failed.transactional_id, options.marker_topic, settings)
            if marker is None or marker.batch_id != batch_id:
                raise SparkReplayError(
                    f"committing micro-batch {batch_id} failed for {failed.transactional_id!r} "
                    f"({exc}); its marker says {_said(marker)}. {len(done)} partition(s) "
                    "before it were committed; the query stops, and its restart replays the "
                    "batch: the partitions committed are skipped, the others written again. "
                    "A prepared transaction is aborted when it stays open longer than "
                    f"kafka.transaction.timeout.ms={options.transaction_timeout_ms}"
                ) from exc
            left = left[len(done) + 1 :]


def _said(marker: Marker | None) -> str:
    return "nothing committed yet" if marker is None else f"batch {marker.batch_id}"
