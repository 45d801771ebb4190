"""OpenTelemetry spans and metrics, with the SDK's in-memory exporters and a fake broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aioaccum import BrokerError, ConfigError, RecordTooLargeError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum.config import producer_config as config_module
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def make(**settings: Any) -> tuple[Producer, FakeKafka]:
    fake = FakeKafka(StaticCluster.uniform({"t": 3}, nodes=1))
    settings.setdefault("linger_ms", 5)
    settings.setdefault("client_id", "c1")
    return Producer("fake:9092", kafka=fake, **settings), fake


def spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


async def test_a_span_per_record_with_the_records_partition_and_offset(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    producer, fake = make(tracer_provider=tracer_provider, key_serializer=str.encode)
    assert producer.config.tracing
    async with producer:
        futures = [await producer.send("t", b"v%d" % i, key=f"key-{i}") for i in range(5)]
        producer._key_serializer = None  # a key of bytes that are not text, as is
        futures.append(await producer.send("t", None, key=b"\xff\xfe", partition=2))
        results = await asyncio.gather(*futures)
        await asyncio.sleep(0)
    finished = spans(exporter)
    assert len(finished) == 6
    # Spans end in the order the broker acknowledged: matched to records by where they went.
    by_place = {
        (
            (span.attributes or {})["messaging.destination.partition.id"],
            (span.attributes or {})["messaging.kafka.offset"],
        ): span
        for span in finished
    }
    for i, metadata in enumerate(results):
        span = by_place[(str(metadata.partition), metadata.offset)]
        assert span.name == "send t"
        assert span.kind is SpanKind.PRODUCER
        assert span.status.status_code is StatusCode.UNSET
        attributes = dict(span.attributes or {})
        tombstone = i == len(results) - 1
        # A key without a text form is left out, as the conventions ask.
        assert attributes.pop("messaging.kafka.message.key", None) == (
            None if tombstone else f"key-{i}"
        )
        assert attributes.pop("messaging.kafka.message.tombstone", False) is tombstone
        assert attributes == {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": "t",
            "messaging.client.id": "c1",
            "messaging.destination.partition.id": str(metadata.partition),
            "messaging.kafka.offset": metadata.offset,
        }
        stored = fake.log[TopicPartition("t", metadata.partition)][metadata.offset]
        assert not stored.headers  # no trace context unless asked for
    assert finished[0].instrumentation_scope is not None
    assert finished[0].instrumentation_scope.name == "aioaccum"


async def test_the_span_is_a_child_of_the_callers_span(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    producer, _ = make(tracer_provider=tracer_provider)
    async with producer:
        with tracer_provider.get_tracer("app").start_as_current_span("handle request") as parent:
            future = await producer.send("t", b"v")
        await future
        await asyncio.sleep(0)
    (send,) = (s for s in spans(exporter) if s.name == "send t")
    assert send.parent is not None
    assert send.parent.span_id == parent.get_span_context().span_id
    assert send.context is not None
    assert send.context.trace_id == parent.get_span_context().trace_id


async def test_trace_context_goes_into_the_headers_only_when_asked(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    producer, fake = make(tracer_provider=tracer_provider, trace_context_headers=True)
    async with producer:
        metadata = await (
            await producer.send(
                "t", b"v", partition=0, headers=[("traceparent", b"stale"), ("h", b"1")]
            )
        )
        await asyncio.sleep(0)
    (span,) = spans(exporter)
    assert span.context is not None
    (stored,) = fake.log[TopicPartition("t", metadata.partition)]
    headers = dict(stored.headers)
    assert [name for name, _ in stored.headers].count("traceparent") == 1  # replaced
    assert headers["h"] == b"1"
    context = span.context
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert headers["traceparent"] == expected.encode()


async def test_a_failed_record_ends_its_span_with_the_error(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    producer, fake = make(tracer_provider=tracer_provider, linger_ms=0, max_request_size=1000)
    fake.script.append({TopicPartition("t", 1): Errors.TOPIC_AUTHORIZATION_FAILED})
    async with producer:
        refused = await producer.send("t", b"v", partition=1)
        with pytest.raises(BrokerError):
            await refused
        with pytest.raises(RecordTooLargeError):
            await producer.send("t", b"x" * 2000)
        await asyncio.sleep(0)
    by_broker, too_large = spans(exporter)
    assert by_broker.status.status_code is StatusCode.ERROR
    assert (by_broker.attributes or {})["error.type"] == "TOPIC_AUTHORIZATION_FAILED"
    assert (by_broker.attributes or {})["messaging.destination.partition.id"] == "1"
    assert "messaging.kafka.offset" not in (by_broker.attributes or {})
    assert [e.name for e in by_broker.events] == ["exception"]
    assert too_large.status.status_code is StatusCode.ERROR
    assert (too_large.attributes or {})["error.type"] == "aioaccum.errors.RecordTooLargeError"
    assert "messaging.destination.partition.id" not in (too_large.attributes or {})


async def test_send_from_thread_and_send_many_are_traced_too(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    producer, _ = make(tracer_provider=tracer_provider)
    async with producer:
        future = await asyncio.to_thread(producer.send_from_thread, "t", b"thread")
        await asyncio.to_thread(future.result, 10)
        await (await producer.send_many("t", [b"a", b"b"]))
        await asyncio.sleep(0)
    assert len(spans(exporter)) == 3


def metric_points(data: MetricsData | None) -> dict[str, list[tuple[dict[str, Any], float]]]:
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = out.setdefault(metric.name, [])
                for point in metric.data.data_points:
                    points.append((dict(point.attributes or {}), point.value))  # type: ignore[union-attr]
    return out


async def test_metrics_are_reported_as_opentelemetry_instruments() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    producer, _ = make(meter_provider=provider)
    other, _ = make(meter_provider=provider, client_id="c2")
    assert producer.config.otel_metrics
    async with producer, other:
        await (await producer.send_many("t", [b"v"] * 7))
        await (await other.send("t", b"v"))
        points = metric_points(reader.get_metrics_data())
        total_bytes = producer.metrics()["buffer-total-bytes"]
    sent = points["kafka.producer.record_send_total"]
    assert sorted(sent, key=lambda point: point[0]["client-id"]) == [
        ({"client-id": "c1", "topic": "t"}, 7.0),
        ({"client-id": "c2", "topic": "t"}, 1.0),
    ]
    # Per producer: what has no per-topic twin.
    queue = {a["client-id"]: v for a, v in points["kafka.producer.record_queue_time_avg"]}
    assert set(queue) == {"c1", "c2"}
    assert ({"client-id": "c1"}, total_bytes) in points["kafka.producer.buffer_total_bytes"]
    # Closed producers are no longer reported.
    after = reader.get_metrics_data()
    assert not (metric_points(after) if after else {}).get("kafka.producer.record_send_total")
    provider.shutdown()


async def test_two_running_producers_of_one_client_id_cannot_share_a_meter_provider() -> None:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    first, _ = make(meter_provider=provider)
    twin, twin_kafka = make(meter_provider=provider)
    async with first:
        with pytest.raises(ConfigError, match=r"client_id='c1' report to one meter provider"):
            await twin.start()
        assert not twin_kafka.started  # refused before anything was started
    # Once the first is closed, the name is free again.
    async with twin:
        await (await twin.send("t", b"v"))
    provider.shutdown()


def test_settings_that_contradict_each_other_or_lack_the_library(
    monkeypatch: pytest.MonkeyPatch, tracer_provider: TracerProvider
) -> None:
    with pytest.raises(ConfigError, match=r"trace_context_headers=True .* needs tracing=True"):
        Producer("fake:9092", trace_context_headers=True)
    with pytest.raises(ConfigError, match="tracer_provider is set but tracing=False"):
        Producer("fake:9092", tracer_provider=tracer_provider, tracing=False)
    with pytest.raises(ConfigError, match="must be an OpenTelemetry TracerProvider"):
        Producer("fake:9092", tracer_provider=object())
    monkeypatch.setattr(config_module, "_has_opentelemetry", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'aioaccum\[otel\]'"):
        Producer("fake:9092", tracing=True)


async def test_a_tracer_that_raises_on_ending_a_span_never_stalls_the_record_futures(
    tracer_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aioaccum.otel import RecordTracer

    def broken(*args: object) -> None:
        raise RuntimeError("exporter down")

    monkeypatch.setattr(RecordTracer, "end", broken)
    producer, _ = make(tracer_provider=tracer_provider)
    async with producer:
        futures = [await producer.send("t", b"v%d" % i) for i in range(5)]
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert len({(r.partition, r.offset) for r in results}) == 5
