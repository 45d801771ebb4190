"""The producer's bounded buffer memory: an asyncio port of Kafka's ``BufferPool``.

Theory of operation
===================

The Java producer caps the memory its record batches may occupy with
``org.apache.kafka.clients.producer.internals.BufferPool``; this module is that class, rebuilt
around asyncio instead of a lock and condition variables. Memory lives in exactly one of four
places, and the pool keeps the sum exact through every path, including timeouts, cancellation
and ``close()``::

    total_memory == len(free) * poolable_size   # pooled buffers waiting to be reused
                  + free_sized                  # larger pooled buffers (chunks), by their size
                  + unallocated                 # bytes never handed out, or handed back unpooled
                  + reserved                    # bytes the head waiter has gathered so far
                  + allocated                   # bytes in callers' hands

*Free list.* Almost every batch is exactly ``batch_size`` (``poolable_size``) bytes, so such
buffers are kept after use and handed out again, oldest first, without touching the allocator.
Any other size is allocated fresh and only its byte count is returned. When an odd-sized request
needs more than ``unallocated``, pooled buffers are given up from the tail of the free list (the
most recently returned ones) until it fits, as Kafka's ``freeUp`` does.

*Sized free lists.* With incremental allocation the pooled size is a chunk, and a busy batch
grows by chunks that double (see :mod:`aioaccum._core.chunks`): ``poolable_size`` times 2, 4, ...
up to ``largest_pooled``. Each of those sizes has a free list of its own, so that a batch of
1 MiB made of 64 KiB chunks reuses them as a batch of one size reuses its buffer. They are given
up first, largest first, when an odd-sized request needs their bytes.

*Fast path.* ``allocate_nowait`` serves a request synchronously when nobody is queued and the
memory is there; ``allocate`` tries it first, so an uncontended allocation never suspends.

*Waiting.* Otherwise the request joins a FIFO of waiters: a dict from an asyncio Future to the
request, ordered by arrival, so removal of any waiter is O(1). The queue is strictly fair. A new
request never overtakes a queued one (Kafka's lock can barge, this pool cannot), and only the head
is ever served, so a large head request blocks smaller ones behind it rather than starving.

*Direct hand-off.* Waiters are never woken to compete for memory. Whoever returns memory
(``deallocate``, a timeout, a cancellation) runs ``_serve``, which moves memory to the head waiter
while the pool still owns the bookkeeping: a pooled-size head gets a free buffer object as is; any
other head gathers bytes piece by piece as they are released (Kafka's ``accumulated``) and is
granted a fresh ``bytearray`` once it has gathered its full size. A granted waiter leaves the
queue, and serving continues with the next one while memory remains. Each grant resolves one
Future, so each grant wakes exactly one task.

*Deadlines and cancellation.* Each waiter computes its deadline once and arms one loop timer for
it. When the timer fires, the pool removes the waiter, returns what it had gathered, serves the
next waiter and fails the Future with ``BufferExhaustedError``. Since the timer and the grant
both run as plain callbacks on the loop, exactly one of them wins, with no window in which a
waiter is both granted and timed out (``asyncio.timeout`` around the await would cancel the
task instead, and that cancellation could arrive after a grant already made). A task cancelled
while queued leaves the queue and returns its gathered bytes. A task cancelled after its grant
but before it resumed returns the granted buffer. ``close()`` fails every waiter with
``ProducerClosedError``. Buffers that are deallocated after that are still counted.

*Threads.* A thread that needs memory (``allocate_blocking``, for ``SyncProducer``) joins the
same FIFO as tasks, so neither can overtake the other. Its waiter is a held lock it blocks on
up to ``max_block_ms``; a grant stores the buffer and releases the lock. Every method holds the
pool's ``lock`` (reentrant, and shared with the accumulator, which calls the pool while it holds
it), and a grant to a task made on another thread reaches the task's loop with
``call_soon_threadsafe``. Until the task takes it, the buffer is the waiter's: a task cancelled
in between gives it back, as above.

The pool never captures an event loop. Futures and timers are created from the running loop
inside ``allocate``.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aioaccum.errors import BufferExhaustedError, ProducerClosedError, RecordTooLargeError

__all__ = ["BufferPool", "PoolStats"]


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot of a :class:`BufferPool`, for metrics and debugging.

    Attributes:
        total: ``total_memory``, the bound on all buffers (``buffer_memory``).
        poolable_size: Size of the pooled buffers (``batch_size``).
        free_buffers: Pooled buffers waiting to be reused.
        unallocated: Bytes not handed out and not held in pooled buffers.
        available: ``unallocated + free_buffers * poolable_size`` plus the bytes of larger
            pooled buffers (Java ``buffer-available-bytes``).
        reserved: Bytes the head waiter has gathered but not yet been granted.
        allocated: Bytes currently handed out (granted and not yet deallocated).
        waiters: Queued allocations (Java ``waiting-threads``).
        allocations: Allocations that returned a buffer.
        queued_allocations: Allocations that had to wait in the queue.
        exhausted_count: Allocations that timed out (Java ``buffer-exhausted-total``).
        wait_time_total_s: Seconds spent waiting in the queue, summed over all waiters (Java
            ``bufferpool-wait-time-ns-total`` / 1e9); its rate is ``bufferpool-wait-ratio``.
        closed: Whether :meth:`BufferPool.close` was called.
        free_sized: Bytes in pooled buffers larger than ``poolable_size`` (the doubling chunks
            of incremental allocation) waiting to be reused.
    """

    total: int
    poolable_size: int
    free_buffers: int
    unallocated: int
    available: int
    reserved: int
    allocated: int
    waiters: int
    allocations: int
    queued_allocations: int
    exhausted_count: int
    wait_time_total_s: float
    closed: bool
    free_sized: int = 0


class _Waiter:
    """One queued request: its size, what it has gathered, and the buffer once granted."""

    __slots__ = ("accumulated", "granted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.accumulated = 0
        self.granted: bytearray | None = None

    def grant(self, buffer: bytearray) -> None:
        raise NotImplementedError

    def fail(self, error: BaseException) -> None:
        raise NotImplementedError

    def abandoned(self) -> bool:
        """Whether nobody will take a grant any more (a cancelled task not yet cleaned up)."""
        return False


class _TaskWaiter(_Waiter):
    """A coroutine in ``allocate``: its future, and the timer of its deadline."""

    __slots__ = ("future", "loop", "thread", "timer")

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(size)
        self.loop = loop
        self.thread = threading.get_ident()
        self.future: asyncio.Future[bytearray] = loop.create_future()
        self.timer: asyncio.TimerHandle | None = None

    def grant(self, buffer: bytearray) -> None:
        self.granted = buffer
        self._on_loop(self._resolve, buffer)

    def fail(self, error: BaseException) -> None:
        self._on_loop(self._reject, error)

    def abandoned(self) -> bool:
        return self.future.cancelled()

    def _on_loop(self, fn: Callable[[Any], None], arg: Any) -> None:
        if threading.get_ident() == self.thread:
            fn(arg)
            return
        # A closed loop raises: its task will never run again to take the grant anyway.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, arg)

    def _resolve(self, buffer: bytearray) -> None:
        if not self.future.done():
            self.future.set_result(buffer)

    def _reject(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _ThreadWaiter(_Waiter):
    """A thread in ``allocate_blocking``: it blocks on ``latch``, held until grant or failure."""

    __slots__ = ("error", "latch")

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.error: BaseException | None = None
        self.latch = _thread.allocate_lock()
        self.latch.acquire()

    def grant(self, buffer: bytearray) -> None:
        self.granted = buffer
        self.latch.release()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.latch.release()


class BufferPool:
    """A bounded pool of ``bytearray`` buffers with fair, deadline-bounded waiting.

    Args:
        total_memory: The most bytes that may be handed out at once (``buffer_memory``).
        poolable_size: The size of buffers that are kept for reuse (``batch_size``).
        clock: A monotonic clock in seconds, used only for the wait-time metric.
        largest_pooled: Above ``poolable_size``: buffers of ``poolable_size`` doubled, up to
            this many bytes, are kept for reuse too, each size in a free list of its own.

    Thread-safe: every method holds :attr:`lock`.

    Raises:
        ValueError: If a size is negative, or ``poolable_size`` is zero or above
            ``total_memory``.
    """

    def __init__(
        self,
        total_memory: int,
        poolable_size: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        largest_pooled: int = 0,
    ) -> None:
        if total_memory < 0:
            raise ValueError(f"total_memory must be >= 0, got {total_memory}")
        if not 0 < poolable_size <= total_memory:
            raise ValueError(
                f"poolable_size must be in 1..total_memory ({total_memory}), got {poolable_size}"
            )
        self._total = total_memory
        self._poolable = poolable_size
        self._clock = clock
        self.lock = threading.RLock()
        """Held by every method; the accumulator holds it too while it appends and drains."""
        # Bound once: the two paths every chunk of an incremental batch takes call them rather
        # than use `with`, whose method lookups and __exit__ call cost more than the rest of the
        # call (callgrind: about 1,400 of an allocation's 2,400 instructions).
        self._acquire, self._release = self.lock.acquire, self.lock.release
        self._free: deque[bytearray] = deque()
        self._sized: dict[int, list[bytearray]] = {}
        size = poolable_size * 2
        while size <= min(largest_pooled, total_memory):
            self._sized[size] = []
            size *= 2
        self._sized_bytes = 0  # bytes in the sized free lists
        self._unallocated = total_memory
        self._allocated = 0
        # In arrival order: a dict, so that any waiter leaves in O(1).
        self._waiters: dict[_Waiter, None] = {}
        self._closed = False
        self._allocations = 0
        self._queued_allocations = 0
        self._exhausted = 0
        self._wait_time = 0.0

    @property
    def total_memory(self) -> int:
        """The bound on all buffers, in bytes."""
        return self._total

    @property
    def poolable_size(self) -> int:
        """The size of the buffers kept for reuse, in bytes."""
        return self._poolable

    @property
    def wait_time_total_s(self) -> float:
        """Seconds spent waiting in the queue so far, summed over all waiters (lock-free read:
        the metrics look once per request)."""
        return self._wait_time

    @property
    def exhausted_count(self) -> int:
        """Allocations that timed out so far."""
        return self._exhausted

    def available_memory(self) -> int:
        """Bytes that could be allocated now: unallocated plus pooled free buffers."""
        with self.lock:
            return self._unallocated + len(self._free) * self._poolable + self._sized_bytes

    def unallocated_memory(self) -> int:
        """Bytes that are neither handed out nor held in pooled free buffers."""
        return self._unallocated

    def queued(self) -> int:
        """How many allocations (tasks and threads) are waiting for memory."""
        return len(self._waiters)

    def allocate_nowait(self, size: int) -> bytearray | None:
        """Allocate without waiting, if that is possible now.

        Args:
            size: Bytes wanted. A request of exactly ``poolable_size`` may return a reused buffer.

        Returns:
            A buffer of exactly ``size`` bytes, or ``None`` if the caller would have to wait
            (memory is short, or other allocations are already queued).

        Raises:
            RecordTooLargeError: ``size`` exceeds ``total_memory``; waiting would never help.
            ProducerClosedError: The pool is closed.
            ValueError: ``size`` is negative.
        """
        self._acquire()
        try:
            if self._waiters or self._closed or not 0 <= size <= self._total:
                self._check_request(size)
                return None
            return self._take(size)
        finally:
            self._release()

    def _take(self, size: int) -> bytearray | None:
        """:meth:`allocate_nowait` once ``size`` is known to be allowed (lock held). Typed in
        the ``.pxd``: a chunk of an incremental batch comes through here, several per batch, and
        boxed arithmetic made a chunk cost as much as a 1 KB record."""
        if size == self._poolable and self._free:
            buffer: bytearray = self._free.popleft()
        else:
            sized: list[bytearray] | None = self._sized.get(size) if self._sized else None
            if sized:
                buffer = sized.pop()
                self._sized_bytes -= size
            else:
                if size > self._unallocated:
                    if size > (self._unallocated + len(self._free) * self._poolable
                               + self._sized_bytes):
                        return None
                    self._free_up(size)
                self._unallocated -= size
                buffer = bytearray(size)
        self._allocated += size
        self._allocations += 1
        return buffer

    async def allocate(self, size: int, max_block_ms: float) -> bytearray:
        """Allocate a buffer, waiting in FIFO order for memory if there is not enough.

        Args:
            size: Bytes wanted. A request of exactly ``poolable_size`` may return a reused buffer
                (its old contents are not cleared); any other size gets a fresh ``bytearray``.
            max_block_ms: How long to wait at most, in milliseconds; ``math.inf`` waits for ever
                and ``0`` fails at once rather than wait.

        Returns:
            A buffer of exactly ``size`` bytes. Give it back with :meth:`deallocate`.

        Raises:
            RecordTooLargeError: ``size`` exceeds ``total_memory``.
            BufferExhaustedError: No memory came free within ``max_block_ms``.
            ProducerClosedError: The pool is closed, or was closed while waiting.
            ValueError: ``size`` is negative or ``max_block_ms`` is NaN.
        """
        loop = asyncio.get_running_loop()
        with self.lock:
            buffer = self.allocate_nowait(size)
            if buffer is not None:
                return buffer
            self._check_block(size, max_block_ms)
            waiter = _TaskWaiter(size, loop)
            self._enqueue(waiter)
            if not math.isinf(max_block_ms):
                deadline = loop.time() + max_block_ms / 1000.0
                waiter.timer = loop.call_at(deadline, self._expire, waiter, max_block_ms)
            started = self._clock()
            # Gather whatever is free now; with no other waiter ahead this makes the new request
            # the head, and it may even prune a cancelled head and complete at once.
            self._serve()
        try:
            buffer = await waiter.future
        except BaseException:
            # Cancelled, timed out or closed. A buffer granted meanwhile goes back; a waiter
            # still queued leaves and lets the next one be served.
            with self.lock:
                self._wait_time += self._clock() - started
                self._abandon(waiter)
            raise
        with self.lock:
            self._wait_time += self._clock() - started
            self._allocations += 1
        return buffer

    def allocate_blocking(self, size: int, max_block_ms: float) -> bytearray:
        """:meth:`allocate` for a thread: block the calling thread in the same FIFO queue.

        Must not be called on a thread that runs the loop of a task waiting in this pool (it
        would block the loop that has to free memory); the producer refuses that before.

        Raises:
            As :meth:`allocate`.
        """
        with self.lock:
            buffer = self.allocate_nowait(size)
            if buffer is not None:
                return buffer
            self._check_block(size, max_block_ms)
            waiter = _ThreadWaiter(size)
            self._enqueue(waiter)
            self._serve()
        started = self._clock()
        timeout = -1.0 if math.isinf(max_block_ms) else max_block_ms / 1000.0
        try:
            waiter.latch.acquire(True, timeout)
        except BaseException:
            # Interrupted (KeyboardInterrupt in the main thread): leave no trace in the pool.
            with self.lock:
                self._wait_time += self._clock() - started
                if waiter.granted is not None:
                    self.deallocate(waiter.granted)
                elif waiter in self._waiters:
                    self._leave(waiter)
                    self._serve()
            raise
        with self.lock:
            self._wait_time += self._clock() - started
            if waiter.granted is not None:
                self._allocations += 1
                return waiter.granted
            if waiter.error is not None:
                raise waiter.error
            # Timed out while still queued: a grant after this point cannot happen.
            message = self._exhausted_message(size, max_block_ms)
            self._exhausted += 1
            self._leave(waiter)
            self._serve()
        raise BufferExhaustedError(message)

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Return memory to the pool and serve queued waiters from it.

        A buffer of exactly ``poolable_size`` bytes (both ``len(buffer)`` and ``size``) goes back
        to the free list for reuse; for any other buffer only the byte count is returned. This
        works after :meth:`close` too, so accounting stays exact during shutdown.

        Args:
            buffer: A buffer obtained from this pool, which the caller must no longer use.
            size: The bytes to return; defaults to ``len(buffer)``.

        Raises:
            ValueError: ``size`` is negative or more than is currently allocated.
        """
        self._acquire()
        try:
            self._give(buffer, len(buffer) if size is None else size)
        finally:
            self._release()

    def _give(self, buffer: bytearray, size: int) -> None:
        """:meth:`deallocate`, lock held (typed in the ``.pxd``, as :meth:`_take`)."""
        if not 0 <= size <= self._allocated:
            raise ValueError(
                f"cannot deallocate {size} bytes: only {self._allocated} bytes are allocated"
            )
        self._allocated -= size
        length = len(buffer)
        if length == size and size == self._poolable:
            self._free.append(buffer)
        elif length == size and self._sized:
            sized: list[bytearray] | None = self._sized.get(size)
            if sized is not None:
                sized.append(buffer)
                self._sized_bytes += size
            else:
                self._unallocated += size
        else:
            self._unallocated += size
        if self._waiters:
            self._serve()

    def close(self) -> None:
        """Close the pool: fail every waiter, and every later allocation, with
        ``ProducerClosedError``. Idempotent; any thread may call it."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            # Nobody is served from here on: each waiter's gathered bytes simply go back.
            for waiter in list(self._waiters):
                self._leave(waiter)
                waiter.fail(
                    ProducerClosedError("the buffer pool was closed while waiting for memory")
                )

    def statistics(self) -> PoolStats:
        """Return a snapshot of the pool's state and counters."""
        with self.lock:
            return PoolStats(
                total=self._total,
                poolable_size=self._poolable,
                free_buffers=len(self._free),
                unallocated=self._unallocated,
                available=self.available_memory(),
                reserved=sum(waiter.accumulated for waiter in self._waiters),
                allocated=self._allocated,
                waiters=len(self._waiters),
                allocations=self._allocations,
                queued_allocations=self._queued_allocations,
                exhausted_count=self._exhausted,
                wait_time_total_s=self._wait_time,
                closed=self._closed,
                free_sized=self._sized_bytes,
            )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<BufferPool {state} total={self._total} poolable={self._poolable}"
            f" available={self.available_memory()} (free={len(self._free)}x{self._poolable}"
            f"{f' + {self._sized_bytes} in larger pooled buffers' if self._sized else ''}"
            f" + unallocated={self._unallocated}) allocated={self._allocated}"
            f" waiters={len(self._waiters)}>"
        )

    # -- internals (all with the lock held) ----------------------------------------------------

    def _check_request(self, size: int) -> None:
        """Raise the error that forbids ``size`` outright, if any."""
        if size > self._total:
            raise RecordTooLargeError(
                f"cannot allocate {size} bytes: the buffer pool holds only {self._total} bytes"
                " in all (buffer_memory)"
            )
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        if self._closed:
            raise ProducerClosedError("the buffer pool is closed")

    def _check_block(self, size: int, max_block_ms: float) -> None:
        """Raise instead of queueing when the caller may not wait at all."""
        if math.isnan(max_block_ms):
            raise ValueError("max_block_ms must be a number, got NaN")
        if max_block_ms <= 0:
            self._exhausted += 1
            raise BufferExhaustedError(self._exhausted_message(size, max_block_ms))

    def _enqueue(self, waiter: _Waiter) -> None:
        self._waiters[waiter] = None
        self._queued_allocations += 1

    def _free_up(self, size: int) -> None:
        """Give up pooled buffers until ``size`` is unallocated: the sized ones first, largest
        first, then the free list's, most recently returned first."""
        if self._sized_bytes:
            for chunk_size in sorted(self._sized, reverse=True):
                sized = self._sized[chunk_size]
                while size > self._unallocated and sized:
                    sized.pop()
                    self._sized_bytes -= chunk_size
                    self._unallocated += chunk_size
        free = self._free
        while size > self._unallocated and free:
            free.pop()
            self._unallocated += self._poolable

    def _serve(self) -> None:
        """Hand memory to waiters in FIFO order until the head cannot be satisfied."""
        waiters = self._waiters
        while waiters:
            waiter = next(iter(waiters))
            if waiter.abandoned():
                # Its task has not run its cleanup yet; do that here so nobody waits behind it.
                self._leave(waiter)
                continue
            sized = self._sized.get(waiter.size) if self._sized else None
            if waiter.size == self._poolable and self._free:
                buffer = self._free.popleft()
                self._unallocated += waiter.accumulated
            elif sized:
                buffer = sized.pop()
                self._sized_bytes -= waiter.size
                self._unallocated += waiter.accumulated
            else:
                need = waiter.size - waiter.accumulated
                self._free_up(need)
                got = min(need, self._unallocated)
                self._unallocated -= got
                waiter.accumulated += got
                if got < need:
                    return
                buffer = bytearray(waiter.size)
            self._leave(waiter, keep_gathered=True)
            self._allocated += waiter.size
            waiter.grant(buffer)

    def _leave(self, waiter: _Waiter, *, keep_gathered: bool = False) -> None:
        """Take ``waiter`` out of the queue (if still there) and return its gathered bytes,
        unless they went into its grant. The caller decides whether to serve the next one."""
        if waiter in self._waiters:
            del self._waiters[waiter]
            if isinstance(waiter, _TaskWaiter) and waiter.timer is not None:
                waiter.timer.cancel()
            if not keep_gathered:
                self._unallocated += waiter.accumulated
            waiter.accumulated = 0

    def _abandon(self, waiter: _TaskWaiter) -> None:
        """A task stopped waiting: return a grant it did not take, or leave the queue."""
        granted, waiter.granted = waiter.granted, None
        waiter.future.cancel()  # no-op once resolved: nothing may resolve it from now on
        if granted is not None:
            self.deallocate(granted)
        elif waiter in self._waiters:
            self._leave(waiter)
            self._serve()

    def _expire(self, waiter: _TaskWaiter, max_block_ms: float) -> None:
        """Deadline timer callback for a queued waiter (leaving the queue cancels the timer)."""
        with self.lock:
            if waiter not in self._waiters:
                return  # granted (or failed) just before the timer fired
            if waiter.abandoned():  # cancelled, its task not yet cleaned up: only prune it
                self._leave(waiter)
                self._serve()
                return
            # Like Kafka, report the memory available to this waiter, before its share goes back.
            message = self._exhausted_message(waiter.size, max_block_ms)
            self._exhausted += 1
            self._leave(waiter)
            waiter.fail(BufferExhaustedError(message))
            self._serve()

    def _exhausted_message(self, size: int, max_block_ms: float) -> str:
        integral = math.isfinite(max_block_ms) and max_block_ms == int(max_block_ms)
        blocked = int(max_block_ms) if integral else max_block_ms
        return (
            f"Failed to allocate {size} bytes within the configured max blocking time"
            f" {blocked} ms. Total memory: {self._total} bytes. Available memory:"
            f" {self.available_memory()} bytes. Poolable size: {self._poolable} bytes"
        )
