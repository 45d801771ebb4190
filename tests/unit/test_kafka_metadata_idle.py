"""AioKafkaAdapter forgets a topic not produced to for metadata_max_idle_ms, as Java's
ProducerMetadata does, so that it leaves the metadata requests.

The adapter runs against aiokafka's real ClusterMetadata inside a stand-in for AIOKafkaClient
that answers each refresh as a broker would, and a fake clock: no sleeps, no broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v1

from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum.config.producer_config import ProducerConfig

MAX_IDLE_S = 5.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeClient:
    """What the adapter uses of AIOKafkaClient: the cluster view and the tracked topics, with
    aiokafka's meaning of an empty topic set (every topic of the cluster)."""

    def __init__(self, existing: Sequence[str]) -> None:
        self.cluster = ClusterMetadata(metadata_max_age_ms=300_000)
        self.existing = existing
        self.topics: set[str] = set()
        self.requested: list[set[str]] = []

    def add_topic(self, topic: str) -> None:
        self.topics.add(topic)

    def set_topics(self, topics: Sequence[str]) -> None:
        self.topics = set(topics)

    def force_metadata_update(self) -> asyncio.Future[bool]:
        self.refresh()
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    def refresh(self) -> set[str]:
        """One metadata request and its response; returns the topics asked for."""
        asked = set(self.topics) or set(self.existing)
        self.requested.append(asked)
        topics = [
            (0, topic, False, [(0, 0, 0, [0], [0]), (0, 1, 0, [0], [0])])
            for topic in sorted(asked & set(self.existing))
        ]
        self.cluster.update_metadata(
            MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, topics)
        )
        return asked


def started(existing: Sequence[str]) -> tuple[AioKafkaAdapter, FakeClient, FakeClock]:
    clock = FakeClock()
    config = ProducerConfig(metadata_max_idle_ms=int(MAX_IDLE_S * 1000))
    adapter = AioKafkaAdapter(config, clock=clock)
    client = FakeClient(existing)
    # What AioKafkaAdapter.start() does with a real client, then the bootstrap's refresh.
    client.cluster.add_listener(adapter._on_metadata_update)
    adapter._client = client
    client.refresh()
    return adapter, client, clock


async def test_a_topic_not_produced_to_leaves_the_metadata_requests() -> None:
    adapter, client, clock = started(["busy", "quiet", "other"])
    assert adapter.partitions_for_topic("busy") == [0, 1]
    assert adapter.partitions_for_topic("quiet") == [0, 1]
    assert client.topics == {"busy", "quiet"}
    assert client.refresh() == {"busy", "quiet"}  # the one adding a topic asks for
    for _ in range(2):  # after 2 s and 4 s "quiet" is idle, but not for long enough
        clock.advance(2)
        assert adapter.partitions_for_topic("busy") == [0, 1]
        assert client.refresh() == {"busy", "quiet"}
    clock.advance(1)  # exactly metadata_max_idle_ms: Java's expiry is inclusive
    adapter.partitions_for_topic("busy")
    assert client.refresh() == {"busy", "quiet"}
    assert client.topics == {"busy"}
    assert client.refresh() == {"busy"}
    # Gone from the cluster view, so the producer's next send to it waits for metadata.
    assert adapter.partitions_for_topic("quiet") is None
    assert adapter.partitions_for_topic("busy") == [0, 1]


async def test_a_forgotten_topic_comes_back_when_produced_to_again() -> None:
    adapter, client, clock = started(["busy", "quiet"])
    adapter.partitions_for_topic("busy")
    adapter.partitions_for_topic("quiet")
    client.refresh()
    clock.advance(MAX_IDLE_S)
    adapter.partitions_for_topic("busy")
    client.refresh()
    client.refresh()
    assert adapter.partitions_for_topic("quiet") is None
    assert await adapter.wait_for_topic("quiet", timeout=1.0) == [0, 1]
    assert client.topics == {"busy", "quiet"}
    assert client.requested[-1] == {"busy", "quiet"}


async def test_a_topic_in_use_between_refreshes_is_kept() -> None:
    # Refreshes rarer than metadata_max_idle_ms: a topic produced to since the last refresh
    # counts as used at this one, not only at its first lookup after the last one.
    adapter, client, clock = started(["busy", "quiet"])
    adapter.partitions_for_topic("busy")
    adapter.partitions_for_topic("quiet")
    client.refresh()
    for _ in range(3):
        clock.advance(1)
        adapter.partitions_for_topic("busy")  # the first lookup since the refresh
        clock.advance(MAX_IDLE_S)
        adapter.partitions_for_topic("busy")  # from the cache: no clock read
        client.refresh()
        assert client.topics == {"busy"}


async def test_topics_the_sender_refreshes_count_as_used() -> None:
    # The sender asks for metadata of topics whose batches have no leader: Java's Sender adds
    # them to ProducerMetadata again, and so does the adapter.
    adapter, client, clock = started(["busy", "waiting"])
    adapter.partitions_for_topic("busy")
    adapter.partitions_for_topic("waiting")
    client.refresh()
    clock.advance(MAX_IDLE_S - 1)
    adapter.request_metadata_update(["waiting"])
    clock.advance(2)
    adapter.partitions_for_topic("busy")
    client.refresh()
    assert client.topics == {"busy", "waiting"}
    clock.advance(MAX_IDLE_S)
    adapter.partitions_for_topic("busy")
    client.refresh()
    assert client.topics == {"busy"}


async def test_the_topic_used_last_stays_when_all_are_idle() -> None:
    # With no topic, aiokafka would ask for every topic of the cluster; Java asks for none.
    adapter, client, clock = started(["first", "second", "unrelated"])
    adapter.partitions_for_topic("first")
    client.refresh()
    clock.advance(1)
    assert adapter.partitions_for_topic("second") is None  # the refresh asked for "first" only
    assert await adapter.wait_for_topic("second", timeout=1.0) == [0, 1]
    clock.advance(MAX_IDLE_S * 10)
    client.refresh()
    assert client.topics == {"second"}
    clock.advance(MAX_IDLE_S * 10)
    assert client.refresh() == {"second"}
    assert client.topics == {"second"}
