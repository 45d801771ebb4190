"""aioaccum.spark.sink against real PySpark (local[2]) and the real Kafka cluster, read back."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aioaccum._core.partitioner import default_partition
from aioaccum.spark.sink import ROW_JSON, SparkWriteError, WriteReport, write_dataframe

from .test_producer import consume_all

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession on 127.0.0.1 for the whole test session, without a UI."""
    saved = {name: os.environ.get(name) for name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # Spark's Python workers must run this interpreter, where aioaccum and pyarrow live.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aioaccum-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


def counts_of(by_partition: dict[int, list[Record]]) -> dict[int, int]:
    return {p: len(records) for p, records in by_partition.items() if records}


async def write(df: DataFrame, topic: str, **kwargs: Any) -> WriteReport:
    """write_dataframe in a thread, as a plain (loop-less) driver program calls it."""
    return await asyncio.to_thread(write_dataframe, df, topic, **kwargs)


def events(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """A string key (null for every 7th row), a binary value and a string trace id."""
    return spark.range(0, rows, 1, partitions).select(
        F.col("id"),
        F.when(F.col("id") % 7 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("key-"), F.col("id").cast("string")))
        .alias("k"),
        F.concat(F.lit("v|"), F.col("id").cast("string")).cast("binary").alias("payload"),
        F.concat(F.lit("t"), F.col("id").cast("string")).alias("trace_id"),
    )


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_every_row_arrives_once_with_its_key_value_and_headers(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, mode: str
) -> None:
    topic = await topic_factory(partitions=6)
    rows = 3000
    df = events(spark, rows, partitions=4)
    report = await write(
        df,
        topic,
        key="k",
        value="payload",
        headers={"trace": "trace_id", "src": F.lit("spark")},
        bootstrap_servers=kafka_bootstrap,
        mode=mode,
        progress=False,
        linger_ms=10,
    )
    by_partition = await consume_all(kafka_bootstrap, topic, rows)

    expected = Counter(
        (
            None if i % 7 == 0 else f"key-{i}".encode(),
            f"v|{i}".encode(),
            (("trace", f"t{i}".encode()), ("src", b"spark")),
        )
        for i in range(rows)
    )
    got = Counter(
        (r.key, r.value, tuple(r.headers)) for records in by_partition.values() for r in records
    )
    assert got == expected
    for partition, records in by_partition.items():
        for r in records:
            if r.key is not None:
                assert partition == default_partition(r.key, 6)
    assert report.mode == mode
    assert (report.records, report.failures, report.first_error) == (rows, 0, None)
    assert report.per_partition == counts_of(by_partition)
    assert report.bytes == sum(len(k or b"") + len(v) for k, v, _ in expected.elements())
    assert report.seconds > 0


async def test_row_json_sends_every_column_and_casts_other_types(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    source = [
        (i, f"name {i}", [f"t{i}", "x"], (i * 2, None if i % 2 else "b"), i % 3 == 0, None)
        for i in range(50)
    ]
    df = spark.createDataFrame(
        source,
        "id long, name string, tags array<string>, info struct<a:int,b:string>, "
        "flag boolean, amount double",
    )
    # Called from inside a running event loop (as in a notebook): it must still work.
    report = write_dataframe(
        df,
        topic,
        key="id",
        value=ROW_JSON,
        headers=["flag"],
        bootstrap_servers=kafka_bootstrap,
        progress=False,
    )
    by_partition = await consume_all(kafka_bootstrap, topic, len(source))

    got = {r.key: (json.loads(r.value), r.headers) for rs in by_partition.values() for r in rs}
    expected = {
        str(i).encode(): (
            {
                "id": i,
                "name": name,
                "tags": tags,
                "info": {"a": a, "b": b},
                "flag": flag,
                "amount": amount,
            },
            (("flag", b"true" if flag else b"false"),),
        )
        for i, name, tags, (a, b), flag, amount in source
    }
    assert got == expected
    assert report.records == len(source)
    assert report.per_partition == counts_of(by_partition)


async def test_column_expressions_and_null_values(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=2)
    df = spark.range(0, 40, 1, 2)
    report = await write(
        df,
        topic,
        key=F.concat(F.lit("user-"), (F.col("id") % 4).cast("string")),
        value=F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(F.col("id") * 10),
        bootstrap_servers=kafka_bootstrap,
        mode="executors",
        progress=False,
    )
    by_partition = await consume_all(kafka_bootstrap, topic, 40)

    got = Counter((r.key, r.value) for rs in by_partition.values() for r in rs)
    expected = Counter(
        (f"user-{i % 4}".encode(), None if i % 5 == 0 else str(i * 10).encode())
        for i in range(40)
    )
    assert got == expected
    assert report.records == 40
    # A null value counts no bytes.
    assert report.bytes == sum(len(k) + len(v or b"") for k, v in expected.elements())


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_a_missing_topic_raises_with_a_report(
    spark: SparkSession, kafka_bootstrap: str, mode: str
) -> None:
    # The test cluster does not create topics on demand.
    topic = f"aioaccum-spark-missing-{mode}-{time.monotonic_ns()}"
    df = events(spark, 100, partitions=2)
    with pytest.raises(SparkWriteError) as caught:
        await write(
            df,
            topic,
            value="payload",
            bootstrap_servers=kafka_bootstrap,
            mode=mode,
            progress=False,
            max_block_ms=1500,
        )
    report = caught.value.report
    assert report.mode == mode
    assert report.records == 0
    assert report.per_partition == {}
    # The first record of each producer (one in the driver, one per task) waited and failed.
    assert report.failures == (1 if mode == "driver" else 2)
    assert report.first_error is not None
    assert report.first_error.startswith("ProducerTimeoutError")
    assert topic in report.first_error
    assert "first error: ProducerTimeoutError" in str(caught.value)


def oversized(spark: SparkSession) -> DataFrame:
    """200 rows; the value of rows 25, 75, 125 and 175 is 4000 bytes, the rest are short."""
    return spark.range(0, 200, 1, 2).select(
        F.when(F.col("id") % 50 == 25, F.repeat(F.lit("z"), 4000))
        .otherwise(F.col("id").cast("string"))
        .alias("value")
    )


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_collect_counts_failed_records_and_delivers_the_rest(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, mode: str
) -> None:
    topic = await topic_factory(partitions=2)
    report = await write(
        oversized(spark),
        topic,
        bootstrap_servers=kafka_bootstrap,
        mode=mode,
        progress=False,
        on_error="collect",
        max_request_size=2048,
    )
    by_partition = await consume_all(kafka_bootstrap, topic, 196)

    got = sorted(r.value for rs in by_partition.values() for r in rs)
    assert got == sorted(str(i).encode() for i in range(200) if i % 50 != 25)
    assert (report.records, report.failures) == (196, 4)
    assert report.first_error is not None
    assert report.first_error.startswith("RecordTooLargeError")
    assert report.per_partition == counts_of(by_partition)


async def test_raise_stops_at_the_first_failure_and_reports_what_was_delivered(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    with pytest.raises(SparkWriteError) as caught:
        await write(
            oversized(spark).coalesce(1),
            topic,
            bootstrap_servers=kafka_bootstrap,
            progress=False,
            max_request_size=2048,
        )
    report = caught.value.report
    by_partition = await consume_all(kafka_bootstrap, topic, report.records)

    # Row 25 is the first oversized one: the 25 before it were delivered, none after it sent.
    assert report.failures == 1
    assert report.records == 25
    assert sorted(r.value for r in by_partition[0]) == sorted(str(i).encode() for i in range(25))
    assert report.first_error is not None
    assert "max_request_size=2048" in report.first_error


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_an_early_stop_or_a_collect_leaves_no_socket_to_the_garbage_collector(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, mode: str
) -> None:
    # In driver mode the write stops in the first of two partitions, with the second one
    # prefetched; in executors mode the driver collects the tasks' counts.
    topic = await topic_factory(partitions=1)
    gc.collect()  # so that only what this write leaves behind is collected below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(SparkWriteError):
            await write(
                oversized(spark),
                topic,
                bootstrap_servers=kafka_bootstrap,
                mode=mode,
                progress=False,
                max_request_size=2048,
            )
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    # Spark serves the next job as usual.
    assert spark.range(10).count() == 10


def final_bar(stderr: str) -> str:
    """The last state tqdm drew (it rewrites its line with carriage returns)."""
    return [part for part in stderr.replace("\n", "\r").split("\r") if part.strip()][-1]


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_progress_is_a_tqdm_bar_on_stderr_ending_with_the_counts(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    topic = await topic_factory(partitions=3)
    rows, partitions = 3000, 4
    df = events(spark, rows, partitions=partitions)
    capsys.readouterr()
    report = await write(df, topic, value="payload", bootstrap_servers=kafka_bootstrap, mode=mode)
    out, err = capsys.readouterr()

    assert "aioaccum" not in out
    unit = "partitions" if mode == "driver" else "tasks"
    assert err.startswith(f"\raioaccum {mode}: ")  # drawn before Spark sent anything
    final = final_bar(err)
    assert final.startswith(f"aioaccum {mode}: 100%|")
    assert f"| {partitions}/{partitions} [" in final
    assert f" {unit}/s, " in final
    assert f", {rows:,} records, {report.bytes / 1e6:.1f} MB, " in final
    assert final.endswith(" rec/s]")
    assert report.records == rows

    await write(
        df, topic, value="payload", bootstrap_servers=kafka_bootstrap, mode=mode, progress=False
    )
    out, err = capsys.readouterr()
    assert "aioaccum" not in out + err


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_a_failed_write_ends_its_bar_before_raising(
    spark: SparkSession, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    # No broker listens on port 1: the driver's producer, or every task's, fails to start.
    capsys.readouterr()
    with pytest.raises(Exception, match=r"127\.0\.0\.1:1\b") as caught:
        await write(
            spark.range(0, 100, 1, 2), "t", value="id", bootstrap_servers="127.0.0.1:1", mode=mode
        )
    assert not isinstance(caught.value, SparkWriteError)
    err = capsys.readouterr().err
    assert err.endswith("\n")  # tqdm's close() ends the line it kept redrawing
    final = final_bar(err)
    assert final.startswith(f"aioaccum {mode}: ")
    # The driver counted what it sent (nothing); the tasks' counts never came back.
    assert (", 0 records, 0.0 MB, " in final) == (mode == "driver")


class PeakRss:
    """Samples this process's resident set size in a thread, keeping the peak."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.baseline = self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_driver_memory_stays_bounded_for_a_frame_far_larger_than_the_buffer(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3, replication_factor=1)
    rows, size = 160_000, 400
    data_bytes = rows * size  # 64 MB of values
    buffer_memory = 2 << 20
    df = spark.range(0, rows, 1, 8).select(
        F.rpad(F.col("id").cast("string"), size, "#").alias("value")
    )
    # A warm-up, so that imports and first-use allocations are in the baseline.
    await write(df.limit(2000), topic, bootstrap_servers=kafka_bootstrap, progress=False)
    with PeakRss() as rss:
        report = await write(
            df,
            topic,
            bootstrap_servers=kafka_bootstrap,
            progress=False,
            buffer_memory=buffer_memory,
            batch_size=65536,
            linger_ms=20,
        )
    assert report.records == rows
    assert report.bytes == data_bytes
    grown = rss.peak - rss.baseline
    # Holding the rows would take more than data_bytes; the sink holds a few chunks and the
    # producer's buffer. The growth is the allocators' high-water mark, and it depends on what
    # ran before in the process and on the machine's load: 14-17 MiB with this file alone,
    # 23 MiB once at the end of the whole suite with the fault tests running beside it. Half
    # of data_bytes stays far below what holding the frame would take.
    assert grown < data_bytes / 2, f"driver RSS grew {grown / 2**20:.1f} MiB"
    assert sum((await end_offsets(kafka_bootstrap, topic)).values()) == rows + 2000


def test_bad_arguments_fail_before_spark_runs(spark: SparkSession) -> None:
    df = spark.range(3)
    calls: list[Callable[[], object]] = [
        lambda: write_dataframe(df, "t", bootstrap_servers="127.0.0.1:1", mode="cluster"),  # type: ignore[arg-type]
        lambda: write_dataframe(df, "t", bootstrap_servers="127.0.0.1:1", value="nope"),
        lambda: write_dataframe(df, "t", bootstrap_servers="127.0.0.1:1", linger_ms=-1),
        lambda: write_dataframe(df, "t", bootstrap_servers="127.0.0.1:1", on_error="skip"),  # type: ignore[arg-type]
        lambda: write_dataframe(df, "t", bootstrap_servers="127.0.0.1:1", headers="id"),
        lambda: write_dataframe(df, "no spaces", bootstrap_servers="127.0.0.1:1"),
    ]
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None))
    for call in calls:
        with pytest.raises(ValueError, match=r"mode|nope|linger|on_error|headers|topic"):
            call()
    assert len(tracker.getJobIdsForGroup(None)) == jobs_before
