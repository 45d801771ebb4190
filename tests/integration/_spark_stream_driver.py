"""A Spark driver for the streaming tests of the aioaccum data source, run as a subprocess so
that a test can kill it with SIGKILL and start it again from its checkpoint.

    python _spark_stream_driver.py BOOTSTRAP INPUT_DIR CHECKPOINT TOPIC GUARANTEE PREFIX FAIL

Reads the JSON files of INPUT_DIR one per micro-batch, hash-partitions the rows by id into 2
Spark partitions (deterministic, so a replay puts the same rows in the same partition), and
writes them with format("aioaccum") until every file is processed (trigger availableNow).
FAIL=1: the first attempt of Spark partition 1 of every micro-batch fails after sending half
its rows (local[2,4] retries it). Prints "batch N" as each micro-batch ends.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

import aioaccum.spark


def failing_once(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Passes rows on; attempt 0 of partition 1 raises after half of them went downstream."""
    from pyspark import TaskContext

    context = TaskContext.get()
    fail = context is not None and context.partitionId() == 1 and context.attemptNumber() == 0
    held = list(batches)
    total = sum(b.num_rows for b in held)
    passed = 0
    for batch in held:
        yield batch
        passed += batch.num_rows
        if fail and passed * 2 >= total and total:
            raise RuntimeError("injected failure half-way through partition 1")


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
    rows = (
        spark.readStream.schema("id long, key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
        .repartition(2, "id")
    )
    if fail == "1":
        rows = rows.mapInArrow(failing_once, rows.schema)
    writer = (
        rows.select("key", "value")
        .writeStream.format("aioaccum")
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
