"""ProducerCollector in prometheus_client's real registry, read back from the text format."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from aioaccum._core.cluster import StaticCluster
from aioaccum._core.metrics import PRODUCER_METRICS, TOPIC_METRICS
from aioaccum.producer import Producer
from aioaccum.prometheus import ProducerCollector
from aioaccum.sync import SyncProducer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime


def make(client_id: str, **settings: Any) -> Producer:
    fake = FakeKafka(StaticCluster.uniform({"a": 2, "b": 1}, nodes=2))
    return Producer("fake:9092", kafka=fake, client_id=client_id, linger_ms=5, **settings)


def scrape(*producers: Producer) -> dict[str, Metric]:
    registry = CollectorRegistry()
    registry.register(ProducerCollector(*producers))
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family: Metric) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


async def send(producer: Producer, topic: str, count: int) -> None:
    await asyncio.gather(*[await producer.send(topic, b"v") for _ in range(count)])


async def test_record_send_total_is_a_counter_of_the_records_sent() -> None:
    producer = make("svc-1")
    async with producer:
        await send(producer, "a", 7)
        await send(producer, "b", 5)
        families = scrape(producer)
    total = families["kafka_producer_record_send"]
    assert total.type == "counter"
    [sample] = total.samples
    assert (sample.name, sample.labels, sample.value) == (
        "kafka_producer_record_send_total", {"client_id": "svc-1"}, 12.0
    )
    per_topic = families["kafka_producer_topic_record_send"]
    assert per_topic.type == "counter"
    assert samples(per_topic) == {
        (("client_id", "svc-1"), ("topic", "a")): 7.0,
        (("client_id", "svc-1"), ("topic", "b")): 5.0,
    }
    assert families["kafka_producer_record_send_rate"].type == "gauge"
    assert families["kafka_producer_topic_byte"].type == "counter"
    assert families["kafka_producer_bufferpool_wait_time_ns"].type == "counter"
    assert families["kafka_producer_waiting_threads"].type == "gauge"


async def test_every_metric_is_exposed_once_with_its_description() -> None:
    producer = make("svc-1")
    async with producer:
        await send(producer, "a", 3)
        families = scrape(producer)
        values = producer.metric_values()
    expected = {
        f"kafka_producer_{name.replace('-', '_').removesuffix('_total')}"
        for name in PRODUCER_METRICS
    } | {
        f"kafka_producer_topic_{name.replace('-', '_').removesuffix('_total')}"
        for name in TOPIC_METRICS
    }
    assert set(families) == expected
    assert sum(len(f.samples) for f in families.values()) == len(values)
    assert families["kafka_producer_record_send"].documentation == (
        PRODUCER_METRICS["record-send-total"]
    )


async def test_one_collector_shows_several_producers_by_client_id() -> None:
    first, second = make("svc-1"), make("svc-2")
    async with first, second:
        await send(first, "a", 2)
        await send(second, "a", 3)
        families = scrape(first, second)
    assert samples(families["kafka_producer_record_send"]) == {
        (("client_id", "svc-1"),): 2.0,
        (("client_id", "svc-2"),): 3.0,
    }


async def test_a_producer_not_started_shows_nothing() -> None:
    assert scrape(make("idle")) == {}


def test_a_collector_needs_a_producer() -> None:
    with pytest.raises(TypeError, match="at least one producer"):
        ProducerCollector()


def test_a_sync_producer_is_collected_open_and_after_close() -> None:
    kafka = FakeKafka(StaticCluster.uniform({"a": 2, "b": 1}, nodes=2))
    producer = SyncProducer("fake:9092", kafka=kafka, client_id="sync-1", linger_ms=1)
    registry = CollectorRegistry()
    registry.register(ProducerCollector(producer))
    try:
        for future in [producer.send("b", b"v") for _ in range(6)]:
            future.result(30)

        def sent() -> dict[tuple[tuple[str, str], ...], float]:
            text = generate_latest(registry).decode()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            return samples(families["kafka_producer_topic_record_send"])

        assert sent() == {(("client_id", "sync-1"), ("topic", "b")): 6.0}
    finally:
        producer.close()
    assert sent() == {(("client_id", "sync-1"), ("topic", "b")): 6.0}  # the last values
