"""Producer.send_records (records for several topics, one future) and SyncProducer's bulk sends,
against a fake broker adapter."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from aioaccum import ConfigError, ProducerClosedError, SerializationError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._runtime.many import ManyOutcomes
from aioaccum._runtime.send_records import JoinedOutcomes, cut_runs
from aioaccum.errors import TopicAuthorizationError
from aioaccum.interceptors import ProducerRecord
from aioaccum.producer import Producer
from aioaccum.sync import SyncProducer

from .fake_kafka import FakeKafka
from .test_sync import Gate

pytestmark = pytest.mark.looptime


def make(**settings: Any) -> tuple[Producer, FakeKafka]:
    fake = FakeKafka(StaticCluster.uniform({"a": 3, "b": 2, "c": 1}, nodes=3))
    settings.setdefault("linger_ms", 5)
    return Producer("fake:9092", kafka=fake, **settings), fake


@dataclasses.dataclass
class MyRecord:
    topic: str
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes | None]] | None = None


def stored(fake: FakeKafka, topic: str, partition: int, offset: int) -> Any:
    return fake.log[TopicPartition(topic, partition)][offset]


async def test_records_for_several_topics_come_back_in_input_order() -> None:
    producer, fake = make()
    records: list[Any] = []
    for i in range(300):
        topic = "abc"[i % 3]
        headers = [("n", b"%d" % i)] if i % 2 else None
        records.append((topic, b"v%d" % i, b"k%d" % (i % 5), None, None, headers))
    async with producer:
        results = await (await producer.send_records(records))
    assert isinstance(results, JoinedOutcomes)
    assert len(results) == 300
    for i, metadata in enumerate(results):
        topic, value, key, _, _, headers = records[i]
        assert metadata.topic == topic
        record = stored(fake, topic, metadata.partition, metadata.offset)
        assert (record.key, record.value) == (key, value)
        assert record.headers == (headers or [])
    assert results[-1] == list(results)[-1]
    assert results[10:12] == [results[10], results[11]]


async def test_tuples_producer_records_and_dataclasses_mix() -> None:
    producer, fake = make()
    records: list[Any] = [
        ("a", b"tuple"),
        ProducerRecord("b", b"producer-record", key=b"k", partition=1, headers=[("h", b"1")]),
        MyRecord("c", b"dataclass", timestamp_ms=1_700_000_000_000),
        ("a", b"full", b"key", 2, 1_700_000_000_001, [("x", None)]),
    ]
    async with producer:
        results = await (await producer.send_records(records))
    assert [m.topic for m in results] == ["a", "b", "c", "a"]
    assert results[1].partition == 1
    assert stored(fake, "b", 1, results[1].offset).headers == [("h", b"1")]
    assert results[2].timestamp == 1_700_000_000_000
    last = stored(fake, "a", 2, results[3].offset)
    assert (last.key, last.value, last.timestamp, last.headers) == (
        b"key", b"full", 1_700_000_000_001, [("x", None)]
    )


def test_consecutive_records_that_share_topic_partition_and_time_make_one_run() -> None:
    records: list[Any] = [("a", b"1"), ("a", b"2", b"k"), ("b", b"3"), ("b", b"4"), ("a", b"5")]
    runs = cut_runs(records)
    assert [(r.topic, r.first, r.values) for r in runs] == [
        ("a", 0, [b"1", b"2"]),
        ("b", 2, [b"3", b"4"]),
        ("a", 4, [b"5"]),
    ]
    assert runs[0].keys == [None, b"k"]
    assert runs[1].keys is None  # no key at all: send_many keeps its bulk path
    assert runs[1].headers is None
    partitions = cut_runs([("a", b"1", None, 0), ("a", b"2", None, 1), ("a", b"3", None, 1)])
    assert [len(r.values) for r in partitions] == [1, 2]


async def test_one_topic_is_exactly_send_many() -> None:
    producer, _ = make()
    async with producer:
        future = await producer.send_records(("a", b"%d" % i) for i in range(50))
        results = await future
    assert isinstance(results, ManyOutcomes)
    assert len(results) == 50


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (("a",), ConfigError),
        (("a", b"v", None, None, None, None, "extra"), ConfigError),
        (("bad topic!", b"v"), ConfigError),
        (("a", b"v", None, "0"), ConfigError),
        (("a", b"v", None, None, -5), ConfigError),
        (("a", b"v", None, None, None, [("h", "not bytes")]), SerializationError),
        (object(), ConfigError),
    ],
)
async def test_a_malformed_record_refuses_the_whole_call(bad: Any, error: type[Exception]) -> None:
    producer, fake = make()
    async with producer:
        with pytest.raises(error, match=r"record #2|topic|header"):
            await producer.send_records([("a", b"1"), ("b", b"2"), bad])
        assert producer.pending_records() == 0
    assert not fake.log


async def test_the_future_fails_with_the_first_failed_runs_error() -> None:
    producer, fake = make(retries=0)
    fake.script.append({TopicPartition("c", 0): Errors.TOPIC_AUTHORIZATION_FAILED})
    async with producer:
        future = await producer.send_records([("a", b"1", None, 0), ("c", b"2"), ("b", b"3")])
        with pytest.raises(TopicAuthorizationError):
            await future
    assert len(fake.log[TopicPartition("a", 0)]) == 1  # the other runs were still delivered


async def test_no_records_is_an_empty_result_and_needs_a_started_producer() -> None:
    producer, _ = make()
    with pytest.raises(ProducerClosedError):
        await producer.send_records([])
    async with producer:
        assert list(await (await producer.send_records([]))) == []


async def test_a_serializer_error_in_a_later_run_says_what_was_buffered() -> None:
    def serialize(value: Any) -> bytes:
        if value == "boom":
            raise ValueError("cannot serialize")
        return str(value).encode()

    producer, _ = make(value_serializer=serialize)
    async with producer:
        with pytest.raises(ValueError, match="cannot serialize") as caught:
            await producer.send_records([("a", "1"), ("a", "2"), ("b", "boom")])
        assert any("#0..#1" in note for note in caught.value.__notes__)
        await producer.flush()


# --- SyncProducer


def sync_fake() -> FakeKafka:
    return FakeKafka(StaticCluster.uniform({"a": 3, "b": 2}, nodes=3))


def test_sync_send_many_takes_shared_and_per_record_headers() -> None:
    kafka = sync_fake()
    values = [b"v%d" % i for i in range(20)]
    each = [[("i", b"%d" % i)] if i % 3 else None for i in range(20)]
    with SyncProducer("fake:9092", kafka=kafka, linger_ms=1) as producer:
        future = producer.send_many(
            "a", values, keys=[b"k"] * 20, headers=[("app", b"x")], record_headers=each
        )
        results = future.result(30)
    assert len(results) == 20
    for i, metadata in enumerate(results):
        record = kafka.log[TopicPartition("a", metadata.partition)][metadata.offset]
        assert record.value == values[i]
        assert record.headers == [("app", b"x"), *(each[i] or [])]


def test_sync_send_records_and_its_errors() -> None:
    kafka = sync_fake()
    with SyncProducer("fake:9092", kafka=kafka, linger_ms=1) as producer:
        results = producer.send_records(
            [("a", b"1", None, None, None, [("h", b"1")]), ("b", b"2")]
        ).result(30)
        assert [m.topic for m in results] == ["a", "b"]
        with pytest.raises(ConfigError, match="keys for 1 values"):
            producer.send_many("a", [b"1"], keys=[b"1", b"2"])
    with pytest.raises(ProducerClosedError):
        producer.send_many("a", [b"1"])
    record = kafka.log[TopicPartition("a", results[0].partition)][results[0].offset]
    assert record.headers == [("h", b"1")]


def test_sync_bulk_sends_refuse_the_loop_thread() -> None:
    kafka = sync_fake()
    with SyncProducer("fake:9092", kafka=kafka, linger_ms=1) as producer:
        errors: list[BaseException] = []

        def on_done(_: Any) -> None:
            try:
                producer.send_many("a", [b"2"])
            except RuntimeError as exc:
                errors.append(exc)

        producer.send("a", b"1").add_done_callback(on_done)
        producer.flush(30)
    assert errors, "the callback ran on the loop thread and was refused"
    assert "loop thread" in str(errors[0])


def test_sync_future_cancelled_by_its_caller_does_not_stop_delivery() -> None:
    kafka = sync_fake()
    kafka.gate = held = Gate()
    with SyncProducer("fake:9092", kafka=kafka, linger_ms=1) as producer:
        assert producer.send_many("a", [b"1", b"2"], partition=0).cancel()
        held.open()
        producer.flush(30)
    assert len(kafka.log[TopicPartition("a", 0)]) == 2
