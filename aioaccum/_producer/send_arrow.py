"""``Producer.send_arrow``: Arrow rows to record batches, one future for them all.

Theory of operation
-------------------
The Arrow form of ``send_many``. The columns are checked first
(:func:`~aioaccum._core.arrow.arrow_columns`), every record's size too, and then each topic's
metadata is waited for, so a bad column, a record too large or a partition out of range refuses
the call whole. :meth:`ArrowRows.plan <aioaccum._core.arrow.ArrowRows.plan>` sorts the rows by
partition choice; each group goes into the open batch of its partition a batch at a time
(``RecordAccumulator.append_rows``), and the first record of each new batch through
``append``, as a Python object, the one per batch. Outcomes are collected by position in the
plan (:class:`~aioaccum._runtime.many.ManyResult`) and handed back in row order
(:class:`ArrowOutcomes`).

Rows that go to one partition (by the ``partition`` column or by key) keep their row order;
keyless rows of a topic go, in their order, after its keyed ones.

With interceptors or tracing set, or a custom partitioner, the rows go through
:meth:`~aioaccum.Producer.send_records` as Python objects instead (each record sees its hooks
and the partitioner), with the same columns, checks and result.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, overload

from aioaccum._core.accumulator import BufferRequest
from aioaccum._core.arrow import ArrowRows, arrow_columns
from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._core.validate import checked_timestamp
from aioaccum._producer.send_many import RECORD_BOUND, BulkSender
from aioaccum._runtime.many import ManyOutcomes, ManyResult, ReadOnRead, position

if TYPE_CHECKING:
    from aioaccum._kafka.adapter import KafkaAdapter
    from aioaccum._runtime.send_records import RecordLike

__all__ = ["ArrowOutcomes", "ArrowSender", "send_arrow"]


class ArrowSender(BulkSender, Protocol):
    """What send_arrow uses of the producer besides the bulk path's parts."""

    @property
    def _hooks(self) -> object: ...

    async def send_records(
        self, records: Iterable[RecordLike]
    ) -> asyncio.Future[Sequence[RecordMetadata]]: ...


class _NoBytes(Sequence[None]):
    """Stands for the keys and values of a plan's positions: ArrowOutcomes gives the sizes."""

    __slots__ = ()

    def __len__(self) -> int:
        return 0

    @overload
    def __getitem__(self, index: int) -> None: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[None]: ...

    def __getitem__(self, index: int | slice) -> Sequence[None] | None:
        return None


_NO_BYTES = _NoBytes()


class ArrowOutcomes(ReadOnRead[RecordMetadata]):
    """The metadata of a ``send_arrow`` call's rows, in row order, each built when read."""

    __slots__ = ("_by_position", "_rows")

    def __init__(self, by_position: Sequence[RecordMetadata], rows: ArrowRows) -> None:
        self._by_position = by_position
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = position(index, len(self), "row")
        rows = self._rows
        metadata = self._by_position[rows.position_of(index)]
        return metadata._replace(
            serialized_key_size=rows.key_size(index),
            serialized_value_size=rows.value_size(index),
        )

    def __iter__(self) -> Iterator[RecordMetadata]:
        for row in range(len(self)):
            yield self[row]

    def partition_counts(self) -> dict[int, int]:
        """How many rows went to each partition (of whichever topic), without building each
        row's metadata."""
        by_position = self._by_position
        if isinstance(by_position, ManyOutcomes):
            return by_position.partition_counts()
        counts: dict[int, int] = {}
        for metadata in by_position:
            counts[metadata.partition] = counts.get(metadata.partition, 0) + 1
        return counts


def _in_row_order(
    inner: asyncio.Future[Sequence[RecordMetadata]],
    outer: asyncio.Future[Sequence[RecordMetadata]],
    rows: ArrowRows,
) -> None:
    if outer.done():
        return  # the caller cancelled it: delivery goes on regardless
    error = inner.exception()
    if error is not None:
        outer.set_exception(error)
    else:
        outer.set_result(ArrowOutcomes(inner.result(), rows))


async def send_arrow(
    producer: ArrowSender, data: Any, topic: str | None
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """What ``Producer.send_arrow`` does (see there and docs/arrow.md)."""
    columns = arrow_columns(data, topic)
    rows = ArrowRows(columns)
    if producer._hooks is not None or not producer._sticky:
        return await producer.send_records(rows.records())
    return await _send_rows(producer, rows)


async def _send_rows(
    producer: BulkSender, rows: ArrowRows
) -> asyncio.Future[Sequence[RecordMetadata]]:
    timestamp = checked_timestamp(None)  # one create time for the call, as send_many
    parts = producer._parts
    if parts is None or parts[2].fatal_error is not None:
        parts = producer._running_parts()
    kafka, acc, sender = parts
    loop = producer._loop
    assert loop is not None  # set by start(), which made _parts
    too_large = rows.first_too_large(producer._max_record_size)
    if too_large >= 0:
        producer._raise_too_large(too_large)
    count = len(rows)
    inner: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
    outer: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
    inner.add_done_callback(lambda done: _in_row_order(done, outer, rows))
    outcome = ManyResult(inner, timestamp, None, _NO_BYTES)
    if not count:
        outcome.seal(0)
        return outer

    topic_partitions: list[Sequence[int]] = []
    blocks: list[float] = []
    for name in rows.topics:
        partitions, max_block_ms = await _partitions(producer, kafka, name)
        topic_partitions.append(partitions)
        blocks.append(max_block_ms)
    groups = rows.plan([len(p) for p in topic_partitions], producer._ignore_keys)
    context = contextvars.copy_context()
    accepted = 0
    try:
        for topic_index, choice, start, stop in groups:
            topic = rows.topics[topic_index]
            partitions = topic_partitions[topic_index]
            partition = None if choice < 0 else choice
            position = start
            while position < stop:
                in_run = acc.append_rows(
                    topic, partition, timestamp, rows, position, stop, outcome, partitions, kafka
                )
                if in_run:
                    position += in_run
                    accepted += in_run
                    continue
                key, value, headers = rows.record(position)
                size = (
                    RECORD_BOUND
                    + (0 if key is None else len(key))
                    + (0 if value is None else len(value))
                    if not headers
                    else estimate_size_in_bytes_upper_bound(key, value, headers)
                )
                appended = acc.append(
                    topic,
                    partition,
                    timestamp,
                    key,
                    value,
                    headers,
                    size,
                    partitions,
                    kafka,
                    loop.time(),
                )
                if isinstance(appended, BufferRequest):
                    future = await producer._append_after_wait(
                        acc,
                        appended,
                        blocks[topic_index],
                        topic,
                        partition,
                        timestamp,
                        key,
                        value,
                        headers,
                        size,
                        partitions,
                        kafka,
                    )
                else:
                    future = cast(FutureRecordMetadata, appended)
                future.add_done_callback(outcome.sink_for(position), context=context)
                position += 1
                accepted += 1
                if acc.batches_created - producer._batches_seen >= acc.batches_per_turn:
                    producer._batches_seen = acc.batches_created
                    if sender.wants_turn():
                        await asyncio.sleep(0)  # as in send(): the sender's turn is due
                        if producer._parts is None:
                            producer._running_parts()  # closed, or the transaction ended
    except BaseException as exc:
        outcome.seal(accepted)
        if accepted:
            exc.add_note(
                f"send_arrow accepted {accepted} of {count} rows before this one; they will "
                "still be delivered (await producer.flush() to wait for them)"
            )
        raise
    outcome.seal(count)
    return outer


async def _partitions(
    producer: BulkSender, kafka: KafkaAdapter, topic: str
) -> tuple[Sequence[int], float]:
    partitions = kafka.partitions_for_topic(topic)
    if partitions:
        return partitions, producer._max_block_ms
    partitions, max_block_ms = await producer._wait_for_topic(kafka, topic)
    if producer._parts is None:
        producer._running_parts()  # closed, or the transaction ended meanwhile
    return partitions, max_block_ms
