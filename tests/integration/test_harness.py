"""The test cluster itself: three brokers that replicate and return what was written to them.

Uses only aiokafka, so a failure here points at the harness, not at aioaccum.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers, pytest.mark.any_loop]

RECORDS = 3000
PARTITIONS = 6
CONSUME_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Sent:
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def make_record(i: int, loop_name: str) -> Sent:
    # Varied sizes, a binary value, an empty header value and some null values (tombstones),
    # so that a record mangled anywhere in the encoding shows up.
    value: bytes | None = None if i % 250 == 0 else bytes([i % 256]) * (i % 300) + b"|%d" % i
    headers = [("seq", i.to_bytes(4, "big")), ("loop", loop_name.encode())]
    if i % 3 == 0:
        headers.append(("empty", b""))
    return Sent(key=b"key-%d" % (i % 97), value=value, headers=tuple(headers))


async def test_topic_is_replicated_on_three_brokers(
    kafka_bootstrap: str, topic_factory: TopicFactory, any_loop: str
) -> None:
    first = await topic_factory(partitions=PARTITIONS, replication_factor=3)
    second = await topic_factory(partitions=1, configs={"min.insync.replicas": "2"})
    assert first != second

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        described = await admin.describe_topics([first, second])
    finally:
        await admin.close()

    assert sorted(b["node_id"] for b in cluster["brokers"]) == [1, 2, 3]
    partitions = {t["topic"]: t["partitions"] for t in described}
    assert len(partitions[first]) == PARTITIONS
    for partition in partitions[first]:
        assert sorted(partition["replicas"]) == [1, 2, 3]
        assert sorted(partition["isr"]) == [1, 2, 3]
    assert len(partitions[second]) == 1
    assert len(partitions[second][0]["replicas"]) == 3


async def test_records_round_trip_in_partition_order(
    kafka_bootstrap: str, topic_factory: TopicFactory, any_loop: str
) -> None:
    topic = await topic_factory(partitions=PARTITIONS, replication_factor=3)

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        records = [make_record(i, any_loop) for i in range(RECORDS)]
        pending = [
            await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers))
            for r in records
        ]
        metadata = await asyncio.gather(*pending)
    finally:
        await producer.stop()

    # Expected log contents, per partition in send order; their offsets must then rise.
    expected: dict[int, list[tuple[int, Sent]]] = {p: [] for p in range(PARTITIONS)}
    for record, meta in zip(records, metadata, strict=True):
        expected[meta.partition].append((meta.offset, record))
    for partition, entries in expected.items():
        offsets = [offset for offset, _ in entries]
        assert offsets == list(range(len(entries))), f"partition {partition} out of order"
    assert all(expected.values()), "the keys should spread over every partition"

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    got: dict[int, list[tuple[int, Sent]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while sum(map(len, got.values())) < RECORDS and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            for tp, messages in batches.items():
                got[tp.partition].extend(
                    (m.offset, Sent(m.key, m.value, tuple(m.headers))) for m in messages
                )
    finally:
        await consumer.stop()

    for partition in range(PARTITIONS):
        assert got[partition] == expected[partition], f"partition {partition} differs"
