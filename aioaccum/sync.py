"""SyncProducer: the asyncio producer for plain, threaded Python code (a Spark driver, a script).

Theory of operation
-------------------
One daemon thread owns an event loop and a :class:`~aioaccum.Producer`. Callers never run
coroutines on it one by one (``run_coroutine_threadsafe`` per record costs a task, a handle and a
thread wake-up each); they append records to one FIFO queue that a single coroutine on the loop
drains in order, so each thread's records reach the accumulator in the order it sent them.

``send()`` has two paths, chosen under one short lock:

- fast: the topic's metadata is known, the record is plainly valid, and the pool has room for it
  beyond what queued records may take. Each queued record reserves the most it can allocate
  (``max(batch_size, its size)``) against a snapshot of the pool's free memory that the loop
  thread publishes after each drain round, so a fast record never waits for memory when its turn
  comes. The caller queues it and returns its future at once; the loop is woken only when the
  drainer sleeps.
- slow: anything else (memory short, unknown topic, a record the producer may reject). The
  caller queues the record and blocks until the loop has appended it, so waiting for memory
  (up to ``max_block_ms``), metadata and validation errors all happen in the caller, with the
  producer's own exception types.

Futures handed out are ``concurrent.futures.Future`` set by a done-callback on the loop: their
callbacks run on the loop thread, where calling back into the producer would deadlock; the
producer raises ``RuntimeError`` there instead.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from aioaccum._core.batch import RecordMetadata
from aioaccum._core.records import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    estimate_size_in_bytes_upper_bound,
)
from aioaccum._kafka import KafkaAdapter
from aioaccum._loops import default_loop_factory
from aioaccum._validate import validate_headers
from aioaccum.config import ProducerConfig
from aioaccum.errors import (
    BufferExhaustedError,
    ProducerClosedError,
    ProducerTimeoutError,
)
from aioaccum.producer import Producer

__all__ = ["SyncProducer"]

_RECORD_BOUND = RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + 10
_PENDING, _STARTED, _ABANDONED = 0, 1, 2
# Seconds a caller waits beyond a timeout it gave, for the loop thread to answer at all.
_GRACE_S = 5.0

Headers = Sequence[tuple[str, bytes | None]]


class _Record:
    __slots__ = (
        "appended",
        "error",
        "future",
        "headers",
        "key",
        "partition",
        "reserved",
        "state",
        "timestamp_ms",
        "topic",
        "value",
    )

    def __init__(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        reserved: int,
        appended: threading.Event | None,
    ) -> None:
        self.topic = topic
        self.value = value
        self.key = key
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.headers = headers
        self.reserved = reserved
        # Set only for slow sends: the caller waits on it and reads `error`.
        self.appended = appended
        self.error: BaseException | None = None
        self.state = _PENDING
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        # Running futures cannot be cancelled by the user: the record is on its way regardless.
        future.set_running_or_notify_cancel()
        self.future = future


@dataclasses.dataclass
class _Flush:
    timeout: float | None
    done: concurrent.futures.Future[None]


def _transfer(
    target: concurrent.futures.Future[RecordMetadata], source: asyncio.Future[Any]
) -> None:
    if source.cancelled():
        target.set_exception(ProducerClosedError("the record was cancelled before it was sent"))
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class SyncProducer:
    """A thread-safe, blocking facade over :class:`~aioaccum.Producer`.

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
        self._user_config = config
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        if self._key_serializer is not None or self._value_serializer is not None:
            # Serialize in the caller's thread: its errors belong there, and its CPU time too.
            config = dataclasses.replace(config, key_serializer=None, value_serializer=None)
        self._config = config
        self._producer = Producer(config=config, kafka=kafka)
        self._max_block_ms = config.max_block_ms
        self._batch_size = config.batch_size
        self._max_record_size = min(config.max_request_size, config.buffer_memory)

        self._lock = threading.Lock()
        self._queue: collections.deque[_Record | _Flush] = collections.deque()
        self._reserved = 0
        self._available = 0
        self._pool_waiters = False
        self._partitions: dict[str, int] = {}
        self._idle = False
        self._closing = False
        self._close_timeout: float | None = None
        self._final_metrics: dict[str, float] = {}
        self._flushes: set[asyncio.Task[None]] = set()

        self._loop_factory = loop_factory or default_loop_factory()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._wakeup: asyncio.Future[None] | None = None
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
        loop = asyncio.get_running_loop()
        self._close_requested = loop.create_future()
        try:
            await self._producer.start()
        except BaseException as exc:
            self._start_error = exc
            await self._producer.close(0)
            self._ready.set()
            return
        self._publish_pool()
        self._ready.set()
        drainer = loop.create_task(self._drain(), name="aioaccum-sync-drain")
        # Should the drainer ever fail, close rather than leave callers waiting for it.
        drainer.add_done_callback(lambda _: self._begin_close())
        await self._close_requested
        with self._lock:
            self._closing = True
        timeout = self._close_timeout
        deadline = None if timeout is None else loop.time() + timeout
        # Records queued before close() are sent, if the time allows.
        await asyncio.wait({drainer}, timeout=timeout)
        remaining = None if deadline is None else max(deadline - loop.time(), 0.0)
        # Closing the producer fails anything still waiting for memory, so the drainer ends.
        await self._producer.close(remaining)
        try:
            await drainer
        finally:
            self._final_metrics = self._producer.metrics()
            self._fail_queued()

    def _fail_queued(self) -> None:
        with self._lock:
            left, self._queue = self._queue, collections.deque()
        for item in left:
            error = ProducerClosedError("the SyncProducer closed before this record was sent")
            if isinstance(item, _Flush):
                item.done.set_exception(error)
            elif item.appended is None:
                item.future.set_exception(error)
            else:
                item.error = error
                item.appended.set()

    def _publish_pool(self) -> None:
        pool = self._producer.pool
        if pool is not None:
            self._available = pool.available_memory()
            self._pool_waiters = pool.queued() > 0

    def _wake(self) -> None:
        fut = self._wakeup
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        producer = self._producer
        while True:
            with self._lock:
                batch = self._queue
                if not batch:
                    if self._closing:
                        return
                    self._idle = True
                    self._wakeup = wakeup = loop.create_future()
                else:
                    self._queue = collections.deque()
            if not batch:
                await wakeup
                continue
            released = 0
            for item in batch:
                if isinstance(item, _Flush):
                    task = loop.create_task(self._flush(item))
                    self._flushes.add(task)
                    task.add_done_callback(self._flushes.discard)
                    continue
                released += item.reserved
                if item.appended is not None:
                    with self._lock:
                        if item.state == _ABANDONED:
                            continue
                        item.state = _STARTED
                await self._append(producer, item)
            with self._lock:
                self._reserved -= released
                self._publish_pool()

    async def _append(self, producer: Producer, item: _Record) -> None:
        try:
            future = await producer.send(
                item.topic, item.value, item.key, item.partition, item.timestamp_ms, item.headers
            )
        except Exception as exc:
            if item.appended is None:
                item.future.set_exception(exc)
            else:
                item.error = exc
                item.appended.set()
            return
        future.add_done_callback(functools.partial(_transfer, item.future))
        if item.topic not in self._partitions:
            count = len(await producer.partitions_for(item.topic))
            # Copied, not mutated: callers read it without the lock.
            self._partitions = {**self._partitions, item.topic: count}
        if item.appended is not None:
            item.appended.set()

    async def _flush(self, request: _Flush) -> None:
        try:
            await self._producer.flush(request.timeout)
        except TimeoutError:
            request.done.set_exception(
                ProducerTimeoutError(
                    f"flush did not finish within {request.timeout} s; the records keep "
                    "going until delivery_timeout_ms"
                )
            )
        except Exception as exc:
            request.done.set_exception(exc)
        else:
            request.done.set_result(None)

    def _begin_close(self) -> None:
        fut = self._close_requested
        if fut is not None and not fut.done():
            fut.set_result(None)
        self._wake()

    # --- callers

    def _check_thread(self, what: str) -> None:
        if threading.get_ident() == self._loop_thread_id:
            raise RuntimeError(
                f"SyncProducer.{what}() was called on the producer's own event-loop thread "
                "(from a future's done-callback?); it would wait for that thread and deadlock. "
                "Call it from another thread, or use aioaccum.Producer in async code"
            )

    def _enqueue(self, item: _Record | _Flush) -> None:
        # With the lock held.
        self._queue.append(item)
        if self._idle:
            self._idle = False
            loop = self._loop
            assert loop is not None
            loop.call_soon_threadsafe(self._wake)

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue one record; return a future of its metadata.

        Blocks while the buffer pool has no room, up to ``max_block_ms`` for its turn and again
        up to ``max_block_ms`` for memory; also while the topic's metadata is fetched.
        Records sent by one thread are appended in the order it sent them.

        Raises:
            ProducerClosedError: :meth:`close` was called.
            BufferExhaustedError: No buffer memory within ``max_block_ms``.
            ProducerTimeoutError: The topic's metadata did not arrive within ``max_block_ms``.
            RecordTooLargeError: The record exceeds ``max_request_size`` or ``buffer_memory``.
            SerializationError: Key, value or headers are not bytes and no serializer was given.
            RuntimeError: Called on the producer's own loop thread.
        """
        self._check_thread("send")
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        fast = True
        # Copies, so that a caller reusing its bytearray cannot change a queued record.
        if key is not None and type(key) is not bytes:
            if isinstance(key, bytearray | memoryview):
                key = bytes(key)
            else:
                fast = False
        if value is not None and type(value) is not bytes:
            if isinstance(value, bytearray | memoryview):
                value = bytes(value)
            else:
                fast = False
        if headers:
            headers = validate_headers(headers)
        if timestamp_ms is not None and (type(timestamp_ms) is not int or timestamp_ms < 0):
            fast = False
        count = self._partitions.get(topic)
        if count is None or (
            partition is not None and (type(partition) is not int or not 0 <= partition < count)
        ):
            fast = False
        size = _RECORD_BOUND + (len(key) if type(key) is bytes else 0) + (
            len(value) if type(value) is bytes else 0
        )
        if fast and (headers or size > self._batch_size):
            size = estimate_size_in_bytes_upper_bound(key, value, headers or ())
            fast = size <= self._max_record_size
        need = max(self._batch_size, size)
        with self._lock:
            if self._closing:
                raise ProducerClosedError("cannot send: the SyncProducer is closed")
            if fast and not self._pool_waiters and self._available - self._reserved >= need:
                record = _Record(topic, value, key, partition, timestamp_ms, headers, need, None)
                self._reserved += need
                self._enqueue(record)
                return record.future
            record = _Record(
                topic, value, key, partition, timestamp_ms, headers, need, threading.Event()
            )
            self._reserved += need
            queued = len(self._queue)
            self._enqueue(record)
        return self._wait_appended(record, queued)

    def _wait_appended(
        self, record: _Record, queued: int
    ) -> concurrent.futures.Future[RecordMetadata]:
        appended = record.appended
        assert appended is not None
        if not appended.wait(self._max_block_ms / 1000):
            with self._lock:
                if record.state == _PENDING:
                    record.state = _ABANDONED
                    raise BufferExhaustedError(
                        f"the record waited {self._max_block_ms} ms (max_block_ms) behind "
                        f"{queued} queued record(s) without reaching the producer; "
                        f"buffer_memory={self._config.buffer_memory} bytes, about "
                        f"{max(self._available, 0)} bytes free"
                    )
            appended.wait()
        if record.error is not None:
            raise record.error
        return record.future

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

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent before this call has ended (acknowledged or failed).

        Raises:
            ProducerTimeoutError: Not done within ``timeout`` seconds.
            ProducerClosedError: The producer is closed.
        """
        self._check_thread("flush")
        started = time.monotonic()
        request = _Flush(timeout, concurrent.futures.Future())
        with self._lock:
            if self._closing:
                raise ProducerClosedError("cannot flush: the SyncProducer is closed")
            self._enqueue(request)
        try:
            request.done.result(None if timeout is None else timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            raise ProducerTimeoutError(
                f"flush did not finish within {time.monotonic() - started:.1f} s"
            ) from None

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued and buffered, then stop the loop thread and wait for it.

        Args:
            timeout: Seconds for the whole close; records still unsent then fail with
                :class:`ProducerClosedError`. ``None`` waits as long as delivery takes.

        Calling it again (from any thread) only waits for the first close to finish.
        """
        self._check_thread("close")
        with self._lock:
            first = not self._closing
            self._closing = True
            if first:
                self._close_timeout = timeout
        loop = self._loop
        if first and loop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(self._begin_close)
        self._thread.join()

    def metrics(self) -> dict[str, float]:
        """The producer's metrics (as ``Producer.metrics()``); the last ones once closed."""
        self._check_thread("metrics")
        loop = self._loop
        if loop is None or not self._thread.is_alive() or self._closing:
            self._thread.join()
            return dict(self._final_metrics)

        async def read() -> dict[str, float]:
            return self._producer.metrics()

        return asyncio.run_coroutine_threadsafe(read(), loop).result()

    @property
    def config(self) -> ProducerConfig:
        return self._user_config

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
        state = "closed" if self._closing else "running"
        return f"<SyncProducer {state} bootstrap={self._config.bootstrap_servers!r}>"
