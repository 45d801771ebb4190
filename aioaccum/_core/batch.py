"""ProducerBatch: the records bound for one partition, and their shared outcome.

A port of Kafka's ``ProducerBatch`` and ``ProduceRequestResult``. A batch wraps a
:class:`MemoryRecordsBuilder` that writes into a buffer borrowed from the pool, keeps one small
entry per record (its future and the sizes that go into its ``RecordMetadata``), and ends exactly
once: succeeded, failed or aborted. The batch never creates futures and never reads the clock; the
caller hands it both, so it stays a plain object that tests can drive synchronously.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from aioaccum._core.cluster import TopicPartition
from aioaccum._core.codecs import CompressionType
from aioaccum._core.records import MemoryRecordsBuilder

if TYPE_CHECKING:
    from aioaccum._core.records import Header

__all__ = [
    "FinalState",
    "ProduceRequestResult",
    "ProducerBatch",
    "RecordMetadata",
    "ResultSink",
]


class RecordMetadata(NamedTuple):
    """Where the broker put a record (Kafka's ``RecordMetadata``).

    ``offset`` is -1 when the broker gave none (``acks=0``); ``timestamp`` is the log-append time
    when the topic uses it, else the record's own create time.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


_new_tuple = tuple.__new__


class ResultSink(Protocol):
    """What a batch resolves per record: an ``asyncio.Future`` satisfies it.

    The protocol keeps this module free of asyncio: the producer makes the futures.
    """

    def done(self) -> bool: ...

    def set_result(self, result: RecordMetadata, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class RunSink(Protocol):
    """Where a bulk append's records learn their outcome: one call per batch, not per record.

    Indexes are positions in the bulk call's input; ``count`` records from ``first`` went into
    one batch in order.
    """

    def settle_run(
        self, first: int, count: int, tp: TopicPartition, base_offset: int, log_append_time: int
    ) -> None: ...

    def fail_run(self, first: int, count: int, error: BaseException) -> None: ...

    def sink_for(self, index: int) -> ResultSink:
        """A per-record sink, for when the batch is split and its records move."""
        ...


# The thunk of a record that belongs to a run: its outcome goes to the run, not to a sink.
_RUN_THUNK: tuple[int, int, int] = (-1, -1, -1)


class FinalState(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"


class ProduceRequestResult:
    """The outcome every record of one batch shares (Kafka's ``ProduceRequestResult``)."""

    __slots__ = ("base_offset", "error", "log_append_time", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None


class ProducerBatch:
    """Records for one topic-partition, built in one pooled buffer.

    Times (``created``, ``last_attempt``, ``drained``) are in the caller's clock, in seconds.
    """

    __slots__ = (
        "_final_state",
        "_runs",
        "_sinks",
        "_thunks",
        "attempts",
        "backoff",
        "base_sequence",
        "buffer",
        "builder",
        "closed",
        "created",
        "drained",
        "from_pool",
        "in_retry",
        "last_attempt",
        "result",
        "split_into",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        builder: MemoryRecordsBuilder,
        now: float,
        *,
        from_pool: bool = True,
    ) -> None:
        self.tp = tp
        self.from_pool = from_pool
        self.backoff = 0.0
        self.builder = builder
        # The pooled buffer is kept apart from the builder: the builder may spill into a bigger
        # bytearray, but it is this object that goes back to the pool.
        self.buffer = builder.buffer
        self.created = now
        self.last_attempt = now
        self.drained = now
        self.attempts = 0
        self.in_retry = False
        self.base_sequence = -1
        self.split_into: list[ProducerBatch] | None = None
        self.result = ProduceRequestResult(tp)
        # Per record, in parallel: its result sink, and (timestamp, key size, value size). The
        # thunks hold only ints, so the garbage collector stops tracking them after one pass;
        # with the future inside, each would be walked by every full collection while the
        # caller keeps its futures (a million records: seconds of collector time).
        self._sinks: list[ResultSink | None] = []
        self._thunks: list[tuple[int, int, int]] = []
        # (sink, first input index, offset delta of its first record, count) per bulk run.
        self._runs: list[tuple[RunSink, int, int, int]] = []
        self.closed = False
        self._final_state: FinalState | None = None

    # --- appending

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        sink: ResultSink | None,
    ) -> bool:
        """Append one record if it fits; the first record of a batch always does."""
        if self.closed or self.builder.try_append(timestamp, key, value, headers) < 0:
            return False
        # A plain tuple: this runs once per record, and a NamedTuple costs twice as much.
        self._sinks.append(sink)
        self._thunks.append(
            (timestamp, -1 if key is None else len(key), -1 if value is None else len(value))
        )
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
        thunks = self._thunks
        add = thunks.append
        first_delta = len(thunks)
        no_headers: tuple[()] = ()
        index = start
        stop = len(values)
        # Runs until a record does not fit: that one is encoded in vain, once per batch.
        while index < stop:
            key = None if keys is None else keys[index]
            if append(timestamp, key, values[index], no_headers) < 0:
                break
            add(_RUN_THUNK)
            index += 1
        if index > start:
            self._sinks.extend([None] * (index - start))
            self._runs.append((run, start, first_delta, index - start))
        return index - start

    @property
    def record_count(self) -> int:
        return len(self._thunks)

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
        """Exactly the bytes this batch wrote: never the stale tail of a reused buffer."""
        return self.builder.build()

    def set_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        self.base_sequence = base_sequence
        self.builder.set_producer_state(producer_id, epoch, base_sequence)

    # --- retries and timing

    def reenqueued(self, now: float, backoff: float) -> None:
        self.backoff = backoff
        self.attempts += 1
        self.last_attempt = now
        self.drained = now
        self.in_retry = True

    def mark_drained(self, now: float) -> None:
        self.drained = now

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
        if not self._set_final_state(FinalState.SUCCEEDED):
            return False
        self.result.base_offset = base_offset
        self.result.log_append_time = log_append_time
        topic, partition = self.tp
        make = _new_tuple  # RecordMetadata's own __new__ is a Python function; this is not
        md_type = RecordMetadata
        offset = base_offset
        step = 0 if base_offset < 0 else 1
        for sink, (timestamp, key_size, value_size) in zip(self._sinks, self._thunks, strict=True):
            if sink is not None and not sink.done():
                sink.set_result(
                    make(
                        md_type,
                        (
                            topic,
                            partition,
                            offset,
                            timestamp if log_append_time < 0 else log_append_time,
                            key_size,
                            value_size,
                        ),
                    )
                )
            offset += step
        for run, first, delta, count in self._runs:
            run.settle_run(
                first, count, self.tp, -1 if base_offset < 0 else base_offset + delta,
                log_append_time,
            )
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
        self.result.error = error
        for sink in self._sinks:
            if sink is not None and not sink.done():
                # One copy per record: a traceback attached while one caller handles it must not
                # leak into another caller's exception. The cause is kept by hand: copy drops it.
                own = copy.copy(error)
                own.__cause__ = error.__cause__
                sink.set_exception(own)
        for run, first, _delta, count in self._runs:
            own = copy.copy(error)
            own.__cause__ = error.__cause__
            run.fail_run(first, count, own)
        return True

    def _set_final_state(self, state: FinalState) -> bool:
        current = self._final_state
        if current is None:
            self._final_state = state
            return True
        if current is FinalState.SUCCEEDED:
            raise RuntimeError(
                f"batch for {self.tp} already succeeded; cannot move to {state.name}"
            )
        # FAILED/ABORTED -> anything else: the first outcome stands (e.g. a late response).
        return False

    # --- splitting

    def split_records(self) -> Iterator[tuple[int, bytes | None, bytes | None, list[Header],
                                              ResultSink | None]]:
        """Yield each record with its own result sink, for re-batching after MESSAGE_TOO_LARGE."""
        sinks = list(self._sinks)
        for run, first, delta, count in self._runs:
            for j in range(count):
                sinks[delta + j] = run.sink_for(first + j)
        for (timestamp, key, value, headers), sink in zip(
            self.builder.iter_records(), sinks, strict=True
        ):
            yield timestamp, key, value, list(headers), sink

    @property
    def is_finished(self) -> bool:
        """Ended, and so have the batches it was split into: what flush waits for."""
        if self._final_state is None:
            return False
        return self.split_into is None or all(p.is_finished for p in self.split_into)

    def detach_sinks(self) -> None:
        """Forget the record sinks once the records moved to new batches by a split."""
        self._sinks = [None] * len(self._sinks)
        self._runs = []

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
