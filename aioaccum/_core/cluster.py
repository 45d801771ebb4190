"""What the pure core needs to know about the cluster, and a fixed cluster for tests.

The accumulator and the partitioner never talk to brokers. They read a :class:`ClusterView`: a
snapshot-like object that answers which partitions a topic has, which of them currently have a
leader, who that leader is, which partitions a broker leads and in which rack a broker stands.
It also says which rack this client stands in when keyless records should favour leaders there
(``client_rack`` with ``partitioner_rack_aware``): the view is where the partitioner learns
where things are, its own place included. The producer's metadata cache satisfies the
protocol; :class:`StaticCluster` is an immutable stand-in for tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

__all__ = ["ClusterView", "StaticCluster", "TopicPartition"]


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


class ClusterView(Protocol):
    """The read-only cluster metadata the core works from.

    Partition lists are returned in ascending partition order.
    """

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        """Every partition of ``topic``, or ``None`` when the topic's metadata is unknown."""
        ...

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]:
        """The partitions of ``topic`` that currently have a known leader."""
        ...

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The node id of the partition's leader, or ``None`` when it has none (or is unknown)."""
        ...

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]:
        """The partitions whose leader is ``node``."""
        ...

    def rack_of(self, node: int) -> str | None:
        """The rack broker ``node`` declares (its ``broker.rack``), or ``None`` when it declares
        none or is unknown."""
        ...

    @property
    def client_rack(self) -> str | None:
        """The rack of this client when the built-in partitioner is rack aware (KIP-1123), else
        ``None``: keyless records then prefer partitions whose leader is in this rack."""
        ...

    @property
    def metadata_version(self) -> int:
        """A number that changes whenever any answer above may have changed: what was
        learnt from the view stays true until it moves."""
        ...


# Each StaticCluster is a version of its own: a test moves leaders by making a new one.
_static_versions = itertools.count()


@dataclass(frozen=True)
class StaticCluster:
    """An immutable :class:`ClusterView` built from a table of partition leaders.

    Args:
        nodes: The broker node ids.
        partitions: Each known partition mapped to its leader's node id, or ``None`` when the
            partition currently has no leader.
        racks: The rack of each broker that declares one.
        client_rack: The client's rack, for rack-aware partitioning; ``None``: not rack aware.

    Raises:
        ValueError: A leader or a rack's node is not one of ``nodes``, or a partition number is
            negative.
    """

    nodes: frozenset[int]
    partitions: Mapping[TopicPartition, int | None]
    racks: Mapping[int, str]
    client_rack: str | None
    _by_topic: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _available: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _by_node: dict[int, tuple[TopicPartition, ...]] = field(init=False, repr=False, compare=False)
    _version: int = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        nodes: Collection[int],
        partitions: Mapping[TopicPartition, int | None] | Mapping[tuple[str, int], int | None],
        *,
        racks: Mapping[int, str] | None = None,
        client_rack: str | None = None,
    ) -> None:
        node_set = frozenset(nodes)
        rack_table = dict(racks or {})
        strangers = sorted(set(rack_table) - node_set)
        if strangers:
            raise ValueError(f"racks given for {strangers}, which are not among the nodes")
        table: dict[TopicPartition, int | None] = {}
        for (topic, partition), leader in partitions.items():
            if partition < 0:
                raise ValueError(f"partition numbers are >= 0, got {topic!r} {partition}")
            if leader is not None and leader not in node_set:
                raise ValueError(
                    f"leader {leader} of {topic}-{partition} is not one of the nodes "
                    f"{sorted(node_set)}"
                )
            table[TopicPartition(topic, partition)] = leader
        by_topic: dict[str, list[int]] = {}
        available: dict[str, list[int]] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in sorted(table):
            leader = table[tp]
            by_topic.setdefault(tp.topic, []).append(tp.partition)
            bucket = available.setdefault(tp.topic, [])
            if leader is not None:
                bucket.append(tp.partition)
                by_node.setdefault(leader, []).append(tp)
        # Frozen: the derived indexes are written once, here, and never again.
        object.__setattr__(self, "nodes", node_set)
        object.__setattr__(self, "partitions", table)
        object.__setattr__(self, "racks", rack_table)
        object.__setattr__(self, "client_rack", client_rack)
        object.__setattr__(self, "_by_topic", {t: tuple(p) for t, p in by_topic.items()})
        object.__setattr__(self, "_available", {t: tuple(p) for t, p in available.items()})
        object.__setattr__(self, "_by_node", {n: tuple(p) for n, p in by_node.items()})
        object.__setattr__(self, "_version", next(_static_versions))

    @classmethod
    def uniform(
        cls,
        topics: Mapping[str, int],
        nodes: int = 3,
        *,
        racks: Mapping[int, str] | None = None,
        client_rack: str | None = None,
    ) -> StaticCluster:
        """A cluster whose topics' partitions are led round-robin by nodes ``0 .. nodes-1``.

        Args:
            topics: Topic name mapped to its number of partitions.
            nodes: How many brokers.
            racks: The rack of each broker that declares one.
            client_rack: The client's rack, for rack-aware partitioning.
        """
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        table = {
            TopicPartition(topic, p): p % nodes
            for topic, count in topics.items()
            for p in range(count)
        }
        return cls(range(nodes), table, racks=racks, client_rack=client_rack)

    def with_leader(self, tp: TopicPartition, leader: int | None) -> StaticCluster:
        """A copy of this cluster in which ``tp`` is led by ``leader`` (``None``: no leader)."""
        table = dict(self.partitions)
        table[TopicPartition(*tp)] = leader
        return StaticCluster(self.nodes, table, racks=self.racks, client_rack=self.client_rack)

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        return self._by_topic.get(topic)

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]:
        return self._available.get(topic, ())

    def leader_for(self, tp: TopicPartition) -> int | None:
        return self.partitions.get(tp)

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]:
        return self._by_node.get(node, ())

    def rack_of(self, node: int) -> str | None:
        return self.racks.get(node)

    @property
    def metadata_version(self) -> int:
        return self._version

    def __hash__(self) -> int:
        return hash(
            (
                self.nodes,
                frozenset(self.partitions.items()),
                frozenset(self.racks.items()),
                self.client_rack,
            )
        )
