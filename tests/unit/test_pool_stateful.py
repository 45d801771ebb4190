"""Stateful property test of BufferPool.

Hypothesis drives random mixes of allocate (waiting or not, with and without deadlines),
allocate_nowait, deallocate, cancellation (while queued, and right after a grant), the passing of
time (so deadlines expire) and close. Each test case gets its own event loop whose clock moves
only when the machine says so; every step runs the loop until all woken tasks have run, then the
invariants are checked:

* memory is exact: free × poolable + larger pooled buffers + unallocated + gathered-by-waiters
  + held == total;
* grants come in FIFO order, and nothing younger than a queued request is ever granted;
* no request waits while the head of the queue could be served.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aioaccum._runtime.pool import BufferPool
from aioaccum.errors import BufferExhaustedError, ProducerClosedError

from .test_pool import ManualClockLoop

P = 100
TOTAL = 5 * P
# 2P and 4P are pooled too (largest_pooled, as incremental allocation's doubling chunks are).
SIZES = st.sampled_from([P, P, P, 1, 40, 150, 2 * P, 2 * P, 260, 4 * P, TOTAL])
MAX_BLOCK_MS = st.sampled_from([math.inf, math.inf, 10.0, 30.0, 0.0])
SLACK = 1e-6  # float noise between the loop's clock and the deadlines the pool computes



async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@dataclass
class Request:
    seq: int
    size: int
    deadline: float
    task: asyncio.Task[bytearray]
    cancel_requested: bool = False


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = ManualClockLoop()
        self.pool = BufferPool(TOTAL, P, largest_pooled=4 * P)
        self.held: list[bytearray] = []
        self.pending: dict[int, Request] = {}  # in arrival order
        self.grant_log: list[int] = []  # seq of each grant, in the order callers got them
        self.next_seq = 0
        self.closed = False

    def teardown(self) -> None:
        for request in self.pending.values():
            request.task.cancel()
        self.loop.run_until_complete(_turns(5))
        for request in self.pending.values():
            assert request.task.cancelled()
        self.loop.close()

    # -- helpers ---------------------------------------------------------------------------

    def _seq(self) -> int:
        self.next_seq += 1
        return self.next_seq

    async def _request(self, seq: int, size: int, max_block_ms: float) -> bytearray:
        buffer = await self.pool.allocate(size, max_block_ms)
        self.grant_log.append(seq)
        return buffer

    def _settle(self) -> None:
        """Run the loop until every woken task has run, then collect finished requests."""
        self.loop.run_until_complete(_turns(6))
        for seq, request in list(self.pending.items()):
            task = request.task
            if not task.done():
                continue
            del self.pending[seq]
            if task.cancelled():
                assert request.cancel_requested
                continue
            error = task.exception()
            if error is None:
                buffer = task.result()
                assert len(buffer) == request.size
                self.held.append(buffer)
            elif isinstance(error, BufferExhaustedError):
                assert self.loop.now + SLACK >= request.deadline
                assert f"Failed to allocate {request.size} bytes" in str(error)
            else:
                assert isinstance(error, ProducerClosedError), error
                assert self.closed

    # -- rules -----------------------------------------------------------------------------

    @rule(size=SIZES, max_block_ms=MAX_BLOCK_MS)
    def allocate(self, size: int, max_block_ms: float) -> None:
        seq = self._seq()
        could_serve = not self.pending and size <= self.pool.available_memory()
        task = self.loop.create_task(self._request(seq, size, max_block_ms))
        self.pending[seq] = Request(seq, size, self.loop.now + max_block_ms / 1000, task)
        self._settle()
        if could_serve and not self.closed:
            assert seq not in self.pending
            assert self.grant_log[-1] == seq

    @rule(size=SIZES)
    def allocate_nowait(self, size: int) -> None:
        if self.closed:
            with pytest.raises(ProducerClosedError):
                self.pool.allocate_nowait(size)
            return
        could_serve = not self.pending and size <= self.pool.available_memory()
        buffer = self.pool.allocate_nowait(size)
        assert (buffer is not None) == could_serve
        if buffer is not None:
            assert len(buffer) == size
            self.held.append(buffer)
            self.grant_log.append(self._seq())

    @precondition(lambda self: self.held)
    @rule(index=st.integers(min_value=0, max_value=63))
    def deallocate(self, index: int) -> None:
        self.pool.deallocate(self.held.pop(index % len(self.held)))
        self._settle()

    @precondition(lambda self: self.pending)
    @rule(index=st.integers(min_value=0, max_value=63))
    def cancel_queued(self, index: int) -> None:
        request = list(self.pending.values())[index % len(self.pending)]
        request.cancel_requested = True
        request.task.cancel()
        self._settle()
        assert request.task.cancelled()

    @precondition(lambda self: self.held and self.pending)
    @rule(index=st.integers(min_value=0, max_value=63))
    def release_then_cancel_head(self, index: int) -> None:
        """Return memory and cancel the head in the same loop turn: granted or not, the head's
        share must go on to the next waiter."""
        head = next(iter(self.pending.values()))
        self.pool.deallocate(self.held.pop(index % len(self.held)))
        head.cancel_requested = True
        head.task.cancel()
        self._settle()
        assert head.task.cancelled()

    @rule(ms=st.sampled_from([5, 10, 25]))
    def advance_time(self, ms: int) -> None:
        self.loop.now += ms / 1000
        self._settle()
        for request in self.pending.values():
            assert request.deadline > self.loop.now - SLACK  # nobody overdue is still queued

    @precondition(lambda self: not self.closed)
    @rule(roll=st.integers(min_value=0, max_value=7))
    def close(self, roll: int) -> None:
        if roll:  # close rarely, so that most runs exercise the open pool for long
            return
        self.pool.close()
        self.closed = True
        self._settle()
        assert not self.pending

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def memory_is_exact(self) -> None:
        stats = self.pool.statistics()
        held = sum(len(buffer) for buffer in self.held)
        assert stats.allocated == held
        assert (stats.free_buffers * P + stats.free_sized + stats.unallocated + stats.reserved
                + held == TOTAL)
        assert stats.available == stats.free_buffers * P + stats.free_sized + stats.unallocated

    @invariant()
    def grants_are_fifo(self) -> None:
        assert self.grant_log == sorted(set(self.grant_log))
        if self.pending and self.grant_log:
            assert min(self.pending) > self.grant_log[-1]

    @invariant()
    def only_an_unservable_head_waits(self) -> None:
        stats = self.pool.statistics()
        assert self.pool.queued() == len(self.pending)
        if self.pending:
            head = next(iter(self.pending.values()))
            assert stats.available == 0
            assert stats.reserved < head.size
        else:
            assert stats.reserved == 0


PoolMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, database=None
)
TestPoolMachine = PoolMachine.TestCase
