"""What a transaction left in the log, seen by confluent-kafka (librdkafka), not by aioaccum.

:func:`wait_stable` waits until no transaction is open on a topic (each partition's last stable
offset, which a ``read_committed`` consumer sees, equals its high watermark); only then does
"nothing is visible" mean the transaction was aborted rather than still open. :func:`read_topic`
reads every partition to its end as ``read_committed`` (or ``read_uncommitted``) and returns the
records with their offsets. :func:`group_offsets` and :func:`stable_group_offsets` are what a
consumer group has committed, :func:`read_from_committed` is the consuming half of
consume-transform-produce, and :func:`transaction_coordinator` is the broker that coordinates a
``transactional_id``, found the way the broker finds it (the id's Java ``hashCode`` picks a
``__transaction_state`` partition, whose leader is the coordinator).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient

__all__ = [
    "Record",
    "end_offsets",
    "group_offsets",
    "read_from_committed",
    "read_topic",
    "stable_group_offsets",
    "transaction_coordinator",
    "wait_stable",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
REQUEST_TIMEOUT_S = 30.0
POLL_S = 0.2


class Record(NamedTuple):
    partition: int
    offset: int
    value: bytes | None


def _consumer(bootstrap: str, isolation: str, group: str | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or "aioaccum-txn-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    found = metadata.topics[topic]
    if found.error is not None:
        raise KafkaException(found.error)
    return sorted(found.partitions)


def _ends(consumer: Consumer, topic: str) -> dict[int, int]:
    # librdkafka's ListOffsets uses the consumer's isolation.level: under read_committed the
    # "high" offset is the last stable offset.
    return {
        p: consumer.get_watermark_offsets(
            ConfluentTopicPartition(topic, p), timeout=REQUEST_TIMEOUT_S, cached=False
        )[1]
        for p in _partitions(consumer, topic)
    }


def _end_offsets(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    consumer = _consumer(bootstrap, isolation)
    try:
        return _ends(consumer, topic)
    finally:
        consumer.close()


async def end_offsets(
    bootstrap: str, topic: str, *, isolation: str = "read_uncommitted"
) -> dict[int, int]:
    """Each partition's high watermark, or its last stable offset under ``read_committed``."""
    return await asyncio.to_thread(_end_offsets, bootstrap, topic, isolation)


async def wait_stable(bootstrap: str, topic: str, *, timeout: float) -> dict[int, int]:
    """Until no partition of ``topic`` has an open transaction; returns the end offsets.

    Raises ``TimeoutError`` naming the partitions whose last stable offset stayed behind.
    """
    deadline = time.monotonic() + timeout
    while True:
        stable = await end_offsets(bootstrap, topic, isolation="read_committed")
        high = await end_offsets(bootstrap, topic)
        if stable == high:
            return high
        if time.monotonic() > deadline:
            behind = {p: (stable[p], high[p]) for p in high if stable.get(p) != high[p]}
            raise TimeoutError(
                f"{topic}: a transaction is still open after {timeout:.0f} s "
                f"(partition: (last stable offset, high watermark)) {behind}"
            )
        await asyncio.sleep(POLL_S)


def _read(bootstrap: str, topic: str, isolation: str, timeout: float) -> list[Record]:
    consumer = _consumer(bootstrap, isolation)
    deadline = time.monotonic() + timeout
    out: list[Record] = []
    try:
        ends = _ends(consumer, topic)
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([ConfluentTopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {topic} ({isolation}) took over {timeout:.0f} s; partitions left "
                    f"{sorted(remaining)}, ends {ends}"
                )
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                partition = message.partition()
                assert partition is not None
                if error is None:
                    offset = message.offset()
                    assert offset is not None
                    out.append(Record(partition, offset, message.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    # Reached the end (the last stable offset under read_committed) that
                    # was measured before reading: nothing more will come.
                    remaining.discard(partition)
                else:
                    raise KafkaException(error)
    finally:
        consumer.close()
    return out


async def read_topic(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 60.0
) -> list[Record]:
    """Every record of ``topic`` that a consumer with ``isolation`` reads, partition by
    partition in offset order. Call :func:`wait_stable` first."""
    return await asyncio.to_thread(_read, bootstrap, topic, isolation, timeout)


def _group_offsets(
    bootstrap: str, group: str, topic: str, partitions: list[int], require_stable: bool
) -> dict[int, int] | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [ConfluentTopicPartition(topic, p) for p in partitions]
    )
    futures = admin.list_consumer_group_offsets(
        [request], require_stable=require_stable, request_timeout=REQUEST_TIMEOUT_S
    )
    result = futures[group].result(timeout=REQUEST_TIMEOUT_S)
    out: dict[int, int] = {}
    for tp in result.topic_partitions:
        if tp.error is not None:
            if tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                return None
            raise KafkaException(tp.error)
        out[tp.partition] = tp.offset
    return out


async def group_offsets(
    bootstrap: str, group: str, topic: str, partitions: Iterable[int]
) -> dict[int, int]:
    """The offsets ``group`` has committed for ``topic``'s ``partitions`` (negative: none).

    Offsets sent with a transaction that is still open (or whose commit markers are not
    written yet) are not among them.
    """
    found = await asyncio.to_thread(
        _group_offsets, bootstrap, group, topic, sorted(partitions), False
    )
    assert found is not None
    return found


async def stable_group_offsets(
    bootstrap: str, group: str, topic: str, partitions: Iterable[int], *, timeout: float
) -> dict[int, int]:
    """:func:`group_offsets` once no transaction has offsets of ``group`` pending (Kafka's
    ``require_stable``): after a commit, its offsets; after an abort, the earlier ones."""
    deadline = time.monotonic() + timeout
    wanted = sorted(partitions)
    while True:
        found = await asyncio.to_thread(_group_offsets, bootstrap, group, topic, wanted, True)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"group {group}: offsets of {topic} still pending in a transaction after "
                f"{timeout:.0f} s"
            )
        await asyncio.sleep(POLL_S)


def _read_from_committed(
    bootstrap: str, group: str, topic: str, partitions: list[int], count: int, timeout: float
) -> dict[int, list[Record]]:
    consumer = _consumer(bootstrap, "read_committed", group)
    deadline = time.monotonic() + timeout
    out: dict[int, list[Record]] = {p: [] for p in partitions}
    try:
        committed = consumer.committed(
            [ConfluentTopicPartition(topic, p) for p in partitions], timeout=REQUEST_TIMEOUT_S
        )
        consumer.assign(
            [
                ConfluentTopicPartition(
                    topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                )
                for tp in committed
            ]
        )
        while any(len(records) < count for records in out.values()):
            if time.monotonic() > deadline:
                got = {p: len(records) for p, records in out.items()}
                raise TimeoutError(f"{topic}: read {got} of {count} each in {timeout:.0f} s")
            for message in consumer.consume(num_messages=count, timeout=0.5):
                error = message.error()
                partition = message.partition()
                assert partition is not None
                if error is None:
                    offset = message.offset()
                    assert offset is not None
                    if len(out[partition]) < count:
                        out[partition].append(Record(partition, offset, message.value()))
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
    finally:
        consumer.close()
    return out


async def read_from_committed(
    bootstrap: str,
    group: str,
    topic: str,
    partitions: Iterable[int],
    count: int,
    *,
    timeout: float = 60.0,
) -> dict[int, list[Record]]:
    """The next ``count`` records of each partition after ``group``'s committed offset (from
    the start when it has none), read as ``read_committed`` without joining the group."""
    return await asyncio.to_thread(
        _read_from_committed, bootstrap, group, topic, sorted(partitions), count, timeout
    )


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _coordinator(bootstrap: str, transactional_id: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(TRANSACTION_STATE_TOPIC, timeout=REQUEST_TIMEOUT_S)
    partitions = metadata.topics[TRANSACTION_STATE_TOPIC].partitions
    if not partitions:
        raise LookupError(f"{TRANSACTION_STATE_TOPIC} does not exist yet")
    h = java_string_hash(transactional_id)
    index = (0 if h == -(1 << 31) else abs(h)) % len(partitions)  # Kafka's Utils.abs
    leader = int(partitions[index].leader)
    if leader < 0:
        raise LookupError(f"{TRANSACTION_STATE_TOPIC}-{index} has no leader")
    return leader


async def transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """Node id of the transaction coordinator of ``transactional_id``.

    The ``__transaction_state`` topic exists once a transactional producer has started.
    """
    return await asyncio.to_thread(_coordinator, bootstrap, transactional_id)
