"""write_dataframe(..., exactly_once=True) against real PySpark and Kafka, with injected failures.

Spark runs as ``local[2,4]``: two task slots, and a task may fail 3 times before its job does.
A DataFrame whose first attempt of some partitions fails midway (after rows of that attempt are
in the topic) must still leave every row exactly once for a ``read_committed`` consumer; the
same write without ``exactly_once`` leaves those rows twice, which shows the test can fail.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aioaccum.errors import ConfigError
from aioaccum.spark.sink import SparkTransactionError, SparkWriteError, WriteReport, write_dataframe

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

Isolation = Literal["read_committed", "read_uncommitted"]

MASTER = "local[2,4]"
PARTITIONS = 4
ROWS_PER_PARTITION = 400
ROWS = PARTITIONS * ROWS_PER_PARTITION
# Arrow batches of this many rows: the sink gets each partition in several chunks.
BATCH_ROWS = 50
# Big enough that each batch goes through the Python workers' 64 KiB output buffers at once.
VALUE_BYTES = 2048
# Attempt 0 of these partitions fails once it has passed this many rows downstream and at
# least FAILS_AFTER_SEEN of them are in the topic.
FAILING = (1, 3)
FAIL_AFTER_PASSED = 300
FAILS_AFTER_SEEN = 100
SEEN_WITHIN_S = 60.0
READ_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A SparkSession whose tasks Spark retries (``local[2,4]``), for this module only.

    One JVM holds one SparkContext, and its master fixes the retries: a session started by
    another module (``local[2]``, no retries) is stopped first. pytest runs that module's
    tests before this one's, so none of them needs it afterwards.
    """
    running = SparkContext._active_spark_context
    if running is not None and running.master != MASTER:
        running.stop()
    saved = {name: os.environ.get(name) for name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(MASTER)
        .appName("aioaccum-exactly-once-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # the injected failures would fill the log
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def value_maker(size: int) -> Callable[[int, int], bytes]:
    """``value(partition, row)``: ``b"PP:RRRRRRRR|"`` padded to ``size`` bytes.

    Made by a factory so that Spark ships it by value: its Python workers cannot import this
    test module, so the steps below use only what they were built with.
    """

    def value(partition: int, row: int) -> bytes:
        head = b"%02d:%08d|" % (partition, row)
        return head + b"#" * (size - len(head))

    return value


value_of = value_maker(VALUE_BYTES)


def row_of(value: bytes) -> tuple[int, int]:
    partition, row = value[:11].rstrip(b"|").split(b":")
    return int(partition), int(row)


def failing_first_attempts(
    bootstrap: str,
    topic: str,
    markers: Path,
    failing: Iterable[int] = FAILING,
    *,
    every_attempt: bool = False,
    wait: bool = True,
    fence_prefix: str | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` step giving each row of ``spark.range`` its value; attempt 0 of the
    ``failing`` partitions (every attempt, with ``every_attempt``) raises once
    ``FAIL_AFTER_PASSED`` of its rows went downstream and (with ``wait``) ``FAILS_AFTER_SEEN``
    of them are in the topic. Before raising it leaves a file in ``markers`` saying how many
    it saw.

    ``wait=False`` for ``mode="driver"``: the driver gets a partition's rows only from an
    attempt that succeeded, so those of a failing attempt never reach the topic.

    With ``fence_prefix`` the step does not raise: it takes the transactional id of its
    partition away from the sink (as a stray producer with the same id would) and goes on.
    """
    failing = frozenset(failing)
    value = value_maker(VALUE_BYTES)
    after, at_least, within = FAIL_AFTER_PASSED, FAILS_AFTER_SEEN, SEEN_WITHIN_S

    def rows_in(partition: int) -> int:
        """Rows of Spark partition ``partition`` in the topic (uncommitted ones too), once
        there are ``at_least`` of them or ``within`` seconds passed."""
        import time

        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as ConfluentTopicPartition

        prefix = b"%02d:" % partition
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"aioaccum-injector-{topic}-{partition}",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            described = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in sorted(described)])
            seen = 0
            deadline = time.monotonic() + within
            while seen < at_least and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=1000, timeout=0.2):
                    got = message.value()
                    if message.error() is None and got is not None and got.startswith(prefix):
                        seen += 1
            return seen
        finally:
            consumer.close()

    def step(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        partition, attempt = context.partitionId(), context.attemptNumber()
        fails = partition in failing and (attempt == 0 or every_attempt)
        passed = 0
        for batch in batches:
            ids = batch.column(0).to_pylist()
            values = [value(partition, i) for i in ids]
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int64()), pa.array(values, pa.binary())], names=["id", "value"]
            )
            passed += len(ids)
            if fails and passed >= after:
                fails = False
                seen = rows_in(partition) if wait else 0
                (markers / f"p{partition}-a{attempt}-seen{seen}").touch()
                if fence_prefix is None:
                    raise RuntimeError(f"injected: partition {partition} attempt {attempt} fails")
                fence(f"{fence_prefix}-{partition}")

    def fence(transactional_id: str) -> None:
        import asyncio

        from aioaccum._runtime.transactions import abort_transactional_ids

        asyncio.run(abort_transactional_ids([transactional_id], bootstrap_servers=bootstrap))

    return step


def source(
    spark: SparkSession, step: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]
) -> DataFrame:
    return spark.range(0, ROWS, 1, PARTITIONS).mapInArrow(step, "id long, value binary")


def seen_before_failing(markers: Path) -> dict[tuple[int, int], int]:
    """(partition, attempt) -> rows of it in the topic when it failed, from the markers."""
    found: dict[tuple[int, int], int] = {}
    for marker in markers.iterdir():
        partition, attempt, seen = marker.name.split("-")
        found[(int(partition[1:]), int(attempt[1:]))] = int(seen.removeprefix("seen"))
    return found


def read_topic(bootstrap: str, topic: str, isolation: Isolation) -> Counter[bytes]:
    """Every value in ``topic`` as a consumer with ``isolation`` sees it, read to the end.

    The end is each partition's high watermark: a ``read_committed`` consumer reaches it only
    once no transaction is open there, so a transaction left open fails the read.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"aioaccum-read-{isolation}-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    values: Counter[bytes] = Counter()
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(ConfluentTopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in partitions])
        remaining = {p for p in partitions if ends[p] > 0}
        deadline = time.monotonic() + READ_WITHIN_S
        while remaining:
            if time.monotonic() > deadline:
                positions = consumer.position(
                    [ConfluentTopicPartition(topic, p) for p in sorted(remaining)]
                )
                raise AssertionError(
                    f"{isolation}: partitions {sorted(remaining)} of {topic} did not reach their "
                    f"end {ends} within {READ_WITHIN_S:.0f} s (at "
                    f"{[(tp.partition, tp.offset) for tp in positions]}): a transaction is "
                    "still open there"
                )
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    value = message.value()
                    assert value is not None
                    values[value] += 1
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
            for tp in consumer.position(
                [ConfluentTopicPartition(topic, p) for p in sorted(remaining)]
            ):
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
    finally:
        consumer.close()
    return values


async def read(bootstrap: str, topic: str, isolation: Isolation) -> Counter[bytes]:
    return await asyncio.to_thread(read_topic, bootstrap, topic, isolation)


async def write(df: DataFrame, topic: str, **kwargs: Any) -> WriteReport:
    """write_dataframe in a thread, as a plain (loop-less) driver program calls it."""
    return await asyncio.to_thread(write_dataframe, df, topic, progress=False, **kwargs)


def expected_values() -> Counter[bytes]:
    return Counter(value_of(i // ROWS_PER_PARTITION, i) for i in range(ROWS))


def duplicates(values: Counter[bytes]) -> int:
    return sum(count - 1 for count in values.values() if count > 1)


def prefix_for(topic: str) -> str:
    return f"{topic}-txn"


# --- retried tasks -------------------------------------------------------------------------


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly_once", "at_least_once"])
async def test_retried_tasks_leave_every_row_once_only_with_exactly_once(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    tmp_path: Path,
    exactly_once: bool,
) -> None:
    topic = await topic_factory(partitions=3)
    df = source(spark, failing_first_attempts(kafka_bootstrap, topic, tmp_path))
    options: dict[str, Any] = {}
    if exactly_once:
        options = {"exactly_once": True, "transactional_id_prefix": prefix_for(topic)}
    report = await write(
        df, topic, value="value", bootstrap_servers=kafka_bootstrap, mode="executors",
        linger_ms=5, **options,
    )
    committed = await read(kafka_bootstrap, topic, "read_committed")
    everything = await read(kafka_bootstrap, topic, "read_uncommitted")

    # The failures happened as intended: attempt 0 of each failing partition, after rows of
    # it were in the topic.
    seen = seen_before_failing(tmp_path)
    assert sorted(seen) == [(p, 0) for p in FAILING]
    assert all(count >= FAILS_AFTER_SEEN for count in seen.values()), seen
    sent_twice = sum(
        1 for value in everything.elements() if row_of(value)[0] in FAILING
    ) - len(FAILING) * ROWS_PER_PARTITION
    assert sent_twice >= len(FAILING) * FAILS_AFTER_SEEN
    print(
        f"\n{'exactly_once' if exactly_once else 'at_least_once'}: {ROWS} rows; attempts that "
        f"failed had {sorted(seen.items())} rows in the topic; read_committed: "
        f"{sum(committed.values())} records, {duplicates(committed)} duplicates; "
        f"read_uncommitted: {sum(everything.values())} records"
    )
    if exactly_once:
        assert committed == expected_values()  # every row, once
        assert report.guarantee == "exactly_once"
        assert report.transactions == PARTITIONS
    else:
        # The negative control: the rows of the failed attempts are there twice.
        assert set(committed) == set(expected_values())
        assert duplicates(committed) == sent_twice
        assert report.guarantee == "at_least_once"
        assert report.transactions == 0
    assert (report.records, report.failures, report.first_error) == (ROWS, 0, None)
    assert report.bytes == ROWS * VALUE_BYTES
    assert sum(report.per_partition.values()) == ROWS


async def test_driver_mode_commits_each_partition_once_after_retries(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=3)
    df = source(spark, failing_first_attempts(kafka_bootstrap, topic, tmp_path, wait=False))
    report = await write(
        df, topic, value="value", bootstrap_servers=kafka_bootstrap, mode="driver",
        exactly_once=True, transactional_id_prefix=prefix_for(topic),
    )
    committed = await read(kafka_bootstrap, topic, "read_committed")

    # The driver sends only what a successful attempt computed; it is committed once.
    assert sorted(seen_before_failing(tmp_path)) == [(p, 0) for p in FAILING]
    assert committed == expected_values()
    assert (report.records, report.transactions, report.guarantee) == (
        ROWS, PARTITIONS, "exactly_once"
    )


async def test_a_fenced_attempt_fails_its_task_and_the_next_attempt_commits(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=3)
    prefix = prefix_for(topic)
    # Midway through attempt 0 of partition 1, another producer takes the id "<prefix>-1".
    df = source(
        spark, failing_first_attempts(kafka_bootstrap, topic, tmp_path, [1], fence_prefix=prefix)
    )
    report = await write(
        df, topic, value="value", bootstrap_servers=kafka_bootstrap, mode="executors",
        exactly_once=True, transactional_id_prefix=prefix,
    )
    committed = await read(kafka_bootstrap, topic, "read_committed")

    everything = await read(kafka_bootstrap, topic, "read_uncommitted")

    seen = seen_before_failing(tmp_path)
    assert list(seen) == [(1, 0)]
    assert seen[(1, 0)] >= FAILS_AFTER_SEEN
    # Spark ran partition 1 again (the fenced attempt raised), and that attempt committed.
    written = Counter(row_of(value)[0] for value in everything.elements())
    assert written[1] >= ROWS_PER_PARTITION + FAILS_AFTER_SEEN
    assert committed == expected_values()
    assert (report.records, report.failures, report.transactions) == (ROWS, 0, PARTITIONS)


# --- failed jobs ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_a_failed_job_commits_nothing_and_a_rerun_writes_every_row_once(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    tmp_path: Path,
    mode: str,
) -> None:
    topic = await topic_factory(partitions=3)
    prefix = prefix_for(topic)
    # Partition 2 fails every attempt: the job fails after the other partitions sent rows.
    doomed = source(
        spark,
        failing_first_attempts(
            kafka_bootstrap, topic, tmp_path, [2], every_attempt=True, wait=mode == "executors"
        ),
    )
    with pytest.raises(Exception, match="injected: partition 2"):
        await write(
            doomed, topic, value="value", bootstrap_servers=kafka_bootstrap, mode=mode,
            exactly_once=True, transactional_id_prefix=prefix,
        )
    assert sorted(seen_before_failing(tmp_path)) == [(2, a) for a in range(4)]
    # Rows were sent, in transactions that were all aborted (none is left open either).
    assert sum((await read(kafka_bootstrap, topic, "read_uncommitted")).values()) >= (
        FAILS_AFTER_SEEN
    )
    assert await read(kafka_bootstrap, topic, "read_committed") == Counter()

    # The same write again, its source fixed and with the same prefix.
    fixed = source(spark, failing_first_attempts(kafka_bootstrap, topic, tmp_path, []))
    report = await write(
        fixed, topic, value="value", bootstrap_servers=kafka_bootstrap, mode=mode,
        exactly_once=True, transactional_id_prefix=prefix,
    )
    assert await read(kafka_bootstrap, topic, "read_committed") == expected_values()
    assert (report.records, report.transactions) == (ROWS, PARTITIONS)


def oversized(spark: SparkSession) -> DataFrame:
    """200 rows in 2 partitions; the value of row 150 is 4000 bytes, the rest are short."""
    return spark.range(0, 200, 1, 2).select(
        F.when(F.col("id") == 150, F.repeat(F.lit("z"), 4000))
        .otherwise(F.col("id").cast("string"))
        .alias("value")
    )


@pytest.mark.parametrize("mode", ["driver", "executors"])
async def test_a_failed_record_aborts_the_whole_write(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory, mode: str
) -> None:
    topic = await topic_factory(partitions=2)
    with pytest.raises(SparkWriteError) as caught:
        await write(
            oversized(spark), topic, bootstrap_servers=kafka_bootstrap, mode=mode,
            exactly_once=True, transactional_id_prefix=prefix_for(topic),
            max_request_size=2048,
        )
    assert not isinstance(caught.value, SparkTransactionError)
    report = caught.value.report
    assert report.guarantee == "exactly_once"
    assert (report.records, report.transactions, report.per_partition) == (0, 0, {})
    # Records of its transaction still queued behind the failed one fail too (aborted).
    assert report.failures >= 1
    assert report.first_error is not None
    assert report.first_error.startswith("RecordTooLargeError")
    assert "nothing committed" in str(caught.value)
    assert await read(kafka_bootstrap, topic, "read_committed") == Counter()


async def test_a_job_longer_than_the_transaction_timeout_commits_nothing(
    spark: SparkSession, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=2)

    def slow(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Before any row: the transactions begin late, so no broker times them out first.
        time.sleep(2.5)
        yield from batches

    df = spark.range(0, 100, 1, 2).mapInArrow(slow, "id long")
    with pytest.raises(SparkTransactionError) as caught:
        await write(
            df, topic, value="id", bootstrap_servers=kafka_bootstrap, mode="executors",
            exactly_once=True, transactional_id_prefix=prefix_for(topic),
            transaction_timeout_ms=2000,
        )
    message = str(caught.value)
    assert "transaction_timeout_ms=2000" in message
    assert "nothing was committed" in message
    assert caught.value.report.transactions == 0
    assert await read(kafka_bootstrap, topic, "read_committed") == Counter()


# --- arguments -----------------------------------------------------------------------------


async def test_a_timeout_the_brokers_refuse_fails_before_spark_runs(
    spark: SparkSession, kafka_bootstrap: str
) -> None:
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None))
    with pytest.raises(ConfigError) as caught:
        await write(
            spark.range(10), "t", value="id", bootstrap_servers=kafka_bootstrap,
            exactly_once=True, transactional_id_prefix="aioaccum-too-long",
            transaction_timeout_ms=900_001,
        )
    message = str(caught.value)
    assert "transaction_timeout_ms=900001" in message
    assert "transaction.max.timeout.ms" in message
    assert "900000" in message
    assert len(tracker.getJobIdsForGroup(None)) == jobs_before


def test_bad_exactly_once_arguments_fail_before_spark_runs(spark: SparkSession) -> None:
    df = spark.range(3)
    common: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1", "value": "id"}
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: write_dataframe(df, "t", exactly_once=True, **common), "transactional_id_prefix"),
        (
            lambda: write_dataframe(
                df, "t", exactly_once=True, transactional_id_prefix="", **common
            ),
            "non-empty",
        ),
        (
            lambda: write_dataframe(
                df, "t", exactly_once=True, transactional_id_prefix="p", on_error="collect",
                **common,
            ),
            "on_error='collect'",
        ),
        (lambda: write_dataframe(df, "t", transactional_id_prefix="p", **common), "only with"),
        (lambda: write_dataframe(df, "t", transactional_id="x", **common), "names its"),
        (
            lambda: write_dataframe(
                df, "t", exactly_once=True, transactional_id_prefix="p",
                enable_idempotence=False, **common,
            ),
            "enable_idempotence",
        ),
    ]
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None))
    for call, words in calls:
        with pytest.raises(ConfigError, match=words):
            call()
    assert len(tracker.getJobIdsForGroup(None)) == jobs_before
