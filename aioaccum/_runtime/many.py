"""The shared outcome of one :meth:`Producer.send_many` call.

A call's records land in one or more batches, possibly of several partitions, which the broker
acknowledges in any order. Each batch reports its share once, as a run of consecutive records
(:meth:`ManyResult.settle_run`); the records that took the per-record path (the first of a new
batch, or a keyed record) are counted per batch result, through one listener on each
(:meth:`ManyResult.track`). Once every accepted record has an outcome, one future gets the
metadata in input order, or the first error. The metadata is built then, in one pass, not
record by record as acknowledgements arrive.

:func:`all_of` joins record futures the same way for a call whose records went one by one
through :meth:`Producer.send` (with interceptors or tracing set).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

from aioaccum._core.cluster import TopicPartition
from aioaccum._core.futures import FutureRecordMetadata, ProduceRequestResult, RecordMetadata

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = ["ManyOutcomes", "ManyResult", "ReadOnRead", "all_of", "position"]

_T = TypeVar("_T")

_new_tuple = tuple.__new__


class ManyResult:
    """Collects the outcomes of one bulk call's records into one future (a ``RunSink``)."""

    __slots__ = (
        "_accepted",
        "_error",
        "_future",
        "_keys",
        "_runs",
        "_settled",
        "_single_futures",
        "_single_results",
        "_singles",
        "_timestamp",
        "_values",
        "_waits",
    )

    def __init__(
        self,
        future: asyncio.Future[Sequence[RecordMetadata]],
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
    ) -> None:
        self._future = future
        self._timestamp = timestamp
        self._keys = keys
        self._values = values
        self._runs: list[tuple[int, int, TopicPartition, int, int]] = []
        self._singles: list[int] = []
        # The records that went one by one (keyed, or the first of a new batch): their input
        # index and future, and how many of them wait on each batch result. One listener per
        # batch, not a callback per record: with keys over many partitions a call has a record
        # of its own in nearly every batch, and per-record callbacks were objects the garbage
        # collector walked until the call ended.
        self._single_futures: list[FutureRecordMetadata] = []
        # The batch result each of them is counted on (a split moves records to new ones).
        self._single_results: list[ProduceRequestResult] = []
        self._waits: dict[ProduceRequestResult, int] = {}
        if cython.compiled:
            # Indexes and record futures (not tracked themselves), a thousand per call, kept by
            # the call's result: the collector's full passes need not visit them (_cgc.pxd).
            gc_untrack(self._singles)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
            gc_untrack(self._single_futures)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
        self._settled = 0
        self._error: BaseException | None = None
        self._accepted = -1  # unknown until seal()

    # --- the RunSink protocol, called by batches

    def settle_run(
        self, first: int, count: int, tp: TopicPartition, base_offset: int, log_append_time: int
    ) -> None:
        self._runs.append((first, count, tp, base_offset, log_append_time))
        self._settle(count)

    def fail_run(self, first: int, count: int, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._settle(count)

    def sink_for(self, index: int) -> _Slot:
        """A done-callback for record ``index`` (the records of a run whose batch was split,
        or an Arrow row sent alone)."""
        return _Slot(self, index)

    def track(self, index: int, future: FutureRecordMetadata) -> None:
        """Count ``future`` (record ``index`` of the call) in when its batch ends."""
        result = future._result
        self._singles.append(index)
        self._single_futures.append(future)
        self._single_results.append(result)
        self._wait_on(result, 1)

    def _wait_on(self, result: ProduceRequestResult, count: int) -> None:
        waits = self._waits
        if result in waits:
            waits[result] += count
        elif result.done:
            self._settle_result(result, count)
        else:
            waits[result] = count
            result.add_listener(self._batch_ended)

    def _batch_ended(self, result: ProduceRequestResult) -> None:
        count = self._waits.pop(result, 0)
        if result.done:
            self._settle_result(result, count)
            return
        # Split: its records moved to new batches, which their futures now point at.
        results = self._single_results
        for i, future in enumerate(self._single_futures):
            if results[i] is result:
                results[i] = future._result
                self._wait_on(future._result, 1)

    def _settle_result(self, result: ProduceRequestResult, count: int) -> None:
        if result.error is not None and self._error is None:
            for future in self._single_futures:  # the error as a record of it reads it
                if future._result is result:
                    self._error = future.exception()
                    break
        self._settle(count)

    # --- the producer's side

    def seal(self, accepted: int) -> None:
        """No more records: the first ``accepted`` went in (fewer than all after an error).

        Records past ``accepted`` never reached a batch, so they never settle.
        """
        self._accepted = accepted
        self._settle(0)

    def _settle(self, count: int) -> None:
        self._settled += count
        if self._settled != self._accepted or self._future.done():
            return
        if self._error is not None:
            self._future.set_exception(self._error)
        else:
            self._future.set_result(self._build())

    def _build(self) -> ManyOutcomes:
        runs = sorted(self._runs, key=_first)
        singles = self._singles
        futures = self._single_futures
        if any(singles[i] > singles[i + 1] for i in range(len(singles) - 1)):
            # Records of a split run report through slots, in the order their batches end.
            order = sorted(range(len(singles)), key=singles.__getitem__)
            singles = [singles[i] for i in order]
            futures = [futures[i] for i in order]
        return ManyOutcomes(self._timestamp, self._keys, self._values, runs, singles, futures)


# (first input index, count, the batch's topic-partition, base offset, log-append time)
Segment = tuple[int, int, TopicPartition, int, int]


def _first(segment: Segment) -> int:
    return segment[0]


class ReadOnRead(Sequence[_T]):
    """A sequence whose items are built when read; compares equal to a list of the same items."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are not hashable

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} records>"


class ManyOutcomes(ReadOnRead[RecordMetadata]):
    """The metadata of a ``send_many`` call's records, in input order, each built when read.

    Kept as one entry per batch for the records that went in runs, and as the input index and
    future of each record that went one by one (keyed records: nearly all of a keyed call). No
    tuple or metadata is made per record until it is read, so results kept by the hundred hold
    no millions of objects for the collector to walk (record futures are not tracked by it).
    """

    __slots__ = ("_count", "_firsts", "_keys", "_runs", "_single_futures", "_singles",
                 "_timestamp", "_values")

    def __init__(
        self,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        runs: list[Segment],
        singles: list[int],
        single_futures: list[FutureRecordMetadata],
    ) -> None:
        self._timestamp = timestamp
        self._keys = keys
        self._values = values
        self._runs = runs
        self._firsts = [run[0] for run in runs]
        self._singles = singles
        self._single_futures = single_futures
        self._count = len(singles) + sum(run[1] for run in runs)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = position(index, len(self), "record")
        singles = self._singles
        at = bisect.bisect_left(singles, index)
        if at < len(singles) and singles[at] == index:
            return self._single_futures[at].result()
        return self._metadata(self._runs[bisect.bisect_right(self._firsts, index) - 1], index)

    def __iter__(self) -> Iterator[RecordMetadata]:
        metadata = self._metadata
        singles = self._singles
        futures = self._single_futures
        at = 0  # the next single
        for run in self._runs:
            first = run[0]
            while at < len(singles) and singles[at] < first:
                yield futures[at].result()
                at += 1
            for index in range(first, first + run[1]):
                yield metadata(run, index)
        for future in futures[at:]:
            yield future.result()

    def partition_counts(self) -> dict[int, int]:
        """How many records went to each partition, from the batches (no metadata built)."""
        counts: dict[int, int] = {}
        for run in self._runs:
            partition = run[2].partition
            counts[partition] = counts.get(partition, 0) + run[1]
        for future in self._single_futures:
            partition = future._result.partition
            counts[partition] = counts.get(partition, 0) + 1
        return counts

    def _metadata(self, segment: Segment, index: int) -> RecordMetadata:
        first, _, (topic, partition), base_offset, log_append_time = segment
        key = None if self._keys is None else self._keys[index]
        value = self._values[index]
        return _new_tuple(
            RecordMetadata,
            (
                topic,
                partition,
                -1 if base_offset < 0 else base_offset + index - first,
                self._timestamp if log_append_time < 0 else log_append_time,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
            ),
        )

class _Slot:
    """Reports one record through a done-callback on its future."""

    __slots__ = ("_index", "_owner")

    def __init__(self, owner: ManyResult, index: int) -> None:
        self._owner = owner
        self._index = index

    def __call__(self, future: FutureRecordMetadata) -> None:
        owner = self._owner
        error = future.exception()  # the record's own future is never cancelled
        if error is not None:
            if owner._error is None:
                owner._error = error
        else:
            owner._singles.append(self._index)
            owner._single_futures.append(future)
            owner._single_results.append(future._result)
        owner._settle(1)


def position(index: int, size: int, what: str) -> int:
    """``index`` into a sequence of ``size`` items, negative counting from the end, as a list
    reads it. Raises ``IndexError`` naming ``what`` the items are."""
    at = index + size if index < 0 else index
    if not 0 <= at < size:
        raise IndexError(f"{what} index {index} out of range for {size} {what}s")
    return at


def all_of(
    loop: asyncio.AbstractEventLoop, futures: list[FutureRecordMetadata]
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """One future of every record's metadata in order, or of the first error (in input order)
    once all have ended. Cancelling it leaves the records alone."""
    combined: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
    remaining = len(futures)
    if not remaining:
        combined.set_result([])
        return combined

    def one_done(_: object) -> None:
        # The record futures are this call's own: nobody else can cancel them.
        nonlocal remaining
        remaining -= 1
        if remaining or combined.done():
            return
        for future in futures:
            error = future.exception()
            if error is not None:
                combined.set_exception(error)
                return
        combined.set_result([future.result() for future in futures])

    for future in futures:
        future.add_done_callback(one_done)
    return combined
