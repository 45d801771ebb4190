"""A topic whose partition count changes under a producer (partitions added, or the topic
deleted and created again with fewer): the sticky partition is drawn afresh, so keyless records
never go on to a partition that no longer exists.

The producer runs on the real :class:`~aioaccum._kafka.adapter.AioKafkaAdapter` (the code that
notices the change) over aiokafka's real ``ClusterMetadata``, fed by a stand-in for
``AIOKafkaClient`` whose answers the test changes; produce requests go to
:class:`~fake_kafka.FakeKafka`, which keeps what it was sent. No broker, no sleeps: a refresh is a
method call.

Partitions without a leader make the sticky draw predictable: keyless records first go only to
the partitions that have one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v1

from aioaccum import ConfigError, Producer
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._kafka.adapter import AioKafkaAdapter, PartitionResponse
from aioaccum.config.producer_config import ProducerConfig

from .fake_kafka import FakeKafka

NODE = 0
NO_LEADER = -1
TOPIC = "churn"

# Topic -> each partition's leader (NO_LEADER: none); a missing topic does not exist.
Layout = Mapping[str, Sequence[int]]


class FakeClient:
    """What the adapter uses of AIOKafkaClient, answering metadata requests from ``layout``.

    ``next_layout``, when set, replaces the layout at the next refresh: the topic changes
    while a send waits for its metadata.
    """

    def __init__(self, layout: Layout) -> None:
        self.cluster = ClusterMetadata(metadata_max_age_ms=300_000)
        self.layout: Layout = layout
        self.next_layout: Layout | None = None
        self.topics: set[str] = set()
        self.refreshes = 0

    def add_topic(self, topic: str) -> None:
        self.topics.add(topic)

    def set_topics(self, topics: Sequence[str]) -> None:
        self.topics = set(topics)

    def force_metadata_update(self) -> asyncio.Future[bool]:
        self.refresh()
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    def refresh(self) -> None:
        """One metadata request and its answer (aiokafka's periodic or forced update)."""
        if self.next_layout is not None:
            self.layout, self.next_layout = self.next_layout, None
        self.refreshes += 1
        asked = self.topics or set(self.layout)
        topics = [
            (
                0,
                topic,
                False,
                [
                    (0, p, leader, [NODE], [NODE] if leader != NO_LEADER else [])
                    for p, leader in enumerate(self.layout[topic])
                ],
            )
            for topic in sorted(asked)
            if topic in self.layout
        ]
        self.cluster.update_metadata(
            MetadataResponse_v1([(NODE, "127.0.0.1", 9092, None)], NODE, topics)
        )


class ChurnAdapter(AioKafkaAdapter):
    """The real adapter on a :class:`FakeClient`, sending produce requests to a FakeKafka."""

    def __init__(self, config: ProducerConfig, client: FakeClient, broker: FakeKafka) -> None:
        super().__init__(config)
        self.fake_client = client
        self.broker = broker

    async def start(self) -> None:
        # What AioKafkaAdapter.start() does with a real client, then the bootstrap's refresh.
        self.fake_client.cluster.add_listener(self._on_metadata_update)
        self._client = self.fake_client
        self.fake_client.refresh()

    async def close(self) -> None:
        self._client = None

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        return await self.broker.produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)

    async def init_producer_id(self) -> tuple[int, int]:
        return await self.broker.init_producer_id()


def producer_on(layout: Layout, **settings: Any) -> tuple[Producer, FakeClient, FakeKafka]:
    client = FakeClient(layout)
    broker = FakeKafka(StaticCluster([NODE], {}))
    # A record that went to a partition without a leader fails after a second, not two
    # minutes: the test then fails on a DeliveryTimeoutError naming that partition.
    config = ProducerConfig.from_arguments(
        None,
        "fake:9092",
        {"linger_ms": 0, "request_timeout_ms": 1000, "delivery_timeout_ms": 1000, **settings},
    )
    adapter = ChurnAdapter(config, client, broker)
    return Producer(config=config, kafka=adapter), client, broker


def written_partitions(broker: FakeKafka) -> set[int]:
    return {tp.partition for tp, records in broker.log.items() if records}


async def test_keyless_records_leave_a_partition_the_recreated_topic_does_not_have() -> None:
    # Only partitions 2..5 have a leader: the sticky partition is one of them.
    producer, client, broker = producer_on({TOPIC: [NO_LEADER, NO_LEADER, NODE, NODE, NODE, NODE]})
    async with producer:
        first = await producer.send_and_wait(TOPIC, b"before")
        assert first.partition >= 2
        # Deleted and created again with 2 partitions; the producer's next refresh sees it.
        client.layout = {TOPIC: [NODE, NODE]}
        client.refresh()
        after = [await producer.send_and_wait(TOPIC, b"after %d" % i) for i in range(20)]
        with pytest.raises(ConfigError, match=r"partition 5 .* has partitions 0\.\.1"):
            await producer.send(TOPIC, b"to a partition that is gone", partition=5)
    assert {md.partition for md in after} <= {0, 1}
    assert written_partitions(broker) == {first.partition} | {md.partition for md in after}


async def test_a_send_waiting_for_a_deleted_topic_goes_to_the_new_one_partitions() -> None:
    producer, client, broker = producer_on({TOPIC: [NO_LEADER, NO_LEADER, NODE, NODE, NODE, NODE]})
    async with producer:
        first = await producer.send_and_wait(TOPIC, b"before")
        assert first.partition >= 2
        client.layout = {}  # deleted
        client.refresh()
        # The send finds no metadata and asks for it; that answer has the topic again.
        client.next_layout = {TOPIC: [NODE, NODE]}
        refreshes = client.refreshes
        after = await producer.send_and_wait(TOPIC, b"after")
        assert client.refreshes > refreshes  # the send did wait for the topic
    assert after.partition in (0, 1)
    assert len(broker.log[TopicPartition(TOPIC, after.partition)]) == 1


async def test_keyless_records_reach_added_partitions_once_the_producer_sees_them() -> None:
    producer, client, _ = producer_on({TOPIC: [NODE, NODE, NODE]})
    async with producer:
        first = await producer.send_and_wait(TOPIC, b"before")
        assert first.partition in (0, 1, 2)
        # Three partitions added; the old ones lost their leader meanwhile, so a sticky
        # partition kept from before could take no record now.
        client.layout = {TOPIC: [NO_LEADER, NO_LEADER, NO_LEADER, NODE, NODE, NODE]}
        client.refresh()
        after = await producer.send_and_wait(TOPIC, b"after")
    assert after.partition in (3, 4, 5)


async def test_the_adapter_tells_of_a_new_partition_count_once_per_change() -> None:
    client = FakeClient({TOPIC: [NODE, NODE, NODE], "steady": [NODE]})
    adapter = ChurnAdapter(ProducerConfig(), client, FakeKafka(StaticCluster([NODE], {})))
    changed: list[str] = []
    adapter.on_partition_count_change(changed.append)
    await adapter.start()
    assert adapter.partitions_for_topic(TOPIC) == [0, 1, 2]
    assert adapter.partitions_for_topic("steady") == [0]
    client.refresh()  # nothing changed
    assert adapter.partitions_for_topic(TOPIC) == [0, 1, 2]
    assert changed == []  # a topic's first count is no change
    client.layout = {TOPIC: [NODE] * 6, "steady": [NODE]}
    client.refresh()
    assert adapter.partitions_for_topic(TOPIC) == [0, 1, 2, 3, 4, 5]
    assert adapter.partitions_for_topic(TOPIC) == [0, 1, 2, 3, 4, 5]  # from the cache
    assert adapter.partitions_for_topic("steady") == [0]
    assert changed == [TOPIC]
    client.layout = {"steady": [NODE]}  # deleted: no count, nothing to tell yet
    client.refresh()
    assert adapter.partitions_for_topic(TOPIC) is None
    client.next_layout = {TOPIC: [NODE, NODE], "steady": [NODE]}
    assert await adapter.wait_for_topic(TOPIC, timeout=1.0) == [0, 1]
    assert changed == [TOPIC, TOPIC]
