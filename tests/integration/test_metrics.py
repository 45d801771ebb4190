"""The producer's metrics against a real cluster: per-topic counts and bytes, the request and
queue times the sender measured, and the same numbers through Prometheus' text format."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import TYPE_CHECKING

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aioaccum._core.metrics import TOPIC_GROUP
from aioaccum.producer import Producer
from aioaccum.prometheus import ProducerCollector

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]


async def test_per_topic_metrics_count_what_each_topic_received(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    orders = await topic_factory(partitions=3)
    clicks = await topic_factory(partitions=1)
    client_id = f"aioaccum-metrics-{uuid.uuid4().hex[:8]}"
    async with Producer(
        kafka_bootstrap, client_id=client_id, linger_ms=5, compression_type="lz4"
    ) as producer:
        sends = [await producer.send(orders, b"order %06d " % i * 20) for i in range(300)]
        sends += [await producer.send(clicks, os.urandom(100)) for _ in range(120)]
        await asyncio.gather(*sends)
        values = producer.metric_values()
        flat = producer.metrics()
        registry = CollectorRegistry()
        registry.register(ProducerCollector(producer))
        text = generate_latest(registry).decode()

    topics: dict[str, dict[str, float]] = {}
    for value in values:
        if value.group == TOPIC_GROUP:
            assert value.tags["client-id"] == client_id
            topics.setdefault(value.tags["topic"], {})[value.name] = value.value
    assert sorted(topics) == sorted([orders, clicks])
    assert topics[orders]["record-send-total"] == 300
    assert topics[clicks]["record-send-total"] == 120
    assert topics[orders]["record-error-total"] == topics[clicks]["record-error-total"] == 0
    # Random bytes do not compress; repeated text does.
    assert topics[clicks]["byte-total"] > 120 * 100
    assert topics[orders]["compression-rate"] < 0.5 < topics[clicks]["compression-rate"]
    assert topics[orders]["byte-total"] + topics[clicks]["byte-total"] == flat["byte-total"]
    assert topics[orders]["record-send-rate"] > 0

    assert flat["record-send-total"] == 420
    assert flat["request-latency-avg"] > 0
    assert flat["request-latency-max"] >= flat["request-latency-avg"]
    assert flat["produce-throttle-time-max"] == 0  # no quota on this client
    assert flat["record-queue-time-avg"] > 0
    assert flat["records-per-request-avg"] > 1
    assert flat["buffer-available-bytes"] == flat["buffer-total-bytes"]

    families = {family.name: family for family in text_string_to_metric_families(text)}
    per_topic = {
        s.labels["topic"]: s.value for s in families["kafka_producer_topic_record_send"].samples
    }
    assert per_topic == {orders: 300.0, clicks: 120.0}
    [total] = families["kafka_producer_record_send"].samples
    assert (total.labels, total.value) == ({"client_id": client_id}, 420.0)
