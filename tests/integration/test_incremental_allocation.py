"""Incremental allocation (KIP-1332) on the real cluster: keyed 100-byte records over thousands
of partitions, where one ``batch_size`` buffer per partition with data would need several times
``buffer_memory``. Every record is delivered and read back intact, uncompressed and with lz4,
and the pool's peak use stays a small fraction of what ``full`` would pin."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from aioaccum._core.chunks import CHUNK_SIZE
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

PARTITIONS = 3000
RECORDS = 30_000
BATCH_SIZE = 64 * 1024
BUFFER_MEMORY = 32 * 1024 * 1024


@pytest.mark.parametrize("codec", ["none", "lz4"])
async def test_keyed_records_over_thousands_of_partitions_take_chunks_not_batches(
    kafka_bootstrap: str, topic_factory: TopicFactory, codec: str
) -> None:
    topic = await topic_factory(partitions=PARTITIONS, replication_factor=1)
    producer = Producer(
        bootstrap_servers=kafka_bootstrap,
        buffer_memory_allocation_strategy="incremental",
        batch_size=BATCH_SIZE,
        buffer_memory=BUFFER_MEMORY,
        compression_type=codec,
        linger_ms=20,
        max_block_ms=60_000,
    )
    await producer.start()
    peak = 0
    try:
        pool = producer._pool
        assert pool is not None
        assert pool.poolable_size == CHUNK_SIZE
        futures = []
        for i in range(RECORDS):
            key = b"key-%06d" % i
            futures.append(await producer.send(topic, b"%06d:" % i + b"v" * 93, key=key))
            if i % 500 == 0:
                peak = max(peak, pool.statistics().allocated)
        await producer.flush()
        metadata = await asyncio.gather(*futures)
        peak = max(peak, pool.statistics().allocated)
    finally:
        await producer.close()
    stats = pool.statistics()
    assert stats.allocated == 0
    assert (stats.free_buffers * stats.poolable_size + stats.free_sized + stats.unallocated
            == BUFFER_MEMORY)
    used = {m.partition for m in metadata}
    assert len(used) > PARTITIONS * 0.9  # the keys really spread over the partitions
    # full would hold a batch_size buffer per partition with data: 3000 x 64 KiB = 187 MiB,
    # six times buffer_memory. With about ten records per partition, the chunks held at the
    # worst moment are one or two per partition (open, in flight, lz4's output), on a loaded
    # machine 10 MiB: half of buffer_memory bounds that, and is under a tenth of what full pins.
    assert 0 < peak <= BUFFER_MEMORY // 2 < len(used) * BATCH_SIZE // 10

    expected = {b"key-%06d" % i: b"%06d:" % i + b"v" * 93 for i in range(RECORDS)}
    where = {(m.partition, m.offset) for m in metadata}
    assert len(where) == RECORDS
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        seen: dict[bytes, bytes] = {}
        async with asyncio.timeout(120):
            while len(seen) < RECORDS:
                batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                for tp, messages in batches.items():
                    for message in messages:
                        assert (tp.partition, message.offset) in where
                        assert message.key is not None
                        assert message.value is not None
                        seen[message.key] = message.value
    finally:
        await consumer.stop()
    assert seen == expected
