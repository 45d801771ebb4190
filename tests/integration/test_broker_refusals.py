"""Refusals that no retry gets past: each ends its record's future at once with a typed error
saying what to change, and the producer's other records are written.

The refusals: a record larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE) or than
its segment.bytes (RECORD_LIST_TOO_LARGE); a record without a key on a compacted topic
(INVALID_RECORD); a timestamp outside the topic's message.timestamp.before.max.ms /
message.timestamp.after.max.ms window (INVALID_TIMESTAMP); and a topic the SASL user may not
write (TOPIC_AUTHORIZATION_FAILED), refused on the produce request when WRITE alone is denied,
on the metadata when DESCRIBE is denied too.

"At once": well within REFUSAL_BOUND_S while delivery_timeout_ms and max_block_ms allow two
minutes, with no retry counted in the producer's metrics. "Written": acknowledged, then read
back, while the refused record is not in the log.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

# confluent_kafka.admin re-exports these without an __all__, which strict mypy reads as private.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from aioaccum import BrokerError, Producer, RecordMetadata, TopicAuthorizationError
from aioaccum._core.kafka_errors import Errors

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

REPO_ROOT = Path(__file__).resolve().parents[2]
# What the producer may wait: a failure well before this came from the refusal, not a timeout.
PATIENCE_MS = 120_000
# "Well before": a refusal is answered within milliseconds; this allows a loaded machine.
REFUSAL_BOUND_S = 10.0
READ_TIMEOUT_S = 60.0
TOPIC_LIMIT_BYTES = 1024  # max.message.bytes of the topic in the size test
SEGMENT_BYTES = 1024 * 1024  # the smallest segment.bytes a Kafka 4 topic takes
TIMESTAMP_WINDOW_MS = 60_000
HOUR_MS = 3_600_000
# The SASL user the ACLs name; the fixtures connect over PLAINTEXT as User:ANONYMOUS, a super
# user of the test cluster (scripts/kafka_security.py), whom no ACL stops.
MECHANISM = "SCRAM-SHA-512"

GOOD: dict[str, Any] = {"key": b"k", "value": b"accepted"}  # keyed: fit for a compacted topic


def patient(**overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "delivery_timeout_ms": PATIENCE_MS,
        "max_block_ms": PATIENCE_MS,
        "request_timeout_ms": 30_000,
        "linger_ms": 5,
    }
    settings.update(overrides)
    return settings


async def read_partition(bootstrap: str, topic: str, partition: int, expected: int) -> list[Any]:
    """The values in one partition, once ``expected`` are there (or READ_TIMEOUT_S passed),
    plus whatever a short poll after that finds."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[Any] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(values) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [r.value for r in records]
        for records in (await consumer.getmany(timeout_ms=300)).values():
            values += [r.value for r in records]
        return values
    finally:
        await consumer.stop()


async def refused_among_accepted(
    producer: Producer, topic: str, other_topic: str, bad: dict[str, Any]
) -> BrokerError:
    """Sends ``bad`` to partition 0 of ``topic``, with GOOD records around it to partition 1
    and to ``other_topic``, and one more to partition 0 once the refusal is in (its
    partition must not be wedged). Returns the refusal.

    Checks what every refusal must do: fail at once, without a retry, and fail nothing else.
    """
    started = time.monotonic()
    others = [
        await producer.send(topic, partition=1, **GOOD),
        await producer.send(other_topic, partition=0, **GOOD),
    ]
    refused = await producer.send(topic, partition=0, **bad)
    others += [
        await producer.send(topic, partition=1, **GOOD),
        await producer.send(other_topic, partition=0, **GOOD),
    ]
    with pytest.raises(BrokerError) as caught:
        await refused
    elapsed = time.monotonic() - started
    others.append(await producer.send(topic, partition=0, **GOOD))
    written = [await future for future in others]

    assert elapsed < REFUSAL_BOUND_S, f"{elapsed:.1f}s: the refusal was retried or waited out"
    assert not caught.value.retriable
    metrics = producer.metrics()
    assert metrics["record-retry-total"] == 0
    assert metrics["record-error-total"] == 1
    assert [(m.topic, m.partition) for m in written] == [
        (topic, 1),
        (other_topic, 0),
        (topic, 1),
        (other_topic, 0),
        (topic, 0),
    ]
    return caught.value


async def assert_only_accepted_in_log(bootstrap: str, topic: str) -> None:
    """Partition 0 holds the one record sent after the refusal, partition 1 both of its own."""
    assert await read_partition(bootstrap, topic, 0, 1) == [GOOD["value"]]
    assert await read_partition(bootstrap, topic, 1, 2) == [GOOD["value"]] * 2


# --- size ----------------------------------------------------------------------------------


async def test_a_record_over_the_topics_max_message_bytes_fails_at_once_naming_its_size(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=2, configs={"max.message.bytes": str(TOPIC_LIMIT_BYTES)})
    other = await topic_factory(partitions=1)
    record = b"x" * (4 * TOPIC_LIMIT_BYTES)  # far below max_request_size (1 MiB)
    async with Producer(bootstrap_servers=kafka_bootstrap, **patient()) as producer:
        error = await refused_among_accepted(producer, topic, other, {"value": record})

    assert type(error) is BrokerError
    assert error.errno == Errors.MESSAGE_TOO_LARGE
    message = str(error)
    assert message.startswith("MESSAGE_TOO_LARGE (error code 10): ")
    size = re.search(r"the batch of (\d+) bytes", message)
    assert size is not None, message
    assert int(size[1]) > len(record)
    assert f"raise max.message.bytes on topic {topic!r}" in message
    assert "cannot be split" in message
    await assert_only_accepted_in_log(kafka_bootstrap, topic)


async def test_a_record_over_the_topics_segment_bytes_fails_at_once_naming_its_size(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # max.message.bytes above segment.bytes lets the record past that check, so the segment
    # refuses it (RECORD_LIST_TOO_LARGE); max_request_size is raised so the producer does not.
    limits = {"max.message.bytes": str(4 * SEGMENT_BYTES), "segment.bytes": str(SEGMENT_BYTES)}
    topic = await topic_factory(partitions=2, configs=limits)
    other = await topic_factory(partitions=1)
    record = b"x" * (SEGMENT_BYTES + SEGMENT_BYTES // 2)
    settings = patient(max_request_size=4 * SEGMENT_BYTES)
    async with Producer(bootstrap_servers=kafka_bootstrap, **settings) as producer:
        error = await refused_among_accepted(producer, topic, other, {"value": record})

    assert type(error) is BrokerError
    assert error.errno == Errors.RECORD_LIST_TOO_LARGE
    message = str(error)
    size = re.search(r"the batch of (\d+) bytes", message)
    assert size is not None, message
    assert int(size[1]) > len(record)
    assert f"raise segment.bytes on topic {topic!r}" in message
    await assert_only_accepted_in_log(kafka_bootstrap, topic)


async def test_small_records_batched_with_an_oversized_one_are_written(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1, configs={"max.message.bytes": str(TOPIC_LIMIT_BYTES)})
    # A short delivery timeout, so that the failure this expects costs seconds.
    settings = patient(delivery_timeout_ms=4000, request_timeout_ms=3000, linger_ms=50)
    async with Producer(bootstrap_servers=kafka_bootstrap, **settings) as producer:
        small = [await producer.send(topic, b"s" * 100) for _ in range(3)]
        big = await producer.send(topic, b"B" * (2 * TOPIC_LIMIT_BYTES))  # < batch_size
        small += [await producer.send(topic, b"s" * 100) for _ in range(3)]
        outcomes = await asyncio.gather(*small, big, return_exceptions=True)
    assert all(isinstance(o, RecordMetadata) for o in outcomes[:-1]), outcomes
    refusal = outcomes[-1]
    assert isinstance(refusal, BrokerError), refusal
    assert refusal.errno == Errors.MESSAGE_TOO_LARGE


# --- content -------------------------------------------------------------------------------


async def test_a_keyless_record_on_a_compacted_topic_fails_at_once_asking_for_a_key(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=2, configs={"cleanup.policy": "compact"})
    other = await topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, **patient()) as producer:
        error = await refused_among_accepted(producer, topic, other, {"value": b"keyless"})

    assert type(error) is BrokerError
    assert error.errno == Errors.INVALID_RECORD
    message = str(error)
    assert message.startswith("INVALID_RECORD (error code 87): ")
    assert f"topic {topic!r}" in message
    assert "cleanup.policy=compact" in message
    assert "give every record a key" in message
    await assert_only_accepted_in_log(kafka_bootstrap, topic)


@pytest.mark.parametrize("offset_ms", [-HOUR_MS, HOUR_MS], ids=["past", "future"])
async def test_a_timestamp_outside_the_topics_window_fails_at_once(
    kafka_bootstrap: str, topic_factory: TopicFactory, offset_ms: int
) -> None:
    # Kafka 4's names; the older message.timestamp.difference.max.ms is gone, and a topic
    # created with an unknown setting would fail to create.
    window = {
        "message.timestamp.before.max.ms": str(TIMESTAMP_WINDOW_MS),
        "message.timestamp.after.max.ms": str(TIMESTAMP_WINDOW_MS),
    }
    topic = await topic_factory(partitions=2, configs=window)
    other = await topic_factory(partitions=1)
    stamp = time.time_ns() // 1_000_000 + offset_ms
    async with Producer(bootstrap_servers=kafka_bootstrap, **patient()) as producer:
        error = await refused_among_accepted(
            producer, topic, other, {"value": b"out of time", "timestamp_ms": stamp}
        )

    assert type(error) is BrokerError
    assert error.errno == Errors.INVALID_TIMESTAMP
    message = str(error)
    assert message.startswith("INVALID_TIMESTAMP (error code 32): ")
    assert f"topic {topic!r}" in message
    assert "message.timestamp.before.max.ms" in message
    assert "message.timestamp.after.max.ms" in message
    await assert_only_accepted_in_log(kafka_bootstrap, topic)


# --- authorization -------------------------------------------------------------------------


def sasl_settings(listener: dict[str, Any]) -> dict[str, Any]:
    user = listener["users"][MECHANISM]
    return patient(
        bootstrap_servers=listener["bootstrap"],
        security_protocol="SASL_SSL",
        ssl_context=ssl.create_default_context(cafile=listener["ca_file"]),
        sasl_mechanism=MECHANISM,
        sasl_plain_username=user["username"],
        sasl_plain_password=user["password"],
    )


def principal(listener: dict[str, Any]) -> str:
    return f"User:{listener['users'][MECHANISM]['username']}"


Grant = Callable[[str, Sequence[tuple[AclOperation, AclPermissionType]]], Awaitable[None]]


@pytest.fixture
async def acls(kafka_bootstrap: str, listener: dict[str, Any]) -> AsyncIterator[Grant]:
    """``await acls(topic, [(operation, permission), ...])`` adds ACLs for the SASL user on
    one topic; they are deleted after the test (a deleted topic keeps its ACLs)."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    added: list[AclBinding] = []

    def create(bindings: list[AclBinding]) -> None:
        for future in admin.create_acls(bindings).values():
            future.result(timeout=60)

    async def grant(topic: str, rules: Sequence[tuple[AclOperation, AclPermissionType]]) -> None:
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                principal(listener),
                "*",
                operation,
                permission,
            )
            for operation, permission in rules
        ]
        await asyncio.to_thread(create, bindings)
        added.extend(bindings)

    def delete() -> None:
        filters = [
            AclBindingFilter(
                b.restype,
                b.name,
                b.resource_pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission_type,
            )
            for b in added
        ]
        for future in admin.delete_acls(filters).values():
            future.result(timeout=60)

    try:
        yield grant
    finally:
        if added:
            await asyncio.to_thread(delete)


async def test_a_topic_the_user_may_not_write_fails_the_record_at_once(
    listener: dict[str, Any], topic_factory: TopicFactory, acls: Grant
) -> None:
    # DESCRIBE allowed, so the metadata comes and the produce request is what is refused.
    topic = await topic_factory(partitions=1)
    other = await topic_factory(partitions=1)
    await acls(
        topic,
        [
            (AclOperation.WRITE, AclPermissionType.DENY),
            (AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ],
    )
    async with Producer(**sasl_settings(listener)) as producer:
        started = time.monotonic()
        before = await producer.send(other, b"before")
        refused = await producer.send(topic, b"denied")
        after = await producer.send(other, b"after")
        with pytest.raises(TopicAuthorizationError) as caught:
            await refused
        elapsed = time.monotonic() - started
        written = [await before, await after]
        metrics = producer.metrics()

    assert elapsed < REFUSAL_BOUND_S, f"{elapsed:.1f}s: the refusal was retried or waited out"
    error = caught.value
    assert isinstance(error, BrokerError)
    assert (error.errno, error.retriable) == (Errors.TOPIC_AUTHORIZATION_FAILED, False)
    assert f"not authorized to write to topic {topic!r}" in str(error)
    assert metrics["record-retry-total"] == 0
    assert metrics["record-error-total"] == 1
    assert [(m.topic, m.offset) for m in written] == [(other, 0), (other, 1)]


async def test_a_topic_the_user_may_not_describe_fails_the_send_at_once(
    listener: dict[str, Any], topic_factory: TopicFactory, acls: Grant
) -> None:
    # Every operation denied: the metadata request already refuses the topic, and send()
    # must say so rather than wait max_block_ms for partitions that will never come.
    topic = await topic_factory(partitions=1)
    other = await topic_factory(partitions=1)
    await acls(topic, [(AclOperation.ALL, AclPermissionType.DENY)])
    async with Producer(**sasl_settings(listener)) as producer:
        started = time.monotonic()
        with pytest.raises(TopicAuthorizationError) as caught:
            await producer.send(topic, b"denied")
        elapsed = time.monotonic() - started
        written = await (await producer.send(other, b"open"))

    assert elapsed < REFUSAL_BOUND_S, f"{elapsed:.1f}s: waited for max_block_ms"
    error = caught.value
    assert (error.errno, error.retriable) == (Errors.TOPIC_AUTHORIZATION_FAILED, False)
    assert f"not authorized to write to topic {topic!r}" in str(error)
    assert (written.topic, written.offset) == (other, 0)
