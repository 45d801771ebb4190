"""10,000 concurrent sends against the fake broker, half of them cancelled at every await point.

See :mod:`cancellation_storm` for the plan. The fake hides the topic's metadata for the first
turns of the loop, so the first wave of sends waits for it, and ``buffer_memory`` holds only 16
batches, so most of them then queue for memory.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum.producer import Producer

from .cancellation_storm import POINTS, Tracker, check_outcome, index_of, run_storm, value_of
from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

COUNT = 10_000
SEED = 20_250_611
TOPIC = "storm"
METADATA_ARRIVES_AT_TURN = 5
WAVE = 500  # sends started per turn of the loop: the first waves wait for metadata


@dataclass
class LateMetadataKafka(FakeKafka):
    """Knows the topics only once :meth:`release` was called."""

    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        return super().partitions_for_topic(topic) if self.released.is_set() else None

    async def wait_for_topic(self, topic: str, timeout: float) -> Sequence[int]:
        async with asyncio.timeout(timeout):
            await self.released.wait()
        return await super().wait_for_topic(topic, timeout)


async def test_cancellation_storm_leaks_nothing_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = LateMetadataKafka(StaticCluster.uniform({TOPIC: 6}, nodes=3))
    producer = Producer(
        "fake:9092",
        kafka=fake,
        linger_ms=0,
        batch_size=1024,
        buffer_memory=16 * 1024,
        max_block_ms=60_000,
    )
    await producer.start()
    pool = producer.pool
    assert pool is not None
    tracker = Tracker()
    tracker.install(monkeypatch, producer, fake)

    def on_turn(turn: int) -> None:
        if turn == METADATA_ARRIVES_AT_TURN:
            fake.release()

    storm = await run_storm(
        producer,
        TOPIC,
        tracker,
        count=COUNT,
        seed=SEED,
        wave=WAVE,
        on_turn=on_turn,
        stuck_after_s=300,
    )
    # Most sends queued for memory at some point: the pool, not the broker, was the limit.
    assert pool.statistics().queued_allocations > COUNT // 4
    await producer.flush()
    await producer.close()

    stats = pool.statistics()
    assert (stats.allocated, stats.reserved, stats.waiters) == (0, 0, 0)
    assert stats.available == stats.total
    assert stats.closed
    assert asyncio.all_tasks() == {asyncio.current_task()}, "a producer task outlived close()"
    assert not tracker.memory
    assert not tracker.metadata

    delivered: Counter[int] = Counter()
    for tp, log in fake.log.items():
        for offset, record in enumerate(log):
            assert record.value is not None
            i = index_of(record.value)
            delivered[i] += 1
            future = storm.returned.get(i)
            if future is not None and not future.cancelled():
                assert future.result().partition == tp.partition
                assert future.result().offset == offset
    check_outcome(storm, delivered, COUNT)
    assert all(
        fake.log[TopicPartition(TOPIC, md.partition)][md.offset].value == value_of(i)
        for i, f in storm.returned.items()
        if not f.cancelled()
        for md in [f.result()]
    )

    points = storm.points()
    assert sum(points.values()) > COUNT * 0.4
    for point in POINTS:
        assert points[point] > 0, f"no send was cancelled at {point!r}: {points}"
    # Futures cancelled by the tasks awaiting them, whose records were still delivered.
    assert sum(1 for i, f in storm.returned.items() if f.cancelled()) > 100
