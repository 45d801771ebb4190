"""Record futures at the cost of one object per batch: Java's ``ProduceRequestResult`` and
``FutureRecordMetadata``.

Theory of operation
-------------------
A batch has one :class:`ProduceRequestResult`: the base offset, log-append time or error the broker
gave the whole batch, and the done-callbacks of every record future that someone waits on. A record
future (:class:`FutureRecordMetadata`) is the batch's result plus the record's own numbers (offset
delta, timestamp, key and value sizes); its :class:`RecordMetadata` is built when read. Completing
a batch is one assignment and, only if anyone waits, one loop callback that runs every waiter's
callback in turn: nothing is scheduled per record.

A record future behaves as an asyncio future wherever one goes (``await``, ``gather``, ``wait``,
``wait_for``, ``as_completed``, ``shield``, ``asyncio.isfuture``): it has the attribute asyncio's
tasks look for, yields itself from ``__await__`` (never the batch, so cancelling one awaiting
task cancels one record future), and keeps its callbacks with the batch result. It holds no
reference back from the result, so it closes no reference cycle.

Cancelling a record future stops it from reporting; the record itself is still sent, as in Java
(where a record's future cannot be cancelled at all). A failed batch's error is copied for each
reader: one exception object raised in many tasks would collect all their frames in its traceback
and keep them, and the batch, alive.

Threads get a :class:`ThreadRecordFuture` instead, Java's future as a thread sees it: ``result``
blocks, up to a timeout, on a latch the batch result makes only when a thread first waits, and
releases when the batch ends, so a batch of records costs one lock however many threads wait.
It also carries the three attributes ``concurrent.futures.wait`` and ``as_completed`` use, so both
work with it, again through the batch result.

Thread futures and the batch result share one module lock, ``THREAD_LOCK``: a thread adds its
callback or latch under it only while the batch is not done, and ending the batch sets ``done``
under it, so nothing a thread adds is missed by the end. Loop-side code needs no lock, it runs on
the thread that ends batches.

The only asyncio names used are the two exception types a future must raise; the loop is handed in
by the caller and used for ``call_soon`` alone, so the core still never creates futures or timers.
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import copy
import threading
from asyncio.exceptions import CancelledError, InvalidStateError
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, Protocol

from aioaccum._core.cluster import TopicPartition

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = [
    "THREAD_LOCK",
    "CallbackLoop",
    "FutureRecordMetadata",
    "ProduceRequestResult",
    "RecordFuture",
    "RecordMetadata",
    "ThreadRecordFuture",
]

# Guards what threads add to a batch result (callbacks, latches, waiters of concurrent.futures)
# against the batch ending meanwhile. Reentrant: concurrent.futures.wait takes the "condition" of
# every future it waits for, and many of ours share it.
THREAD_LOCK = threading.RLock()
# Its two methods, looked up once: ProduceRequestResult.set takes the lock once per batch, and a
# ``with`` block looks up ``__enter__`` and ``__exit__`` by name each time.
_lock_thread = THREAD_LOCK.acquire
_unlock_thread = THREAD_LOCK.release


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


class CallbackLoop(Protocol):
    """The part of an event loop a batch result uses: an ``asyncio`` loop satisfies it."""

    def call_soon(
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = ...
    ) -> Any: ...

    def call_exception_handler(self, context: dict[str, Any]) -> None: ...


Callback = Callable[[Any], object]
# A waiter on the whole batch (aioaccum.wait_all): told once when the result is set.
Listener = Callable[["ProduceRequestResult"], object]


def fresh_error(error: BaseException) -> BaseException:
    """A copy of a batch's error for one reader, keeping the chain to what caused it."""
    own = copy.copy(error)
    own.__cause__ = error.__cause__
    own.__suppress_context__ = True
    return own


class ProduceRequestResult:
    """The outcome every record of one batch shares, and the callbacks waiting for it.

    Args:
        tp: The batch's topic-partition.
        loop: Where callbacks run (``call_soon``); ``None`` runs them inline, for loop-free tests.
    """

    __slots__ = (
        "_callbacks",
        "_cancel_messages",
        "_latch",
        "_listeners",
        "_thread_waiters",
        "base_offset",
        "done",
        "error",
        "log_append_time",
        "loop",
        "partition",
        "topic",
        "tp",
    )

    def __init__(self, tp: TopicPartition, loop: CallbackLoop | None) -> None:
        self.tp = tp
        # Read for every record's metadata: plain fields, not the named tuple's getters.
        self.topic: str = tp.topic
        self.partition: int = tp.partition
        self.loop = loop
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.done = False
        # (record future, callback, context) for each record someone waits on, in order added;
        # None while there is none, so that a batch nobody waits on allocates no list.
        self._callbacks: list[tuple[RecordFuture, Callback, contextvars.Context]] | None = None
        self._listeners: list[Listener] | None = None
        # Made only when a thread first waits: a held lock, released when the batch ends.
        self._latch: Any = None
        # (waiter, record future) for each waiter concurrent.futures installed.
        self._thread_waiters: list[tuple[Any, ThreadRecordFuture]] | None = None
        # The message given to cancel(msg), by record offset in the batch: rare, so kept here
        # rather than in a field of every record future.
        self._cancel_messages: dict[int, object] | None = None
        if cython.compiled:
            # Until something that may point back is held (a waiter list, an error): with
            # keys over thousands of partitions, thousands of open batches, each with a result
            # the collector would walk on every full pass (_cgc.pxd).
            gc_untrack(self)  # type: ignore[name-defined,unused-ignore]  # noqa: F821

    def set(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """End the batch (once): release waiting threads, and run the waiters' callbacks soon,
        in one loop callback."""
        if self.done:
            return
        _lock_thread()
        try:
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            if error is not None:
                self._track()  # its traceback may lead back here
            latch = self._latch
            waiters = self._thread_waiters
            self._thread_waiters = None
            pending = bool(self._callbacks or self._listeners)
        finally:
            _unlock_thread()
        if latch is not None:
            latch.release()
        if waiters is not None:
            for waiter, future in waiters:
                if error is None:
                    waiter.add_result(future)
                else:
                    waiter.add_exception(future)
        if pending:
            self._schedule()
        else:
            self._settle()

    def latch(self) -> Any:
        """A lock that is held until the batch ends: acquire it (with a timeout) to wait, then
        release it at once for the next waiter."""
        with THREAD_LOCK:
            latch = self._latch
            if latch is None:
                latch = self._latch = _thread.allocate_lock()
                if not self.done:
                    latch.acquire()
        return latch

    def add_thread_waiter(self, waiter: Any, future: ThreadRecordFuture) -> None:
        """Install a waiter of ``concurrent.futures`` (with ``THREAD_LOCK`` held)."""
        if self.done:
            # concurrent.futures installs on every future and counted the done ones already.
            return
        if self._thread_waiters is None:
            self._thread_waiters = []
            self._track()  # a waiter holds the futures it waits on
        self._thread_waiters.append((waiter, future))

    def remove_thread_waiter(self, waiter: Any, future: ThreadRecordFuture) -> None:
        with THREAD_LOCK:
            waiters = self._thread_waiters
            if waiters is not None:
                self._thread_waiters = [
                    entry for entry in waiters if entry[0] is not waiter or entry[1] is not future
                ]

    def _schedule(self) -> None:
        loop = self.loop
        if loop is None:
            self._fire()
            return
        try:
            loop.call_soon(self._fire)
        except RuntimeError:
            # The loop is closed: nobody can wait any more, so let the callbacks go.
            self._callbacks = None
            self._listeners = None

    def _settle(self) -> None:
        """A successful batch whose waiters were all told holds only numbers, strings, its
        partition and the loop, and can close no reference cycle any more: compiled, it leaves
        the garbage collector's lists. Futures kept by the million share one result per batch,
        and with small batches (keys over many partitions) the collector's full passes over
        these results cost a third of the producer's CPU."""
        if (
            self.error is None
            and not self._callbacks
            and not self._listeners
            and self._cancel_messages is None
        ):
            self._callbacks = None
            self._listeners = None
            if cython.compiled:
                gc_untrack(self)  # type: ignore[name-defined,unused-ignore]  # noqa: F821

    def _track(self) -> None:
        # Something that may point back is held again (a callback or listener added late).
        if cython.compiled:
            gc_track(self)  # type: ignore[name-defined,unused-ignore]  # noqa: F821

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks or [], None
        listeners, self._listeners = self._listeners or [], None
        for listener in listeners:
            listener(self)
        for i, (future, fn, context) in enumerate(callbacks):
            try:
                context.run(fn, future)
            except (SystemExit, KeyboardInterrupt):
                # The rest still run, in a later callback, as they would have with call_soon.
                self._callbacks = callbacks[i + 1 :] + (self._callbacks or [])
                if self._callbacks:
                    self._schedule()
                raise
            except BaseException as exc:  # reported as asyncio reports a failing callback
                if self.loop is not None:
                    self.loop.call_exception_handler(
                        {
                            "message": f"Exception in callback {fn!r} of a record future",
                            "exception": exc,
                            "future": future,
                        }
                    )
        if self.done:
            self._settle()  # it checks that nobody was added meanwhile

    def add_callback(
        self, future: RecordFuture, fn: Callback, context: contextvars.Context
    ) -> None:
        callbacks = self._callbacks
        if callbacks is None:
            # The loop adds without the lock, threads with it: the list is made once, under it.
            with THREAD_LOCK:
                callbacks = self._callbacks
                if callbacks is None:
                    callbacks = self._callbacks = []
                    self._track()
        callbacks.append((future, fn, context))

    def remove_callbacks(self, future: RecordFuture, fn: Callback | None) -> int:
        """Drop ``future``'s callbacks (only those equal to ``fn``, unless it is ``None``)."""
        with THREAD_LOCK:  # threads may append meanwhile
            callbacks = self._callbacks or []
            kept = [
                entry
                for entry in callbacks
                if entry[0] is not future or (fn is not None and entry[1] != fn)
            ]
            removed = len(callbacks) - len(kept)
            if removed:
                self._callbacks = kept
        return removed

    def take_callbacks(
        self, future: RecordFuture
    ) -> list[tuple[RecordFuture, Callback, contextvars.Context]]:
        with THREAD_LOCK:  # threads may append meanwhile
            callbacks = self._callbacks or []
            taken = [entry for entry in callbacks if entry[0] is future]
            if taken:
                self._callbacks = [entry for entry in callbacks if entry[0] is not future]
        return taken

    def keep_cancel_message(self, relative_offset: int, message: object) -> None:
        """Remember what ``cancel(message)`` said for the record at ``relative_offset``."""
        with THREAD_LOCK:
            if self._cancel_messages is None:
                self._cancel_messages = {}
                self._track()  # the message may be any object
            self._cancel_messages[relative_offset] = message

    def cancel_message(self, relative_offset: int, drop: bool = False) -> object:
        """The message a record was cancelled with (None if none); ``drop`` forgets it."""
        messages = self._cancel_messages
        if messages is None:
            return None
        return messages.pop(relative_offset, None) if drop else messages.get(relative_offset)

    def add_listener(self, listener: Listener) -> None:
        listeners = self._listeners
        if listeners is None:
            with THREAD_LOCK:  # as in add_callback: appends from threads may meet this one
                listeners = self._listeners
                if listeners is None:
                    listeners = self._listeners = []
                    self._track()
        listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        listeners = self._listeners
        if listeners is not None:
            with contextlib.suppress(ValueError):  # already told, or never added
                listeners.remove(listener)

    def hand_over(self) -> None:
        """After a split moved this batch's records: their callbacks follow them, and whoever
        waited on the whole batch is told to look again."""
        with THREAD_LOCK:
            callbacks, self._callbacks = self._callbacks or [], None
            for future, fn, context in callbacks:
                target = future._result
                if target is self:  # not moved (cannot happen for a complete split): keep it
                    self.add_callback(future, fn, context)
                else:
                    target.add_callback(future, fn, context)
            waiters, self._thread_waiters = self._thread_waiters, None
            for waiter, thread_future in waiters or ():
                thread_future._result.add_thread_waiter(waiter, thread_future)
        # Threads waiting on this batch's latch wake when it ends, and find their record moved.
        listeners, self._listeners = self._listeners or [], None
        for listener in listeners:
            listener(self)

    @property
    def waiters(self) -> int:
        """Callbacks and listeners waiting (for tests and repr)."""
        return len(self._callbacks or ()) + len(self._listeners or ())

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("failed" if self.error else "done")
        return (
            f"<ProduceRequestResult {self.tp.topic}-{self.tp.partition} {state} "
            f"base_offset={self.base_offset} waiters={self.waiters}>"
        )


# Compiled, record futures are not tracked by the garbage collector: they can close no cycle,
# since nothing they hold points back at them (their callbacks live in the batch result).
@cython.no_gc
@cython.cclass
class RecordFuture:
    """What every record future holds: its batch's result and the record's own numbers.

    Made by the batch the record went into, never by users. The two kinds differ only in how
    one waits: :class:`FutureRecordMetadata` for coroutines, :class:`ThreadRecordFuture` for
    threads.
    """

    __slots__ = (
        "_blocking",
        "_cancelled",
        "_key_size",
        "_relative_offset",
        "_result",
        "_timestamp",
        "_value_size",
    )

    def __init__(
        self,
        result: ProduceRequestResult,
        relative_offset: int,
        timestamp: int,
        key_size: int,
        value_size: int,
    ) -> None:
        self._result = result
        self._relative_offset = relative_offset
        self._timestamp = timestamp
        self._key_size = key_size
        self._value_size = value_size
        self._cancelled = False
        self._blocking = False

    def pending_result(self) -> ProduceRequestResult | None:
        """The batch result this record still waits for, or ``None`` once it is done."""
        if self._cancelled or self._result.done:
            return None
        return self._result

    def retarget(self, result: ProduceRequestResult, relative_offset: int) -> None:
        """Point at another batch after a split moved the record there."""
        message = (
            self._result.cancel_message(self._relative_offset, drop=True)
            if self._cancelled
            else None
        )
        self._result = result
        self._relative_offset = relative_offset
        if message is not None:
            result.keep_cancel_message(relative_offset, message)

    def done(self) -> bool:
        return self._cancelled != 0 or self._result.done

    def _metadata(self) -> RecordMetadata:
        """The record's metadata, or its error raised (a copy, for this reader); done only."""
        return metadata_of(self)

    def _describe(self, kind: str) -> str:
        if self._cancelled:
            state = "cancelled"
        elif not self._result.done:
            state = "pending"
        elif self._result.error is not None:
            state = f"exception={self._result.error!r}"
        else:
            state = f"result={metadata_of(self)!r}"
        tp = self._result.tp
        return f"<{kind} {tp.topic}-{tp.partition}+{self._relative_offset} {state}>"


@cython.no_gc
@cython.cclass
class FutureRecordMetadata(RecordFuture):
    """The future of one record's :class:`RecordMetadata` (Kafka's ``FutureRecordMetadata``).

    An asyncio-compatible future: await it, gather it, add callbacks to it. Made by the batch the
    record went into; never constructed by users. Only the producer ends it: ``set_result`` and
    ``set_exception`` are not available.
    """

    __slots__ = ()

    def __init__(
        self,
        result: ProduceRequestResult,
        relative_offset: int,
        timestamp: int,
        key_size: int,
        value_size: int,
    ) -> None:
        RecordFuture.__init__(self, result, relative_offset, timestamp, key_size, value_size)

    # Read and written by asyncio's Task: True while a task yields this future to the loop. Kept
    # in the base class's one-byte field (futures.pxd): two flags and no message slot keep a
    # record future at 48 bytes, not 64.
    @property
    def _asyncio_future_blocking(self) -> bool:
        return self._blocking != 0

    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value: bool) -> None:
        self._blocking = bool(value)

    # --- state

    def cancelled(self) -> bool:
        return self._cancelled != 0

    def get_loop(self) -> Any:
        loop = self._result.loop
        if loop is None:
            raise RuntimeError("this record future has no event loop (a loop-free test batch)")
        return loop

    def result(self) -> RecordMetadata:
        """The record's metadata.

        Raises:
            CancelledError: This future was cancelled.
            InvalidStateError: The batch has not ended yet.
            AioAccumError: The record failed (a copy of the batch's error, for this reader).
        """
        if self._cancelled:
            raise self._make_cancelled_error()
        if not self._result.done:
            raise InvalidStateError("the record is not acknowledged yet")
        return metadata_of(self)

    def exception(self) -> BaseException | None:
        """The record's error (a copy for this reader), or ``None`` if it succeeded."""
        if self._cancelled:
            raise self._make_cancelled_error()
        result = self._result
        if not result.done:
            raise InvalidStateError("the record is not acknowledged yet")
        return None if result.error is None else fresh_error(result.error)

    def cancel(self, msg: object = None) -> bool:
        """Stop reporting this record's outcome; the record is still sent (see the module)."""
        if self.done():
            return False
        self._cancelled = True
        if msg is not None:
            self._result.keep_cancel_message(self._relative_offset, msg)
        result = self._result
        loop = result.loop
        for future, fn, context in result.take_callbacks(self):
            if loop is None:
                context.run(fn, future)
            else:
                loop.call_soon(fn, future, context=context)
        return True

    def _make_cancelled_error(self) -> CancelledError:
        # asyncio.gather calls this on a cancelled child.
        message = self._result.cancel_message(self._relative_offset)
        return CancelledError() if message is None else CancelledError(message)

    # --- callbacks

    def add_done_callback(
        self, fn: Callback, *, context: contextvars.Context | None = None
    ) -> None:
        if context is None:
            context = contextvars.copy_context()
        if self.done():
            loop = self._result.loop
            if loop is None:
                context.run(fn, self)
            else:
                loop.call_soon(fn, self, context=context)
            return
        self._result.add_callback(self, fn, context)

    def remove_done_callback(self, fn: Callback) -> int:
        return self._result.remove_callbacks(self, fn)

    # --- awaiting

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not cython.compiled:
            return self._awaiting()
        # Compiled, the future is its own iterator, driven through the am_send slot that
        # futures.pxd gives the class: no generator per await, no StopIteration raised.
        return self  # type: ignore[return-value,unused-ignore]

    __iter__ = __await__

    def _awaiting(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            self._blocking = True
            yield self  # the record, not the batch: a task that is cancelled cancels only this
        if not self.done():
            raise RuntimeError("await wasn't used with future")
        return self.result()

    def __next__(self) -> Any:
        """A step of awaiting, for callers that step by hand; ``await`` uses ``am_send``."""
        step = await_step(self)
        if step is self:
            return step
        raise StopIteration(step)

    def __repr__(self) -> str:
        return self._describe("FutureRecordMetadata")


# concurrent.futures reads a future's state by these names.
_FINISHED = "FINISHED"
_RUNNING = "RUNNING"


@cython.no_gc
@cython.cclass
class ThreadRecordFuture(RecordFuture):
    """A record's future for threads: Java's ``FutureRecordMetadata.get(timeout)``.

    ``result(timeout)`` blocks until the broker answered for the record's batch. It cannot be
    cancelled: the record is sent regardless, as in Java. ``concurrent.futures.wait`` and
    ``as_completed`` accept it. Callbacks run on the producer's loop thread (where blocking on
    the producer would deadlock: the producer refuses that).
    """

    __slots__ = ()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata, waiting up to ``timeout`` seconds (``None``: no limit).

        Raises:
            TimeoutError: The batch did not end within ``timeout``; the record is still on its
                way, and a later call may return it.
            AioAccumError: The record failed (a copy of the batch's error, for this reader).
        """
        wait_for_batch(self, timeout)
        return metadata_of(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error (a copy for this reader), or ``None``; waits as :meth:`result`."""
        wait_for_batch(self, timeout)
        error = self._result.error
        return None if error is None else fresh_error(error)

    def cancel(self) -> bool:
        """Always ``False``: an accepted record is sent whatever happens to its future."""
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._result.done

    def add_done_callback(self, fn: Callback) -> None:
        """Call ``fn(future)`` once the record ended: at once in this thread if it has, else on
        the producer's loop thread."""
        with THREAD_LOCK:
            result = self._result
            if not result.done:
                result.add_callback(self, fn, contextvars.copy_context())
                return
        fn(self)

    # --- what concurrent.futures.wait and as_completed use

    @property
    def _condition(self) -> Any:
        return THREAD_LOCK

    @property
    def _state(self) -> str:
        return _FINISHED if self._result.done else _RUNNING

    @property
    def _waiters(self) -> _WaiterList:
        return _WaiterList(self)

    def __repr__(self) -> str:
        return self._describe("ThreadRecordFuture")


def metadata_of(future: RecordFuture) -> RecordMetadata:
    """A done record's metadata, or its batch's error raised (a copy, for this reader).

    A function, not a method: a method the compiled class dispatches through a table would cost
    every record future a pointer to that table.
    """
    result = future._result
    if result.error is not None:
        raise fresh_error(result.error)
    base = result.base_offset
    log_append_time = result.log_append_time
    offset = -1 if base < 0 else base + future._relative_offset
    timestamp = future._timestamp if log_append_time < 0 else log_append_time
    if not cython.compiled:
        return _new_tuple(
            RecordMetadata,
            (result.topic, result.partition, offset, timestamp, future._key_size,
             future._value_size),
        )
    # Filled in place (futures.pxd): tuple.__new__ would build and copy two tuples first.
    return new_record_metadata(  # type: ignore[no-any-return,name-defined,unused-ignore]  # noqa: F821
        RecordMetadata, result.topic, result.partition, offset, timestamp, future._key_size,
        future._value_size,
    )


def await_step(future: FutureRecordMetadata) -> Any:
    """One step of ``await future``: the future itself to yield while its batch is pending (once;
    the awaiting task clears the flag when it takes it), else its metadata or its error raised."""
    if future._cancelled:
        return future.result()  # raises the cancellation
    if future._result.done:
        return metadata_of(future)  # a C call, where result() would be a method lookup
    if future._blocking:
        raise RuntimeError("await wasn't used with future")
    future._blocking = True
    return future


if cython.compiled:
    # Declared in futures.pxd: from now on, FutureRecordMetadata's am_send calls await_step.
    install_await_step(  # type: ignore[name-defined,unused-ignore]  # noqa: F821
        FutureRecordMetadata, cython.cast(cython.p_void, await_step)
    )


def wait_for_batch(future: RecordFuture, timeout: float | None) -> None:
    """Block until ``future``'s batch ended, up to ``timeout`` seconds (``None``: no limit)."""
    if future._result.done:
        return
    wait = -1.0 if timeout is None else max(timeout, 0.0)
    # A split may move the record to another batch while it waits: wait for that one then.
    while not future._result.done:
        latch = future._result.latch()
        if not latch.acquire(True, wait):
            raise TimeoutError(
                f"the record was not acknowledged within {timeout} s; it is still on its "
                "way (delivery_timeout_ms bounds it)"
            )
        latch.release()


class _WaiterList:
    """The waiter list concurrent.futures appends to and removes from; kept by the batch."""

    __slots__ = ("_future",)

    def __init__(self, future: ThreadRecordFuture) -> None:
        self._future = future

    def append(self, waiter: Any) -> None:
        with THREAD_LOCK:
            self._future._result.add_thread_waiter(waiter, self._future)

    def remove(self, waiter: Any) -> None:
        self._future._result.remove_thread_waiter(waiter, self._future)
