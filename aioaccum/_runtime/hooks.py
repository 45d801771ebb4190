"""Interceptors (Java's ``ProducerInterceptor``) and tracing: the hooks the send path calls.

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

The producer calls these hooks from inside its one send path and goes on, as Java's
``KafkaProducer.send()`` calls ``interceptors.onSend(record)``: :meth:`SendHooks.begin` returns
the record to send and its span, :meth:`SendHooks.headers` the headers to send it with,
:meth:`SendHooks.follow` takes the record future the append made, and
:meth:`SendHooks.refused` hears of a record the send path refused. The hooks never see the
producer. The producer tests one attribute per call to know whether any of this is set up; with
no interceptor and no tracing nothing here runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aioaccum._core.futures import (
    ProduceRequestResult,
    RecordFuture,
    RecordMetadata,
    ThreadRecordFuture,
)
from aioaccum._core.interceptor_api import Headers, ProducerInterceptor, ProducerRecord
from aioaccum._core.validate import validate_headers

if TYPE_CHECKING:
    from aioaccum._runtime.tracing import RecordTracer
    from aioaccum.config.producer_config import ProducerConfig

__all__ = ["ProducerInterceptor", "ProducerRecord", "SendHooks"]

log = logging.getLogger(__name__)

_new_record = tuple.__new__


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
    """The interceptors and the tracer of one producer, called by its send path."""

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
            # Only now: OpenTelemetry is optional.
            from aioaccum._runtime.tracing import RecordTracer

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

    # --- around one record, called by the producer's send path

    def begin(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
    ) -> tuple[ProducerRecord, Any]:
        """The record to send (the interceptors' last), and its span if tracing."""
        record = _new_record(ProducerRecord, (topic, value, key, partition, timestamp_ms, headers))
        if self._sends:
            record = self.on_send(record)
        tracer = self._tracer
        return record, None if tracer is None else tracer.start(record)

    def headers(self, record: ProducerRecord, span: Any) -> list[tuple[str, bytes | None]]:
        """The headers to send ``record`` with: checked, with the trace context if asked for."""
        given = record.headers
        headers = [] if given is None else validate_headers(given)
        if span is not None:
            assert self._tracer is not None
            self._tracer.inject(span, headers)
        return headers

    def refused(self, record: ProducerRecord, span: Any, error: BaseException) -> None:
        """The send path refused ``record``: it failed before it was accepted (Java's
        onSendError)."""
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

    def follow(self, future: RecordFuture, record: ProducerRecord, span: Any) -> None:
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

    def follow_from_thread(
        self,
        future: ThreadRecordFuture,
        record: ProducerRecord,
        span: Any,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """:meth:`follow` for a record another thread appended: its outcome is reported on
        ``loop``, the producer's, as the batches' listeners are."""
        done = functools.partial(self._done, record, span)
        if future.done():
            # Already acknowledged: the callback would run here, on the caller's thread, but
            # interceptors hear of outcomes on the producer's loop.
            loop.call_soon_threadsafe(done, future)
        else:
            future.add_done_callback(done)

    def _done(self, record: ProducerRecord, span: Any, future: ThreadRecordFuture) -> None:
        """A thread's record future's done-callback: the record's outcome, once."""
        error = future.exception()
        if error is not None:
            self._end(span, _failed_metadata(record, future), error)
        else:
            self._end(span, future.result(), None)

    def _batch_ended(self, result: ProduceRequestResult) -> None:
        """A batch ended, or was split (then its records are followed to where they went)."""
        entries = self._batches.pop(result, None)
        if entries is None:
            return
        for future, record, span in entries:
            # A record future cancelled meanwhile is still reported: cancelling one only stops
            # it from reporting, and the record is still sent. One that a split moved is
            # followed to its new batch.
            self.follow(future, record, span)

    def _outcome(self, future: RecordFuture, record: ProducerRecord, span: Any) -> None:
        """The outcome of ``future``, whose batch ended."""
        error = future._result.error
        if error is not None:
            self._end(span, _failed_metadata(record, future), error)
        else:
            self._end(span, future._metadata(), None)
