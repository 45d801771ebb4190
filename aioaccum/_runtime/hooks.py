"""Interceptors (Java's ``ProducerInterceptor``) and the hooks that run them around a send.

Set ``Producer(interceptors=[...])`` to see, and change, every record on its way in and see every
outcome on its way out::

    class Stamp(ProducerInterceptor):
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record.replace(headers=[*(record.headers or ()), ("by", b"me")])

        def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
            counts[error is None] += 1

Theory of operation
-------------------
The semantics are Java's ``ProducerInterceptors``: ``on_send`` runs before the record is
serialized, each interceptor in the order given, each getting what the one before returned; an
interceptor that raises (or returns something that is not a :class:`ProducerRecord`) is logged
and skipped, the record it was given going on to the next. ``on_acknowledgement`` is called once
per record, with its :class:`RecordMetadata` and ``None`` on success, or with the error and the
metadata known so far (offset -1; partition -1 when none was chosen yet) on failure, including a
record that ``send()`` refused (a serializer failed, the record was too large, no buffer memory
in time, the producer closed). Its exceptions are logged and ignored too: an interceptor never
fails a send.

``on_send`` runs in the caller (the task that awaits ``send()``, or the thread of
``send_from_thread``); ``on_acknowledgement`` runs on the producer's event loop, as Java runs it
on the I/O thread, so it must be quick and must not block.

Tracing (:mod:`aioaccum.otel`) rides on the same hooks: its span starts after the interceptors,
so it sees the record they made, and ends when the record's outcome is known.

The producer tests one attribute per call to know whether any of this is set up; with no
interceptor and no tracing nothing here runs. With them, :class:`SendHooks` wraps the call and
hands the producer the final record with its headers in an :class:`Intercepted` list, which is
how the producer knows the record went through the hooks already.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from aioaccum._core.futures import (
    FutureRecordMetadata,
    ProduceRequestResult,
    RecordFuture,
    RecordMetadata,
    ThreadRecordFuture,
)
from aioaccum._core.validate import validate_headers
from aioaccum.errors import ConfigError

if TYPE_CHECKING:
    from aioaccum.config.producer_config import ProducerConfig
    from aioaccum.otel import RecordTracer
    from aioaccum.producer import Producer

__all__ = ["Intercepted", "ProducerInterceptor", "ProducerRecord", "SendHooks"]

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]]


class ProducerRecord(NamedTuple):
    """One record as ``send()`` was given it, before serialization (Java's ``ProducerRecord``).

    Immutable: an interceptor returns a changed copy (``record.replace(value=...)``).
    ``partition`` and ``timestamp_ms`` are ``None`` when the producer chooses them.
    """

    # A named tuple rather than a frozen dataclass: one is made per record sent through the
    # hooks, and a frozen dataclass takes several times longer to build.
    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Headers | None = None

    def replace(self, **changes: Any) -> ProducerRecord:
        """A copy with ``changes`` (field name -> new value)."""
        return self._replace(**changes)


_new_record = tuple.__new__


class ProducerInterceptor(Protocol):
    """What ``Producer(interceptors=[...])`` takes: Java's ``ProducerInterceptor``.

    Subclass it to inherit the do-nothing defaults, or pass any object with these methods
    (one of the two ``on_`` methods is enough at run time).
    """

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Called for each record before it is serialized; return it, or a replacement."""
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        """Called once per record: acknowledged (``error`` is ``None``) or failed."""
        return None

    def close(self) -> None:
        """Called once when the producer closes."""
        return None


class Intercepted(list[tuple[str, bytes | None]]):
    """A record's headers, marked as having been through :class:`SendHooks` already."""

    __slots__ = ()


def _failed_metadata(record: ProducerRecord, future: RecordFuture | None) -> RecordMetadata:
    """Java's metadata for a failed record: topic and partition if known, the rest -1."""
    if future is not None:
        tp = future._result.tp
        return RecordMetadata(tp.topic, tp.partition, -1, -1, -1, -1)
    partition = -1 if record.partition is None else record.partition
    return RecordMetadata(record.topic, partition, -1, -1, -1, -1)


def _bound(interceptors: Sequence[object], method: str) -> list[tuple[object, Callable[..., Any]]]:
    """Each interceptor that has ``method``, with it bound."""
    out = []
    for interceptor in interceptors:
        bound = getattr(interceptor, method, None)
        if callable(bound):
            out.append((interceptor, bound))
    return out


class SendHooks:
    """Runs the interceptors and the tracer around each send of one producer."""

    __slots__ = ("_acks", "_batches", "_closers", "_sends", "_tracer", "_warned")

    def __init__(self, interceptors: Sequence[object], tracer: RecordTracer | None) -> None:
        # Any of the three methods may be missing from an object that is not a subclass.
        self._sends = _bound(interceptors, "on_send")
        self._acks = _bound(interceptors, "on_acknowledgement")
        self._closers = _bound(interceptors, "close")
        self._tracer = tracer
        self._warned: set[tuple[int, str]] = set()
        # The records sent through the hooks, by the batch they wait in: one listener per batch
        # rather than a callback per record future.
        self._batches: dict[ProduceRequestResult, list[tuple[RecordFuture, ProducerRecord, Any]]]
        self._batches = {}

    @classmethod
    def for_config(cls, config: ProducerConfig) -> SendHooks | None:
        """The hooks a producer's settings ask for, or ``None`` when there are none."""
        if not config.interceptors and not config.tracing:
            return None
        tracer = None
        if config.tracing:
            from aioaccum.otel import RecordTracer  # only now: opentelemetry is optional

            tracer = RecordTracer.from_config(config)
        return cls(config.interceptors, tracer)

    # --- the interceptors, Java's ProducerInterceptors

    def _report(self, interceptor: object, what: str, problem: str = "raised") -> None:
        # Once per interceptor and method at WARNING (with the traceback, if it raised), then
        # at DEBUG: one broken interceptor must not write a traceback per record.
        key = (id(interceptor), what)
        traceback = problem == "raised"
        if key in self._warned:
            log.debug("interceptor %r %s in %s; ignored", interceptor, problem, what,
                      exc_info=traceback)
            return
        self._warned.add(key)
        log.warning(
            "interceptor %r %s in %s; ignored, as Java does (logged at DEBUG from now on)",
            interceptor,
            problem,
            what,
            exc_info=traceback,
        )

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Each interceptor's ``on_send`` in order; one that fails is skipped."""
        for interceptor, on_send in self._sends:
            try:
                changed = on_send(record)
            except Exception:
                self._report(interceptor, "on_send")
                continue
            if type(changed) is not ProducerRecord:
                self._report(
                    interceptor, "on_send",
                    f"returned {type(changed).__name__}, not a ProducerRecord,",
                )
                continue
            record = changed
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        for interceptor, on_acknowledgement in self._acks:
            try:
                on_acknowledgement(metadata, error)
            except Exception:
                self._report(interceptor, "on_acknowledgement")

    def close(self) -> None:
        """Each interceptor's ``close()``, once, when the producer closes."""
        closers, self._closers = self._closers, []
        for interceptor, close in closers:
            try:
                close()
            except Exception:
                self._report(interceptor, "close")

    # --- around one record

    def _begin(self, record: ProducerRecord) -> tuple[ProducerRecord, Any]:
        """The interceptors' record, and its span if tracing."""
        if self._sends:
            record = self.on_send(record)
        tracer = self._tracer
        return record, None if tracer is None else tracer.start(record)

    def _headers(self, record: ProducerRecord, span: Any) -> Intercepted:
        """The record's headers, checked, with the trace context if asked for."""
        given = record.headers
        headers = Intercepted() if given is None else Intercepted(validate_headers(given))
        if span is not None:
            assert self._tracer is not None
            self._tracer.inject(span, headers)
        return headers

    def _refused(self, record: ProducerRecord, span: Any, error: BaseException) -> None:
        """``send()`` raised: the record failed before it was accepted (Java's onSendError)."""
        self._end(span, _failed_metadata(record, None), error)

    def _end(self, span: Any, metadata: RecordMetadata, error: BaseException | None) -> None:
        self.on_acknowledgement(metadata, error)
        if span is not None:
            assert self._tracer is not None
            try:
                self._tracer.end(span, metadata, error)
            except Exception:
                # This runs inside the batch's listener, ahead of the record futures' own
                # callbacks: a tracer that raised here would leave their waiters waiting.
                self._report(self._tracer, "ending a span")

    def _done(
        self,
        record: ProducerRecord,
        span: Any,
        future: ThreadRecordFuture,
    ) -> None:
        """A thread's record future's done-callback: the record's outcome, once."""
        error = future.exception()
        if error is not None:
            self._end(span, _failed_metadata(record, future), error)
        else:
            self._end(span, future.result(), None)

    def _follow(self, future: RecordFuture, record: ProducerRecord, span: Any) -> None:
        """Report ``future``'s outcome when its batch ends (on the loop's thread only)."""
        result = future._result
        if result.done:
            # Its listeners may have been told already: report now (we are on the loop).
            self._outcome(future, record, span)
            return
        entries = self._batches.get(result)
        if entries is None:
            entries = self._batches[result] = []
            result.add_listener(self._batch_ended)
        entries.append((future, record, span))

    def _batch_ended(self, result: ProduceRequestResult) -> None:
        """A batch ended, or was split (then its records are followed to where they went)."""
        entries = self._batches.pop(result, None)
        if entries is None:
            return
        for future, record, span in entries:
            # A record future cancelled meanwhile is still reported: cancelling one only stops
            # it from reporting, and the record is still sent. One that a split moved is
            # followed to its new batch.
            self._follow(future, record, span)

    def _outcome(self, future: RecordFuture, record: ProducerRecord, span: Any) -> None:
        """The outcome of ``future``, whose batch ended."""
        error = future._result.error
        if error is not None:
            self._end(span, _failed_metadata(record, future), error)
        else:
            self._end(span, future._metadata(), None)

    # --- the producer's entry points, when hooks are set

    async def send(
        self,
        producer: Producer,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
    ) -> FutureRecordMetadata:
        """``Producer.send`` with the hooks around it."""
        record, span = self._begin(
            _new_record(ProducerRecord, (topic, value, key, partition, timestamp_ms, headers))
        )
        try:
            future = await producer.send(
                record.topic, record.value, record.key, record.partition, record.timestamp_ms,
                self._headers(record, span),
            )
        except BaseException as exc:
            self._refused(record, span, exc)
            raise
        self._follow(future, record, span)
        return future

    def send_from_thread(
        self,
        producer: Producer,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
    ) -> ThreadRecordFuture:
        """``Producer.send_from_thread`` with the hooks around it."""
        record, span = self._begin(
            _new_record(ProducerRecord, (topic, value, key, partition, timestamp_ms, headers))
        )
        try:
            future = producer.send_from_thread(
                record.topic, record.value, record.key, record.partition, record.timestamp_ms,
                self._headers(record, span),
            )
        except BaseException as exc:
            self._refused(record, span, exc)
            raise
        done = functools.partial(self._done, record, span)
        loop = producer._loop
        if future.done() and loop is not None:
            # Already acknowledged: the callback would run here, on the caller's thread, but
            # interceptors hear of outcomes on the producer's loop.
            loop.call_soon_threadsafe(done, future)
        else:
            future.add_done_callback(done)
        return future

    async def send_many(
        self,
        producer: Producer,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        record_headers: Iterable[Headers | None] | None,
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """``Producer.send_many`` record by record, each through the hooks, with one future for
        them all (as the bulk path returns).

        Each record is checked as it is sent, so a bad record stops the call midway; the
        records before it stay buffered (a note on the error says how many).
        """
        value_list = list(values)
        count = len(value_list)
        key_list: list[Any] = [None] * count if keys is None else list(keys)
        each: list[Headers | None] = [None] * count if record_headers is None else list(
            record_headers
        )
        if len(key_list) != count:
            raise ConfigError(
                f"send_many got {len(key_list)} keys for {count} values; pass one key per "
                "value, or keys=None"
            )
        if len(each) != count:
            raise ConfigError(
                f"send_many got {len(each)} record_headers for {count} values; pass one "
                "entry (None or a list of pairs) per value"
            )
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)  # one create time for the call, as in bulk
        shared = validate_headers(headers)
        futures: list[FutureRecordMetadata] = []
        try:
            for value, key, own in zip(value_list, key_list, each, strict=True):
                record_headers_of = [*shared, *own] if own else (shared or None)
                futures.append(
                    await self.send(
                        producer, topic, value, key, partition, timestamp_ms, record_headers_of
                    )
                )
        except BaseException as exc:
            if futures:
                exc.add_note(
                    f"send_many accepted {len(futures)} of {count} records before this one; "
                    "they will still be delivered (await producer.flush() to wait for them)"
                )
            raise
        return _all_of(asyncio.get_running_loop(), futures)


def _all_of(
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
