"""``Producer.send_many``: many records for one topic, one future for them all.

Theory of operation
-------------------
The bulk form of ``send()``: the same checks, partitioning, batching and memory wait, but one
call and one future. Every record is serialized and checked before the first is buffered, so a
bad record refuses the call whole. Records that share a partition choice (an explicit
partition, or the sticky one) go into a batch at a time (``RecordAccumulator.append_run``); a
keyed record, one with headers, and the first record of each new batch go one by one through
``append``. Their outcomes meet in one :class:`~aioaccum._runtime.many.ManyResult`.

With interceptors or tracing set, the producer calls :func:`send_each` instead: each record
goes through ``send()`` in turn, with its own ``on_send`` and span, and
:func:`~aioaccum._runtime.many.all_of` joins their futures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, cast

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata
from aioaccum._core.records import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    estimate_size_in_bytes_upper_bound,
)
from aioaccum._core.validate import checked_column, checked_timestamp, validate_headers
from aioaccum._kafka.adapter import KafkaAdapter
from aioaccum._runtime.many import ManyResult, all_of
from aioaccum._runtime.sender import Sender
from aioaccum.config.producer_config import Serializer
from aioaccum.errors import ConfigError

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = ["NO_HEADERS", "RECORD_BOUND", "BulkSender", "send_each", "send_many"]

Header = tuple[str, bytes | None]
Headers = Sequence[Header]

NO_HEADERS: list[Header] = []
RECORD_BOUND = RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + 10
"""A record's size without its key and value, at most (its lengths as two 5-byte varints)."""


class BulkSender(Protocol):
    """What the bulk path uses of the producer: its parts, settings and checks."""

    _parts: tuple[KafkaAdapter, RecordAccumulator, Sender] | None
    _batches_seen: int
    _journal: Any

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None: ...
    @property
    def _key_serializer(self) -> Serializer | None: ...
    @property
    def _value_serializer(self) -> Serializer | None: ...
    @property
    def _sticky(self) -> bool: ...
    @property
    def _ignore_keys(self) -> bool: ...
    @property
    def _max_block_ms(self) -> float: ...
    @property
    def _max_record_size(self) -> int: ...

    def _running_parts(
        self, sending: bool = True
    ) -> tuple[KafkaAdapter, RecordAccumulator, Sender]: ...

    def _raise_too_large(self, size: int) -> None: ...

    async def _wait_for_topic(
        self, kafka: KafkaAdapter, topic: str
    ) -> tuple[Sequence[int], float]: ...

    async def _append_after_wait(
        self,
        acc: RecordAccumulator,
        request: BufferRequest,
        max_block_ms: float,
        topic: str,
        partition: int | None,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        size: int,
        partitions: Sequence[int],
        kafka: KafkaAdapter,
    ) -> FutureRecordMetadata: ...


def _listed(
    values: Iterable[Any], keys: Iterable[Any] | None
) -> tuple[list[Any], list[Any] | None]:
    """The values and keys as lists (their lengths are read again when the acks come)."""
    value_list = list(values)
    if keys is None:
        return value_list, None
    key_list = list(keys)
    if len(key_list) != len(value_list):
        raise ConfigError(
            f"send_many got {len(key_list)} keys for {len(value_list)} values; pass one key "
            "per value, or keys=None"
        )
    return value_list, key_list


def _header_lists(
    shared: Headers | None, each: Iterable[Headers | None] | None, count: int
) -> list[list[Header]] | None:
    """One checked header list per record, or ``None`` when no record has headers."""
    common = validate_headers(shared) if shared else []
    if each is None:
        return None if not common else [common] * count
    lists = list(each)
    if len(lists) != count:
        raise ConfigError(
            f"send_many got {len(lists)} record_headers for {count} values; pass one "
            "entry (None or a list of pairs) per value"
        )
    return [common + validate_headers(h) if h else common for h in lists]


def _longest(items: list[bytes | None]) -> int:
    try:
        return max(map(len, items), default=0)  # type: ignore[arg-type]
    except TypeError:  # a None among them: the slower way
        return max((0 if item is None else len(item) for item in items), default=0)


def _check_sizes(
    producer: BulkSender,
    keys: list[bytes | None] | None,
    values: list[bytes | None],
    header_lists: list[list[Header]] | None,
) -> None:
    # A bound first (the longest key with the longest value); each record only near it.
    limit = producer._max_record_size
    bound = _longest(values) + (0 if keys is None else _longest(keys)) + RECORD_BOUND
    if header_lists is None and bound <= limit:
        return
    for i, value in enumerate(values):
        key = None if keys is None else keys[i]
        headers = NO_HEADERS if header_lists is None else header_lists[i]
        size = estimate_size_in_bytes_upper_bound(key, value, headers)
        if size > limit:
            producer._raise_too_large(size)


async def send_many(
    producer: BulkSender,
    topic: str,
    values: Iterable[Any],
    keys: Iterable[Any] | None,
    partition: int | None,
    timestamp_ms: int | None,
    headers: Headers | None,
    record_headers: Iterable[Headers | None] | None,
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """What ``Producer.send_many`` does with no hooks set (see there)."""
    value_list, key_list = _listed(values, keys)
    count = len(value_list)
    timestamp = checked_timestamp(timestamp_ms)  # one create time for the call
    parts = producer._parts
    if parts is None or parts[2].fatal_error is not None:
        parts = producer._running_parts()
    kafka, acc, sender = parts
    loop = producer._loop
    assert loop is not None  # set by start(), which made _parts
    key_array = (
        None if key_list is None else checked_column("key", key_list, producer._key_serializer)
    )
    value_array = checked_column("value", value_list, producer._value_serializer)
    if cython.compiled:
        # The call's own lists (copied in _listed), of bytes and None only, kept with its result
        # for as long as the caller keeps that: out of the collector's lists, whose full passes
        # would visit every item of every result kept (_core/_cgc.pxd).
        gc_untrack(value_array)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
        if key_array is not None:
            gc_untrack(key_array)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
    header_lists = _header_lists(headers, record_headers, count)
    _check_sizes(producer, key_array, value_array, header_lists)
    future_all: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
    outcome = ManyResult(future_all, timestamp, key_array, value_array)
    if not count:
        outcome.seal(0)
        return future_all

    partitions = kafka.partitions_for_topic(topic)
    max_block_ms = producer._max_block_ms
    if not partitions:
        partitions, max_block_ms = await producer._wait_for_topic(kafka, topic)
        if producer._parts is None:
            producer._running_parts()  # closed, or the transaction ended meanwhile
    bulk = header_lists is None and (
        partition is not None
        or (producer._sticky and (key_array is None or producer._ignore_keys))
    )
    accepted = 0
    try:
        while accepted < count:
            if bulk:
                in_run = acc.append_run(
                    topic, partition, timestamp, key_array, value_array, accepted,
                    outcome, partitions, kafka,
                )
                if in_run:
                    accepted += in_run
                    continue
            key = None if key_array is None else key_array[accepted]
            value = value_array[accepted]
            headers_of = NO_HEADERS if header_lists is None else header_lists[accepted]
            size = (
                RECORD_BOUND + (0 if key is None else len(key))
                + (0 if value is None else len(value))
                if header_lists is None
                else estimate_size_in_bytes_upper_bound(key, value, headers_of)
            )
            appended = acc.append(
                topic, partition, timestamp, key, value, headers_of, size, partitions,
                kafka, loop.time(),
            )
            if isinstance(appended, BufferRequest):
                future = await producer._append_after_wait(
                    acc, appended, max_block_ms, topic, partition, timestamp, key, value,
                    headers_of, size, partitions, kafka,
                )
            else:
                future = cast(FutureRecordMetadata, appended)
            outcome.track(accepted, future)
            accepted += 1
            if acc.batches_created - producer._batches_seen >= acc.batches_per_turn:
                producer._batches_seen = acc.batches_created
                if sender.wants_turn():
                    await asyncio.sleep(0)  # as in send(): the sender's turn is due
                    if producer._parts is None:
                        producer._running_parts()  # closed, or the transaction ended
    except BaseException as exc:
        # seal() counts only the accepted records: the refused one never reached a batch.
        outcome.seal(accepted)
        if accepted:  # cancellation too: what went in stays in
            exc.add_note(
                f"send_many accepted {accepted} of {count} records before this one; they "
                "will still be delivered (await producer.flush() to wait for them)"
            )
        raise
    outcome.seal(count)
    if producer._journal is not None:
        await producer._journal.committed()  # journal_sync='always'
    return future_all


async def send_each(
    send: Callable[..., Awaitable[FutureRecordMetadata]],
    topic: str,
    values: Iterable[Any],
    keys: Iterable[Any] | None,
    partition: int | None,
    timestamp_ms: int | None,
    headers: Headers | None,
    record_headers: Iterable[Headers | None] | None,
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """``send_many`` record by record through ``send`` (the producer's, hooks and all), with one
    future for them all, as the bulk path returns.

    Each record is checked as it is sent, so a bad record stops the call midway; the records
    before it stay buffered (a note on the error says how many).
    """
    value_list, key_list = _listed(values, keys)
    count = len(value_list)
    each: list[Headers | None] = (
        [None] * count if record_headers is None else list(record_headers)
    )
    if len(each) != count:
        raise ConfigError(
            f"send_many got {len(each)} record_headers for {count} values; pass one "
            "entry (None or a list of pairs) per value"
        )
    # One create time for the call, as in bulk; a bad one is refused by send(), record by
    # record, so that the interceptors hear of it.
    timestamp = checked_timestamp(None) if timestamp_ms is None else timestamp_ms
    shared = validate_headers(headers)
    futures: list[FutureRecordMetadata] = []
    try:
        for i, value in enumerate(value_list):
            own = each[i]
            futures.append(
                await send(
                    topic, value, None if key_list is None else key_list[i], partition,
                    timestamp, [*shared, *own] if own else (shared or None),
                )
            )
    except BaseException as exc:
        if futures:
            exc.add_note(
                f"send_many accepted {len(futures)} of {count} records before this one; "
                "they will still be delivered (await producer.flush() to wait for them)"
            )
        raise
    return all_of(asyncio.get_running_loop(), futures)
