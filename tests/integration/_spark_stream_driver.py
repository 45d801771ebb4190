"""A Spark driver for the streaming tests of the aioaccum data source, run as a subprocess so
that a test can kill it with SIGKILL and start it again from its checkpoint.

    python _spark_stream_driver.py BOOTSTRAP INPUT_DIR CHECKPOINT TOPIC GUARANTEE PREFIX FAIL

Reads the JSON files of INPUT_DIR one per micro-batch, hash-partitions the rows by id into 2
Spark partitions (deterministic, so a replay puts the same rows in the same partition), and
writes them with format("aioaccum") until every file is processed (trigger availableNow).
FAIL=1: through ``format("aioaccum-failing")``, the first attempt of Spark partition 1 of every
micro-batch fails once the sink has half its rows in the topic, inside its open transaction
(local[2,4] retries it). Prints
"batch N" as each micro-batch ends.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator

import pyarrow as pa
from aiokafka import AIOKafkaConsumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

import aioaccum.spark
from aioaccum.spark.datasource import (
    AioAccumCommitMessage,
    AioAccumDataSource,
    AioAccumStreamWriter,
)
from aioaccum.spark.options import SinkOptions

WRITTEN_WITHIN_S = 30.0


def failing_once(
    bootstrap: str, topic: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The sink's rows, passed on; attempt 0 of partition 1 raises half-way, once the rows it
    passed are in the topic (in the sink's open transaction, as read_uncommitted shows), so
    that the failure aborts a transaction that really holds rows."""
    from pyspark import TaskContext

    context = TaskContext.get()
    fail = context is not None and context.partitionId() == 1 and context.attemptNumber() == 0
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
            raise RuntimeError("injected failure half-way through partition 1")


class FailingStreamWriter(AioAccumStreamWriter):
    """The ``aioaccum`` stream writer with :func:`failing_once` between Spark and the sink."""

    def __init__(self, options: SinkOptions, bootstrap: str, topic: str) -> None:
        super().__init__(options)
        self.bootstrap = bootstrap
        self.topic = topic

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AioAccumCommitMessage:
        return super().write(failing_once(self.bootstrap, self.topic, iterator))


class FailingSource(AioAccumDataSource):
    """``format("aioaccum-failing")``: the ``aioaccum`` source with :class:`FailingStreamWriter`."""

    @classmethod
    def name(cls) -> str:
        return "aioaccum-failing"

    def streamWriter(self, schema: StructType, overwrite: bool) -> FailingStreamWriter:
        options = super().streamWriter(schema, overwrite).options
        return FailingStreamWriter(
            options, str(options.properties["bootstrap.servers"]), str(options.topic)
        )


async def _end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return dict(await consumer.end_offsets(tps))
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


def main() -> None:
    bootstrap, input_dir, checkpoint, topic, guarantee, prefix, fail = sys.argv[1:8]
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("aioaccum-stream-driver")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    aioaccum.spark.register(spark)
    spark.dataSource.register(FailingSource)
    rows = (
        spark.readStream.schema("id long, key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
        .repartition(2, "id")
    )
    writer = (
        rows.select("key", "value")
        .writeStream.format("aioaccum-failing" if fail == "1" else "aioaccum")
        .option("checkpointLocation", checkpoint)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.linger.ms", "5")
        .option("delivery.guarantee", guarantee)
    )
    if guarantee == "exactly_once":
        writer = writer.option("transactional.id.prefix", prefix)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
