"""The shared outcome of one :meth:`Producer.send_many` call.

A call's records land in one or more batches, possibly of several partitions, which the broker
acknowledges in any order. Each batch reports its share once, as a run of consecutive records
(:meth:`ManyResult.settle_run`); a record that took the per-record path (the first of a new
batch, or a keyed record) reports through a :class:`_Slot`, a done-callback on its record
future. Once every accepted record has an outcome, one future gets the metadata in input order,
or the first error. The metadata is built then, in one pass, not record by record as
acknowledgements arrive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aioaccum._core.cluster import TopicPartition
from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata

__all__ = ["ManyResult"]

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
        "_singles",
        "_timestamp",
        "_values",
    )

    def __init__(
        self,
        future: asyncio.Future[list[RecordMetadata]],
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
    ) -> None:
        self._future = future
        self._timestamp = timestamp
        self._keys = keys
        self._values = values
        self._runs: list[tuple[int, int, TopicPartition, int, int]] = []
        self._singles: list[tuple[int, RecordMetadata]] = []
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
        return _Slot(self, index)

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

    def _build(self) -> list[RecordMetadata]:
        keys, values = self._keys, self._values
        out: list[RecordMetadata | None] = [None] * self._accepted
        for first, count, (topic, partition), base_offset, log_append_time in self._runs:
            timestamp = self._timestamp if log_append_time < 0 else log_append_time
            for j in range(count):
                i = first + j
                key, value = None if keys is None else keys[i], values[i]
                out[i] = _new_tuple(
                    RecordMetadata,
                    (
                        topic,
                        partition,
                        -1 if base_offset < 0 else base_offset + j,
                        timestamp,
                        -1 if key is None else len(key),
                        -1 if value is None else len(value),
                    ),
                )
        for i, metadata in self._singles:
            out[i] = metadata
        return out  # type: ignore[return-value]  # every accepted record settled


class _Slot:
    """Reports one record that took the per-record path: a done-callback on its future."""

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
            owner._singles.append((self._index, future.result()))
        owner._settle(1)
