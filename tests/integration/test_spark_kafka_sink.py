"""One DataFrame through Spark's own ``format("kafka")`` and through ``format("aioaccum")``.

Spark's JVM Kafka sink (``spark-sql-kafka-0-10_2.13`` 4.2.0, fetched by
``scripts/spark_kafka_jars.py`` from ``scripts/spark_kafka_pom.xml``) runs in the same session
as ours (in a process of its own, whose JVM starts with those jars), on the same rows: string
keys (some null), binary values (some null: tombstones),
headers, a ``topic`` column routing rows to two topics, and a ``partition`` column for some rows.
A consumer then reads both sets of topics. What it reads must be the same: the same records
(key, value, headers) in each topic, and, for every row with a key or a partition, in the same
partition (murmur2 over the key bytes is Kafka's, in both). Keyless rows go to the sticky
partitioner's random choice in both, so only their topic is compared.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import aioaccum.spark

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

MASTER = "local[2]"
ROWS = 3000
PARTITIONS = 5
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def kafka_jars() -> str:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from spark_kafka_jars import fetch
    finally:
        sys.path.remove(str(SCRIPTS))
    return ",".join(str(jar) for jar in fetch())


def session() -> SparkSession:
    """A session whose JVM has Spark's Kafka sink on its class path: ``spark.jars`` is read
    when the JVM starts, so this runs in a process of its own (see :func:`write_both`), never
    in the test process, whose JVM other Spark tests may have started already."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(MASTER)
        .appName("aioaccum-vs-spark-kafka")
        .config("spark.jars", kafka_jars())
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    aioaccum.spark.register(spark)
    return spark


def write_both(bootstrap: str, theirs: list[str], ours: list[str]) -> None:
    """The same rows through ``format("kafka")`` into ``theirs`` and ``format("aioaccum")``
    into ``ours``, in a fresh Python process (and so a fresh JVM)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, __file__, bootstrap, *theirs, *ours],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def main(bootstrap: str, theirs: list[str], ours: list[str]) -> None:
    spark = session()
    try:
        frame(spark, *theirs).write.format("kafka").option(
            "kafka.bootstrap.servers", bootstrap
        ).save()
        frame(spark, *ours).write.format("aioaccum").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).save()
    finally:
        spark.stop()


def frame(spark: SparkSession, first: str, second: str) -> DataFrame:
    i = F.col("id")
    return spark.range(0, ROWS, 1, 4).select(
        F.when(i % 10 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("k"), (i % 97).cast("string")))
        .alias("key"),
        F.when(i % 13 == 0, F.lit(None).cast("binary"))
        .otherwise(F.concat(F.lit("value "), i.cast("string")).cast("binary"))
        .alias("value"),
        F.when(i % 3 == 0, F.array().cast("array<struct<key:string,value:binary>>"))
        .otherwise(
            F.array(
                F.struct(F.lit("n").alias("key"), i.cast("string").cast("binary").alias("value")),
                F.struct(F.lit("empty").alias("key"), F.lit(None).cast("binary").alias("value")),
            )
        )
        .alias("headers"),
        F.when(i % 4 == 0, F.lit(first)).otherwise(F.lit(second)).alias("topic"),
        F.when(i % 7 == 0, (i % PARTITIONS).cast("int")).alias("partition"),
    )


Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


async def read_all(bootstrap: str, topic: str) -> dict[int, Counter[Record]]:
    """Every record of ``topic`` by partition: key, value and headers."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        seen: dict[int, Counter[Record]] = {p: Counter() for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                for r in records:
                    seen[tp.partition][(r.key, r.value, tuple(r.headers))] += 1
        return seen
    finally:
        await consumer.stop()


def placed(record: Record) -> bool:
    """Whether the row chose its partition: by key, or by its ``partition`` column (row ids
    that are multiples of 7; the id is in the value, or in header ``n``)."""
    if record[0] is not None:
        return True
    if record[1] is not None:
        return int(record[1].split()[1]) % 7 == 0
    ids = [int(v) for k, v in record[2] if k == "n" and v is not None]
    return bool(ids) and ids[0] % 7 == 0


async def test_spark_s_kafka_sink_and_ours_write_what_a_consumer_reads_alike(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    theirs = [await topic_factory(partitions=PARTITIONS) for _ in range(2)]
    ours = [await topic_factory(partitions=PARTITIONS) for _ in range(2)]
    await asyncio.to_thread(write_both, kafka_bootstrap, theirs, ours)

    for their_topic, our_topic in zip(theirs, ours, strict=True):
        by_them = await read_all(kafka_bootstrap, their_topic)
        by_us = await read_all(kafka_bootstrap, our_topic)
        assert {
            p: +Counter({r: n for r, n in c.items() if placed(r)}) for p, c in by_us.items()
        } == {p: +Counter({r: n for r, n in c.items() if placed(r)}) for p, c in by_them.items()}
        loose_them: Counter[Record] = sum((c for c in by_them.values()), Counter())
        loose_us: Counter[Record] = sum((c for c in by_us.values()), Counter())
        assert loose_us == loose_them
    total = sum(sum(c.values()) for c in (await read_all(kafka_bootstrap, theirs[0])).values())
    total += sum(sum(c.values()) for c in (await read_all(kafka_bootstrap, theirs[1])).values())
    assert total == ROWS
    # The rows were varied enough to check what they should: tombstones, rows with and
    # without headers, keyless rows on both sides.
    everything: Any = await read_all(kafka_bootstrap, ours[1])
    records = [r for c in everything.values() for r in c]
    assert any(r[1] is None for r in records)
    assert any(r[2] == () for r in records)
    assert any(len(r[2]) == 2 for r in records)
    assert any(not placed(r) for r in records)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:4], sys.argv[4:6])
