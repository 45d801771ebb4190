"""Bad input against the fake broker: a typed error that says what to do, and no loss.

Each case first sends good records, then the bad one, and checks that the bad one was refused
before it touched the buffer pool and that the good ones are still delivered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioaccum import ConfigError, ProducerClosedError, ProducerTimeoutError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum.errors import RecordTooLargeError, SerializationError
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

TOPIC = "t"
GOOD = [b"good-%d" % i for i in range(5)]
MAX_REQUEST_SIZE = 2000
INT64_MAX = 2**63 - 1


def make(**settings: Any) -> tuple[Producer, FakeKafka]:
    fake = FakeKafka(StaticCluster.uniform({TOPIC: 3}, nodes=3))
    settings.setdefault("max_request_size", MAX_REQUEST_SIZE)
    return Producer("fake:9092", kafka=fake, **settings), fake


def delivered(fake: FakeKafka) -> list[bytes | None]:
    return sorted((r.value for log in fake.log.values() for r in log), key=lambda v: v or b"")


async def refused_after_good_records(
    producer: Producer, fake: FakeKafka, error: type[Exception], **send: Any
) -> str:
    """Send GOOD, then the bad record; return the bad one's message once GOOD arrived."""
    futures = [await producer.send(TOPIC, value, partition=i % 3) for i, value in enumerate(GOOD)]
    pool = producer.pool
    assert pool is not None
    before = pool.statistics()
    send.setdefault("topic", TOPIC)
    with pytest.raises(error) as caught:
        await producer.send(**send)
    after = pool.statistics()
    # The sender may free memory meanwhile; nothing may have been taken from the pool.
    assert (after.allocations, after.queued_allocations, after.waiters) == (
        before.allocations,
        before.queued_allocations,
        0,
    ), "the refused record touched the buffer pool"
    assert after.allocated <= before.allocated
    await producer.flush()
    assert [f.result().offset >= 0 for f in futures] == [True] * len(GOOD)
    assert delivered(fake) == GOOD
    return str(caught.value)


BAD_SENDS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    (
        "str value",
        {"value": "text"},
        SerializationError,
        "value must be bytes or None, got str; encode it to bytes first, or pass "
        "value_serializer= to the Producer (e.g. value_serializer=str.encode); a serializer "
        "must return bytes or None",
    ),
    (
        "dict value",
        {"value": {"a": 1}},
        SerializationError,
        "value must be bytes or None, got dict; encode it to bytes first, or pass "
        "value_serializer= to the Producer; a serializer must return bytes or None",
    ),
    (
        "int key",
        {"value": b"v", "key": 7},
        SerializationError,
        "key must be bytes or None, got int; encode it to bytes first, or pass key_serializer=",
    ),
    (
        "record above max_request_size",
        {"value": b"x" * MAX_REQUEST_SIZE},
        RecordTooLargeError,
        f"bytes serialized, larger than max_request_size={MAX_REQUEST_SIZE}; raise "
        "max_request_size",
    ),
    ("empty topic", {"topic": ""}, ConfigError, "topic must be a non-empty str, got ''"),
    ("None topic", {"topic": None}, ConfigError, "topic must be a non-empty str, got None"),
    ("bytes topic", {"topic": b"t"}, ConfigError, "topic must be a non-empty str, got b't'"),
    ("topic of 250 chars", {"topic": "a" * 250}, ConfigError, "use 1 to 249 characters"),
    ("topic with a space", {"topic": "a b"}, ConfigError, "invalid topic name 'a b': use 1 to"),
    ("topic with a slash", {"topic": "a/b"}, ConfigError, "from [a-zA-Z0-9._-]"),
    ("topic '.'", {"topic": "."}, ConfigError, "invalid topic name '.': use 1 to 249"),
    ("topic '..'", {"topic": ".."}, ConfigError, "not '.' or '..'"),
    (
        "negative timestamp",
        {"value": b"v", "timestamp_ms": -1},
        ConfigError,
        f"timestamp_ms must be an int in 0..{INT64_MAX} (ms since the epoch), got -1",
    ),
    (
        "timestamp above int64",
        {"value": b"v", "timestamp_ms": INT64_MAX + 1},
        ConfigError,
        f"got {INT64_MAX + 1}",
    ),
    ("float timestamp", {"value": b"v", "timestamp_ms": 1.5}, ConfigError, "got 1.5"),
    ("bool timestamp", {"value": b"v", "timestamp_ms": True}, ConfigError, "got True"),
    (
        "header name not str",
        {"value": b"v", "headers": [(1, b"v")]},
        SerializationError,
        "header #0 name must be str, got int",
    ),
    (
        "header name bytes",
        {"value": b"v", "headers": [("ok", b""), (b"k", b"v")]},
        SerializationError,
        "header #1 name must be str, got bytes; decode it to str",
    ),
    (
        "header name not UTF-8",
        {"value": b"v", "headers": [("\ud800", b"v")]},
        SerializationError,
        "header #0 name '\\ud800' cannot be encoded as UTF-8: surrogates not allowed",
    ),
    (
        "header value str",
        {"value": b"v", "headers": [("k", "v")]},
        SerializationError,
        "header 'k' value must be bytes or None, got str; encode it to bytes first (e.g. "
        "value.encode())",
    ),
    (
        "header value int",
        {"value": b"v", "headers": [("k", 5)]},
        SerializationError,
        "header 'k' value must be bytes or None, got int; encode it to bytes first",
    ),
    (
        "header not a pair",
        {"value": b"v", "headers": [("k",)]},
        SerializationError,
        "header #0 must be a (str, bytes) pair, got ('k',)",
    ),
    (
        "headers as a dict",
        {"value": b"v", "headers": {"k": b"v"}},
        SerializationError,
        "headers must be a sequence of (str, bytes) pairs, got dict (list(headers.items()) "
        "turns a dict into pairs)",
    ),
    (
        "headers as a str",
        {"value": b"v", "headers": "k=v"},
        SerializationError,
        "headers must be a sequence of (str, bytes) pairs, got str",
    ),
    (
        "headers as an int",
        {"value": b"v", "headers": 5},
        SerializationError,
        "headers must be a sequence of (str, bytes) pairs, got int",
    ),
    (
        "partition out of range",
        {"value": b"v", "partition": 3},
        ConfigError,
        "partition 3 is not a partition of topic 't', which has partitions 0..2",
    ),
    ("partition True", {"value": b"v", "partition": True}, ConfigError, "partition True is not"),
    ("partition float", {"value": b"v", "partition": 1.0}, ConfigError, "partition 1.0 is not"),
]


@pytest.mark.parametrize(
    ("send", "error", "message"),
    [pytest.param(send, error, message, id=name) for name, send, error, message in BAD_SENDS],
)
async def test_bad_record_is_refused_and_good_ones_still_arrive(
    send: dict[str, Any], error: type[Exception], message: str
) -> None:
    producer, fake = make(linger_ms=5)
    async with producer:
        text = await refused_after_good_records(producer, fake, error, **send)
    assert message in text


async def test_record_above_buffer_memory_is_refused_before_the_pool() -> None:
    producer, fake = make(buffer_memory=4096, batch_size=1024, max_request_size=1_000_000)
    async with producer:
        text = await refused_after_good_records(
            producer, fake, RecordTooLargeError, value=b"x" * 5000
        )
    assert text.endswith("bytes serialized, larger than buffer_memory=4096; raise buffer_memory")


async def test_serializer_returning_the_wrong_type_says_so() -> None:
    producer, fake = make(value_serializer=json.dumps)  # a str, where bytes are needed
    async with producer:
        with pytest.raises(SerializationError) as caught:
            await producer.send(TOPIC, {"a": 1})
        pool = producer.pool
        assert pool is not None
        assert pool.statistics().allocations == 0
    assert "got str" in str(caught.value)
    assert "a serializer must return bytes or None" in str(caught.value)
    assert delivered(fake) == []


async def test_missing_topic_fails_within_max_block_ms_and_good_records_arrive() -> None:
    producer, fake = make(max_block_ms=1500)
    async with producer:
        loop = asyncio.get_running_loop()
        futures = [await producer.send(TOPIC, value) for value in GOOD]
        start = loop.time()
        with pytest.raises(ProducerTimeoutError, match="'no-such-topic' not present in metadata"):
            await producer.send("no-such-topic", b"v")
        assert loop.time() - start <= 1.5 + 0.01
        await asyncio.gather(*futures)
    assert delivered(fake) == GOOD


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("linger_msec", "linger_ms"),
        ("LINGER_MS", "linger_ms"),
        ("lingerMs", "linger_ms"),
        ("LINGER_MS_CONFIG", "linger_ms"),
        ("bufer_memory", "buffer_memory"),
        ("max_in_flight", "max_in_flight_requests_per_connection"),
        ("max_batch_size", "batch_size"),
    ],
)
def test_misspelled_setting_suggests_the_close_match(name: str, suggestion: str) -> None:
    settings: dict[str, Any] = {name: 5}
    with pytest.raises(ConfigError) as caught:
        Producer("fake:9092", **settings)
    assert str(caught.value) == f"unknown setting {name!r}; did you mean {suggestion!r}?"


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("linger.msec", "linger.ms"),
        ("LINGER.MS", "linger.ms"),
        ("batch.sizes", "batch.size"),
        ("max.in.flight", "max.in.flight.requests.per.connection"),
        ("enable.idempotency", "enable.idempotence"),
        ("bootstrap.server", "bootstrap.servers"),
    ],
)
def test_misspelled_java_property_suggests_the_close_match(name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Producer.from_properties({"bootstrap.servers": "fake:9092", name: "5"})
    assert str(caught.value) == f"unknown setting {name!r}; did you mean {suggestion!r}?"


async def test_send_after_close_and_before_start() -> None:
    producer, fake = make()
    with pytest.raises(ProducerClosedError, match=r"call await producer\.start"):
        await producer.send(TOPIC, b"early")
    async with producer:
        future = await producer.send(TOPIC, b"in time")
    with pytest.raises(ProducerClosedError, match="the producer is closed"):
        await producer.send(TOPIC, b"late")
    assert (await future).offset == 0
    assert delivered(fake) == [b"in time"]


async def test_flush_scheduled_from_a_done_callback_completes() -> None:
    producer, fake = make(linger_ms=50)
    flushes: list[asyncio.Future[None]] = []
    async with producer:
        futures = [await producer.send(TOPIC, value) for value in GOOD]
        for future in futures:
            future.add_done_callback(lambda _: flushes.append(asyncio.ensure_future(
                producer.flush()
            )))
        await asyncio.gather(*futures)
        await asyncio.wait_for(asyncio.gather(*flushes), timeout=5)
    assert len(flushes) == len(GOOD)
    assert all(f.done() and f.exception() is None for f in flushes)
    assert delivered(fake) == GOOD


@dataclass
class FlushingKafka(FakeKafka):
    """An adapter whose code calls back into the producer while the sender runs it."""

    producer: Producer | None = None
    errors: list[BaseException] = field(default_factory=list)
    spawned: list[asyncio.Task[None]] = field(default_factory=list)

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        assert self.producer is not None
        for call in (self.producer.flush, self.producer.close):
            try:
                await call()
            except RuntimeError as exc:
                self.errors.append(exc)
        # A task started here is not the sender: it may wait for the sender.
        self.spawned.append(asyncio.ensure_future(self.producer.flush()))
        return await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)


async def test_flush_or_close_from_inside_the_sender_is_an_error_not_a_deadlock() -> None:
    fake = FlushingKafka(StaticCluster.uniform({TOPIC: 1}, nodes=1))
    producer = Producer("fake:9092", kafka=fake, linger_ms=0)
    fake.producer = producer
    async with producer:
        futures = [await producer.send(TOPIC, value) for value in GOOD]
        await asyncio.wait_for(asyncio.gather(*futures, *fake.spawned), timeout=5)
        await asyncio.wait_for(asyncio.gather(*fake.spawned), timeout=5)
    assert fake.errors, "the adapter never ran"
    assert {str(e).split("()")[0] for e in fake.errors} == {
        "producer.flush",
        "producer.close",
    }
    assert "would wait for that task itself: a deadlock" in str(fake.errors[0])
    assert delivered(fake) == GOOD


async def test_cancelling_the_wait_for_a_future_does_not_cancel_the_record() -> None:
    producer, fake = make(linger_ms=100)
    async with producer:
        dropped = await producer.send(TOPIC, b"dropped wait")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(dropped, timeout=0.01)
        kept = await producer.send(TOPIC, b"shielded wait")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(kept), timeout=0.01)
        await producer.flush()
        assert dropped.cancelled()
        assert kept.result().offset >= 0
    assert delivered(fake) == [b"dropped wait", b"shielded wait"]
