"""Write a Spark DataFrame to Kafka through aioaccum.

``write_dataframe(df, topic, bootstrap_servers=...)`` sends every row of ``df`` as one record and
returns a :class:`WriteReport`. Two ways to run it:

``mode="driver"`` (the default)
    One producer in the driver. Spark turns each Arrow batch of the selected columns into an
    Arrow IPC blob of a few MiB (``mapInArrow``) and the driver pulls the blobs partition by
    partition with ``toLocalIterator(prefetchPartitions=True)``. The driver's Python process
    holds two blobs and ``buffer_memory`` at most, whatever the DataFrame's size; its JVM holds
    the blobs of about two partitions. Executors need pyarrow, not aioaccum.

``mode="executors"``
    One producer per Spark task (``mapInArrow``), each on its own event loop, for data that one
    driver cannot carry. Each task returns one row of counts; the driver adds them up.
    Executors need aioaccum and pyarrow installed.

``exactly_once=True`` (both modes)
    Each Spark partition's records go out in a Kafka transaction of its own, whose
    transactional id is ``f"{transactional_id_prefix}-{partition}"``. No task commits: each
    flushes its transaction and hands its identity
    (:class:`~aioaccum.transactions.PreparedTransaction`) to the driver, which commits them
    all once the Spark job has succeeded, and aborts them all if it failed. A retried attempt
    of a partition reuses the id, which fences the earlier attempt and makes the broker abort
    its transaction, so a ``read_committed`` consumer sees every row once.

This module imports pyspark only when called; ``import aioaccum`` never imports it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from aioaccum._core.validate import validate_topic
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import AioAccumError, ConfigError
from aioaccum.spark.rows import (
    RESULT_DDL,
    Chunk,
    OnError,
    Tally,
    make_packer,
    prepared_of,
    produce_from_thread,
    produce_partitions,
    run_coroutine,
    unpack,
)
from aioaccum.spark.transactions import CommitFailed, Transactions

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator

    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from pyspark.sql import Column, DataFrame, Row
    from pyspark.sql.types import DataType

__all__ = [
    "ROW_JSON",
    "SparkTransactionError",
    "SparkWriteError",
    "WriteReport",
    "write_dataframe",
]

log = logging.getLogger(__name__)

Mode = Literal["driver", "executors"]
Guarantee = Literal["at_least_once", "exactly_once"]

# Each blob the driver pulls holds about this much of the selected columns.
_CHUNK_BYTES = 1 << 20
_PACKED_DDL = "task int, rows long, blob binary"
_PROGRESS_EVERY_S = 0.5
# Null fields stay in the JSON ({"a": null}): every record of a DataFrame has the same keys.
_JSON_OPTIONS = {"ignoreNullFields": "false"}
# exactly_once=True: a partition's transaction stays open from its first record until the
# driver commits after the whole job, so the sink asks for Kafka's default ceiling
# (transaction.max.timeout.ms) rather than the producer's 60 s.
_TRANSACTION_TIMEOUT_MS = 900_000
# After a failed job, the driver waits this long at most for Spark to end the job's other
# tasks before it aborts their transactions (a task still starting would open a new one).
_TASKS_END_WITHIN_S = 30.0


class _RowJson:
    """The type of :data:`ROW_JSON`."""

    _instance: _RowJson | None = None

    def __new__(cls) -> _RowJson:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ROW_JSON"

    def __reduce__(self) -> str:
        return "ROW_JSON"


ROW_JSON: Final = _RowJson()
"""Pass as ``value=`` (or ``key=``) to send the whole row, every column, as a JSON object."""

@dataclass(frozen=True, slots=True)
class WriteReport:
    """What one :func:`write_dataframe` call did.

    Attributes:
        records: Records the brokers acknowledged.
        bytes: Key and value bytes of those records (headers not counted).
        seconds: Wall time of the whole call, the Spark jobs included.
        per_partition: Acknowledged records per Kafka partition.
        failures: Records that failed (not counting rows never attempted after a stop).
        first_error: ``"ErrorType: message"`` of the first failure, or ``None``.
        mode: ``"driver"`` or ``"executors"``.
        guarantee: ``"exactly_once"`` (``exactly_once=True``: ``records``, ``bytes`` and
            ``per_partition`` count committed records only, none when the write failed) or
            ``"at_least_once"``.
        transactions: Transactions committed (one per Spark partition that had rows); 0 with
            ``guarantee="at_least_once"``.
    """

    records: int
    bytes: int
    seconds: float
    per_partition: dict[int, int] = field(hash=False)
    failures: int
    first_error: str | None
    mode: Mode
    guarantee: Guarantee = "at_least_once"
    transactions: int = 0

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


class SparkWriteError(AioAccumError):
    """Records failed, and ``on_error="raise"`` (or an error no later record could escape).

    Raised after the producer flushed what it held, so ``report`` counts every record that
    was handed to it.

    Attributes:
        report: The :class:`WriteReport` of the call.
    """

    def __init__(self, report: WriteReport) -> None:
        if report.guarantee == "exactly_once":
            outcome = "exactly_once: nothing committed, every transaction of the write aborted"
        else:
            outcome = f"{report.records} delivered"
        super().__init__(
            f"{report.failures} record(s) failed writing to Kafka ({outcome}, "
            f"mode={report.mode}); first error: {report.first_error}"
        )
        self.report = report


class SparkTransactionError(SparkWriteError):
    """``exactly_once=True``: the Spark job succeeded, but its transactions could not all be
    committed (the job outlasted ``transaction_timeout_ms``, or a transaction was fenced).

    Raised after what could still be aborted was aborted. When a commit was refused, those
    before it stay committed and the message says how many; ``report`` counts no records and
    no transactions; ``committed_transactional_ids`` names those committed.
    """

    def __init__(
        self, report: WriteReport, message: str, committed: Sequence[str] = ()
    ) -> None:
        AioAccumError.__init__(self, message)
        self.report = report
        self.committed_transactional_ids = list(committed)
        """The transactions committed before the failure (their partitions are written)."""


def write_dataframe(
    df: DataFrame,
    topic: str,
    *,
    key: str | Column | _RowJson | None = None,
    value: str | Column | _RowJson | None = "value",
    headers: Sequence[str] | Mapping[str, str | Column] | None = None,
    bootstrap_servers: str | Sequence[str],
    mode: Mode = "driver",
    progress: bool = True,
    on_error: OnError = "raise",
    exactly_once: bool = False,
    transactional_id_prefix: str | None = None,
    **config: Any,
) -> WriteReport:
    """Send every row of ``df`` to ``topic`` as one Kafka record.

    Columns become bytes in Spark: binary as is, strings as UTF-8, structs, arrays and maps as
    JSON, other types as their string form. Null stays null (a null value is a tombstone).

    Args:
        df: Any DataFrame; it is computed once.
        topic: The Kafka topic; it must exist unless the brokers create topics on demand.
        key: A column name, a Column expression, :data:`ROW_JSON`, or ``None`` for no key.
        value: Same choices; ``ROW_JSON`` sends the whole row as a JSON object.
        headers: Column names (each header named after its column), or a mapping from
            header name to column name or Column expression.
        bootstrap_servers: The Kafka cluster.
        mode: ``"driver"``: one producer in the driver; ``"executors"``: one per Spark task.
        progress: Show a progress bar (tqdm, from the ``spark`` extra) on stderr.
        on_error: ``"raise"``: stop at the first failed record, deliver what is buffered, then
            raise :class:`SparkWriteError`; ``"collect"``: count failures and go on. An error
            that no later record could escape (the topic's metadata never arrived, memory
            never freed within ``max_block_ms``) stops the write and raises in both cases.
        exactly_once: Write each Spark partition in a transaction that the driver commits
            only after the whole job succeeded (aborting all of them otherwise), so that a
            ``read_committed`` consumer sees every row once, retried tasks included. Needs
            ``transactional_id_prefix`` and ``on_error="raise"``; any failed record aborts
            the whole write.
        transactional_id_prefix: With ``exactly_once``: partition ``i`` writes as
            transactional id ``f"{prefix}-{i}"``. Use one prefix per write that may run at
            the same time as others, and the same prefix when running a failed write again
            (its start aborts what the failed one left open).
        **config: Producer settings by their Python names (``linger_ms=20``, ``acks=1``, ...).
            With ``exactly_once``, ``transaction_timeout_ms`` (default here 900000, the
            brokers' default ``transaction.max.timeout.ms``) must cover the whole job.

    Returns:
        The :class:`WriteReport`.

    Raises:
        ConfigError: A bad argument or producer setting (before any Spark job runs), or a
            ``transaction_timeout_ms`` above what the brokers allow.
        SparkWriteError: Records failed (see ``on_error``); ``.report`` has the counts.
        SparkTransactionError: ``exactly_once``: the job succeeded but its transactions
            could not all be committed.
    """
    if mode not in ("driver", "executors"):
        raise ConfigError(f"mode must be 'driver' or 'executors', got {mode!r}")
    if on_error not in ("raise", "collect"):
        raise ConfigError(f"on_error must be 'raise' or 'collect', got {on_error!r}")
    validate_topic(topic)
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap_servers, **config}
    # Fail on a bad setting before Spark does any work.
    prefix = _checked_transactions(settings, exactly_once, transactional_id_prefix, on_error)
    projected, header_names = _project(df, key, value, headers)
    started = time.monotonic()
    txns: Transactions | None = None
    if prefix is not None:
        txns = Transactions(prefix, settings, started)
        txns.check()
    try:
        if mode == "driver":
            tally = _write_from_driver(
                projected, topic, settings, header_names, on_error, progress, txns
            )
        else:
            tally = _write_from_executors(
                projected, topic, settings, header_names, on_error, progress, txns
            )
    except BaseException as exc:
        if txns is not None:
            txns.abort_after(exc)
        raise
    if txns is None:
        report = _report(tally, mode, started)
        if tally.failures and (tally.fatal or on_error == "raise"):
            raise SparkWriteError(report)
        return report
    if tally.failures:
        failed = _report(tally, mode, started, "exactly_once", committed=None)
        error = SparkWriteError(failed)
        txns.abort_after(error)
        raise error
    try:
        committed = txns.commit()
    except CommitFailed as exc:
        aborted = _report(tally, mode, started, "exactly_once", committed=None)
        error = SparkTransactionError(aborted, str(exc), txns.committed)
        txns.abort_after(error)
        raise error from exc.__cause__
    except BaseException as exc:  # interrupted: what is not committed must not stay open
        txns.abort_after(exc)
        raise
    return _report(tally, mode, started, "exactly_once", committed=committed)


def _report(
    tally: Tally,
    mode: Mode,
    started: float,
    guarantee: Guarantee = "at_least_once",
    committed: int | None = 0,
) -> WriteReport:
    """The report of a write that committed ``committed`` transactions (``None``: an
    exactly-once write that was aborted, so no record counts)."""
    if committed is None:
        return WriteReport(
            records=0,
            bytes=0,
            seconds=time.monotonic() - started,
            per_partition={},
            failures=tally.failures,
            first_error=tally.first_error,
            mode=mode,
            guarantee="exactly_once",
            transactions=0,
        )
    return WriteReport(
        records=tally.records,
        bytes=tally.bytes,
        seconds=time.monotonic() - started,
        per_partition=dict(sorted(tally.per_partition.items())),
        failures=tally.failures,
        first_error=tally.first_error,
        mode=mode,
        guarantee=guarantee,
        transactions=committed,
    )


def _checked_transactions(
    settings: dict[str, Any], exactly_once: object, prefix: object, on_error: OnError
) -> str | None:
    """Check the producer ``settings`` and the exactly-once arguments; the transactional id
    prefix when ``exactly_once``, else ``None``. Sets the sink's default transaction
    timeout in ``settings``."""
    if "transactional_id" in settings:
        raise ConfigError(
            "write_dataframe names its transactions itself, one per Spark partition: pass "
            "exactly_once=True, transactional_id_prefix='...' instead of transactional_id"
        )
    if exactly_once is False:
        if prefix is not None:
            raise ConfigError(
                f"transactional_id_prefix={prefix!r} is used only with exactly_once=True; "
                "pass that too, or drop the prefix"
            )
        ProducerConfig.from_kwargs(**settings)
        return None
    if exactly_once is not True:
        raise ConfigError(f"exactly_once must be True or False, got {exactly_once!r}")
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(
            f"exactly_once=True needs transactional_id_prefix='...', a non-empty str naming "
            f"this write's transactions (partition i writes as '<prefix>-i'), got {prefix!r}"
        )
    if on_error != "raise":
        raise ConfigError(
            f"exactly_once=True commits all rows or none, so on_error={on_error!r} cannot "
            "apply: a failed record aborts the whole write. Use on_error='raise' (the default)"
        )
    settings.setdefault("transaction_timeout_ms", _TRANSACTION_TIMEOUT_MS)
    # The real ids end in each partition's index; any of them checks the same way.
    ProducerConfig.from_kwargs(**settings, transactional_id=f"{prefix}-0")
    return prefix


# --- columns to bytes ----------------------------------------------------------------------


def _column(df: DataFrame, spec: object, what: str) -> Column:
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if spec is None:
        return F.lit(None).cast("binary")
    if spec is ROW_JSON:
        return F.to_json(F.struct(*[df[name] for name in df.columns]), _JSON_OPTIONS)
    if isinstance(spec, str):
        if spec not in df.columns:
            raise ConfigError(f"{what}={spec!r} names no column; the columns are {df.columns}")
        return F.col("`" + spec.replace("`", "``") + "`")
    if isinstance(spec, Column):
        return spec
    raise ConfigError(
        f"{what} must be a column name, a Column, ROW_JSON or None, got {type(spec).__name__}"
    )


def _as_binary(column: Column, data_type: DataType) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StructType

    if isinstance(data_type, BinaryType):
        return column
    if isinstance(data_type, StructType | ArrayType | MapType):
        return F.to_json(column, _JSON_OPTIONS).cast("binary")
    # Strings cast to their UTF-8 bytes; anything else goes through its string form first.
    return column.cast("string").cast("binary")


def _project(
    df: DataFrame,
    key: object,
    value: object,
    headers: Sequence[str] | Mapping[str, str | Column] | None,
) -> tuple[DataFrame, tuple[str, ...]]:
    """``df`` as binary columns ``key``, ``value``, ``h0``…, and the header names."""
    if headers is None:
        header_specs: list[tuple[str, object]] = []
    elif isinstance(headers, Mapping):
        header_specs = list(headers.items())
    elif isinstance(headers, str):
        raise ConfigError(f"headers must be a list of column names, not the string {headers!r}")
    else:
        header_specs = [(name, name) for name in headers]
    for name, _ in header_specs:
        if not isinstance(name, str):
            raise ConfigError(f"header names must be str, got {name!r}")
    raw = df.select(
        _column(df, key, "key").alias("key"),
        _column(df, value, "value").alias("value"),
        *[
            _column(df, spec, f"headers[{name!r}]").alias(f"h{i}")
            for i, (name, spec) in enumerate(header_specs)
        ],
    )
    projected = raw.select(
        *[_as_binary(raw[f.name], f.dataType).alias(f.name) for f in raw.schema.fields]
    )
    return projected, tuple(name for name, _ in header_specs)


# --- the two modes -------------------------------------------------------------------------


def _write_from_driver(
    projected: DataFrame,
    topic: str,
    settings: Mapping[str, Any],
    header_names: tuple[str, ...],
    on_error: OnError,
    show: bool,
    txns: Transactions | None = None,
) -> Tally:
    packed = projected.mapInArrow(make_packer(_CHUNK_BYTES), _PACKED_DDL)
    partitions = packed.rdd.getNumPartitions() if show or txns is not None else 0
    total = partitions if show else 0
    if txns is not None:
        txns.partitions = partitions
    bar = _Progress(show, "aioaccum driver", "partitions", total)
    tally = Tally(on_error)

    # Only this generator holds pyspark's iterator: closing it drops the iterator, and pyspark
    # (4.2 and later) then reads the partition in flight to its end, tells Spark to stop and
    # closes its socket, rather than leaving that to the garbage collector. A generator, not a
    # generator expression, so that Spark starts no job before the producer is up.
    def pull(rows: Iterable[Row] | None = None) -> Generator[Chunk]:
        if rows is None:
            rows = packed.toLocalIterator(prefetchPartitions=True)
        for row in rows:
            yield unpack(row[2], header_names, row[0])

    # With transactions worker threads pull the chunks, so Spark's iterator is started here:
    # its jobs then carry this thread's local properties (job group, scheduler pool).
    chunks = pull() if txns is None else pull(packed.toLocalIterator(prefetchPartitions=True))

    def on_chunk(chunk: Chunk) -> None:
        # Spark hands partitions over in order: those before this chunk's are complete.
        bar.update(chunk.task, len(chunk), chunk.payload_bytes)

    completed = False
    try:
        if txns is None:
            # SyncProducer, not the async one: this thread appends each chunk's records itself
            # (scripts/bench_spark_driver.py measured it 4-10% faster for the same chunks).
            produce_from_thread(chunks, topic, settings, tally, on_chunk)
        else:
            # A producer per Spark partition (its transactional id), one after the other.
            prefix = txns.prefix
            txns.prepared = run_coroutine(
                lambda: produce_partitions(chunks, topic, settings, tally, prefix, on_chunk)
            )
        completed = not tally.stop
    finally:
        chunks.close()
        bar.finish(total if completed else None)
    return tally


def _conf_true(df: DataFrame, key: str) -> bool:
    """Whether the Spark setting ``key`` is on for ``df``'s session."""
    return str(df.sparkSession.conf.get(key, "false")).strip().lower() == "true"


def _write_from_executors(
    projected: DataFrame,
    topic: str,
    settings: Mapping[str, Any],
    header_names: tuple[str, ...],
    on_error: OnError,
    show: bool,
    txns: Transactions | None = None,
) -> Tally:
    settings = dict(settings)
    prefix = None if txns is None else txns.prefix

    # Nested, so Spark ships the closure's values, while run_task comes from aioaccum there.
    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from aioaccum.spark.rows import run_task

        return run_task(batches, topic, settings, header_names, on_error, prefix)

    # One RDD for the count and the job: a DataFrame's .rdd plans the query afresh each time,
    # and adaptive execution may give a second plan other partitions.
    rows = projected.mapInArrow(task, RESULT_DDL).rdd
    if txns is not None:
        txns.partitions = rows.getNumPartitions()
        if _conf_true(projected, "spark.speculation"):
            raise ConfigError(
                "exactly_once=True in mode='executors' cannot run with spark.speculation=true: "
                "a speculative copy of a task reuses its transactional id and fences the "
                "attempt whose transaction the driver would commit; turn speculation off for "
                "this job"
            )
    sc = projected.sparkSession.sparkContext
    group = f"aioaccum-{uuid.uuid4().hex[:12]}"
    previous = sc.getLocalProperty("spark.jobGroup.id")
    sc.setLocalProperty("spark.jobGroup.id", group)
    watcher = _TaskWatcher(sc, group, show)
    failed = True
    try:
        # One small row per task, so collecting them all is safe whatever the DataFrame's size.
        results = rows.collect()
        failed = False
    finally:
        sc.setLocalProperty("spark.jobGroup.id", previous)  # type: ignore[arg-type]
        watcher.stop()
        if failed:
            watcher.finish(None, None)  # now, not when the garbage collector gets to the bar
            if txns is not None:
                # Tasks of the failed (or interrupted) job may still run: a task that started
                # its producer after the abort would open a transaction that only its timeout
                # ends. Stop them, and give Spark a moment to.
                try:
                    sc.cancelJobGroup(group)
                    watcher.wait_for_tasks(_TASKS_END_WITHIN_S)
                except Exception as exc:  # the job's own error is the one to raise
                    log.warning("could not stop the failed write's tasks: %r", exc)
    tally = Tally(on_error)
    for row in results:
        if txns is not None:
            prepared = prepared_of(row)
            if prepared is not None:
                txns.prepared.append((row["task"], prepared))
        tally.records += row["records"]
        tally.bytes += row["bytes"]
        tally.failures += row["failures"]
        tally.fatal = tally.fatal or bool(row["fatal"])
        if tally.first_error is None and row["first_error"] is not None:
            tally.first_error = row["first_error"]
        for partition, count in zip(row["kafka_partitions"], row["kafka_counts"], strict=True):
            tally.per_partition[partition] = tally.per_partition.get(partition, 0) + count
    watcher.finish(tally.records, tally.bytes)
    return tally


# --- progress ------------------------------------------------------------------------------


class _Progress:
    """A tqdm bar on stderr: partitions (or tasks) done out of a total, then records, MB and
    records/s. Disabled, it draws nothing and tqdm is not imported."""

    def __init__(self, enabled: bool, label: str, unit: str, total: int | None = None) -> None:
        self._started = time.monotonic()
        self._records = 0
        self._bytes = 0
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError as exc:
            raise ImportError(
                "progress=True draws its bar with tqdm: install aioaccum[spark], or pass "
                "progress=False"
            ) from exc
        # Where stderr is a log rather than a terminal, fewer redraws keep the log short.
        tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._bar = tqdm(
            desc=label,
            total=total or None,
            unit=f" {unit}",
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=_PROGRESS_EVERY_S if tty else 5.0,
        )

    def set_total(self, total: int) -> None:
        if self._bar is not None and (total or None) != self._bar.total:
            self._bar.total = total or None  # 0: no stage known yet
            self._bar.refresh()

    def update(self, done: int, records: int = 0, nbytes: int = 0, *, counts: bool = True) -> None:
        """``records`` and ``nbytes`` more were sent; ``done`` partitions are complete.

        ``counts=False`` while records are known only at the end: none are shown yet.
        """
        self._records += records
        self._bytes += nbytes
        bar = self._bar
        if bar is None:
            return
        if counts:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            bar.set_postfix_str(
                f"{self._records:,} records, {self._bytes / 1e6:.1f} MB, "
                f"{self._records / elapsed:,.0f} rec/s",
                refresh=False,
            )
        bar.update(max(done - bar.n, 0))  # tqdm redraws at most every mininterval

    def finish(
        self,
        done: int | None,
        records: int | None = None,
        nbytes: int | None = None,
        *,
        counts: bool = True,
    ) -> None:
        """End the bar with its final state (``done=None``: as far as it got) and the counts."""
        bar = self._bar
        if bar is None:
            return
        if records is not None:
            self._records = records
        if nbytes is not None:
            self._bytes = nbytes
        self.update(bar.n if done is None else done, counts=counts)
        bar.close()  # draws the bar once more and leaves it on screen


class _TaskWatcher:
    """Progress of ``mode="executors"``: polls Spark's status tracker for the job's tasks."""

    def __init__(self, sc: Any, group: str, enabled: bool) -> None:
        self._sc = sc
        self._group = group
        self._bar = _Progress(enabled, "aioaccum executors", "tasks")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(
                target=self._run, name="aioaccum-spark-progress", daemon=True
            )
            self._thread.start()

    def _stages(self) -> Iterator[Any]:
        """The stages of the group's jobs, as Spark's status tracker knows them now."""
        tracker = self._sc.statusTracker()
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    yield stage

    def _poll(self) -> tuple[int, int]:
        done = total = 0
        for stage in self._stages():
            done += stage.numCompletedTasks
            total += stage.numTasks
        return done, total

    def _run(self) -> None:
        while not self._stopping.wait(_PROGRESS_EVERY_S):
            done, total = self._poll()
            self._bar.set_total(total)
            self._bar.update(done, counts=False)

    def wait_for_tasks(self, timeout: float) -> bool:
        """Wait until no task of the group runs (Spark kills those of a failed job), at most
        ``timeout`` seconds; whether none does."""
        deadline = time.monotonic() + timeout
        while True:
            active = sum(stage.numActiveTasks for stage in self._stages())
            if not active:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def finish(self, records: int | None, nbytes: int | None) -> None:
        """End the bar; ``records=None``: the job failed, so its counts are unknown, and Spark
        is not asked again (it may be what failed)."""
        if self._thread is None:
            return
        if records is None:
            self._bar.finish(None, counts=False)
            return
        done, total = self._poll()
        self._bar.set_total(total)
        self._bar.finish(done, records, nbytes)
