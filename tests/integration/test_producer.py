"""aioaccum's Producer against the real 3-broker cluster, read back with aiokafka's consumer."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from aioaccum import ProducerClosedError, ProducerTimeoutError
from aioaccum._core.partitioner import default_partition
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

CONSUME_TIMEOUT_S = 90.0


async def consume_all(
    bootstrap: str, topic: str, expected: int
) -> dict[int, list[ConsumerRecord[bytes, bytes]]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        if not parts:
            await consumer._client.force_metadata_update()
            parts = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: dict[int, list[ConsumerRecord[bytes, bytes]]] = {p: [] for p in parts}
        got = 0
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while got < expected and time.monotonic() < deadline:
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                out[tp.partition].extend(records)
                got += len(records)
        # One more short poll: anything beyond `expected` would be a duplicate.
        for tp, records in (await consumer.getmany(timeout_ms=300)).items():
            out[tp.partition].extend(records)
        return out
    finally:
        await consumer.stop()


@pytest.mark.any_loop
async def test_every_acknowledged_record_is_read_back_once_in_order(
    kafka_bootstrap: str, new_topic: str, any_loop: str
) -> None:
    sent: list[tuple[Any, int, bytes, bytes | None, list[tuple[str, bytes]], int]] = []
    base_ts = int(time.time() * 1000) - 10_000
    async with Producer(kafka_bootstrap, linger_ms=5, batch_size=4096) as producer:
        for i in range(5000):
            key = b"k%d" % (i % 101)
            value = None if i % 500 == 7 else (b"%d|" % i) * (1 + i % 40)
            headers = [("i", str(i).encode()), ("loop", any_loop.encode())]
            fut = await producer.send(new_topic, value, key=key, headers=headers,
                                      timestamp_ms=base_ts + i)
            sent.append((fut, i, key, value, headers, base_ts + i))
        results = await asyncio.gather(*(s[0] for s in sent))
    by_partition = await consume_all(kafka_bootstrap, new_topic, len(sent))
    assert sum(len(v) for v in by_partition.values()) == len(sent)
    consumed = {(p, r.offset): r for p, records in by_partition.items() for r in records}
    last_offset: dict[int, int] = {}
    for (_, _, key, value, headers, ts), meta in zip(sent, results, strict=True):
        assert meta.topic == new_topic
        assert meta.partition == default_partition(key, 6)
        record = consumed[(meta.partition, meta.offset)]
        assert (record.key, record.value, record.timestamp) == (key, value, ts)
        assert list(record.headers) == headers
        assert meta.offset > last_offset.get(meta.partition, -1)  # send order kept
        last_offset[meta.partition] = meta.offset
        assert meta.serialized_key_size == len(key)
        assert meta.serialized_value_size == (-1 if value is None else len(value))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_is_accepted_and_read_back(
    kafka_bootstrap: str, topic_factory: TopicFactory, codec: str
) -> None:
    topic = await topic_factory(partitions=2)
    values = [b"%s record %d " % (codec.encode(), i) * (1 + i % 30) for i in range(3000)]
    async with Producer(kafka_bootstrap, compression_type=codec, linger_ms=20) as producer:
        futures = [await producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)]
        await asyncio.gather(*futures)
        metrics = producer.metrics()
    assert metrics["compression-rate-avg"] < 0.5
    by_partition = await consume_all(kafka_bootstrap, topic, len(values))
    assert [r.value for r in by_partition[0]] == values[0::2]
    assert [r.value for r in by_partition[1]] == values[1::2]


async def test_linger_makes_multi_record_batches_from_a_trickle(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    async with Producer(kafka_bootstrap, linger_ms=50) as producer:
        futures = []
        for i in range(40):
            futures.append(await producer.send(topic, b"t%d" % i))
            await asyncio.sleep(0.005)  # a trickle: 40 records over ~200 ms
        await asyncio.gather(*futures)
        metrics = producer.metrics()
    # Without linger each record would travel alone: 40 requests.
    assert metrics["request-total"] <= 10
    assert metrics["record-send-total"] == 40


async def test_linger_zero_sends_promptly(kafka_bootstrap: str, new_topic: str) -> None:
    async with Producer(kafka_bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(new_topic, b"warm-up", partition=0)
        start = time.monotonic()
        await producer.send_and_wait(new_topic, b"now", partition=0)
        elapsed = time.monotonic() - start
    # Far below what even a 1 s linger would impose; the bound only guards semantics.
    assert elapsed < 1.0


async def test_keyless_records_spread_over_partitions(
    kafka_bootstrap: str, new_topic: str
) -> None:
    # Uniform stickiness: adaptive partitioning (on by default) rightly gives fewer records to
    # a partition whose leader is slower, and on a loaded machine that alone can push one
    # below the bound (CI saw 1,914 of 30,000); test_adaptive_partitioning covers that part.
    # Keyless records stick to a partition for batch_size bytes (Java's rule); at the 1 MiB
    # default 30,000 records of 100 B would visit three partitions, so the spread is checked at
    # Java's 16 KiB.
    async with Producer(
        kafka_bootstrap, linger_ms=5, partitioner_adaptive_partitioning_enable=False,
        batch_size=16384,
    ) as producer:
        futures = [await producer.send(new_topic, b"x" * 100) for _ in range(30_000)]
        results = await asyncio.gather(*futures)
    counts = Counter(m.partition for m in results)
    assert set(counts) == set(range(6))
    mean = len(results) / 6
    assert min(counts.values()) > 0.4 * mean, counts


async def test_flush_waits_for_acknowledgement(kafka_bootstrap: str, new_topic: str) -> None:
    async with Producer(kafka_bootstrap, linger_ms=60_000) as producer:
        futures = [await producer.send(new_topic, b"f%d" % i) for i in range(100)]
        assert not any(f.done() for f in futures)
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in futures)


async def test_close_delivers_then_refuses(kafka_bootstrap: str, new_topic: str) -> None:
    producer = Producer(kafka_bootstrap, linger_ms=60_000)
    await producer.start()
    futures = [await producer.send(new_topic, b"c%d" % i) for i in range(200)]
    await producer.close(timeout=30)
    assert all(f.result().offset >= 0 for f in futures)
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.send(new_topic, b"late")
    by_partition = await consume_all(kafka_bootstrap, new_topic, 200)
    assert sum(len(v) for v in by_partition.values()) == 200


async def test_missing_topic_fails_within_max_block(kafka_bootstrap: str) -> None:
    async with Producer(kafka_bootstrap, max_block_ms=1500) as producer:
        start = time.monotonic()
        with pytest.raises(ProducerTimeoutError, match="not present in metadata"):
            await producer.send("aioaccum-no-such-topic", b"x")
        assert time.monotonic() - start < 10


async def test_from_properties_and_acks_one(kafka_bootstrap: str, new_topic: str) -> None:
    producer = Producer.from_properties(
        {"bootstrap.servers": kafka_bootstrap, "acks": "1", "linger.ms": "1"}
    )
    async with producer:
        meta = await producer.send_and_wait(new_topic, b"p", key=b"java-props")
    assert meta.offset >= 0
    assert meta.partition == default_partition(b"java-props", 6)
