"""BufferPool with threads: waiters that block a thread share the FIFO with waiting tasks.

Threads here are real; each wait is bounded, and "still waiting" is read from the pool's own
queue, never proven by sleeping.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
from collections.abc import Callable

import pytest

from aioaccum._runtime.pool import BufferPool
from aioaccum.errors import BufferExhaustedError, ProducerClosedError

from .test_pool import P, assert_exact, hold_all, settle
from .test_sync import WAIT_S, wait_until


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    """:func:`wait_until` without blocking the loop (the condition needs no loop to change)."""
    await asyncio.to_thread(wait_until, condition, what)


def in_thread(fn: Callable[[], bytearray]) -> concurrent.futures.Future[bytearray]:
    """Run ``fn`` in a new thread; its outcome lands in the returned future."""
    outcome: concurrent.futures.Future[bytearray] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(fn())
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return outcome


async def test_threads_and_tasks_are_served_in_arrival_order() -> None:
    pool = BufferPool(2 * P, P)
    held = await hold_all(pool)
    order: list[str] = []

    async def task(name: str) -> bytearray:
        buffer = await pool.allocate(P, math.inf)
        order.append(name)
        return buffer

    first = asyncio.create_task(task("task-1"))
    await settle()
    thread = in_thread(lambda: pool.allocate_blocking(P, math.inf))
    await wait_for(lambda: pool.queued() == 2, "the thread to queue behind the task")
    third = asyncio.create_task(task("task-2"))
    await settle()
    assert pool.queued() == 3

    pool.deallocate(held.pop())  # serves the head only: the first task
    await settle()
    assert order == ["task-1"]
    assert not thread.done()
    pool.deallocate(held.pop())  # the thread, ahead of the later task
    granted = await asyncio.wrap_future(thread)
    assert len(granted) == P
    assert order == ["task-1"]
    assert not third.done()
    pool.deallocate(granted)
    await third
    assert order == ["task-1", "task-2"]
    pool.deallocate(first.result())
    pool.deallocate(third.result())
    assert_exact(pool, 0)


def test_a_thread_times_out_with_the_numbers_and_leaves_the_queue() -> None:
    pool = BufferPool(2 * P, P)
    held = [pool.allocate_nowait(P) for _ in range(2)]
    with pytest.raises(BufferExhaustedError) as info:
        pool.allocate_blocking(P, 20)
    message = str(info.value)
    assert f"{P} bytes" in message
    assert "20 ms" in message
    assert "Available memory: 0" in message
    assert pool.queued() == 0
    stats = assert_exact(pool, 2 * P)
    assert stats.exhausted_count == 1
    for buffer in held:
        assert buffer is not None
        pool.deallocate(buffer)
    assert_exact(pool, 0)


def test_a_thread_gathers_odd_sized_memory_piece_by_piece() -> None:
    pool = BufferPool(4 * P, P)
    held = [pool.allocate_nowait(P) for _ in range(4)]
    waiting = in_thread(lambda: pool.allocate_blocking(3 * P, math.inf))
    wait_until(lambda: pool.queued() == 1, "the thread to queue")
    for buffer in held[:2]:
        assert buffer is not None
        pool.deallocate(buffer)
    assert pool.statistics().reserved == 2 * P  # gathered, not yet enough
    assert not waiting.done()
    assert held[2] is not None
    pool.deallocate(held[2])
    granted = waiting.result(WAIT_S)
    assert len(granted) == 3 * P
    pool.deallocate(granted)
    assert held[3] is not None
    pool.deallocate(held[3])
    assert_exact(pool, 0)


def test_close_from_another_thread_wakes_every_waiting_thread() -> None:
    pool = BufferPool(P, P)
    held = pool.allocate_nowait(P)
    waiting = [in_thread(lambda: pool.allocate_blocking(P, math.inf)) for _ in range(3)]
    wait_until(lambda: pool.queued() == 3, "three threads to queue")
    closer = threading.Thread(target=pool.close)
    closer.start()
    closer.join(WAIT_S)
    for outcome in waiting:
        with pytest.raises(ProducerClosedError):
            outcome.result(WAIT_S)
    assert pool.queued() == 0
    assert held is not None
    pool.deallocate(held)
    assert_exact(pool, 0)


async def queue_behind_a_grant_from_another_thread(pool: BufferPool) -> tuple[
    bytearray, asyncio.Task[bytearray]
]:
    """A task queued for the pool's only buffer, and that buffer freed by another thread: the
    grant crosses threads with call_soon_threadsafe."""
    held = await pool.allocate(P, math.inf)
    waiter = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    assert pool.queued() == 1
    freeing = threading.Thread(target=pool.deallocate, args=(held,))
    freeing.start()
    freeing.join(WAIT_S)
    return held, waiter


async def test_memory_freed_by_a_thread_reaches_a_waiting_task() -> None:
    pool = BufferPool(P, P)
    held, waiter = await queue_behind_a_grant_from_another_thread(pool)
    async with asyncio.timeout(WAIT_S):  # the task wakes on its own loop
        granted = await waiter
    assert granted is held  # the same pooled buffer, reused
    pool.deallocate(granted)
    assert_exact(pool, 0)


async def test_a_task_cancelled_after_a_grant_from_another_thread_gives_it_back() -> None:
    pool = BufferPool(P, P)
    held, waiter = await queue_behind_a_grant_from_another_thread(pool)
    # Granted (the memory is the waiter's), but the task is cancelled before it takes it.
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await settle()
    assert pool.queued() == 0
    assert_exact(pool, 0)
    assert await pool.allocate(P, 0) is held  # nothing was lost or duplicated


def test_many_threads_and_tasks_contending_end_with_every_byte_back() -> None:
    pool = BufferPool(8 * P, P)
    rounds = 200
    errors: list[BaseException] = []

    def thread_work() -> None:
        try:
            for i in range(rounds):
                size = P if i % 3 else 2 * P  # pooled and odd sizes
                buffer = pool.allocate_blocking(size, WAIT_S * 1000)
                pool.deallocate(buffer)
        except BaseException as exc:
            errors.append(exc)

    async def task_work() -> None:
        for i in range(rounds):
            buffer = await pool.allocate(P if i % 2 else 3 * P, WAIT_S * 1000)
            await asyncio.sleep(0)
            pool.deallocate(buffer)

    async def main() -> None:
        threads = [threading.Thread(target=thread_work) for _ in range(4)]
        for thread in threads:
            thread.start()
        await asyncio.gather(*(task_work() for _ in range(4)))
        for thread in threads:
            await asyncio.to_thread(thread.join, WAIT_S)

    asyncio.run(main())
    assert not errors
    stats = assert_exact(pool, 0)
    assert stats.waiters == 0
    assert stats.available == 8 * P
