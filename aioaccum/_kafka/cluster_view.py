"""A read-only view of the cluster: its id, its brokers, its topics and their partitions.

The producer learns only the topics it writes to, and asks for them as Kafka's producer does,
which lets a broker with ``auto.create.topics.enable`` create any topic it is asked about. An
HTTP gateway must instead answer "no such topic", list the topics and show leaders and replicas,
so it asks here: with auto-creation off, naming the topics it wants (or all of them), over a
connection opened like the producer's (the adapter carries the TLS, SASL and socket settings).

Like ``_kafka.py`` and ``_metadata.py`` this module is part of the layer that talks to aiokafka;
nothing above it sees aiokafka's classes or errors.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

import aiokafka.errors as kerr
from aiokafka.protocol.metadata import MetadataRequest

from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import ProducerTimeoutError

__all__ = ["ClusterReader", "ClusterSnapshot", "PartitionInfo", "TopicInfo"]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the metadata answer showed it (``leader`` is -1 when it has none)."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One metadata answer.

    Attributes:
        cluster_id: The cluster's id (None from brokers too old to say).
        controller: The controller's node id, or -1.
        brokers: The node ids of the brokers, sorted.
        topics: The topics found, by name.
        missing: Topics asked for that do not exist.
        unauthorized: Topics asked for that this client may not describe.
    """

    cluster_id: str | None
    controller: int
    brokers: tuple[int, ...]
    topics: dict[str, TopicInfo]
    missing: frozenset[str]
    unauthorized: frozenset[str]


class ClusterReader:
    """Asks the cluster for metadata, never creating a topic by asking.

    Args:
        config: The producer's settings: the reader connects as the producer does.
    """

    def __init__(self, config: ProducerConfig) -> None:
        self._config = config
        self._adapter = AioKafkaAdapter(config)

    async def start(self) -> None:
        """Connect to the bootstrap servers.

        Raises:
            BrokerError: No bootstrap server answered.
            AuthenticationError: TLS or SASL was refused.
        """
        await self._adapter.start()

    async def close(self) -> None:
        await self._adapter.close()

    async def describe(self, topics: Sequence[str] | None, timeout: float) -> ClusterSnapshot:
        """The cluster's metadata for ``topics`` (None: every topic), from the first broker that
        answers, asking every ``retry_backoff_ms`` until ``timeout`` seconds have passed.

        Raises:
            ProducerTimeoutError: No broker answered within ``timeout``.
        """
        client = self._adapter.client
        request = MetadataRequest(
            None if topics is None else list(topics), allow_auto_topic_creation=False
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        tried: set[int] = set()
        last_error: BaseException | None = None
        while True:
            nodes = [broker.nodeId for broker in client.cluster.brokers()]
            random.shuffle(nodes)
            for node in nodes:
                tried.add(node)
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    async with asyncio.timeout(left):
                        response = await client.send(node, request)
                except (TimeoutError, kerr.KafkaError, OSError) as exc:
                    last_error = exc
                    continue
                if response.brokers:
                    return _snapshot(response.to_object(), topics)
            left = deadline - loop.time()
            if left <= 0:
                raise ProducerTimeoutError(
                    f"no broker answered a metadata request within {timeout * 1000:.0f} ms "
                    f"(nodes tried: {sorted(tried)}; last error: {last_error!r}); check that "
                    "the brokers are up and reachable"
                )
            await asyncio.sleep(min(self._config.retry_backoff_ms / 1000, left))


def _snapshot(answer: dict[str, object], asked: Sequence[str] | None) -> ClusterSnapshot:
    topics: dict[str, TopicInfo] = {}
    missing: set[str] = set()
    unauthorized: set[str] = set()
    for entry in answer["topics"]:  # type: ignore[attr-defined]  # aiokafka's untyped dicts
        name = entry["topic"]
        code = entry["error_code"]
        if code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            missing.add(name)
            continue
        if code == Errors.TOPIC_AUTHORIZATION_FAILED:
            unauthorized.add(name)
            continue
        partitions = tuple(
            sorted(
                (
                    PartitionInfo(
                        p["partition"], p["leader"], tuple(p["replicas"]), tuple(p["isr"])
                    )
                    for p in entry["partitions"]
                ),
                key=lambda p: p.partition,
            )
        )
        if not partitions:
            # Being created or deleted: not a topic a record can go to yet.
            missing.add(name)
            continue
        topics[name] = TopicInfo(name, bool(entry.get("is_internal", False)), partitions)
    if asked is not None:
        missing.update(name for name in asked if name not in topics and name not in unauthorized)
    brokers = tuple(sorted(b["node_id"] for b in answer["brokers"]))  # type: ignore[attr-defined]
    cluster_id = answer.get("cluster_id")
    controller = answer.get("controller_id", -1)
    return ClusterSnapshot(
        cluster_id=cluster_id if isinstance(cluster_id, str) else None,
        controller=controller if isinstance(controller, int) else -1,
        brokers=brokers,
        topics=topics,
        missing=frozenset(missing),
        unauthorized=frozenset(unauthorized),
    )
