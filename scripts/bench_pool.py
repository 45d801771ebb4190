"""Micro-benchmarks for aioaccum._runtime.pool.BufferPool (prints figures; not a test).

Usage: PYTHONPATH=. python scripts/bench_pool.py [--tasks 1000] [--rounds 20] [--uvloop]

1. Fast path: one allocate + deallocate pair of a pooled buffer, in ns per pair, driven three
   ways: ``allocate_nowait`` (synchronous), the ``allocate`` coroutine stepped by hand with
   ``send(None)``, and ``await pool.allocate`` inside a task.
2. Contention: many tasks share a small pool of pooled buffers; each holds a buffer for one loop
   turn and gives it back. Reports grants per second and task wake-ups per grant.
"""

from __future__ import annotations

import argparse
import asyncio
import collections.abc
import gc
import time
from collections.abc import Coroutine, Generator
from typing import Any

from aioaccum._runtime.pool import BufferPool

POOLABLE = 16 * 1024


def _per_pair_ns(elapsed_s: float, pairs: int) -> float:
    return elapsed_s / pairs * 1e9


def bench_nowait(pairs: int) -> float:
    pool = BufferPool(32 * 1024 * 1024, POOLABLE)
    allocate, deallocate = pool.allocate_nowait, pool.deallocate
    deallocate(allocate(POOLABLE) or bytearray())  # warm the free list
    start = time.perf_counter()
    for _ in range(pairs):
        buffer = allocate(POOLABLE)
        assert buffer is not None
        deallocate(buffer)
    return _per_pair_ns(time.perf_counter() - start, pairs)


async def bench_send(pairs: int) -> float:
    pool = BufferPool(32 * 1024 * 1024, POOLABLE)
    allocate, deallocate = pool.allocate, pool.deallocate
    start = time.perf_counter()
    for _ in range(pairs):
        coro = allocate(POOLABLE, 60_000)
        try:
            coro.send(None)
        except StopIteration as done:
            deallocate(done.value)
        else:
            raise AssertionError("the fast path suspended")
    return _per_pair_ns(time.perf_counter() - start, pairs)


async def bench_await(pairs: int) -> float:
    pool = BufferPool(32 * 1024 * 1024, POOLABLE)
    allocate, deallocate = pool.allocate, pool.deallocate
    start = time.perf_counter()
    for _ in range(pairs):
        deallocate(await allocate(POOLABLE, 60_000))
    return _per_pair_ns(time.perf_counter() - start, pairs)


class _Counted(collections.abc.Coroutine[Any, Any, Any]):
    """Wraps a coroutine and counts how often its task steps it (start + every wake-up)."""

    steps = 0

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro

    def send(self, value: Any) -> Any:
        _Counted.steps += 1
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        _Counted.steps += 1
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()


async def bench_contention(tasks: int, rounds: int) -> tuple[float, float, int]:
    pool = BufferPool(1024 * 1024, POOLABLE)

    async def worker() -> None:
        for _ in range(rounds):
            buffer = await pool.allocate(POOLABLE, 60_000)
            await asyncio.sleep(0)  # hold it for one loop turn
            pool.deallocate(buffer)

    _Counted.steps = 0
    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(tasks):
            group.create_task(_Counted(worker()))
    elapsed = time.perf_counter() - start
    stats = pool.statistics()
    grants = stats.allocations
    assert grants == tasks * rounds
    assert stats.available == stats.total
    # Every step is the start, the resume after sleep(0), or a resume from the pool's queue.
    wakeups = _Counted.steps - tasks - grants
    return grants / elapsed, wakeups / max(stats.queued_allocations, 1), stats.queued_allocations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--uvloop", action="store_true", help="run the async parts on uvloop")
    args = parser.parse_args()
    runner: Any = asyncio.run
    if args.uvloop:
        import uvloop

        runner = uvloop.run
    gc.disable()
    print(f"fast path, allocate_nowait + deallocate:      {bench_nowait(args.pairs):7.1f} ns/pair")
    print(
        "fast path, allocate().send(None) + deallocate: "
        f"{runner(bench_send(args.pairs)):7.1f} ns/pair"
    )
    print(
        "fast path, await allocate() + deallocate:     "
        f"{runner(bench_await(args.pairs)):7.1f} ns/pair"
    )
    gc.enable()
    rate, per_grant, queued = runner(bench_contention(args.tasks, args.rounds))
    print(
        f"contention, {args.tasks} tasks on 1 MiB of {POOLABLE // 1024} KiB buffers: "
        f"{rate:,.0f} grants/s, {queued} queued grants, {per_grant:.3f} wake-ups per queued grant"
    )


if __name__ == "__main__":
    main()
