"""How often a caller that never suspends lets the sender run: once per ``batches_per_turn`` new
batches (a turn's worth of bytes, within a sixteenth of the pool), so that each request carries
the batches that filled meanwhile rather than one each."""

from __future__ import annotations

import pytest

from aioaccum import Producer
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._runtime.sender import TURN_BYTES

from .fake_kafka import FakeKafka

TOPIC = "t"


@pytest.mark.parametrize(
    ("batch_size", "buffer_memory", "per_turn"),
    [
        (16 * 1024, 32 << 20, TURN_BYTES // (16 * 1024)),
        (64 * 1024, 32 << 20, 1),
        (1 << 20, 32 << 20, 1),
        (1024, 64 * 1024, 4),  # a sixteenth of a small pool: 4 KiB
        (1024, 16 * 1024, 1),
    ],
)
async def test_batches_per_turn_follows_batch_size_within_the_pool(
    batch_size: int, buffer_memory: int, per_turn: int
) -> None:
    fake = FakeKafka(StaticCluster.uniform({TOPIC: 1}, nodes=1))
    async with Producer(
        "fake:9092", kafka=fake, batch_size=batch_size, buffer_memory=buffer_memory
    ) as producer:
        acc = producer._acc
        assert acc is not None
        assert acc.batches_per_turn == per_turn


async def test_a_caller_sending_flat_out_gives_the_sender_a_turn_per_few_batches() -> None:
    # Four partitions on one node; 4000-byte records fill a 16 KiB batch with 4, and each batch
    # goes to the next partition. With a turn per batch, a request took the one that had just
    # filled; with a turn per four, it takes the four that filled meanwhile.
    cluster = StaticCluster([0], {TopicPartition(TOPIC, p): 0 for p in range(4)})
    fake = FakeKafka(cluster)
    value = b"v" * 4000
    async with Producer(
        "fake:9092", kafka=fake, batch_size=16 * 1024, linger_ms=0, acks=1,
        enable_idempotence=False,
    ) as producer:
        acc = producer._acc
        assert acc is not None
        per_turn = acc.batches_per_turn
        assert per_turn == 4
        futures = [
            await producer.send(TOPIC, value, partition=(i // 4) % 4) for i in range(64 * 4)
        ]
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in futures)
    batches = [len(r.partitions) for r in fake.requests]
    assert sum(batches) == 64
    assert sum(r for req in fake.requests for r in req.record_counts) == 256
    # A turn drains what filled since the last: about per_turn batches a request, not one.
    assert len(batches) <= 64 // per_turn + 2, batches
