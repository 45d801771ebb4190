"""format("aioaccum") against real PySpark and the real Kafka cluster, checked by consumers.

Batch writes run in this process (local[2]); the streaming ones run a driver subprocess
(``_spark_stream_driver.py``, local[2,4]) so that it can be killed with SIGKILL and restarted
from its checkpoint. A ``read_committed`` consumer must then see every row once; the same
replay with ``at_least_once`` shows duplicates, which shows the checks can fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import aioaccum.spark

from ._spark_failing import register as register_failing

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

MASTER = "local[2]"
DRIVER = Path(__file__).with_name("_spark_stream_driver.py")
FILES = 5
ROWS_PER_FILE = 400
ROWS = FILES * ROWS_PER_FILE
RUN_WITHIN_S = 240.0


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    running = SparkContext._active_spark_context
    if running is not None and running.master != MASTER:
        running.stop()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(MASTER)
        .appName("aioaccum-source-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    aioaccum.spark.register(session)
    return session


async def read_values(bootstrap: str, topic: str, isolation: str) -> Counter[bytes]:
    """Every value in ``topic`` up to its end (the last stable offset for read_committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        seen: Counter[bytes] = Counter()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.update(r.value for r in records if r.value is not None)
        return seen
    finally:
        await consumer.stop()


async def committed_values(bootstrap: str, topic: str, expected: set[bytes]) -> Counter[bytes]:
    """read_committed values once ``expected`` are all visible, or after 30 s (the caller's
    assertion then names what is missing). A commit returns once the coordinator has logged
    it; the markers that make its records visible to read_committed reach the partitions
    just after, so a read at once may end at a last stable offset short of them."""
    deadline = time.monotonic() + 30
    while True:
        seen = await read_values(bootstrap, topic, "read_committed")
        if set(seen) >= expected or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(0.5)


async def until_no_task_runs(spark: SparkSession, within_s: float = 60.0) -> None:
    """Waits until no executor runs a task. When a task fails and Spark fails its job,
    ``save()`` raises at once, while the job's other tasks that are running still write
    their partitions: a read before they end sees part of what the failed job wrote."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + within_s
    while True:
        running = sum(info.numRunningTasks() for info in tracker.getExecutorInfos())
        if running == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{running} Spark task(s) still running after {within_s} s")
        await asyncio.sleep(0.2)


def rows_df(spark: SparkSession, rows: int) -> DataFrame:
    return spark.range(0, rows, 1, 4).select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v-"), F.col("id").cast("string")).alias("value"),
        F.array(F.struct(F.lit("h").alias("key"), F.lit(b"x").alias("value"))).alias("headers"),
    )


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_batch_write_puts_every_row_once(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, guarantee: str
) -> None:
    topic = await topic_factory(partitions=3)
    df = rows_df(spark, 1000)
    writer = (
        df.write.format("aioaccum")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", topic)
        .option("delivery.guarantee", guarantee)
    )
    if guarantee == "exactly_once":
        writer = writer.option("transactional.id.prefix", topic)
    # In this thread: a Python data source is registered with the JVM thread's session.
    writer.save()
    seen = await committed_values(kafka_bootstrap, topic, {b"v-%d" % i for i in range(1000)})
    assert seen == Counter({b"v-%d" % i: 1 for i in range(1000)})


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_batch_write_failing_mid_partition_then_run_again(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, guarantee: str
) -> None:
    """A task fails half-way, with rows in the topic; ``local[2]`` does not retry it, so the
    job fails and the writer's ``abort`` runs. Exactly-once: nothing of the failed job is
    committed, and running the write again puts every row in once. At-least-once, the
    negative control: the failed job's rows stay, and the second run duplicates them."""
    register_failing(spark)
    topic = await topic_factory(partitions=3)
    df = rows_df(spark, 1000)

    def write(fmt: str) -> None:
        writer = (
            df.write.format(fmt)
            .mode("append")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("topic", topic)
            .option("delivery.guarantee", guarantee)
        )
        if guarantee == "exactly_once":
            writer = writer.option("transactional.id.prefix", topic)
        writer.save()

    with pytest.raises(Exception, match="injected failure half-way"):
        write("aioaccum-failing")
    # The job fails as soon as one task does; its other running tasks go on writing.
    await until_no_task_runs(spark)
    after_failure = await read_values(kafka_bootstrap, topic, "read_committed")
    written = await read_values(kafka_bootstrap, topic, "read_uncommitted")
    assert sum(written.values()) >= 1000 // 4 // 2  # at least half of the failed partition
    if guarantee == "exactly_once":
        assert after_failure == Counter()
    else:
        assert after_failure == written
    write("aioaccum")
    seen = await committed_values(kafka_bootstrap, topic, {b"v-%d" % i for i in range(1000)})
    assert set(seen) == {b"v-%d" % i for i in range(1000)}
    if guarantee == "exactly_once":
        assert max(seen.values()) == 1
    else:
        assert sum(seen.values()) - 1000 == sum(after_failure.values()) > 0


def test_bad_options_and_columns_are_refused_before_any_task(
    spark: SparkSession, kafka_bootstrap: str
) -> None:
    df = rows_df(spark, 10)
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None))

    def save(frame: DataFrame, **options: str) -> str:
        writer = frame.write.format("aioaccum").mode("append")
        for name, value in {"kafka.bootstrap.servers": kafka_bootstrap, **options}.items():
            writer = writer.option(name, value)
        with pytest.raises(Exception, match=r"\S") as caught:
            writer.save()
        return str(caught.value)

    assert "did you mean 'topic'" in save(df, topik="t")
    assert "linger.mss" in save(df, topic="t", **{"kafka.linger.mss": "5"})
    exactly_once = {"delivery.guarantee": "exactly_once"}
    assert "'transactional.id.prefix'" in save(df, topic="t", **exactly_once)
    numbers = spark.range(3).withColumnRenamed("id", "value")
    assert "column 'value' has type bigint" in save(numbers, topic="t")
    assert "column 'partition' has type string" in save(
        df.withColumn("partition", F.lit("1")), topic="t"
    )
    assert "no topic for the rows" in save(df)
    assert "kafka.key.serializer" in save(df, topic="t", **{"kafka.key.serializer": "x"})
    # Refused on the driver: no Spark job ran for any of them.
    assert len(tracker.getJobIdsForGroup(None)) == jobs_before


def write_input(directory: Path) -> set[bytes]:
    directory.mkdir()
    values = set()
    for f in range(FILES):
        lines = []
        for r in range(ROWS_PER_FILE):
            i = f * ROWS_PER_FILE + r
            value = f"row-{i:06d}"
            values.add(value.encode())
            lines.append(json.dumps({"id": i, "key": f"k{i % 97}", "value": value}))
        (directory / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")
    return values


def driver(
    bootstrap: str, tmp: Path, topic: str, guarantee: str, *, fail: bool = False
) -> subprocess.Popen[str]:
    root = Path(__file__).parents[2]  # the repository, and tests/ for integration._spark_failing
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(root), str(root / "tests")))}
    return subprocess.Popen(
        [
            sys.executable, str(DRIVER), bootstrap, str(tmp / "in"), str(tmp / "checkpoint"),
            topic, guarantee, topic, "1" if fail else "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_to_end(process: subprocess.Popen[str]) -> str:
    with process:
        out, err = process.communicate(timeout=RUN_WITHIN_S)
    assert process.returncode == 0, err[-3000:]
    return out


def forget_last_commit(checkpoint: Path) -> int:
    """Drop Spark's record of the last micro-batch's commit: the next start replays it,
    although the sink committed it to Kafka."""
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last = commits[-1]
    last.unlink()
    crc = last.with_name(f".{last.name}.crc")
    if crc.exists():
        crc.unlink()
    return int(last.name)


async def test_a_stream_writes_every_row_once_through_task_failures_and_a_replay_after_commit(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=3)
    expected = write_input(tmp_path / "in")
    run_to_end(driver(kafka_bootstrap, tmp_path, topic, "exactly_once", fail=True))
    replayed = forget_last_commit(tmp_path / "checkpoint")
    out = run_to_end(driver(kafka_bootstrap, tmp_path, topic, "exactly_once"))
    assert f"batch {replayed}" in out  # the replay ran
    seen = await committed_values(kafka_bootstrap, topic, expected)
    assert set(seen) == expected
    assert max(seen.values()) == 1
    # Each failed attempt had half of its partition's rows in the topic when it failed (the
    # driver waits for them): they are there, aborted, which read_uncommitted shows.
    everything = await read_values(kafka_bootstrap, topic, "read_uncommitted")
    aborted = sum(everything.values()) - sum(seen.values())
    assert aborted >= FILES * ROWS_PER_FILE // 8, aborted


async def test_at_least_once_shows_the_duplicates_of_the_same_faults(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=3)
    expected = write_input(tmp_path / "in")
    run_to_end(driver(kafka_bootstrap, tmp_path, topic, "at_least_once", fail=True))
    forget_last_commit(tmp_path / "checkpoint")
    run_to_end(driver(kafka_bootstrap, tmp_path, topic, "at_least_once"))
    seen = await committed_values(kafka_bootstrap, topic, expected)
    assert set(seen) == expected
    duplicated = sum(1 for n in seen.values() if n > 1)
    # The replayed micro-batch (a whole file) and half of each failed partition, twice.
    assert duplicated >= ROWS_PER_FILE


async def test_a_stream_killed_at_a_random_point_and_restarted_writes_every_row_once(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=3)
    expected = write_input(tmp_path / "in")
    seed = random.randrange(1 << 30)
    delay = random.Random(seed).uniform(12.0, 25.0)
    # The with-block closes the pipes whether the driver is killed or (on a fast machine)
    # finished first.
    with driver(kafka_bootstrap, tmp_path, topic, "exactly_once") as first:
        try:
            first.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            first.send_signal(signal.SIGKILL)
        first.communicate()
    run_to_end(driver(kafka_bootstrap, tmp_path, topic, "exactly_once"))
    seen = await committed_values(kafka_bootstrap, topic, expected)
    assert set(seen) == expected, f"seed {seed}, killed after {delay:.1f} s"
    assert max(seen.values()) == 1, f"seed {seed}, killed after {delay:.1f} s"
