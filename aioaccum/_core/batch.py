"""ProducerBatch: the records bound for one partition, and their shared outcome.

A port of Kafka's ``ProducerBatch``. A batch wraps a :class:`MemoryRecordsBuilder` that writes into
a buffer borrowed from the pool, hands each appended record a :class:`FutureRecordMetadata` that
points at the batch's one :class:`ProduceRequestResult`, and ends exactly once: succeeded, failed or
aborted. Ending is one assignment on the shared result, whatever the number of records. The batch
never reads the clock; the caller hands it the time and the loop its result reports on, so it
stays a plain object that tests can drive synchronously.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from aioaccum._core.cluster import TopicPartition
from aioaccum._core.codecs import CompressionType
from aioaccum._core.futures import (
    CallbackLoop,
    FutureRecordMetadata,
    ProduceRequestResult,
    RecordFuture,
    RecordMetadata,
    ThreadRecordFuture,
    fresh_error,
)
from aioaccum._core.records import MemoryRecordsBuilder

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

if TYPE_CHECKING:
    from aioaccum._core.arrow import ArrowRows
    from aioaccum._core.records import Header

# The record future and the batch result live in aioaccum._core.futures; import them from there
# (compiled, this module holds them as C types, not as attributes).
__all__ = [
    "FinalState",
    "ProducerBatch",
    "RecordMetadata",
    "RunSink",
    "abort_quietly",
    "append_moved",
    "first_unfinished",
]


class RunSink(Protocol):
    """Where a bulk append's records learn their outcome: one call per batch, not per record.

    Indexes are positions in the bulk call's input; ``count`` records from ``first`` went into
    one batch in order.
    """

    def settle_run(
        self, first: int, count: int, tp: TopicPartition, base_offset: int, log_append_time: int
    ) -> None: ...

    def fail_run(self, first: int, count: int, error: BaseException) -> None: ...

    def sink_for(self, index: int) -> Callable[[FutureRecordMetadata], object]:
        """A done-callback for one record, for when the batch is split and its records move."""
        ...


class FinalState(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"


# Read once per batch that ends: a module constant is a cached lookup, where the enum's
# attribute goes through its class's attribute hook.
_SUCCEEDED = FinalState.SUCCEEDED


class ProducerBatch:
    """Records for one topic-partition, built in one pooled buffer.

    Times (``created``, ``last_attempt``, ``drained``) are in the caller's clock, in seconds.
    """

    __slots__ = (
        "_builder_append",
        "_final_state",
        "_futures",
        "_runs",
        "attempts",
        "backoff",
        "base_sequence",
        "buffer",
        "builder",
        "closed",
        "created",
        "from_pool",
        "last_attempt",
        "possibly_written",
        "result",
        "split_into",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        builder: MemoryRecordsBuilder,
        now: float,
        loop: CallbackLoop | None = None,
        from_pool: bool = True,
    ) -> None:
        self.tp = tp
        self.from_pool = from_pool
        self.backoff = 0.0
        self.builder = builder
        # The pooled buffer is kept apart from the builder: the builder may spill into a bigger
        # bytearray, but it is this object that goes back to the pool (with incremental
        # allocation, the first of the chunks: builder.chunks lists them all).
        self.buffer = builder.buffer
        # Looked up once: by name on every append it cost as much as a tenth of an append.
        # The class's function, not a bound method: that would be one more object per batch
        # for the garbage collector to walk (_cgc.pxd).
        self._builder_append = type(builder).try_append
        self.created = now
        self.last_attempt = now
        self.attempts = 0
        self.base_sequence = -1
        # Sent at least once without a definite answer: the broker may hold it already.
        self.possibly_written = False
        self.split_into: list[ProducerBatch] | None = None
        self.result = ProduceRequestResult(tp, loop)
        # Each record's future (None for records of a bulk run): kept only so that a split can
        # point them at the batches their records move to.
        self._futures: list[RecordFuture | None] = []
        # (sink, first input index, offset delta of its first record, count) per bulk run;
        # None until the first, as most batches take records one by one.
        self._runs: list[tuple[RunSink, int, int, int]] | None = None
        self.closed = False
        self._final_state: FinalState | None = None
        if cython.compiled:
            # The batch and its record list live until the batch ends and point at nothing
            # that points back (_cgc.pxd says why they leave the collector).
            gc_untrack(self)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
            gc_untrack(self._futures)  # type: ignore[name-defined,unused-ignore]  # noqa: F821

    # --- appending

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        for_thread: bool = False,
    ) -> RecordFuture | None:
        """Append one record if it fits (the first record of a batch always does).

        Returns:
            The record's future (a :class:`ThreadRecordFuture` if ``for_thread``, else a
            :class:`FutureRecordMetadata`), or ``None`` if the record did not fit.
        """
        if self.closed:
            return None
        delta = self._builder_append(self.builder, timestamp, key, value, headers)
        if delta < 0:
            return None
        # Filled in place rather than through __init__: compiled, this skips argument parsing.
        future: RecordFuture
        if for_thread:
            future = ThreadRecordFuture.__new__(ThreadRecordFuture)
        else:
            future = FutureRecordMetadata.__new__(FutureRecordMetadata)
        future._result = self.result
        future._relative_offset = delta
        future._timestamp = timestamp
        future._key_size = -1 if key is None else len(key)
        future._value_size = -1 if value is None else len(value)
        future._cancelled = False
        future._blocking = False
        self._futures.append(future)
        return future

    def try_append_moved(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        future: RecordFuture,
    ) -> bool:
        """Append a record that a split took out of another batch, keeping its future."""
        if self.closed:
            return False
        delta = self.builder.try_append(timestamp, key, value, headers)
        if delta < 0:
            return False
        future.retarget(self.result, delta)
        self._futures.append(future)
        return True

    def try_append_many(
        self,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        run: RunSink,
    ) -> int:
        """Append ``values[start:]`` (with their ``keys``) until the batch is full.

        The bulk form of :meth:`try_append`: one call per batch instead of one per record, and
        one outcome per batch for ``run`` instead of one result sink per record.

        Returns:
            How many records went in (0 if none fit; the first of a batch always does).
        """
        if self.closed:
            return 0
        append = self.builder.try_append
        first_delta = self.builder.num_records
        no_headers: tuple[()] = ()
        index = start
        stop = len(values)
        # Runs until a record does not fit: that one is encoded in vain, once per batch.
        while index < stop:
            key = None if keys is None else keys[index]
            if append(timestamp, key, values[index], no_headers) < 0:
                break
            index += 1
        if index > start:
            self._futures.extend([None] * (index - start))
            self._add_run((run, start, first_delta, index - start))
        return index - start

    def try_append_rows(
        self, timestamp: int, rows: ArrowRows, start: int, stop: int, run: RunSink
    ) -> int:
        """:meth:`try_append_many` for Arrow rows: positions ``[start, stop)`` of ``rows``
        (see :mod:`aioaccum._core.arrow`), ``run`` told of them by position."""
        if self.closed:
            return 0
        first_delta = self.builder.num_records
        appended = rows.append_to(self.builder, timestamp, start, stop)
        if appended:
            self._futures.extend([None] * appended)
            self._add_run((run, start, first_delta, appended))
        return appended

    def _add_run(self, run: tuple[RunSink, int, int, int]) -> None:
        if self._runs is None:
            self._runs = [run]
        else:
            self._runs.append(run)

    @property
    def record_count(self) -> int:
        return self.builder.num_records

    @property
    def is_full(self) -> bool:
        return self.builder.is_full

    @property
    def estimated_size_in_bytes(self) -> int:
        return self.builder.estimated_size_in_bytes

    def close(self) -> None:
        """Stop appends and seal the bytes (compression, header, CRC)."""
        self.closed = True
        self.builder.close()

    @property
    def is_closed(self) -> bool:
        return self.closed

    def records(self) -> memoryview:
        """Exactly the bytes this batch wrote: never the stale tail of a reused buffer.

        One contiguous view: a batch in chunks is joined (a copy), so the send path takes
        :meth:`record_parts` instead.
        """
        return self.builder.build()

    def record_parts(self) -> list[memoryview]:
        """The batch's bytes in order, the 61-byte header at the front, as the buffers that
        hold them: one view per pooled chunk (one in all with ``full`` allocation). Hand them
        to ``transport.writelines`` as they are; they stay valid until the batch is
        deallocated."""
        return self.builder.build_parts()

    def request_entry(self) -> tuple[TopicPartition, list[memoryview]]:
        """``(tp, record_parts())``: what a produce request carries for this batch, kept
        while the request is in flight."""
        entry = (self.tp, self.builder.build_parts())
        if cython.compiled:
            gc_untrack(entry)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
        return entry

    def set_producer_state(
        self, producer_id: int, epoch: int, base_sequence: int, transactional: bool = False
    ) -> None:
        self.base_sequence = base_sequence
        self.builder.set_producer_state(producer_id, epoch, base_sequence, transactional)

    # --- retries and timing

    def reenqueued(self, now: float, backoff: float) -> None:
        self.backoff = backoff
        self.attempts += 1
        self.last_attempt = now

    def has_reached_delivery_timeout(self, delivery_timeout: float, now: float) -> bool:
        return now - self.created >= delivery_timeout

    # --- completion

    @property
    def final_state(self) -> FinalState | None:
        return self._final_state

    @property
    def is_done(self) -> bool:
        return self._final_state is not None

    def complete(self, base_offset: int, log_append_time: int) -> bool:
        """Resolve every record with its offset. Returns False if the batch had already ended."""
        if not self._set_final_state(_SUCCEEDED):
            return False
        # One assignment for every record future; their metadata is built when read.
        self.result.set(base_offset, log_append_time, None)
        for run, first, delta, count in self._runs or ():
            run.settle_run(
                first, count, self.tp, -1 if base_offset < 0 else base_offset + delta,
                log_append_time,
            )
        self._futures = []
        return True

    def fail(self, error: BaseException) -> bool:
        """Fail every record with its own copy of ``error``. False if already ended."""
        return self._finish_with_error(FinalState.FAILED, error)

    def abort(self, error: BaseException) -> bool:
        """End the batch without sending it (close, or a fatal producer error)."""
        return self._finish_with_error(FinalState.ABORTED, error)

    def _finish_with_error(self, state: FinalState, error: BaseException) -> bool:
        if not self._set_final_state(state):
            return False
        # Each reader of a record future gets its own copy (see futures.fresh_error).
        self.result.set(-1, -1, error)
        for run, first, _delta, count in self._runs or ():
            run.fail_run(first, count, fresh_error(error))
        self._futures = []
        return True

    def _set_final_state(self, state: FinalState) -> bool:
        current = self._final_state
        if current is None:
            self._final_state = state
            return True
        if current is _SUCCEEDED:
            raise RuntimeError(
                f"batch for {self.tp} already succeeded; cannot move to {state.name}"
            )
        # FAILED/ABORTED -> anything else: the first outcome stands (e.g. a late response).
        return False

    # --- splitting

    def split_records(
        self,
    ) -> Iterator[tuple[int, bytes | None, bytes | None, list[Header], RecordFuture | None,
                        Callable[[FutureRecordMetadata], object] | None]]:
        """Each record with its future, or (for a bulk run's record) the callback that reports
        it, for re-batching after MESSAGE_TOO_LARGE."""
        futures = list(self._futures)
        callbacks: list[Callable[[FutureRecordMetadata], object] | None] = [None] * len(futures)
        for run, first, delta, count in self._runs or ():
            for j in range(count):
                callbacks[delta + j] = run.sink_for(first + j)
        for (timestamp, key, value, headers), future, callback in zip(
            self.builder.iter_records(), futures, callbacks, strict=True
        ):
            yield timestamp, key, value, list(headers), future, callback

    @property
    def is_finished(self) -> bool:
        """Ended, and so have the batches it was split into: what flush waits for."""
        if self._final_state is None:
            return False
        return self.split_into is None or all(p.is_finished for p in self.split_into)

    def detach_records(self) -> None:
        """Forget the records once a split moved them (and their callbacks) to new batches."""
        self._futures = []
        self._runs = None
        self.result.hand_over()

    @property
    def compression(self) -> CompressionType:
        return self.builder.compression

    def __repr__(self) -> str:
        state = self._final_state.name if self._final_state else "open"
        if self.is_closed and self._final_state is None:
            state = "closed"
        return (
            f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={self.record_count} "
            f"bytes~{self.estimated_size_in_bytes} attempts={self.attempts} {state}>"
        )


def abort_quietly(batch: ProducerBatch, error: BaseException) -> bool:
    """Abort a batch on the way out. Sealing its bytes is skipped: an abort sends nothing, and
    the failure being cleaned up may be the codec itself."""
    batch.closed = True
    return batch.abort(error)


def append_moved(
    batch: ProducerBatch,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    future: RecordFuture | None,
    callback: Callable[[FutureRecordMetadata], object] | None,
) -> bool:
    """Append a record a split moved: its future follows it; a bulk run's record gets a new
    future that reports to the run."""
    if future is not None:
        return batch.try_append_moved(timestamp, key, value, headers, future)
    new = batch.try_append(timestamp, key, value, headers)
    if new is None:
        return False
    if callback is not None:
        cast(FutureRecordMetadata, new).add_done_callback(callback)
    return True


def first_unfinished(batches: Sequence[ProducerBatch], start: int) -> int:
    """The index of the first batch from ``start`` on that has not finished (``len`` if none).

    A finished batch stays finished, so a wait on many batches resumes where its last check
    stopped: a flush of n batches reads ``is_finished`` O(n) times in all, not once per batch
    per wake-up.
    """
    i = start
    while i < len(batches) and batches[i].is_finished:
        i += 1
    return i
