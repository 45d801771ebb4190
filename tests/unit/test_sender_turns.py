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
        (64 * 1024, 32 << 20, 2),
        (128 * 1024, 32 << 20, 1),
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
    # As many partitions on one node as batches a turn; 4000-byte records fill a 16 KiB batch
    # with 4, and each batch goes to the next partition. With a turn per batch, a request took
    # the one that had just filled; with a turn per N, it takes the N that filled meanwhile (a
    # request carries one batch per partition, so N partitions let it take them all).
    per_turn = TURN_BYTES // (16 * 1024)
    assert per_turn > 1
    cluster = StaticCluster([0], {TopicPartition(TOPIC, p): 0 for p in range(per_turn)})
    fake = FakeKafka(cluster)
    value = b"v" * 4000
    batches_sent = 16 * per_turn
    async with Producer(
        "fake:9092", kafka=fake, batch_size=16 * 1024, linger_ms=0, acks=1,
        enable_idempotence=False,
    ) as producer:
        acc = producer._acc
        assert acc is not None
        assert acc.batches_per_turn == per_turn
        futures = [
            await producer.send(TOPIC, value, partition=(i // 4) % per_turn)
            for i in range(batches_sent * 4)
        ]
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in futures)
    batches = [len(r.partitions) for r in fake.requests]
    assert sum(batches) == batches_sent
    assert sum(r for req in fake.requests for r in req.record_counts) == batches_sent * 4
    # A turn drains what filled since the last: about per_turn batches a request, not one.
    assert len(batches) <= batches_sent // per_turn + 2, batches
