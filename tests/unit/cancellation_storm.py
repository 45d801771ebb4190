"""A cancellation storm: thousands of concurrent sends, half of them cancelled mid-way.

Shared by the unit test (fake broker) and the integration test (real Kafka). Each send runs in
its own task. Half of the tasks, drawn with a seeded RNG, are cancelled at one of these points:

``before``    the task was created but never ran
``metadata``  suspended in the adapter's ``wait_for_topic`` (the topic is not known yet)
``memory``    queued in the buffer pool (``buffer_memory`` is kept small)
``yield``     suspended anywhere else inside ``send()``
``future``    ``send()`` returned, the task awaits the record's future

The storm only records what happened; the tests check the outcome against the broker's log.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata
from aioaccum.producer import Producer

POINTS = ("before", "metadata", "memory", "yield", "future")
_ORDER = {point: i for i, point in enumerate(POINTS)}
# Chance, per turn of the event loop, that a task sitting at its planned point is cancelled
# there: a task stays at "metadata" or "memory" for many turns, so the moment varies too.
_CHANCE = {"metadata": 0.5, "memory": 0.1, "yield": 1.0, "future": 0.5}
_MAX_TURNS = 200_000


def value_of(i: int) -> bytes:
    return b"storm-%05d-" % i + b"x" * 40


def index_of(value: bytes) -> int:
    return int(value[6:11])


@dataclass
class Tracker:
    """Which tasks are suspended in the adapter's metadata wait or in the pool's queue."""

    metadata: set[asyncio.Task[Any]] = field(default_factory=set)
    memory: set[asyncio.Task[Any]] = field(default_factory=set)

    def install(self, monkeypatch: pytest.MonkeyPatch, producer: Producer, adapter: Any) -> None:
        """Wrap the started producer's pool and the adapter to report who waits where."""
        pool = producer.pool
        assert pool is not None, "start the producer first"
        allocate = pool.allocate
        wait_for_topic = adapter.wait_for_topic

        async def tracked_allocate(size: int, max_block_ms: float) -> bytearray:
            task = asyncio.current_task()
            assert task is not None
            self.memory.add(task)
            try:
                return await allocate(size, max_block_ms)
            finally:
                self.memory.discard(task)

        async def tracked_wait_for_topic(topic: str, timeout: float) -> Sequence[int]:
            task = asyncio.current_task()
            assert task is not None
            self.metadata.add(task)
            try:
                result: Sequence[int] = await wait_for_topic(topic, timeout)
                return result
            finally:
                self.metadata.discard(task)

        monkeypatch.setattr(pool, "allocate", tracked_allocate)
        monkeypatch.setattr(adapter, "wait_for_topic", tracked_wait_for_topic)


@dataclass
class StormResult:
    tasks: list[asyncio.Task[RecordMetadata]]
    returned: dict[int, FutureRecordMetadata]
    cancelled_at: dict[int, str]

    def points(self) -> Counter[str]:
        return Counter(self.cancelled_at.values())


async def run_storm(
    producer: Producer,
    topic: str,
    tracker: Tracker,
    *,
    count: int,
    seed: int,
    wave: int,
    on_turn: Callable[[int], None] | None = None,
    stuck_after_s: float,
) -> StormResult:
    """Start ``count`` sends, ``wave`` per turn of the loop, cancel half at their planned
    points, and wait until all ended.

    ``on_turn`` is called with the turn number each time the canceller runs (the unit test
    releases the topic's metadata from it). Fails the test if a task is still running
    ``stuck_after_s`` seconds (loop time) after the canceller is done.
    """
    rng = random.Random(seed)
    plan = {i: rng.choice(POINTS) for i in sorted(rng.sample(range(count), count // 2))}
    started: set[int] = set()
    returned: dict[int, FutureRecordMetadata] = {}

    async def one(i: int) -> RecordMetadata:
        started.add(i)
        future = await producer.send(topic, value_of(i))
        returned[i] = future
        return await future

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[RecordMetadata]] = []
    cancelled_at: dict[int, str] = {}

    def spawn(n: int) -> None:
        for i in range(len(tasks), min(len(tasks) + n, count)):
            task = loop.create_task(one(i), name=f"storm-{i}")
            tasks.append(task)
            if plan.get(i) == "before":
                task.cancel()
                cancelled_at[i] = "before"

    def where(i: int) -> str | None:
        task = tasks[i]
        if i in returned:
            return "future"
        if task in tracker.metadata:
            return "metadata"
        if task in tracker.memory:
            return "memory"
        return "yield" if i in started else None

    waiting = {i: point for i, point in plan.items() if point != "before"}
    turn = 0
    while waiting or len(tasks) < count:
        spawn(wave)
        await asyncio.sleep(0)
        turn += 1
        assert turn < _MAX_TURNS, f"{len(waiting)} planned cancellations never came due"
        if on_turn is not None:
            on_turn(turn)
        for i, planned in list(waiting.items()):
            if i >= len(tasks):
                break
            task = tasks[i]
            now = where(i)
            if task.done() or now is None:
                if task.done():
                    del waiting[i]  # it finished before its point came: it stays uncancelled
                continue
            if _ORDER[now] > _ORDER[planned]:
                planned = waiting[i] = now  # it went past its point: cancel at the next one
            if now == planned and rng.random() < _CHANCE[now]:
                task.cancel()
                cancelled_at[i] = now
                del waiting[i]

    _, pending = await asyncio.wait(tasks, timeout=stuck_after_s)
    assert not pending, f"{len(pending)} send tasks are stuck, e.g. {sorted(pending, key=id)[:3]}"
    return StormResult(tasks, returned, cancelled_at)


def check_outcome(
    storm: StormResult, delivered: Counter[int], count: int
) -> None:
    """Every send that returned is delivered exactly once, and nothing else is."""
    for i, task in enumerate(storm.tasks):
        future = storm.returned.get(i)
        if future is None:
            # send() raised (it was cancelled): the record was never buffered.
            assert task.cancelled(), f"send #{i} ended with {task.exception()!r}"
            assert delivered[i] == 0, f"send #{i} was cancelled but its record was delivered"
            continue
        assert delivered[i] == 1, f"record #{i} was accepted, delivered {delivered[i]} times"
        if task.cancelled():
            # The shared future was cancelled with the task awaiting it (or had its result
            # already); either way the record itself went out.
            assert future.cancelled() or future.result().offset >= 0
        else:
            assert task.result() == future.result()  # metadata is built per read
    assert set(delivered) <= set(range(count))
    assert sum(delivered.values()) == len(storm.returned)
