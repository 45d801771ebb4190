"""A Spark driver for the streaming tests of the aioaccum data source, run as a subprocess so
that a test can kill it with SIGKILL and start it again from its checkpoint.

    python _spark_stream_driver.py BOOTSTRAP INPUT_DIR CHECKPOINT TOPIC GUARANTEE PREFIX FAIL

Reads the JSON files of INPUT_DIR one per micro-batch, hash-partitions the rows by id into 2
Spark partitions (deterministic, so a replay puts the same rows in the same partition), and
writes them with format("aioaccum") until every file is processed (trigger availableNow).
FAIL=1: through ``format("aioaccum-failing")`` (``_spark_failing.py``), the first attempt of
Spark partition 1 of every micro-batch fails once the sink has half its rows in the topic,
inside its open transaction (local[2,4] retries it). Prints "batch N" as each micro-batch ends.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import aioaccum.spark
from integration._spark_failing import register as register_failing


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
    register_failing(spark)
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
