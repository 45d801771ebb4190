"""10,000 concurrent sends to a real cluster, half cancelled at every await point, read back.

The storm (see ``tests/unit/cancellation_storm.py``) starts while the producer does not know
the topic yet, so the first waves wait for metadata, and with ``buffer_memory`` of 16 batches
most sends queue for memory. Afterwards every record that ``send()`` accepted must be in the
topic exactly once, including those whose future was cancelled by the task awaiting it, and no
record of a cancelled ``send()`` may be.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from unit.cancellation_storm import POINTS, Tracker, check_outcome, index_of, run_storm

from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

COUNT = 10_000
SEED = 20_250_611
WAVE = 500
READ_TIMEOUT_S = 120.0


async def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` as (partition, offset, value), up to the end offsets now."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(parts or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "the topic could not be read back in time"
            for tp, records in (await consumer.getmany(*tps, timeout_ms=500)).items():
                out.extend((tp.partition, r.offset, r.value or b"") for r in records)
        return out
    finally:
        await consumer.stop()


async def test_cancellation_storm_against_kafka(
    kafka_bootstrap: str, topic_factory: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ProducerConfig(
        bootstrap_servers=kafka_bootstrap,
        linger_ms=0,
        batch_size=1024,
        buffer_memory=16 * 1024,
        max_block_ms=60_000,
    )
    adapter = AioKafkaAdapter(config)
    producer = Producer(config=config, kafka=adapter)
    await producer.start()
    try:
        pool = producer.pool
        assert pool is not None
        tracker = Tracker()
        tracker.install(monkeypatch, producer, adapter)
        # Created after the producer's bootstrap: its first sends must wait for metadata.
        topic = await topic_factory(partitions=6)
        storm = await run_storm(
            producer, topic, tracker, count=COUNT, seed=SEED, wave=WAVE, stuck_after_s=120
        )
        await producer.flush()
    finally:
        await producer.close()

    stats = pool.statistics()
    assert (stats.allocated, stats.reserved, stats.waiters) == (0, 0, 0)
    assert stats.available == stats.total
    assert not tracker.memory
    assert not tracker.metadata
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith(("storm-", "aioaccum"))]

    records = await read_topic(kafka_bootstrap, topic)
    delivered = Counter(index_of(value) for _, _, value in records)
    where = {index_of(value): (partition, offset) for partition, offset, value in records}
    check_outcome(storm, delivered, COUNT)
    for i, future in storm.returned.items():
        if not future.cancelled():
            md = future.result()
            assert (md.partition, md.offset) == where[i]

    points = storm.points()
    assert sum(points.values()) > COUNT * 0.4
    for point in POINTS:
        assert points[point] > 0, f"no send was cancelled at {point!r}: {points}"
    assert any(f.cancelled() for f in storm.returned.values())
