"""SyncProducer: the producer for plain, threaded Python code (Flask, Django, scripts, a Spark
driver).

Theory of operation
-------------------
Java's producer is thread-safe because calling threads do the work themselves: they append into
the accumulator under its lock, block on the buffer pool up to ``max.block.ms``, and get a record
future that waits on its batch's latch. Only the sender has a thread of its own. This facade is
that model: one daemon thread runs an event loop with a :class:`~aioaccum.Producer` on it, and
that thread only drains and sends. ``send()`` runs
:meth:`~aioaccum.Producer.send_from_thread` in the calling thread: the same checks and the same
synchronous append as ``await producer.send()``, so nothing crosses threads per record. A thread
wakes the loop once per new batch (and once per full batch), not once per record.

Records sent by one thread are appended in the order it sent them; the futures handed out are
:class:`~aioaccum.ThreadRecordFuture`, one small object per record, whose waiting costs one lock
per batch. Their callbacks run on the loop thread, where calling back into this producer would
block the loop; it raises ``RuntimeError`` there instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from aioaccum._core.futures import RecordMetadata, ThreadRecordFuture
from aioaccum._core.lifecycle import move
from aioaccum._core.metrics import MetricValue
from aioaccum._kafka.adapter import KafkaAdapter
from aioaccum._runtime.loops import LOOP_GRACE_S, default_loop_factory
from aioaccum._runtime.send_records import RecordLike
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import ConfigError, ProducerClosedError, ProducerTimeoutError
from aioaccum.producer import Producer

__all__ = ["SyncProducer"]

Headers = Sequence[tuple[str, bytes | None]]
_T = TypeVar("_T")


class _State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


_TRANSITIONS = {
    _State.STARTING: frozenset({_State.RUNNING, _State.CLOSED}),
    _State.RUNNING: frozenset({_State.CLOSING, _State.CLOSED}),
    _State.CLOSING: frozenset({_State.CLOSED}),
    _State.CLOSED: frozenset(),
}
# Read on every send: a module constant, not an attribute lookup on the enum class.
_RUNNING = _State.RUNNING


class SyncProducer:
    """A thread-safe, blocking producer: :class:`~aioaccum.Producer` for threads.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of them.
        config: A ready :class:`~aioaccum.config.ProducerConfig` instead of settings.
        kafka: A broker adapter (tests pass a fake).
        loop_factory: Makes the background thread's loop. By default uvloop's
            (``uvloop.new_event_loop``) when uvloop can be imported, else asyncio's own; pass
            ``asyncio.new_event_loop`` for the standard loop.
        **settings: Any :class:`~aioaccum.config.ProducerConfig` setting.

    The constructor starts the thread and the producer and returns once both run. Use it as a
    context manager, or call :meth:`close`.

    Raises:
        ConfigError: A setting is invalid.
        AioAccumError: The producer could not start.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        config: ProducerConfig | None = None,
        kafka: KafkaAdapter | None = None,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
        **settings: Any,
    ) -> None:
        config = ProducerConfig.from_arguments(config, bootstrap_servers, settings)
        if config.transactional_id is not None:
            # Threads appending while another commits would race the commit's flush: a record
            # could land in the next transaction. Java guards this with locks per call.
            raise ConfigError(
                "SyncProducer does not run transactions; use the asyncio Producer with "
                f"transactional_id={config.transactional_id!r} (begin_transaction, "
                "commit_transaction), or leave transactional_id unset"
            )
        self._config = config
        self._producer = Producer(config=config, kafka=kafka)
        self._lock = threading.Lock()
        self._state = _State.STARTING
        self._close_timeout: float | None = None
        self._final_metrics: dict[str, float] = {}
        self._final_metric_values: list[MetricValue] = []
        self._loop_factory = loop_factory or default_loop_factory()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._close_requested: asyncio.Future[None] | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="aioaccum-sync", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    # --- the loop thread

    def _run(self) -> None:
        loop = self._loop_factory()
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._close_requested = asyncio.get_running_loop().create_future()
        try:
            await self._producer.start()
        except BaseException as exc:
            self._start_error = exc
            self._move(_State.CLOSED)
            await self._producer.close(0)
            self._ready.set()
            return
        self._move(_State.RUNNING)
        self._ready.set()
        await self._close_requested
        try:
            # Records buffered before close() are sent, if the time allows; the rest fail.
            await self._producer.close(self._close_timeout)
        finally:
            self._final_metrics = self._producer.metrics()
            self._final_metric_values = self._producer.metric_values()
            self._move(_State.CLOSED)

    def _move(self, state: _State) -> None:
        self._state = move("the SyncProducer", self._state, state, _TRANSITIONS)

    def _request_close(self) -> None:
        fut = self._close_requested
        if fut is not None and not fut.done():
            fut.set_result(None)

    # --- callers

    def _check_thread(self, what: str) -> None:
        if threading.get_ident() == self._loop_thread_id:
            raise RuntimeError(
                f"SyncProducer.{what}() was called on the producer's own event-loop thread "
                "(from a future's done-callback?); it would wait for that thread and deadlock. "
                "Call it from another thread, or use aioaccum.Producer in async code"
            )

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> ThreadRecordFuture:
        """Buffer one record; return a future of its metadata.

        Blocks while the buffer pool has no room and while the topic's metadata is fetched,
        each up to ``max_block_ms``. Records sent by one thread are appended in the order it
        sent them.

        Raises:
            ProducerClosedError: :meth:`close` was called.
            BufferExhaustedError: No buffer memory within ``max_block_ms``.
            ProducerTimeoutError: The topic's metadata did not arrive within ``max_block_ms``.
            RecordTooLargeError: The record exceeds ``max_request_size`` or ``buffer_memory``.
            SerializationError: Key, value or headers are not bytes and no serializer was given.
            RuntimeError: Called on the producer's own loop thread.
        """
        if self._state is not _RUNNING:
            raise ProducerClosedError("cannot send: the SyncProducer is closed")
        return self._producer.send_from_thread(topic, value, key, partition, timestamp_ms, headers)

    def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        """Send one record and block until the broker acknowledged it.

        Raises:
            TimeoutError: No answer within ``timeout`` seconds (the record is still on its way).
            AioAccumError: As :meth:`send`, or the record's delivery error.
        """
        return self.send(topic, value, key, partition, timestamp_ms, headers).result(timeout)

    def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        record_headers: Iterable[Headers | None] | None = None,
    ) -> concurrent.futures.Future[Sequence[RecordMetadata]]:
        """Buffer many records for one topic; return one future of all their metadata.

        :meth:`aioaccum.Producer.send_many` from a thread, with the same arguments: ``headers``
        go on every record, ``record_headers`` (one entry per value, ``None`` or pairs) on
        each, after ``headers``. The records are handed to the producer's loop thread in one
        piece, which serializes and appends them; this call blocks until all are buffered.

        Returns:
            A ``concurrent.futures.Future`` of the records' :class:`RecordMetadata` in input
            order; it fails with the first error once every record has ended.

        Raises:
            The errors of :meth:`aioaccum.Producer.send_many`, and ``RuntimeError`` on the
            producer's own loop thread.
        """
        value_list = list(values)  # iterated here, not on the loop thread
        key_list = None if keys is None else list(keys)
        each = None if record_headers is None else list(record_headers)
        return self._buffer_on_loop(
            "send_many",
            lambda: self._producer.send_many(
                topic, value_list, keys=key_list, partition=partition,
                timestamp_ms=timestamp_ms, headers=headers, record_headers=each,
            ),
        )

    def send_records(
        self, records: Iterable[RecordLike]
    ) -> concurrent.futures.Future[Sequence[RecordMetadata]]:
        """Buffer records for any topics; return one future of all their metadata.

        :meth:`aioaccum.Producer.send_records` from a thread: each record is a tuple
        ``(topic, value, key, partition, timestamp_ms, headers)`` or an object with those
        attributes. Blocks until every record is buffered.

        Raises:
            The errors of :meth:`aioaccum.Producer.send_records`, and ``RuntimeError`` on the
            producer's own loop thread.
        """
        record_list = list(records)
        return self._buffer_on_loop(
            "send_records", lambda: self._producer.send_records(record_list)
        )

    def _buffer_on_loop(
        self, what: str, buffer: Callable[[], Awaitable[asyncio.Future[_T]]]
    ) -> concurrent.futures.Future[_T]:
        """Run a bulk send on the loop thread, block until it buffered, and hand back a future
        of its outcome that any thread can wait on."""
        self._check_thread(what)
        loop = self._loop
        if self._state is not _RUNNING or loop is None:
            raise ProducerClosedError(f"cannot {what}: the SyncProducer is closed")
        outcome: concurrent.futures.Future[_T] = concurrent.futures.Future()

        async def run() -> None:
            future = await buffer()
            future.add_done_callback(lambda done: _copy_outcome(done, outcome))

        try:
            buffered = asyncio.run_coroutine_threadsafe(run(), loop)
        except RuntimeError:  # the loop closed since the check above
            raise ProducerClosedError(f"cannot {what}: the SyncProducer is closed") from None
        # Buffering waits at most max_block_ms (metadata, memory); past that and a grace, the
        # loop is gone (a close raced this call) and nothing will answer.
        bound = self._config.max_block_ms / 1000 + LOOP_GRACE_S
        try:
            buffered.result(bound)
        except concurrent.futures.TimeoutError:
            buffered.cancel()
            raise ProducerTimeoutError(
                f"{what} was not buffered within max_block_ms + {LOOP_GRACE_S:.0f} s "
                f"({bound:.0f} s): the producer's loop did not answer; was it closed meanwhile?"
            ) from None
        return outcome

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent before this call has ended (acknowledged or failed).

        Raises:
            ProducerTimeoutError: Not done within ``timeout`` seconds.
            ProducerClosedError: The producer is closed.
        """
        self._check_thread("flush")
        loop = self._loop
        if self._state is not _State.RUNNING or loop is None:
            raise ProducerClosedError("cannot flush: the SyncProducer is closed")
        started = time.monotonic()
        flushing = asyncio.run_coroutine_threadsafe(self._producer.flush(timeout), loop)
        try:
            flushing.result(None if timeout is None else timeout + LOOP_GRACE_S)
        except concurrent.futures.TimeoutError:  # the flush's own timeout, or no answer at all
            flushing.cancel()
            raise ProducerTimeoutError(
                f"flush did not finish within {time.monotonic() - started:.1f} s (timeout="
                f"{timeout} s); the records keep going until delivery_timeout_ms"
            ) from None

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, then stop the loop thread and wait for it.

        Args:
            timeout: Seconds for the whole close; records still unsent then fail with
                :class:`ProducerClosedError`. ``None`` waits as long as delivery takes.

        Calling it again (from any thread) only waits for the first close to finish.
        """
        self._check_thread("close")
        with self._lock:
            first = self._state is _State.RUNNING
            if first:
                self._move(_State.CLOSING)
                self._close_timeout = timeout
        loop = self._loop
        if first and loop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(self._request_close)
        self._thread.join()

    def metrics(self) -> dict[str, float]:
        """The producer's metrics (as ``Producer.metrics()``); the last ones once closed."""
        self._check_thread("metrics")
        loop = self._loop
        if loop is None or self._state is not _State.RUNNING:
            self._thread.join()
            return dict(self._final_metrics)

        async def read() -> dict[str, float]:
            return self._producer.metrics()

        return asyncio.run_coroutine_threadsafe(read(), loop).result(LOOP_GRACE_S)

    def metric_values(self) -> list[MetricValue]:
        """As ``Producer.metric_values()`` (for exporters); the last ones once closed."""
        self._check_thread("metric_values")
        loop = self._loop
        if loop is None or self._state is not _State.RUNNING:
            self._thread.join()
            return list(self._final_metric_values)

        async def read() -> list[MetricValue]:
            return self._producer.metric_values()

        return asyncio.run_coroutine_threadsafe(read(), loop).result(LOOP_GRACE_S)

    @property
    def config(self) -> ProducerConfig:
        return self._config

    @property
    def producer(self) -> Producer:
        """The :class:`~aioaccum.Producer` this facade drives (on its own loop thread)."""
        return self._producer

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<SyncProducer {self._state.value} bootstrap={self._config.bootstrap_servers!r}>"
        )


def _copy_outcome(done: asyncio.Future[_T], outcome: concurrent.futures.Future[_T]) -> None:
    """Put a loop future's outcome in a thread's future (left alone if that was cancelled)."""
    try:
        error = done.exception()  # a bulk send's future is never cancelled
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(done.result())
    except concurrent.futures.InvalidStateError:
        pass  # the caller cancelled its future: delivery goes on, unreported
