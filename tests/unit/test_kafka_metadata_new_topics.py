"""Metadata for many topics (Java's KIP-526): the first send to a new topic asks for the new
topics alone, waiters at the same moment share one request, requests name a bounded number of
topics, and every answer is merged into the cluster view without losing the other topics.

The adapter runs on aioaccum's real MetadataClient (aiokafka's client, its refresh task and
ClusterMetadata included) whose ``send`` a stand-in broker answers: no sockets, no sleeps
(looptime runs the loop's clock).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import pytest
from aiokafka.errors import RequestTimedOutError
from aiokafka.protocol.metadata import MetadataRequest, MetadataRequest_v5, MetadataResponse_v1

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum._kafka.metadata import MetadataClient
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import BrokerError, ProducerTimeoutError

pytestmark = pytest.mark.looptime

BROKERS = [(node, "127.0.0.1", 9092 + node, None) for node in range(3)]
UNKNOWN_TOPIC, NOT_AUTHORIZED = 3, 29


class StubClient(MetadataClient):
    """The real MetadataClient, whose requests a stand-in broker answers.

    ``existing``: topic -> partition count; partition p is led by node p % 3. ``asked``: the
    topics each metadata request named, in order (None: every topic).
    """

    def __init__(
        self,
        existing: Mapping[str, int],
        *,
        unauthorized: Collection[str] = (),
        max_topics_per_request: int = 500,
    ) -> None:
        super().__init__(
            bootstrap_servers="127.0.0.1:9092", max_topics_per_request=max_topics_per_request
        )
        self.existing = dict(existing)
        self.unauthorized = set(unauthorized)
        self.asked: list[list[str] | None] = []
        self.auto_create: list[bool] = []
        # Requests for which hold_if is true wait for release; fail_if: no node answers them.
        self.hold_if: Callable[[list[str]], bool] = lambda topics: False
        self.release = asyncio.Event()
        self.fail_if: Callable[[list[str]], bool] = lambda topics: False

    def start(self) -> None:
        """What bootstrap() does: brokers only, then the refresh task."""
        self.cluster.update_metadata(MetadataResponse_v1(BROKERS, 0, []))
        self._sync_task = asyncio.create_task(self._md_synchronizer())

    async def send(self, node_id: Any, request: Any, **kwargs: Any) -> Any:
        assert isinstance(request, MetadataRequest)
        struct = request.build(MetadataRequest_v5)  # what a Kafka 4 broker gets
        topics: list[str] | None = struct.topics
        if self.fail_if(topics or []):
            raise RequestTimedOutError()
        self.asked.append(None if topics is None else list(topics))
        self.auto_create.append(struct.allow_auto_topic_creation)
        if self.hold_if(topics or []):
            await self.release.wait()
        named = sorted(self.existing) if topics is None else topics
        return MetadataResponse_v1(BROKERS, 0, [self._answer(topic) for topic in named])

    def _answer(self, topic: str) -> tuple[Any, ...]:
        if topic in self.unauthorized:
            return (NOT_AUTHORIZED, topic, False, [])
        if topic not in self.existing:
            return (UNKNOWN_TOPIC, topic, False, [])
        parts = [(0, p, p % 3, [p % 3], [p % 3]) for p in range(self.existing[topic])]
        return (0, topic, False, parts)

    def named(self) -> list[str]:
        """Every topic name the requests carried, repeats included."""
        return [topic for topics in self.asked for topic in topics or ()]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., tuple[AioKafkaAdapter, StubClient]]]:
    clients: list[StubClient] = []

    def build(existing: Mapping[str, int], **options: Any) -> tuple[AioKafkaAdapter, StubClient]:
        client = StubClient(existing, **options)
        adapter = AioKafkaAdapter(ProducerConfig(retry_backoff_ms=100), clock=Clock())
        # What AioKafkaAdapter.start() does with a real client.
        client.cluster.add_listener(adapter._on_metadata_update)
        adapter._client = client
        client.start()
        clients.append(client)
        return adapter, client

    yield build
    for client in clients:
        client.release.set()
        await client.close()


Make = Callable[..., tuple[AioKafkaAdapter, StubClient]]


def topics(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(count)]


async def test_waiters_at_the_same_moment_share_one_request_for_the_new_topics_only(
    make: Make,
) -> None:
    new = topics("new", 50)
    adapter, client = make({"known": 2, **dict.fromkeys(new, 1)})
    assert await adapter.wait_for_topic("known", timeout=5) == [0, 1]
    assert client.asked == [["known"]]
    client.asked.clear()

    found = await asyncio.gather(*(adapter.wait_for_topic(t, timeout=5) for t in new))

    assert found == [[0]] * len(new)
    assert client.asked == [new]  # one request, without "known"
    # Every later full refresh names them all.
    await client.force_metadata_update()
    assert sorted(client.asked[-1] or ()) == sorted(["known", *new])


async def test_one_coroutine_asks_for_each_new_topic_alone(make: Make) -> None:
    # One full round per topic would name 1 + 2 + ... + 30 = 465 topics.
    new = topics("seq", 30)
    adapter, client = make(dict.fromkeys(new, 1))
    for topic in new:
        assert await adapter.wait_for_topic(topic, timeout=5) == [0]
    assert client.asked == [[topic] for topic in new]
    assert all(client.cluster.partitions_for_topic(topic) == {0} for topic in new)


async def test_requests_for_new_topics_name_at_most_the_maximum(make: Make) -> None:
    new = topics("many", 30)
    adapter, client = make(dict.fromkeys(new, 1), max_topics_per_request=8)
    found = await asyncio.gather(*(adapter.wait_for_topic(t, timeout=5) for t in new))
    assert found == [[0]] * len(new)
    assert [len(asked or ()) for asked in client.asked] == [8, 8, 8, 6]
    assert client.named() == new  # each once, in the order they came


async def test_a_new_topic_is_merged_without_dropping_the_others(make: Make) -> None:
    adapter, client = make({"a": 3, "b": 2, "c": 4})
    for topic in ("a", "b"):
        await adapter.wait_for_topic(topic, timeout=5)
    # The caches, filled before the merge.
    assert adapter.partitions_for_topic("a") == [0, 1, 2]
    assert adapter.leader_for(TopicPartition("a", 1)) == 1
    assert adapter.partitions_for_node(0) == [TopicPartition("a", 0), TopicPartition("b", 0)]
    assert adapter.available_partitions_for_topic("c") == []
    assert adapter.leader_for(TopicPartition("c", 3)) is None
    version = adapter.metadata_version
    client.asked.clear()

    assert await adapter.wait_for_topic("c", timeout=5) == [0, 1, 2, 3]

    assert client.asked == [["c"]]
    assert adapter.metadata_version > version
    assert adapter.partitions_for_topic("a") == [0, 1, 2]
    assert adapter.partitions_for_topic("b") == [0, 1]
    assert adapter.partitions_for_topic("c") == [0, 1, 2, 3]
    assert adapter.available_partitions_for_topic("c") == [0, 1, 2, 3]
    assert adapter.leader_for(TopicPartition("c", 3)) == 0
    assert adapter.leader_for(TopicPartition("a", 1)) == 1
    assert adapter.partitions_for_node(0) == [
        TopicPartition("a", 0),
        TopicPartition("b", 0),
        TopicPartition("c", 0),
        TopicPartition("c", 3),
    ]
    merged = snapshot(client)
    # The merged view is the one a full refresh of the same topics gives.
    await client.force_metadata_update()
    assert sorted(client.asked[-1] or ()) == ["a", "b", "c"]
    assert snapshot(client) == merged


def snapshot(client: StubClient) -> tuple[Any, ...]:
    cluster = client.cluster
    return (
        {t: cluster.partitions_for_topic(t) for t in cluster.topics()},
        {n: cluster.partitions_for_broker(n) for n in range(3)},
        {b.nodeId for b in cluster.brokers()},
    )


async def test_a_merged_answer_replaces_what_it_names(make: Make) -> None:
    adapter, client = make({"grows": 1, "other": 1})
    await adapter.wait_for_topic("grows", timeout=5)
    await adapter.wait_for_topic("other", timeout=5)
    client.existing["grows"] = 3  # more partitions, led by nodes 0, 1 and 2
    await client.request_update_for_new_topic("grows")
    assert adapter.partitions_for_topic("grows") == [0, 1, 2]
    assert adapter.partitions_for_node(0) == [
        TopicPartition("grows", 0),
        TopicPartition("other", 0),
    ]
    assert adapter.partitions_for_node(2) == [TopicPartition("grows", 2)]
    del client.existing["grows"]  # deleted: the answer is an error, and the topic leaves
    await client.request_update_for_new_topic("grows")
    assert client.cluster.partitions_for_topic("grows") is None
    assert adapter.partitions_for_node(0) == [TopicPartition("other", 0)]


async def test_a_full_refresh_asks_in_bounded_parts_and_installs_them_at_once(
    make: Make,
) -> None:
    tracked = topics("t", 20)
    adapter, client = make(dict.fromkeys(tracked, 1), max_topics_per_request=8)
    await asyncio.gather(*(adapter.wait_for_topic(t, timeout=5) for t in tracked))
    version = adapter.metadata_version
    client.asked.clear()

    assert await client.force_metadata_update()

    assert [len(asked or ()) for asked in client.asked] == [8, 8, 4]
    assert sorted(client.named()) == tracked
    assert adapter.metadata_version == version + 1  # one view, not one per part
    assert all(adapter.partitions_for_topic(t) == [0] for t in tracked)


async def test_a_full_refresh_with_a_part_unanswered_changes_nothing(make: Make) -> None:
    tracked = topics("t", 20)
    adapter, client = make(dict.fromkeys(tracked, 1), max_topics_per_request=8)
    await asyncio.gather(*(adapter.wait_for_topic(t, timeout=5) for t in tracked))
    version = adapter.metadata_version
    before = snapshot(client)
    # The part naming t-019 gets no answer from any node; the other parts are answered.
    client.fail_if = lambda asked: "t-019" in asked

    assert not await client.force_metadata_update()

    assert adapter.metadata_version == version
    assert snapshot(client) == before


async def test_a_topic_merged_while_a_full_refresh_is_in_flight_stays(make: Make) -> None:
    adapter, client = make({"a": 1, "late": 2})
    await adapter.wait_for_topic("a", timeout=5)
    client.hold_if = lambda asked: asked == ["a"]  # the full refresh, started before "late"
    refresh = asyncio.ensure_future(client.force_metadata_update())
    await asyncio.sleep(0.01)
    assert client.asked[-1] == ["a"]
    assert not refresh.done()

    assert await adapter.wait_for_topic("late", timeout=5) == [0, 1]
    client.release.set()
    assert await refresh

    # The refresh never named "late": its answer leaves the merged entry alone.
    assert adapter.partitions_for_topic("late") == [0, 1]
    assert adapter.partitions_for_topic("a") == [0]
    client.hold_if = lambda asked: False
    await client.force_metadata_update()
    assert sorted(client.asked[-1] or ()) == ["a", "late"]


async def test_an_unauthorized_topic_raises_the_same_error_as_before(make: Make) -> None:
    adapter, client = make({"open": 1}, unauthorized={"secret"})
    with pytest.raises(BrokerError, match="not authorized to write to topic 'secret'") as info:
        await adapter.wait_for_topic("secret", timeout=5)
    assert info.value.errno == NOT_AUTHORIZED
    assert client.asked == [["secret"]]


async def test_a_missing_topic_times_out_with_the_same_message(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    adapter, client = make({"present": 1})
    message = (
        "topic 'ghost' not present in metadata after 2000 ms; create the topic "
        "(auto-creation may be off) or raise max_block_ms"
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(ProducerTimeoutError) as info:
        await adapter.wait_for_topic("ghost", timeout=2.0)
    assert str(info.value) == message
    # Asked alone, about once per retry_backoff_ms (100 ms) until the deadline.
    assert set(client.named()) == {"ghost"}
    assert 15 <= len(client.asked) <= 21
    # Each answer says the topic is missing: aiokafka's line for each is at DEBUG, and the
    # producer says it once, at WARNING, with what to do.
    echoes = [r for r in caplog.records if "not found in cluster metadata" in r.getMessage()]
    assert len(echoes) >= 15
    assert {r.levelno for r in echoes} == {logging.DEBUG}
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert told == [
        "topic 'ghost' is not in the cluster's metadata; send() waits up to max_block_ms "
        "(2000 ms) for it: create the topic (auto-creation is often off) or check its name"
    ]


async def test_a_topic_auto_created_meanwhile_is_found_on_a_later_round(make: Make) -> None:
    adapter, client = make({})
    waiting = asyncio.ensure_future(adapter.wait_for_topic("born", timeout=5))
    await asyncio.sleep(0.25)
    assert not waiting.done()
    client.existing["born"] = 2
    assert await waiting == [0, 1]
    assert set(client.named()) == {"born"}


async def test_new_topics_may_be_auto_created_as_in_aiokafkas_own_refreshes(
    make: Make,
) -> None:
    adapter, client = make({"a": 1})
    await adapter.wait_for_topic("a", timeout=5)
    await client.force_metadata_update()
    assert client.asked == [["a"], ["a"]]
    assert client.auto_create == [True, True]


async def test_a_wait_that_gives_up_leaves_the_shared_request_to_the_others(
    make: Make,
) -> None:
    adapter, client = make({"slow": 1})
    client.hold_if = lambda asked: True
    patient = asyncio.ensure_future(adapter.wait_for_topic("slow", timeout=30))
    with pytest.raises(ProducerTimeoutError):
        await adapter.wait_for_topic("slow", timeout=1)
    client.release.set()
    assert await patient == [0]
    assert client.asked == [["slow"]]


async def test_a_request_no_node_answers_is_tried_again(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    adapter, client = make({"flaky": 1})
    failures = iter(range(3 * 2))  # every node fails twice, i.e. two whole rounds
    client.fail_if = lambda asked: next(failures, None) is not None
    with caplog.at_level(logging.DEBUG, logger="aioaccum._kafka.metadata"):
        assert await adapter.wait_for_topic("flaky", timeout=5) == [0]
    assert client.asked == [["flaky"]]
    # Two rounds failed on every node: one warning, not one line per node and round.
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "no broker answered" in warnings[0].getMessage()


async def test_with_no_topic_tracked_a_full_refresh_asks_for_none(make: Make) -> None:
    # aiokafka asks for every topic of the cluster then; Java's producer asks for none.
    _, client = make({"a": 1, "b": 1})
    assert await client.force_metadata_update()
    assert client.asked == [[]]
    assert client.cluster.topics() == set()


async def test_waiters_after_close_do_not_reopen_connections(make: Make) -> None:
    adapter, client = make({"a": 1})
    await client.close()
    with pytest.raises(ProducerTimeoutError):
        await adapter.wait_for_topic("a", timeout=1)
    assert client.asked == []
