"""``Producer.send_records``: records for any topics in one call, one future for them all.

Theory of operation
-------------------
:meth:`Producer.send_many` is the bulk path for one topic, one partition choice and one
timestamp. ``send_records`` cuts its input into *runs*: consecutive records that share topic,
partition and timestamp (``None``, "now", counting as one value). Each run goes to
``send_many`` unchanged, so a run pays what ``send_many`` pays and ``send_many`` itself is not
touched; records of one topic given together stay one run however their keys and headers
differ. The run futures are then joined: one future, set once every run has ended, whose result
reads as one sequence in input order (:class:`JoinedOutcomes`), or fails with the error of the
first run, in input order, that failed.

Every record's shape, topic, partition, timestamp and headers are checked before the first run
is buffered, so a malformed record refuses the call whole. Keys and values are serialized run
by run, inside ``send_many``: a serializer that raises on a later run stops the call there,
with the runs before it buffered (a note on the error says how many records).

Records come as plain tuples ``(topic, value, key, partition, timestamp_ms, headers)`` (from
``value`` on, trailing fields may be left out) or as objects with those attributes, such as
:class:`aioaccum.interceptors.ProducerRecord` or a dataclass of one's own.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, overload

from aioaccum._core.futures import RecordMetadata
from aioaccum._core.lifecycle import ProducerState
from aioaccum._core.validate import checked_timestamp, validate_headers, validate_topic
from aioaccum._runtime.many import ReadOnRead
from aioaccum.errors import ConfigError, ProducerClosedError

__all__ = [
    "JoinedOutcomes",
    "ManySender",
    "RecordFields",
    "RecordLike",
    "cut_runs",
    "send_records",
]

_FIELDS = ("topic", "value", "key", "partition", "timestamp_ms", "headers")
Headers = Sequence[tuple[str, bytes | None]]


class RecordFields(Protocol):
    """What ``send_records`` reads from a record object (a ``ProducerRecord``, a dataclass)."""

    @property
    def topic(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def key(self) -> Any: ...
    @property
    def partition(self) -> int | None: ...
    @property
    def timestamp_ms(self) -> int | None: ...
    @property
    def headers(self) -> Headers | None: ...


RecordLike = RecordFields | tuple[Any, ...]
"""A record object, or a tuple ``(topic, value[, key[, partition[, timestamp_ms[, headers]]]])``."""


class ManySender(Protocol):
    """What ``send_records`` uses of the producer: its bulk path and its state."""

    @property
    def state(self) -> ProducerState: ...

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        record_headers: Iterable[Headers | None] | None = None,
    ) -> asyncio.Future[Sequence[RecordMetadata]]: ...


class Run:
    """Consecutive records for one ``send_many`` call."""

    __slots__ = ("first", "headers", "keys", "partition", "timestamp_ms", "topic", "values")

    def __init__(self, first: int, topic: str, partition: int | None, timestamp_ms: int | None):
        self.first = first
        self.topic = topic
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.values: list[Any] = []
        self.keys: list[Any] | None = None  # None while every key so far is None
        self.headers: list[Headers | None] | None = None  # likewise

    def add(self, value: Any, key: Any, headers: Headers | None) -> None:
        n = len(self.values)
        self.values.append(value)
        if key is not None and self.keys is None:
            self.keys = [None] * n
        if self.keys is not None:
            self.keys.append(key)
        if headers and self.headers is None:
            self.headers = [None] * n
        if self.headers is not None:
            self.headers.append(headers or None)

    async def send(self, producer: ManySender) -> asyncio.Future[Sequence[RecordMetadata]]:
        return await producer.send_many(
            self.topic,
            self.values,
            keys=self.keys,
            partition=self.partition,
            timestamp_ms=self.timestamp_ms,
            record_headers=self.headers,
        )


def _fields(record: object, index: int) -> tuple[Any, Any, Any, Any, Any, Any]:
    if isinstance(record, tuple) and not hasattr(record, "_fields"):
        if not 2 <= len(record) <= len(_FIELDS):
            raise ConfigError(
                f"record #{index} is a tuple of {len(record)}; pass (topic, value[, key[, "
                "partition[, timestamp_ms[, headers]]]])"
            )
        padded = (*record, *(None,) * (len(_FIELDS) - len(record)))
        return padded
    some: Any = record
    try:
        topic, value = some.topic, some.value
    except AttributeError:
        raise ConfigError(
            f"record #{index} is a {type(record).__name__}: pass a tuple (topic, value, ...) or "
            "an object with topic, value, key, partition, timestamp_ms and headers"
        ) from None
    return (
        topic,
        value,
        getattr(some, "key", None),
        getattr(some, "partition", None),
        getattr(some, "timestamp_ms", None),
        getattr(some, "headers", None),
    )


def cut_runs(records: Iterable[RecordLike]) -> list[Run]:
    """The records as runs for ``send_many``, each record checked on the way.

    Raises:
        ConfigError: A record is not a record, or its topic, partition or timestamp is invalid.
        SerializationError: A record's headers are not ``(str, bytes)`` pairs.
    """
    runs: list[Run] = []
    run: Run | None = None
    checked_topic = None
    for index, record in enumerate(records):
        topic, value, key, partition, timestamp_ms, headers = _fields(record, index)
        if topic is not checked_topic:
            validate_topic(topic)
            checked_topic = topic
        if partition is not None and (type(partition) is not int or partition < 0):
            raise ConfigError(
                f"record #{index}: partition must be None or an int >= 0, got {partition!r}"
            )
        if timestamp_ms is not None:
            # None stays None: "now" for the whole run, which send_many reads once.
            try:
                checked_timestamp(timestamp_ms)
            except ConfigError as exc:
                raise ConfigError(f"record #{index}: {exc} (or None for now)") from None
        if headers:
            headers = validate_headers(headers)
        if (
            run is None
            or topic != run.topic
            or partition != run.partition
            or timestamp_ms != run.timestamp_ms
        ):
            run = Run(index, topic, partition, timestamp_ms)
            runs.append(run)
        run.add(value, key, headers)
    return runs


async def send_records(
    producer: ManySender, records: Iterable[RecordLike]
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """What :meth:`Producer.send_records` does (see there); ``producer`` is the one sending."""
    runs = cut_runs(records)
    if len(runs) == 1:
        return await runs[0].send(producer)
    loop = asyncio.get_running_loop()
    joined: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
    if not runs:
        if producer.state is not ProducerState.RUNNING:
            raise ProducerClosedError(f"cannot send: the producer is {producer.state.value}")
        joined.set_result(JoinedOutcomes([], []))
        return joined
    futures: list[asyncio.Future[Sequence[RecordMetadata]]] = []
    try:
        for run in runs:
            futures.append(await run.send(producer))
    except BaseException as exc:
        if futures:
            buffered = runs[len(futures)].first
            exc.add_note(
                f"send_records had buffered records #0..#{buffered - 1} before the run this "
                "error stopped (a note above counts what that run buffered); they will still "
                "be delivered (await producer.flush() to wait for them)"
            )
        for future in futures:  # nobody will read them: keep asyncio from logging their errors
            future.add_done_callback(_read_outcome)
        raise
    join = _Join(joined, futures, [run.first for run in runs])
    for future in futures:
        future.add_done_callback(join.one_done)
    return joined


def _read_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Join:
    """Sets one future from the run futures once all have ended."""

    __slots__ = ("_firsts", "_future", "_parts", "_pending")

    def __init__(
        self,
        future: asyncio.Future[Sequence[RecordMetadata]],
        parts: list[asyncio.Future[Sequence[RecordMetadata]]],
        firsts: list[int],
    ) -> None:
        self._future = future
        self._parts = parts
        self._firsts = firsts
        self._pending = len(parts)

    def one_done(self, _part: asyncio.Future[Sequence[RecordMetadata]]) -> None:
        self._pending -= 1
        if self._pending:
            return
        for part in self._parts:  # every part read, so none is logged as never retrieved
            _read_outcome(part)
        if self._future.done():  # the caller cancelled it: delivery goes on regardless
            return
        for part in self._parts:
            error = part.exception()  # the run futures are never cancelled
            if error is not None:
                self._future.set_exception(error)
                return
        self._future.set_result(JoinedOutcomes([p.result() for p in self._parts], self._firsts))


class JoinedOutcomes(ReadOnRead[RecordMetadata]):
    """The metadata of a ``send_records`` call, in input order: the runs' sequences end to end."""

    __slots__ = ("_firsts", "_parts", "_size")

    def __init__(self, parts: list[Sequence[RecordMetadata]], firsts: list[int]) -> None:
        self._parts = parts
        self._firsts = firsts
        self._size = sum(map(len, parts))

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(f"record index {index} out of range for {self._size} records")
        run = bisect.bisect_right(self._firsts, index) - 1
        return self._parts[run][index - self._firsts[run]]

    def __iter__(self) -> Iterator[RecordMetadata]:
        for part in self._parts:
            yield from part
