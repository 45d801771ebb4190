"""Headers everywhere, on the cluster: send_records over several topics, and SyncProducer's
send, send_many and send_records with headers, read back with aiokafka's consumer."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from aioaccum import Producer
from aioaccum.interceptors import ProducerRecord
from aioaccum.sync import SyncProducer

from .test_web import consume_all

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]


def by_position(records: list[Any]) -> dict[tuple[str, int, int], Any]:
    return {(r.topic, r.partition, r.offset): r for r in records}


async def test_send_records_over_several_topics(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    first, second = await topic_factory(partitions=3), await topic_factory(partitions=2)
    records: list[Any] = []
    for i in range(2000):
        topic = first if i % 7 < 4 else second  # runs of 4 and 3 records
        headers = [("n", b"%d" % i), ("app", b"test")] if i % 5 else None
        key = b"k%d" % (i % 11) if i % 3 else None
        records.append((topic, b"v%d" % i, key, None, None, headers))
    records.append(ProducerRecord(first, b"pinned", partition=2, timestamp_ms=1_700_000_000_000))
    async with Producer(kafka_bootstrap, linger_ms=5, batch_size=4096) as producer:
        results = await (await producer.send_records(records))
    assert len(results) == len(records)
    in_first = sum(1 for m in results if m.topic == first)
    stored = by_position(
        await consume_all(kafka_bootstrap, first, in_first)
        + await consume_all(kafka_bootstrap, second, len(records) - in_first)
    )
    assert len(stored) == len(records)
    for record, metadata in zip(records[:-1], results, strict=False):
        topic, value, key, _, _, headers = record
        found = stored[(metadata.topic, metadata.partition, metadata.offset)]
        assert (found.topic, found.key, found.value) == (topic, key, value)
        assert list(found.headers) == (headers or [])
    pinned = results[-1]
    assert (pinned.topic, pinned.partition, pinned.timestamp) == (first, 2, 1_700_000_000_000)


async def test_sync_producer_headers_on_every_path(kafka_bootstrap: str, new_topic: str) -> None:
    values = [b"many-%d" % i for i in range(50)]
    each = [[("i", b"%d" % i)] if i % 2 else None for i in range(50)]

    def run() -> tuple[Any, Any, Any]:
        with SyncProducer(kafka_bootstrap, linger_ms=5) as producer:
            one = producer.send(new_topic, b"one", headers=[("single", b"1")])
            many = producer.send_many(
                new_topic, values, headers=[("shared", b"s")], record_headers=each
            )
            mixed = producer.send_records(
                [(new_topic, b"r0", None, 0, None, [("r", b"0")]), (new_topic, b"r1", None, 1)]
            )
            return one.result(60), many.result(60), mixed.result(60)

    one, many, mixed = await asyncio.to_thread(run)
    stored = by_position(await consume_all(kafka_bootstrap, new_topic, 53))
    assert list(stored[(new_topic, one.partition, one.offset)].headers) == [("single", b"1")]
    for i, metadata in enumerate(many):
        found = stored[(new_topic, metadata.partition, metadata.offset)]
        assert found.value == values[i]
        assert list(found.headers) == [("shared", b"s"), *(each[i] or [])]
    assert [list(stored[(new_topic, m.partition, m.offset)].headers) for m in mixed] == [
        [("r", b"0")],
        [],
    ]
