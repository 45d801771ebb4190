"""The producer's metrics as the sender records them, against a fake broker on a fast-forwarded
loop clock: per-topic counts, windows set by the settings, latency, throttle and queue time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from aioaccum import BrokerError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.metrics import TOPIC_GROUP
from aioaccum._kafka.adapter import PartitionResponse, ProduceAnswers
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

CLUSTER = {"a": 2, "b": 1}


@dataclass
class SlowKafka(FakeKafka):
    """Answers each request after ``delay`` seconds, saying it was throttled ``throttle_ms``."""

    delay: float = 0.0
    throttle_ms: int = 0

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        await asyncio.sleep(self.delay)
        answers = ProduceAnswers(
            await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)
        )
        answers.throttle_time_ms = self.throttle_ms
        return answers


def make(fake: FakeKafka | None = None, **settings: Any) -> tuple[Producer, FakeKafka]:
    fake = fake or FakeKafka(StaticCluster.uniform(CLUSTER, nodes=2))
    settings.setdefault("linger_ms", 5)
    settings.setdefault("client_id", "metrics-test")
    return Producer("fake:9092", kafka=fake, **settings), fake


def per_topic(producer: Producer) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for value in producer.metric_values():
        if value.group == TOPIC_GROUP:
            assert value.tags["client-id"] == "metrics-test"
            out.setdefault(value.tags["topic"], {})[value.name] = value.value
    return out


async def test_records_and_bytes_are_counted_per_topic() -> None:
    producer, fake = make()
    async with producer:
        assert per_topic(producer) == {}
        futures = [await producer.send("a", b"x" * 10) for _ in range(7)]
        futures += [await producer.send("b", b"y" * 10) for _ in range(5)]
        await asyncio.gather(*futures)
        topics = per_topic(producer)
        flat = producer.metrics()
    assert sorted(topics) == ["a", "b"]
    assert (topics["a"]["record-send-total"], topics["b"]["record-send-total"]) == (7, 5)
    assert flat["record-send-total"] == 12
    assert topics["a"]["byte-total"] > 7 * 10
    assert topics["a"]["byte-total"] + topics["b"]["byte-total"] == flat["byte-total"]
    assert flat["request-total"] == len(fake.requests)
    assert flat["records-per-request-avg"] == pytest.approx(12 / len(fake.requests))
    assert flat["batch-size-max"] >= flat["batch-size-avg"] > 0
    assert topics["a"]["compression-rate"] == 1.0  # no codec: the batch's size as it is
    assert (topics["a"]["record-error-total"], topics["a"]["record-retry-total"]) == (0, 0)


async def test_retries_and_errors_land_on_their_topic() -> None:
    producer, fake = make(linger_ms=0, retry_backoff_ms=10)
    fake.script.append({TopicPartition("a", 0): Errors.NOT_LEADER_OR_FOLLOWER})
    async with producer:
        await (await producer.send("a", b"1", partition=0))
        fake.script.append({TopicPartition("b", 0): Errors.INVALID_REQUIRED_ACKS})
        with pytest.raises(BrokerError):
            await (await producer.send("b", b"2", partition=0))
        topics = per_topic(producer)
        flat = producer.metrics()
    assert topics["a"]["record-retry-total"] == 1
    assert topics["a"]["record-send-total"] == 1
    assert topics["b"]["record-error-total"] == 1
    assert topics["b"]["record-send-total"] == 0
    assert (flat["record-retry-total"], flat["record-error-total"]) == (1, 1)


async def test_metrics_off_keeps_the_lifetime_totals_and_live_gauges_only() -> None:
    producer, fake = make(metrics_enabled=False, linger_ms=0, retry_backoff_ms=10)
    fake.script.append({TopicPartition("a", 0): Errors.NOT_LEADER_OR_FOLLOWER})
    async with producer:
        await (await producer.send("a", b"1", partition=0))
        fake.script.append({TopicPartition("b", 0): Errors.INVALID_REQUIRED_ACKS})
        with pytest.raises(BrokerError):
            await (await producer.send("b", b"2", partition=0))
        await asyncio.gather(*[await producer.send("a", b"x" * 10) for _ in range(5)])
        flat = producer.metrics()
        values = producer.metric_values()
    assert per_topic(producer) == {}
    assert {v.group for v in values} == {"producer-metrics"}
    assert {v.name for v in values} == set(flat)
    assert (flat["record-send-total"], flat["record-retry-total"]) == (6, 1)
    assert flat["record-error-total"] == 1
    assert flat["request-total"] == len(fake.requests)
    assert flat["byte-total"] > 6 * 10
    assert flat["buffer-available-bytes"] == flat["buffer-total-bytes"] > 0
    windowed = {"record-send-rate", "request-latency-avg", "batch-size-avg", "byte-rate"}
    assert not windowed & set(flat)
    assert {name for name in flat if not name.endswith("-total")} == {
        "requests-in-flight", "buffer-total-bytes", "buffer-available-bytes", "waiting-threads"
    }


async def test_rates_follow_the_window_settings_and_totals_stay() -> None:
    producer, _ = make(metrics_sample_window_ms=1000, metrics_num_samples=2)
    async with producer:
        await asyncio.gather(*[await producer.send("a", b"v") for _ in range(10)])
        flat = producer.metrics()
        # A first sample less than a second old, plus one window: 10 records over about 1 s.
        assert 9 <= flat["record-send-rate"] <= 10
        assert per_topic(producer)["a"]["record-send-rate"] == flat["record-send-rate"]
        await asyncio.sleep(2.0)  # two windows: the samples expire
        flat = producer.metrics()
        assert flat["record-send-rate"] == 0.0
        assert flat["batch-size-avg"] == 0.0
        assert flat["record-send-total"] == 10


async def test_default_windows_are_java_s_thirty_seconds_twice() -> None:
    producer, _ = make()
    async with producer:
        await asyncio.gather(*[await producer.send("a", b"v") for _ in range(30)])
        await asyncio.sleep(50.0)
        # 50 s after one sample began: still measured (cleared only 60 s after its last value).
        assert producer.metrics()["record-send-rate"] == pytest.approx(30 / 50, rel=0.01)
        await asyncio.sleep(10.0)
        assert producer.metrics()["record-send-rate"] == 0.0


async def test_request_latency_throttle_and_queue_time_in_ms() -> None:
    fake = SlowKafka(StaticCluster.uniform(CLUSTER, nodes=2), delay=0.020, throttle_ms=50)
    producer, _ = make(fake, linger_ms=30)
    async with producer:
        await asyncio.gather(*[await producer.send("a", b"v", partition=0) for _ in range(3)])
        flat = producer.metrics()
    assert flat["request-latency-avg"] == pytest.approx(20, abs=2)
    assert flat["request-latency-max"] == pytest.approx(20, abs=2)
    assert (flat["produce-throttle-time-avg"], flat["produce-throttle-time-max"]) == (50, 50)
    assert flat["record-queue-time-max"] == pytest.approx(30, abs=2)  # the linger


async def test_metrics_can_be_read_from_another_thread() -> None:
    producer, _ = make()
    async with producer:
        await asyncio.gather(*[await producer.send("b", b"v") for _ in range(4)])
        values = await asyncio.to_thread(producer.metric_values)
        flat = await asyncio.to_thread(producer.metrics)
    assert flat["record-send-total"] == 4
    assert {(v.name, v.tags.get("topic")) for v in values} >= {
        ("record-send-total", None),
        ("record-send-total", "b"),
    }


async def test_no_metrics_before_start() -> None:
    producer, _ = make()
    assert producer.metrics() == {}
    assert producer.metric_values() == []
