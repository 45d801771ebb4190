"""Unit tests for aioaccum._runtime.pool.BufferPool (Kafka's BufferPool, ported to asyncio)."""

from __future__ import annotations

import asyncio
import collections.abc
import gc
import math
from collections.abc import Coroutine, Generator
from typing import Any

import pytest

from aioaccum._runtime.pool import BufferPool, PoolStats
from aioaccum.errors import BufferExhaustedError, ProducerClosedError, RecordTooLargeError

P = 1024  # poolable size used throughout


async def settle(rounds: int = 5) -> None:
    """Yield to the loop a few times so that woken tasks run (never waits for time)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def assert_exact(pool: BufferPool, held: int) -> PoolStats:
    """Every byte is in exactly one place: free list, unallocated, reserved or held."""
    stats = pool.statistics()
    assert stats.allocated == held
    assert (stats.free_buffers * P + stats.free_sized + stats.unallocated + stats.reserved + held
            == stats.total)
    return stats


async def hold_all(pool: BufferPool) -> list[bytearray]:
    """Allocate the whole pool as pooled-size buffers."""
    return [await pool.allocate(P, math.inf) for _ in range(pool.total_memory // P)]


class ManualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when told to; drive it with ready callbacks only."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


class FakeClock:
    """The pool's metrics clock, advanced by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingCoro(collections.abc.Coroutine[Any, Any, Any]):
    """Wraps a coroutine and counts how often its task steps it: once to start, then once per
    wake-up."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.steps = 0

    def send(self, value: Any) -> Any:
        self.steps += 1
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self.steps += 1
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()


# -- 1. start-up ------------------------------------------------------------------------------


async def test_empty_free_list_allocates_fresh_buffers_from_unallocated() -> None:
    pool = BufferPool(4 * P, P)
    assert pool.statistics().free_buffers == 0
    first = await pool.allocate(P, 1000)
    odd = await pool.allocate(100, 1000)
    assert isinstance(first, bytearray)
    assert len(first) == P
    assert len(odd) == 100
    assert pool.unallocated_memory() == 3 * P - 100
    assert pool.available_memory() == 3 * P - 100
    stats = assert_exact(pool, P + 100)
    assert stats.allocations == 2
    assert stats.queued_allocations == 0
    assert stats.free_buffers == 0


def test_allocate_nowait_serves_without_a_loop_and_refuses_when_short() -> None:
    pool = BufferPool(2 * P, P)
    buffer = pool.allocate_nowait(P)
    assert buffer is not None
    assert len(buffer) == P
    assert pool.allocate_nowait(P + 1) is None
    assert pool.statistics().allocations == 1


async def test_uncontended_allocate_never_suspends() -> None:
    pool = BufferPool(2 * P, P)
    coro = pool.allocate(P, 1000)
    with pytest.raises(StopIteration) as done:
        coro.send(None)
    assert len(done.value.value) == P


def test_pool_binds_to_no_loop_and_works_under_successive_loops() -> None:
    pool = BufferPool(P, P)  # created with no loop running

    async def round_trip() -> None:
        held = await pool.allocate(P, 1000)
        waiter = asyncio.ensure_future(pool.allocate(P, 1000))
        await settle()
        pool.deallocate(held)
        await settle()
        pool.deallocate(waiter.result())

    asyncio.run(round_trip())
    asyncio.run(round_trip())
    assert pool.statistics().queued_allocations == 2
    assert pool.available_memory() == P


# -- 2. reuse ---------------------------------------------------------------------------------


async def test_deallocated_pooled_buffer_is_the_next_one_handed_out() -> None:
    pool = BufferPool(4 * P, P)
    first = await pool.allocate(P, 1000)
    second = await pool.allocate(P, 1000)
    pool.deallocate(first)
    pool.deallocate(second)
    assert pool.statistics().free_buffers == 2
    # Oldest returned first (head of the free list).
    assert await pool.allocate(P, 1000) is first
    assert await pool.allocate(P, 1000) is second
    assert_exact(pool, 2 * P)


async def test_only_exact_poolable_buffers_are_pooled() -> None:
    pool = BufferPool(4 * P, P)
    buffer = await pool.allocate(P, 1000)
    pool.deallocate(buffer, 100)  # accounted as 100 odd bytes, not pooled
    assert pool.statistics().free_buffers == 0
    assert pool.unallocated_memory() == 3 * P + 100
    odd = await pool.allocate(P + 1, 1000)
    pool.deallocate(odd, P)  # size matches but the object is not a pooled buffer
    assert pool.statistics().free_buffers == 0
    assert_exact(pool, P - 100 + 1)


# -- 3. odd sizes -----------------------------------------------------------------------------


async def test_odd_size_releases_free_buffers_from_the_tail() -> None:
    pool = BufferPool(4 * P, P)
    a, b, c, d = await hold_all(pool)
    for buffer in (a, b, c, d):
        pool.deallocate(buffer)
    assert pool.unallocated_memory() == 0
    big = await pool.allocate(P + P // 2, 1000)  # needs two buffers' worth
    stats = assert_exact(pool, P + P // 2)
    assert stats.free_buffers == 2
    assert stats.unallocated == P // 2
    # The survivors are the head of the list, still in order.
    assert await pool.allocate(P, 1000) is a
    assert await pool.allocate(P, 1000) is b
    pool.deallocate(big)
    stats = assert_exact(pool, 2 * P)
    assert stats.unallocated == 2 * P
    assert stats.free_buffers == 0


async def test_zero_size_allocation_is_an_empty_buffer() -> None:
    pool = BufferPool(P, P)
    empty = await pool.allocate(0, 1000)
    assert empty == bytearray()
    pool.deallocate(empty)
    assert pool.available_memory() == P


async def test_deallocating_more_than_allocated_is_refused() -> None:
    pool = BufferPool(2 * P, P)
    buffer = await pool.allocate(P, 1000)
    with pytest.raises(ValueError, match="only 1024 bytes are allocated"):
        pool.deallocate(buffer, P + 1)
    with pytest.raises(ValueError, match="cannot deallocate -1 bytes"):
        pool.deallocate(buffer, -1)
    pool.deallocate(buffer)
    with pytest.raises(ValueError, match="cannot deallocate"):
        pool.deallocate(buffer)
    assert_exact(pool, 0)


# -- 4. exhaustion ----------------------------------------------------------------------------


@pytest.mark.any_loop
async def test_waiters_are_served_first_come_first_served() -> None:
    pool = BufferPool(2 * P, P)
    held = await hold_all(pool)
    order: list[int] = []

    async def wait(n: int) -> bytearray:
        buffer = await pool.allocate(P, math.inf)
        order.append(n)
        return buffer

    tasks = [asyncio.create_task(wait(n)) for n in range(3)]
    await settle()
    assert pool.queued() == 3
    pool.deallocate(held.pop())
    await settle()
    assert order == [0]
    assert pool.queued() == 2
    pool.deallocate(held.pop())
    pool.deallocate(await tasks[0])
    await settle()
    assert order == [0, 1, 2]
    assert tasks[2].result() is tasks[0].result()  # the same pooled object went round
    assert pool.statistics().queued_allocations == 3


@pytest.mark.any_loop
async def test_large_head_gathers_memory_in_pieces_and_blocks_smaller_requests() -> None:
    pool = BufferPool(4 * P, P)
    a, b, c, d = await hold_all(pool)
    big = asyncio.create_task(pool.allocate(3 * P, math.inf))
    small = asyncio.create_task(pool.allocate(P // 2, math.inf))
    await settle()
    pool.deallocate(a)
    await settle()
    stats = assert_exact(pool, 3 * P)
    assert stats.reserved == P
    assert stats.available == 0
    assert not small.done()  # it would fit, but it is behind the head
    pool.deallocate(b, P // 2)  # returned in two uneven pieces
    pool.deallocate(bytearray(P // 2))
    await settle()
    assert pool.statistics().reserved == 2 * P
    assert not big.done()
    pool.deallocate(c)
    await settle()
    assert len(big.result()) == 3 * P
    assert not small.done()
    assert_exact(pool, 4 * P)
    pool.deallocate(d)
    await settle()
    assert len(small.result()) == P // 2
    stats = assert_exact(pool, 3 * P + P // 2)
    assert stats.unallocated == P // 2
    assert stats.waiters == 0


async def test_head_served_then_remaining_memory_goes_to_the_next() -> None:
    pool = BufferPool(4 * P, P)
    held = await hold_all(pool)
    waiters = [asyncio.create_task(pool.allocate(size, math.inf)) for size in (P // 2, P // 4, P)]
    await settle()
    pool.deallocate(held.pop())  # one pooled buffer: freed up and split for the two odd heads
    await settle()
    assert waiters[0].done()
    assert waiters[1].done()
    assert not waiters[2].done()
    assert pool.statistics().reserved == P // 4
    pool.deallocate(held.pop())
    await settle()
    # The pooled-size head takes the pooled buffer object and gives its gathered bytes back.
    assert waiters[2].result() is not None
    stats = assert_exact(pool, 3 * P + P // 2 + P // 4)
    assert stats.unallocated == P // 4
    assert stats.free_buffers == 0


@pytest.mark.looptime
async def test_timeout_names_the_numbers_and_returns_what_was_gathered() -> None:
    loop = asyncio.get_running_loop()
    pool = BufferPool(3 * P, P)
    a, b, c = await hold_all(pool)
    big = asyncio.create_task(pool.allocate(2 * P, 100))
    later = asyncio.create_task(pool.allocate(P // 2, math.inf))
    await settle()
    start = loop.time()
    pool.deallocate(a)
    await settle()
    assert pool.statistics().reserved == P
    with pytest.raises(BufferExhaustedError) as caught:
        await big
    assert loop.time() - start == pytest.approx(0.1)
    assert str(caught.value) == (
        f"Failed to allocate {2 * P} bytes within the configured max blocking time 100 ms. "
        f"Total memory: {3 * P} bytes. Available memory: 0 bytes. Poolable size: {P} bytes"
    )
    assert isinstance(caught.value, TimeoutError)
    await settle()
    # The head's share went straight to the next waiter.
    assert len(later.result()) == P // 2
    stats = assert_exact(pool, 2 * P + P // 2)
    assert stats.exhausted_count == 1
    assert stats.unallocated == P // 2
    pool.deallocate(b)
    pool.deallocate(c)
    pool.deallocate(later.result())
    assert_exact(pool, 0)


@pytest.mark.looptime
async def test_granted_waiter_is_not_timed_out_later() -> None:
    pool = BufferPool(P, P)
    (held,) = await hold_all(pool)
    waiter = asyncio.create_task(pool.allocate(P, 50))
    await settle()
    pool.deallocate(held)
    await settle()
    assert waiter.result() is held
    await asyncio.sleep(1)  # loop time only: the cancelled timer must not fire
    stats = assert_exact(pool, P)
    assert stats.exhausted_count == 0


async def test_zero_max_block_fails_at_once_without_queueing() -> None:
    pool = BufferPool(2 * P, P)
    await pool.allocate(P, 0)  # memory is there: no waiting needed
    with pytest.raises(
        BufferExhaustedError, match=r"max blocking time 0 ms\. .*Available memory: 1024"
    ):
        await pool.allocate(2 * P, 0)
    stats = pool.statistics()
    assert stats.queued_allocations == 0
    assert stats.exhausted_count == 1


@pytest.mark.looptime
async def test_fractional_max_block_is_printed_as_given() -> None:
    pool = BufferPool(P, P)
    await pool.allocate(P, 1000)
    with pytest.raises(BufferExhaustedError, match=r"max blocking time 2\.5 ms"):
        await pool.allocate(P, 2.5)


async def test_nan_max_block_is_refused() -> None:
    pool = BufferPool(P, P)
    await pool.allocate(P, 1000)
    with pytest.raises(ValueError, match="NaN"):
        await pool.allocate(P, math.nan)
    assert pool.queued() == 0


async def test_wait_time_is_measured_with_the_injected_clock() -> None:
    clock = FakeClock()
    pool = BufferPool(P, P, clock=clock)
    (held,) = await hold_all(pool)
    waiter = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    clock.now += 2.5
    pool.deallocate(held)
    await settle()
    assert waiter.result() is held
    assert pool.statistics().wait_time_total_s == pytest.approx(2.5)


# -- 5. no barging ----------------------------------------------------------------------------


@pytest.mark.any_loop
async def test_released_memory_is_never_taken_ahead_of_a_waiter() -> None:
    pool = BufferPool(2 * P, P)
    first, second = await hold_all(pool)
    waiter = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    pool.deallocate(first)
    # The waiter has not run yet, but the buffer is already its own.
    assert pool.allocate_nowait(P) is None
    assert pool.allocate_nowait(1) is None
    newcomer = asyncio.create_task(pool.allocate(1, math.inf))
    await settle()
    assert waiter.result() is first
    assert not newcomer.done()
    pool.deallocate(second)
    await settle()
    assert len(newcomer.result()) == 1
    assert_exact(pool, P + 1)


async def test_newcomer_queues_while_others_wait_even_for_a_tiny_request() -> None:
    pool = BufferPool(4 * P, P)
    held = await hold_all(pool)
    pool.deallocate(held.pop())
    big = asyncio.create_task(pool.allocate(2 * P, math.inf))
    await settle()
    assert pool.allocate_nowait(1) is None
    tiny = asyncio.create_task(pool.allocate(1, math.inf))
    await settle()
    assert not tiny.done()
    assert pool.queued() == 2
    pool.deallocate(held.pop())
    await settle()
    assert big.done()
    assert not tiny.done()
    pool.deallocate(held.pop())
    await settle()
    assert tiny.done()


# -- 6. cancellation --------------------------------------------------------------------------


@pytest.mark.any_loop
async def test_cancelled_waiter_leaves_the_queue_and_returns_its_share() -> None:
    pool = BufferPool(2 * P, P)
    first, second = await hold_all(pool)
    big = asyncio.create_task(pool.allocate(2 * P, math.inf))
    small = asyncio.create_task(pool.allocate(P // 2, math.inf))
    await settle()
    pool.deallocate(first)
    await settle()
    assert pool.statistics().reserved == P
    big.cancel()
    await settle()
    assert big.cancelled()
    assert len(small.result()) == P // 2
    stats = assert_exact(pool, P + P // 2)
    assert stats.waiters == 0
    assert stats.reserved == 0
    pool.deallocate(second)
    pool.deallocate(small.result())
    assert_exact(pool, 0)


@pytest.mark.any_loop
async def test_cancel_after_grant_before_resume_gives_the_buffer_back() -> None:
    pool = BufferPool(P, P)
    (held,) = await hold_all(pool)
    granted = asyncio.create_task(pool.allocate(P, math.inf))
    next_in_line = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    pool.deallocate(held)  # resolves the head's future...
    granted.cancel()  # ...but its task is cancelled before it resumes
    await settle()
    assert granted.cancelled()
    assert next_in_line.result() is held  # handed on, nothing leaked
    stats = assert_exact(pool, P)
    assert stats.allocations == 2  # the hold and next_in_line; the cancelled grant does not count


async def test_cancel_after_grant_with_nobody_waiting_refills_the_free_list() -> None:
    pool = BufferPool(P, P)
    (held,) = await hold_all(pool)
    granted = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    pool.deallocate(held)
    granted.cancel()
    await settle()
    assert granted.cancelled()
    stats = assert_exact(pool, 0)
    assert stats.free_buffers == 1


@pytest.mark.any_loop
async def test_cancelling_the_head_while_memory_is_released_strands_nobody() -> None:
    pool = BufferPool(4 * P, P)
    a, b, c, d = await hold_all(pool)
    head = asyncio.create_task(pool.allocate(3 * P, math.inf))
    second = asyncio.create_task(pool.allocate(P, math.inf))
    third = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    pool.deallocate(a)  # the head gathers it
    head.cancel()  # its cleanup has not run yet...
    pool.deallocate(b)  # ...so this release prunes it, returns its share and serves the rest
    assert pool.queued() == 0  # both remaining waiters were granted on the spot
    await settle()
    assert head.cancelled()
    assert second.result() is b  # the pooled-size head took the pooled buffer itself
    assert len(third.result()) == P  # and the next one the bytes the cancelled head gave back
    assert third.result() is not a
    assert_exact(pool, 4 * P)
    for buffer in (c, d, second.result(), third.result()):
        pool.deallocate(buffer)
    assert_exact(pool, 0)


async def test_cancelled_head_is_pruned_by_a_newcomer() -> None:
    pool = BufferPool(2 * P, P)
    first, _ = await hold_all(pool)
    head = asyncio.create_task(pool.allocate(2 * P, math.inf))
    await settle()
    pool.deallocate(first)
    assert pool.statistics().reserved == P
    head.cancel()
    # Still counted as queued until pruned, so the newcomer queues, prunes it and is served.
    newcomer = asyncio.create_task(pool.allocate(P // 2, math.inf))
    await settle()
    assert head.cancelled()
    assert len(newcomer.result()) == P // 2
    assert_exact(pool, P + P // 2)


async def test_error_thrown_into_a_waiting_allocate_leaves_the_queue() -> None:
    pool = BufferPool(P, P)
    (held,) = await hold_all(pool)
    coro = pool.allocate(P, math.inf)
    fut = coro.send(None)  # now queued and suspended on its future
    assert pool.queued() == 1
    with pytest.raises(KeyboardInterrupt):
        coro.throw(KeyboardInterrupt())
    assert fut.cancelled()
    assert pool.queued() == 0
    pool.deallocate(held)
    assert_exact(pool, 0)


def test_timer_firing_for_a_cancelled_waiter_only_prunes_it() -> None:
    loop = ManualClockLoop()
    try:
        pool = BufferPool(2 * P, P)
        held = [pool.allocate_nowait(P) for _ in range(2)]
        head = loop.create_task(pool.allocate(2 * P, 100))  # deadline at t=0.1
        loop.call_at(0.05, head.cancel)  # due in the same loop turn, ahead of the deadline
        loop.run_until_complete(settle())
        first = held[0]
        assert first is not None
        pool.deallocate(first)
        second = loop.create_task(pool.allocate(P, math.inf))
        loop.run_until_complete(settle())
        assert pool.statistics().reserved == P
        loop.now = 1.0
        loop.run_until_complete(settle())
        assert head.cancelled()
        assert len(second.result()) == P
        stats = assert_exact(pool, 2 * P)
        assert stats.exhausted_count == 0  # a cancellation, not a timeout
    finally:
        loop.close()


async def test_cancelled_after_its_future_failed_leaves_no_unretrieved_error() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    pool = BufferPool(P, P)
    await hold_all(pool)
    waiter = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    pool.close()  # fails the waiter's future...
    waiter.cancel()  # ...and the task is cancelled before it sees that
    await settle()
    assert waiter.cancelled()
    del waiter
    gc.collect()
    assert reported == []


# -- 7. close and hard limits -----------------------------------------------------------------


@pytest.mark.any_loop
async def test_close_fails_every_waiter_and_every_later_allocate() -> None:
    pool = BufferPool(2 * P, P)
    first, second = await hold_all(pool)
    big = asyncio.create_task(pool.allocate(2 * P, 60_000))
    small = asyncio.create_task(pool.allocate(1, math.inf))
    await settle()
    pool.deallocate(first)
    await settle()
    assert pool.statistics().reserved == P
    pool.close()
    pool.close()  # idempotent
    await settle()
    for task in (big, small):
        with pytest.raises(ProducerClosedError, match="closed while waiting"):
            task.result()
    with pytest.raises(ProducerClosedError, match="is closed"):
        await pool.allocate(1, 1000)
    with pytest.raises(ProducerClosedError):
        pool.allocate_nowait(1)
    # Deallocation after close still counts every byte.
    pool.deallocate(second)
    stats = assert_exact(pool, 0)
    assert stats.closed
    assert stats.waiters == 0
    assert stats.available == 2 * P


async def test_close_skips_a_cancelled_waiter_not_yet_pruned() -> None:
    pool = BufferPool(P, P)
    await hold_all(pool)
    cancelled = asyncio.create_task(pool.allocate(P, math.inf))
    other = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    cancelled.cancel()
    pool.close()
    await settle()
    assert cancelled.cancelled()
    assert isinstance(other.exception(), ProducerClosedError)
    assert pool.queued() == 0


async def test_size_above_total_fails_at_once_naming_both_numbers() -> None:
    pool = BufferPool(4 * P, P)
    await hold_all(pool)
    queued = asyncio.create_task(pool.allocate(P, math.inf))
    await settle()
    with pytest.raises(RecordTooLargeError, match=r"4097 bytes.* 4096 bytes"):
        await pool.allocate(4 * P + 1, 60_000)
    with pytest.raises(RecordTooLargeError):
        pool.allocate_nowait(4 * P + 1)
    pool.close()
    with pytest.raises(RecordTooLargeError):
        await pool.allocate(4 * P + 1, 60_000)
    await settle()
    assert isinstance(queued.exception(), ProducerClosedError)


async def test_negative_size_is_refused() -> None:
    pool = BufferPool(P, P)
    with pytest.raises(ValueError, match="size must be >= 0"):
        await pool.allocate(-1, 1000)


@pytest.mark.parametrize(
    ("total", "poolable", "message"),
    [(-1, 1, "total_memory"), (P, 0, "poolable_size"), (P, P + 1, "poolable_size")],
)
def test_constructor_rejects_impossible_sizes(total: int, poolable: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BufferPool(total, poolable)


# -- 9. one wake-up per grant -----------------------------------------------------------------


@pytest.mark.any_loop
async def test_each_grant_wakes_exactly_one_task() -> None:
    pool = BufferPool(2 * P, P)
    held = await hold_all(pool)
    coros = [CountingCoro(pool.allocate(P, math.inf)) for _ in range(10)]
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    await settle()
    assert [coro.steps for coro in coros] == [1] * 10  # started, queued, asleep
    for n in range(10):
        pool.deallocate(held.pop())
        await settle()
        assert sum(coro.steps for coro in coros) == 10 + n + 1
        assert [task.done() for task in tasks] == [True] * (n + 1) + [False] * (9 - n)
        held.append(tasks[n].result())
    stats = pool.statistics()
    assert stats.queued_allocations == 10
    assert stats.waiters == 0


@pytest.mark.any_loop
async def test_one_wakeup_per_grant_under_contention() -> None:
    pool = BufferPool(8 * P, P)
    rounds = 5

    async def worker() -> None:
        for _ in range(rounds):
            buffer = await pool.allocate(P, math.inf)
            await asyncio.sleep(0)
            pool.deallocate(buffer)

    coros = [CountingCoro(worker()) for _ in range(50)]
    await asyncio.gather(*coros)
    stats = pool.statistics()
    assert stats.allocations == 50 * rounds
    assert stats.queued_allocations > 0
    # Steps: one start, one resume per sleep(0), one per grant from the queue, nothing else.
    assert sum(c.steps for c in coros) == 50 + 50 * rounds + stats.queued_allocations
    assert_exact(pool, 0)


# -- introspection ----------------------------------------------------------------------------


async def test_repr_and_statistics_show_the_state() -> None:
    pool = BufferPool(4 * P, P)
    buffer = await pool.allocate(P, 1000)
    await pool.allocate(10, 1000)
    pool.deallocate(buffer)
    assert pool.total_memory == 4 * P
    assert pool.poolable_size == P
    assert repr(pool) == (
        f"<BufferPool open total={4 * P} poolable={P} available={4 * P - 10} "
        f"(free=1x{P} + unallocated={3 * P - 10}) allocated=10 waiters=0>"
    )
    pool.close()
    assert repr(pool).startswith("<BufferPool closed ")
    stats = pool.statistics()
    assert stats == PoolStats(
        total=4 * P,
        poolable_size=P,
        free_buffers=1,
        unallocated=3 * P - 10,
        available=4 * P - 10,
        reserved=0,
        allocated=10,
        waiters=0,
        allocations=2,
        queued_allocations=0,
        exhausted_count=0,
        wait_time_total_s=0.0,
        closed=True,
    )


def test_doubled_sizes_are_pooled_each_in_its_own_free_list_and_given_up_for_odd_sizes() -> None:
    pool = BufferPool(8 * P, P, largest_pooled=4 * P)  # pooled: P, 2P and 4P
    two, four = pool.allocate_nowait(2 * P), pool.allocate_nowait(4 * P)
    assert two is not None
    assert four is not None
    pool.deallocate(two)
    pool.deallocate(four)
    stats = pool.statistics()
    assert (stats.free_sized, stats.unallocated, stats.available) == (6 * P, 2 * P, 8 * P)
    assert pool.allocate_nowait(4 * P) is four  # reused, not allocated again
    assert pool.allocate_nowait(2 * P) is two
    pool.deallocate(two)
    pool.deallocate(four)
    # 3P is no pooled size: the larger pooled buffers are given up for its bytes, largest first.
    odd = pool.allocate_nowait(3 * P)
    assert odd is not None
    assert len(odd) == 3 * P
    stats = pool.statistics()
    assert (stats.free_sized, stats.unallocated, stats.allocated) == (2 * P, 3 * P, 3 * P)
    assert pool.allocate_nowait(8 * P) is None  # 5P is all there is: refused, not waited for
    pool.deallocate(odd)
    assert_exact(pool, 0)
    assert pool.statistics().free_sized + pool.statistics().unallocated == 8 * P
    # A size above largest_pooled is counted back, not kept.
    big = pool.allocate_nowait(8 * P)
    assert big is not None
    pool.deallocate(big)
    assert pool.statistics().free_sized == 0


async def test_a_waiter_for_a_doubled_size_gets_a_returned_buffer_of_that_size() -> None:
    pool = BufferPool(4 * P, P, largest_pooled=4 * P)
    held = pool.allocate_nowait(4 * P)
    assert held is not None
    waiter = asyncio.ensure_future(pool.allocate(4 * P, math.inf))
    await settle()
    assert not waiter.done()
    pool.deallocate(held)
    await settle()
    assert waiter.result() is held
    pool.deallocate(held)
    assert_exact(pool, 0)
