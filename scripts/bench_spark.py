#!/usr/bin/env python3
"""Spark's own Kafka sink against ours, rows/s on the same DataFrame, side by side.

One cached DataFrame (string key, 100-byte value; 300,000 rows in 8 partitions by default) is
written by each sink in turn, in interleaved rounds, each run to a fresh topic of 8 partitions,
on ``local[2]`` with ``acks=1`` and ``linger.ms=5`` (exactly-once needs ``acks=all``):

* ``jvm``: Spark's ``format("kafka")`` (``spark-sql-kafka-0-10_2.13`` 4.2.0, at-least-once),
  the jars fetched by ``scripts/spark_kafka_jars.py``;
* ``jvm-stream``: the same sink in a stream of micro-batches;
* ``alo``: ``format("aioaccum")``, ``delivery.guarantee=at_least_once``;
* ``eos``: ``format("aioaccum")``, ``delivery.guarantee=exactly_once``, one batch;
* ``eos-stream``: the same in a stream of micro-batches;
* ``driver``: ``aioaccum.spark.write_dataframe(mode="driver")``.

The streams read the same rows from Parquet files (one file per micro-batch, trigger
``availableNow``). Every run's records are counted afterwards (end offsets; a
``read_committed`` consumer for the transactional ones); a wrong count stops the script.
Prints the median rows/s of each sink and its ratio to ``jvm``.

    .venv/bin/python scripts/bench_spark.py [--rows 300000] [--rounds 3] [--only alo,jvm]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiokafka import AIOKafkaConsumer, TopicPartition
from demo import create_topic, ensure_cluster
from spark_demo import end_offsets
from spark_kafka_jars import fetch

PARTITIONS = 8
VALUE_BYTES = 100
SINKS = ("jvm", "jvm-stream", "alo", "eos", "eos-stream", "driver")
TRANSACTIONAL = {"eos", "eos-stream"}


async def committed_count(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer reads from ``topic`` (up to the last stable offset)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        count = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                break
            for records in (await consumer.getmany(timeout_ms=500, max_records=50_000)).values():
                count += len(records)
        return count
    finally:
        await consumer.stop()


async def settled_count(bootstrap: str, topic: str, rows: int) -> int:
    """The topic's end offsets summed, once they reach ``rows`` or 30 s passed: with acks=1
    the high watermark follows the leader's acknowledgement by a replication."""
    deadline = time.monotonic() + 30
    count = sum((await end_offsets(bootstrap, topic, PARTITIONS)).values())
    while count < rows and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        count = sum((await end_offsets(bootstrap, topic, PARTITIONS)).values())
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=6)
    parser.add_argument("--only", default=",".join(SINKS), help="comma-separated sinks")
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    sinks = [s for s in args.only.split(",") if s]
    unknown = set(sinks) - set(SINKS)
    if unknown:
        parser.error(f"unknown sinks {sorted(unknown)}; choose from {', '.join(SINKS)}")
    bootstrap, _started = ensure_cluster(args.bootstrap)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import aioaccum.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioaccum-bench-spark")
        .config("spark.jars", ",".join(str(j) for j in fetch()))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    aioaccum.spark.register(spark)
    df = (
        spark.range(0, args.rows, 1, PARTITIONS)
        .select(
            F.concat(F.lit("key-"), (F.col("id") % 100_000).cast("string")).alias("key"),
            F.lpad(F.col("id").cast("string"), VALUE_BYTES, "v").alias("value"),
        )
        .cache()
    )
    if df.count() != args.rows:
        raise SystemExit("the cached DataFrame lost rows")
    source = Path(tempfile.mkdtemp(prefix="aioaccum-bench-spark-"))
    df.repartition(args.micro_batches).write.parquet(str(source / "in"))

    phases: list[tuple[str, int, dict[str, int]]] = []

    def stream(topic: str, fmt: str, **options: str) -> None:
        reader = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1)
        writer = (
            reader.parquet(str(source / "in"))
            .writeStream.format(fmt)
            .option("checkpointLocation", str(source / f"cp-{topic}"))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
        )
        for name, value in options.items():
            writer = writer.option(name, value)
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        # Where a stream's time went: Spark's own per-micro-batch durations, summed.
        spent: dict[str, int] = {}
        for progress in query.recentProgress:
            for phase, ms in progress["durationMs"].items():
                spent[phase] = spent.get(phase, 0) + ms
        phases.append((fmt, len(query.recentProgress), spent))

    def batch(topic: str, fmt: str, **options: str) -> None:
        writer = df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap)
        writer = writer.option("topic", topic)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()

    fast = {"kafka.acks": "1", "kafka.linger.ms": "5"}
    eos = {"kafka.linger.ms": "5", "delivery.guarantee": "exactly_once"}
    runs: dict[str, Callable[[str], object]] = {
        "jvm": lambda t: batch(t, "kafka", **fast),
        "jvm-stream": lambda t: stream(t, "kafka", **fast),
        "alo": lambda t: batch(t, "aioaccum", **fast),
        "eos": lambda t: batch(t, "aioaccum", **eos, **{"transactional.id.prefix": t}),
        "eos-stream": lambda t: stream(t, "aioaccum", **eos, **{"transactional.id.prefix": t}),
        "driver": lambda t: aioaccum.spark.write_dataframe(
            df,
            t,
            key="key",
            value="value",
            bootstrap_servers=bootstrap,
            mode="driver",
            progress=False,
            acks=1,
            linger_ms=5,
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in sinks}
    # Round 0 warms up (Python workers, JIT, connections) and is not counted.
    for round_no in range(-1, args.rounds):
        for name in sinks:
            topic = f"bench-spark-{name}-{uuid.uuid4().hex[:8]}"
            asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
            start = time.perf_counter()
            runs[name](topic)
            elapsed = time.perf_counter() - start
            if name in TRANSACTIONAL:
                count = asyncio.run(committed_count(bootstrap, topic))
            else:
                count = asyncio.run(settled_count(bootstrap, topic, args.rows))
            if count != args.rows:
                raise SystemExit(f"{name}: {count} records in {topic}, expected {args.rows}")
            if round_no < 0:
                continue
            rates[name].append(args.rows / elapsed)
            print(
                f"round {round_no + 1} {name:>10}: {args.rows / elapsed:>10,.0f} rows/s", flush=True
            )
    spark.stop()
    for fmt, batches, spent in phases[-2:]:
        top = ", ".join(f"{k} {v} ms" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
        print(f"last {fmt} stream, {batches} micro-batches: {top}")
    base = statistics.median(rates["jvm"]) if "jvm" in rates else None
    # A stream also reads its Parquet files: it is compared with the JVM sink's stream too.
    stream_base = statistics.median(rates["jvm-stream"]) if "jvm-stream" in rates else None
    print(f"\n{'sink':>10}  {'rows/s':>10}  {'vs jvm':>7}  vs jvm-stream")
    for name in sinks:
        median = statistics.median(rates[name])
        ratio = f"{median / base:.2f}x" if base else "-"
        same = f"{median / stream_base:.2f}x" if stream_base and "stream" in name else "-"
        print(f"{name:>10}  {median:>10,.0f}  {ratio:>7}  {same}")


if __name__ == "__main__":
    main()
