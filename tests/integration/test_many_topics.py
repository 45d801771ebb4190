"""The first send to each of 200 new topics, from one coroutine, against the real cluster: every
record lands, and metadata is asked for the new topics alone rather than in one full round of
every topic per new topic (Java's KIP-526)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.metadata import MetadataRequest

from aioaccum.producer import Producer

pytestmark = pytest.mark.kafka

TOPICS = 200
READY_TIMEOUT_S = 60.0
# More than one or two topics in a request: a full round of the tracked topics.
WIDE = 10


@pytest.fixture
async def new_topics(kafka_bootstrap: str) -> AsyncIterator[list[str]]:
    """TOPICS fresh topics of 1 partition each, ready on every broker, deleted afterwards."""
    run = uuid.uuid4().hex[:8]
    names = [f"aioaccum-many-{run}-{i:03d}" for i in range(TOPICS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=60_000)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(name, 1, 1) for name in names])
        errors = [r for r in response.to_object()["topic_errors"] if r["error_code"]]
        assert not errors, errors
        await wait_for_leaders(kafka_bootstrap, names)
        # A broker may list itself as leader a moment before it takes writes; reading each
        # partition's end offset from its leader waits for that, so that no NOT_LEADER error
        # adds a refresh the test is not about.
        assert set((await end_offsets(kafka_bootstrap, names)).values()) == {0}
        yield names
    finally:
        try:
            await admin.delete_topics(names)
        finally:
            await admin.close()


async def wait_for_leaders(bootstrap: str, names: list[str]) -> None:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = {broker.nodeId for broker in client.cluster.brokers()}
        while waiting:
            for node in sorted(waiting):
                response = await client.send(node, MetadataRequest(names))
                ready = [t for t in response.topics if t[0] == 0 and t[-1] and t[-1][0][2] >= 0]
                if len(ready) == len(names):
                    waiting.discard(node)
            assert time.monotonic() < deadline, f"topics not ready on brokers {waiting}"
            if waiting:
                await asyncio.sleep(0.1)
    finally:
        await client.close()


async def end_offsets(bootstrap: str, names: list[str]) -> dict[str, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        # The consumer tracks no topic, so this learns every topic of the cluster in one
        # round; end_offsets would otherwise wait for each topic's metadata in turn.
        await consumer._client.force_metadata_update()
        ends = await consumer.end_offsets([TopicPartition(name, 0) for name in names])
    finally:
        await consumer.stop()
    return {tp.topic: end for tp, end in ends.items()}


class MetadataRequests:
    """The topics named by each metadata request any aiokafka connection sends (None: every
    topic), while counting."""

    def __init__(self) -> None:
        self.named: list[list[str] | None] = []
        self.counting = False


@pytest.fixture
def metadata_requests(monkeypatch: pytest.MonkeyPatch) -> MetadataRequests:
    seen = MetadataRequests()
    original = AIOKafkaConnection.send

    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if seen.counting and isinstance(request, MetadataRequest):
            topics = request._topics
            seen.named.append(None if topics is None else list(topics))
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(AIOKafkaConnection, "send", send)
    return seen


async def test_first_sends_to_200_new_topics_from_one_coroutine(
    kafka_bootstrap: str, new_topics: list[str], metadata_requests: MetadataRequests
) -> None:
    metadata_requests.counting = True
    async with Producer(kafka_bootstrap, linger_ms=5) as producer:
        futures = [await producer.send(topic, b"x") for topic in new_topics]
        written = await asyncio.gather(*futures)
    metadata_requests.counting = False

    assert [(m.topic, m.partition, m.offset) for m in written] == [
        (topic, 0, 0) for topic in new_topics
    ]
    assert await end_offsets(kafka_bootstrap, new_topics) == dict.fromkeys(new_topics, 1)

    requests = metadata_requests.named
    assert None not in requests  # never every topic of the cluster
    named = [topics for topics in requests if topics is not None]
    # Every topic was asked for, so the count saw the requests that mattered ...
    assert set(new_topics) <= {topic for topics in named for topic in topics}
    # ... each alone, not in one full round per topic: those would be 200 requests naming
    # 1, 2, ... 200 topics (20,100 in all). A full refresh on an error may still happen.
    narrow = [len(topics) for topics in named if len(topics) <= WIDE]
    wide = [len(topics) for topics in named if len(topics) > WIDE]
    assert sum(narrow) <= 2 * TOPICS, sum(narrow)
    assert len(wide) <= 3, wide
