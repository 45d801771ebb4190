"""The transaction requests on the wire: what :mod:`aioaccum._runtime.transactions` sends, and how.

Part of the network layer with :mod:`aioaccum._kafka.adapter` (which holds the produce request).
aiokafka knows these requests only in their first versions; the ones a transactional producer
needs are newer: InitProducerId with a producer id and epoch (v3, KIP-360), EndTxn that moves
the epoch on (v5) and TxnOffsetCommit that adds the group itself (v5) for KIP-890's protocol,
and ApiVersions v3 for the cluster's finalized ``transaction.version``. Each is encoded and
read here by hand, in Kafka's flexible format, and sent over aiokafka's connections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from aiokafka.client import ConnectionGroup, CoordinationType

from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum._kafka.errors import map_errors
from aioaccum._kafka.wire import (
    I8,
    I16,
    I32,
    I64,
    NO_TAGS,
    Call,
    Reader,
    compact_array,
    compact_str,
)
from aioaccum.errors import BrokerError

_API_VERSIONS = 18
_INIT_PRODUCER_ID = 22
_ADD_PARTITIONS_TO_TXN = 24
_ADD_OFFSETS_TO_TXN = 25
_END_TXN = 26
_TXN_OFFSET_COMMIT = 28
_OFFSET_FETCH = 9

GROUP = int(CoordinationType.GROUP)
TRANSACTION = int(CoordinationType.TRANSACTION)

__all__ = [
    "GROUP",
    "TRANSACTION",
    "AddPartitionsResult",
    "EndTxnResult",
    "OffsetFetchResult",
    "ProducerIdResult",
    "TxnWire",
]

# --- answers


class ProducerIdResult(NamedTuple):
    error_code: int
    producer_id: int
    epoch: int


class EndTxnResult(NamedTuple):
    error_code: int
    producer_id: int
    """-1 before v5 (the epoch stays)."""
    epoch: int


class AddPartitionsResult(NamedTuple):
    errors: dict[tuple[str, int], int]
    """Error code per partition (0: added)."""


class OffsetFetchResult(NamedTuple):
    error_code: int
    """The group's error (0: the offsets below are answers)."""
    offsets: dict[tuple[str, int], tuple[int, int]]
    """Per partition: committed offset (-1: none) and error code."""


def _partition_errors(r: Reader) -> dict[tuple[str, int], int]:
    """Error code per partition, as AddPartitionsToTxn v3 and TxnOffsetCommit v3+ answer."""
    errors: dict[tuple[str, int], int] = {}
    for _ in range(r.compact_count()):
        topic = r.compact_str() or ""
        for _ in range(r.compact_count()):
            partition = r.int32()
            errors[(topic, partition)] = r.int16()
            r.tags()
        r.tags()
    return errors


class TxnWire:
    """The transaction requests, sent through a started :class:`AioKafkaAdapter`."""

    def __init__(self, adapter: AioKafkaAdapter) -> None:
        self._adapter = adapter

    async def _send(self, node: int, call: Call) -> Any:
        with map_errors():
            return await self._adapter.client.send(node, call, group=ConnectionGroup.COORDINATION)

    async def coordinator(self, key: str, kind: int) -> int:
        """The node that coordinates transactional id or group ``key`` (FindCoordinator)."""
        client = self._adapter.client
        with map_errors():
            node: int = await client.coordinator_lookup(kind, key)
        return node

    async def finalized_features(self) -> dict[str, int]:
        """The cluster's finalized feature levels (ApiVersions v3), from any broker."""
        client = self._adapter.client
        node = client.get_random_node()
        if node is None:
            raise BrokerError("no broker is known to ask for its features", retriable=True)

        def body(_version: int) -> bytes:
            return compact_str("aioaccum") + compact_str("1.0") + NO_TAGS

        def read(_version: int, r: Reader) -> dict[str, int]:
            r.int16()  # error code: a failure leaves the features out, read as none
            for _ in range(r.compact_count()):
                r.int16(), r.int16(), r.int16()
                r.tags()
            r.int32()
            tagged = r.tags()
            features: dict[str, int] = {}
            raw = tagged.get(2)
            if raw:
                inner = Reader(raw)
                for _ in range(inner.compact_count()):
                    name = inner.compact_str() or ""
                    features[name] = inner.int16()  # the finalized (max) level
                    inner.int16()
                    inner.tags()
            return features

        found: dict[str, int] = await self._send(node, Call(_API_VERSIONS, (4, 3), body, read))
        return found

    async def init_producer_id(
        self,
        node: int,
        transactional_id: str | None,
        timeout_ms: int,
        producer_id: int = -1,
        epoch: int = -1,
    ) -> ProducerIdResult:
        def body(_version: int) -> bytes:
            return (
                compact_str(transactional_id)
                + I32.pack(timeout_ms)
                + I64.pack(producer_id)
                + I16.pack(epoch)
                + NO_TAGS
            )

        def read(_version: int, r: Reader) -> ProducerIdResult:
            r.int32()
            return ProducerIdResult(r.int16(), r.int64(), r.int16())

        result: ProducerIdResult = await self._send(
            node, Call(_INIT_PRODUCER_ID, (5, 4, 3), body, read)
        )
        return result

    async def add_partitions(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> AddPartitionsResult:
        topics = _topics_field(partitions)

        def body(_version: int) -> bytes:
            return (
                compact_str(transactional_id)
                + I64.pack(producer_id)
                + I16.pack(epoch)
                + topics
                + NO_TAGS
            )

        def read(_version: int, r: Reader) -> AddPartitionsResult:
            r.int32()
            return AddPartitionsResult(_partition_errors(r))

        # v3 is the last version for clients; later ones are the brokers' own.
        result: AddPartitionsResult = await self._send(
            node, Call(_ADD_PARTITIONS_TO_TXN, (3,), body, read)
        )
        return result

    async def add_offsets(
        self, node: int, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> int:
        def body(_version: int) -> bytes:
            return (
                compact_str(transactional_id)
                + I64.pack(producer_id)
                + I16.pack(epoch)
                + compact_str(group_id)
                + NO_TAGS
            )

        def read(_version: int, r: Reader) -> int:
            r.int32()
            return r.int16()

        code: int = await self._send(node, Call(_ADD_OFFSETS_TO_TXN, (4, 3), body, read))
        return code

    async def txn_offset_commit(
        self,
        node: int,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        epoch: int,
        offsets: Mapping[tuple[str, int], int],
        *,
        transaction_version: int,
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append((partition, offset))

        def body(_version: int) -> bytes:
            topics = [
                compact_str(topic)
                + compact_array(
                    [
                        I32.pack(partition)
                        + I64.pack(offset)
                        + I32.pack(-1)  # leader epoch: unknown
                        + compact_str(None)  # metadata
                        + NO_TAGS
                        for partition, offset in sorted(parts)
                    ]
                )
                + NO_TAGS
                for topic, parts in by_topic.items()
            ]
            return (
                compact_str(transactional_id)
                + compact_str(group_id)
                + I64.pack(producer_id)
                + I16.pack(epoch)
                + I32.pack(-1)  # generation: not checked without a member id
                + compact_str("")
                + compact_str(None)
                + compact_array(topics)
                + NO_TAGS
            )

        def read(_version: int, r: Reader) -> dict[tuple[str, int], int]:
            r.int32()
            return _partition_errors(r)

        # v5 adds the group to the transaction by itself (KIP-890); v3 and v4 need
        # AddOffsetsToTxn first.
        versions = (5,) if transaction_version >= 2 else (4, 3)
        errors: dict[tuple[str, int], int] = await self._send(
            node, Call(_TXN_OFFSET_COMMIT, versions, body, read)
        )
        return errors

    async def offset_fetch(
        self, node: int, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> OffsetFetchResult:
        """The committed offsets of ``group_id`` (OffsetFetch v7, ``require_stable``: while
        a transaction that commits offsets of these partitions is still being completed, the
        coordinator answers UNSTABLE_OFFSET_COMMIT rather than the older offset, KIP-447)."""
        topics = _topics_field(partitions)

        def body(_version: int) -> bytes:
            return compact_str(group_id) + topics + I8.pack(1) + NO_TAGS

        def read(_version: int, r: Reader) -> OffsetFetchResult:
            r.int32()
            offsets: dict[tuple[str, int], tuple[int, int]] = {}
            for _ in range(r.compact_count()):
                topic = r.compact_str() or ""
                for _ in range(r.compact_count()):
                    partition = r.int32()
                    offset = r.int64()
                    r.int32()  # leader epoch
                    r.compact_str()  # metadata
                    offsets[(topic, partition)] = (offset, r.int16())
                    r.tags()
                r.tags()
            return OffsetFetchResult(r.int16(), offsets)

        result: OffsetFetchResult = await self._send(
            node, Call(_OFFSET_FETCH, (7,), body, read)
        )
        return result

    async def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        *,
        transaction_version: int,
    ) -> EndTxnResult:
        def body(_version: int) -> bytes:
            return (
                compact_str(transactional_id)
                + I64.pack(producer_id)
                + I16.pack(epoch)
                + I8.pack(1 if commit else 0)
                + NO_TAGS
            )

        def read(version: int, r: Reader) -> EndTxnResult:
            r.int32()
            code = r.int16()
            if version >= 5:
                return EndTxnResult(code, r.int64(), r.int16())
            return EndTxnResult(code, -1, -1)

        # v5 is KIP-890's: the coordinator moves the epoch on at every end.
        versions = (5,) if transaction_version >= 2 else (4, 3)
        result: EndTxnResult = await self._send(node, Call(_END_TXN, versions, body, read))
        return result


def _topics_field(partitions: Iterable[tuple[str, int]]) -> bytes:
    """Partitions grouped by topic, as the compact topics array of AddPartitionsToTxn v3 and
    OffsetFetch v7 write them (each topic's partitions in order)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return compact_array([
        compact_str(topic) + compact_array([I32.pack(p) for p in sorted(parts)]) + NO_TAGS
        for topic, parts in by_topic.items()
    ])
