"""Interceptors and OpenTelemetry tracing against a real cluster, read back with aiokafka."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from aioaccum import RecordMetadata, RecordTooLargeError
from aioaccum.interceptors import ProducerInterceptor, ProducerRecord
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

CONSUME_TIMEOUT_S = 60.0


async def read_back(
    bootstrap: str, topic: str, expected: int
) -> dict[tuple[int, int], ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` by (partition, offset)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: dict[tuple[int, int], ConsumerRecord[bytes, bytes]] = {}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < expected and time.monotonic() < deadline:
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                out.update(((tp.partition, r.offset), r) for r in records)
        return out
    finally:
        await consumer.stop()


class Upper(ProducerInterceptor):
    """Replaces each value by its upper case and marks it; counts the outcomes."""

    def __init__(self) -> None:
        self.acks: list[tuple[RecordMetadata, BaseException | None]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        headers = [*(record.headers or ()), ("intercepted", b"yes")]
        return record.replace(value=record.value.upper(), headers=headers)

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        self.acks.append((metadata, error))


class Raises(ProducerInterceptor):
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("broken interceptor")

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        raise RuntimeError("broken interceptor")


async def test_spans_and_interceptors_match_what_the_broker_wrote(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    upper = Upper()
    async with Producer(
        kafka_bootstrap,
        linger_ms=5,
        max_request_size=10_000,
        interceptors=[Raises(), upper],
        tracer_provider=provider,
        trace_context_headers=True,
    ) as producer:
        futures = [await producer.send(topic, b"value-%d" % i, key=b"k%d" % i) for i in range(30)]
        results = await asyncio.gather(*futures)
        with pytest.raises(RecordTooLargeError):
            await producer.send(topic, b"x" * 20_000)
    provider.shutdown()

    written = await read_back(kafka_bootstrap, topic, len(results))
    assert len(written) == len(results)
    spans = {
        (
            int(str((s.attributes or {})["messaging.destination.partition.id"])),
            (s.attributes or {})["messaging.kafka.offset"],
        ): s
        for s in exporter.get_finished_spans()
        if s.status.status_code is not StatusCode.ERROR
    }
    assert len(spans) == len(results)
    for i, metadata in enumerate(results):
        record = written[(metadata.partition, metadata.offset)]
        # The interceptor's replacement is what the broker has.
        assert (record.key, record.value) == (b"k%d" % i, b"VALUE-%d" % i)
        headers = dict(record.headers)
        assert headers["intercepted"] == b"yes"
        # The span matches the record's metadata, and its context travelled in the headers.
        span = spans[(metadata.partition, metadata.offset)]
        assert (span.attributes or {})["messaging.kafka.message.key"] == f"k{i}"
        assert span.context is not None
        assert headers["traceparent"].decode() == (
            f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-"
            f"{span.context.trace_flags:02x}"
        )
    # Every record acknowledged once, the refused one with its error.
    assert sorted((m.partition, m.offset) for m, e in upper.acks if e is None) == sorted(
        (m.partition, m.offset) for m in results
    )
    errors = [e for _, e in upper.acks if e is not None]
    assert len(errors) == 1
    assert isinstance(errors[0], RecordTooLargeError)
    (failed,) = [
        s for s in exporter.get_finished_spans() if s.status.status_code is StatusCode.ERROR
    ]
    assert (failed.attributes or {})["error.type"] == "aioaccum.errors.RecordTooLargeError"


async def test_no_trace_context_in_the_headers_unless_asked(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with Producer(kafka_bootstrap, tracer_provider=provider) as producer:
        metadata = await producer.send_and_wait(topic, b"v", headers=[("h", b"1")])
    provider.shutdown()
    written = await read_back(kafka_bootstrap, topic, 1)
    assert list(written[(metadata.partition, metadata.offset)].headers) == [("h", b"1")]
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {})["messaging.kafka.offset"] == metadata.offset
