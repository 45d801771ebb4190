"""Producer.send_many, the bulk path, against a fake broker adapter on a fast-forwarded clock."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from aioaccum import (
    BrokerError,
    BufferExhaustedError,
    ConfigError,
    RecordTooLargeError,
    SerializationError,
)
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.partitioner import default_partition
from aioaccum._runtime.many import ManyOutcomes
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka, Request

pytestmark = pytest.mark.looptime



def make(fake: FakeKafka | None = None, **settings: Any) -> tuple[Producer, FakeKafka]:
    fake = fake or FakeKafka(StaticCluster.uniform({"t": 3}, nodes=3))
    settings.setdefault("linger_ms", 5)
    return Producer("fake:9092", kafka=fake, **settings), fake


async def test_metadata_comes_back_in_input_order_across_batches_and_partitions() -> None:
    producer, fake = make(batch_size=1024)
    values = [b"value-%05d" % i + b"x" * 50 for i in range(2000)]
    async with producer:
        future = await producer.send_many("t", values)
        results = await future
    assert len(results) == len(values)
    assert len({r.partition for r in results}) > 1, "the sticky partitioner moved on"
    for metadata, value in zip(results, values, strict=True):
        stored = fake.log[TopicPartition("t", metadata.partition)][metadata.offset]
        assert stored.value == value
        assert metadata.serialized_value_size == len(value)
        assert metadata.serialized_key_size == -1
    # The bulk path still batches: about 1 KiB of records per batch.
    counts = [n for request in fake.requests for n in request.record_counts]
    assert sum(counts) == 2000
    assert min(counts[:-3]) > 10


async def test_keys_choose_partitions_like_send_does() -> None:
    producer, fake = make()
    keys = [b"k%d" % (i % 7) for i in range(300)]
    values = [b"v%d" % i for i in range(300)]
    async with producer:
        bulk = await (await producer.send_many("t", values, keys=keys))
        pairs = zip(keys, values, strict=True)
        single = [await (await producer.send("t", v, key=k)) for k, v in pairs]
    assert [m.partition for m in bulk] == [m.partition for m in single]
    assert [m.serialized_key_size for m in bulk] == [len(k) for k in keys]
    for metadata, key in zip(bulk, keys, strict=True):
        assert fake.log[TopicPartition("t", metadata.partition)][metadata.offset].key == key


async def test_keyed_records_spread_over_many_batches_land_in_order_with_their_metadata() -> None:
    # Keyed records join their partition's open batch as runs of one; every fifth has no key
    # (the sticky partitioner's), and small batches make many of them open new batches.
    producer, fake = make(FakeKafka(StaticCluster.uniform({"t": 12}, nodes=3)), batch_size=512)
    keys = [None if i % 5 == 0 else b"key-%d" % (i % 97) for i in range(3000)]
    values = [b"value-%d" % i for i in range(3000)]
    async with producer:
        results = await (await producer.send_many("t", values, keys=keys))
    assert len(results) == 3000
    seen: dict[int, list[int]] = {}
    for i, metadata in enumerate(results):
        stored = fake.log[TopicPartition("t", metadata.partition)][metadata.offset]
        assert (stored.key, stored.value) == (keys[i], values[i])
        assert metadata.serialized_key_size == (-1 if keys[i] is None else len(keys[i] or b""))
        seen.setdefault(metadata.partition, []).append(metadata.offset)
    for offsets in seen.values():
        assert offsets == sorted(offsets)  # input order within each partition
    for metadata, key in zip(results, keys, strict=True):
        if key is not None:
            assert metadata.partition == default_partition(key, 12)
    counts = [n for request in fake.requests for n in request.record_counts]
    assert sum(counts) == 3000
    assert len(counts) > 30


async def test_a_fixed_partition_takes_every_record_in_order() -> None:
    producer, fake = make()
    async with producer:
        values = [b"%d" % i for i in range(500)]
        results = await (await producer.send_many("t", values, partition=2))
    assert {r.partition for r in results} == {2}
    assert [r.offset for r in results] == list(range(500))
    assert [r.value for r in fake.log[TopicPartition("t", 2)]] == [b"%d" % i for i in range(500)]


async def test_serializers_apply_to_every_record() -> None:
    producer, fake = make(
        value_serializer=lambda v: str(v).encode(), key_serializer=lambda k: k.encode()
    )
    async with producer:
        results = await (await producer.send_many("t", [1, 2, 3], keys=["a", "b", "c"]))
    stored = [fake.log[TopicPartition("t", r.partition)][r.offset] for r in results]
    assert [(s.key, s.value) for s in stored] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


async def test_an_empty_call_resolves_to_an_empty_list() -> None:
    producer, _ = make()
    async with producer:
        assert await (await producer.send_many("t", [])) == []


async def test_a_bad_record_refuses_the_whole_call_and_keeps_what_was_accepted() -> None:
    producer, fake = make()
    async with producer:
        good = await producer.send("t", b"accepted before", partition=0)
        stats_before = producer.pool.statistics() if producer.pool else None
        with pytest.raises(SerializationError, match=r"value #2 must be bytes or None, got int"):
            await producer.send_many("t", [b"a", b"b", 3, b"d"])
        with pytest.raises(ConfigError, match="2 keys for 3 values"):
            await producer.send_many("t", [b"a", b"b", b"c"], keys=[b"1", b"2"])
        assert producer.pool is not None
        assert producer.pool.statistics() == stats_before
        assert (await good).offset == 0
    assert [r.value for r in fake.log[TopicPartition("t", 0)]] == [b"accepted before"]


async def test_a_record_too_large_is_refused_before_the_pool_is_touched() -> None:
    producer, fake = make(max_request_size=1000)
    async with producer:
        assert producer.pool is not None
        before = producer.pool.statistics()
        with pytest.raises(RecordTooLargeError, match="max_request_size=1000"):
            await producer.send_many("t", [b"a", b"x" * 2000, b"c"])
        assert producer.pool.statistics() == before
    assert sum(len(log) for log in fake.log.values()) == 0


async def test_a_failed_batch_fails_the_future_with_a_typed_error() -> None:
    producer, fake = make(retries=0, batch_size=256)
    fake.script.append({TopicPartition("t", 1): Errors.INVALID_REQUIRED_ACKS})
    async with producer:
        future = await producer.send_many("t", [b"x" * 40] * 20, partition=1)
        with pytest.raises(BrokerError) as caught:
            await future
    assert caught.value.errno == Errors.INVALID_REQUIRED_ACKS
    assert not caught.value.retriable


async def test_records_of_a_split_batch_keep_their_places() -> None:
    producer, fake = make(batch_size=4096)
    fake.script.append({TopicPartition("t", 0): Errors.MESSAGE_TOO_LARGE})
    values = [b"r%03d" % i + b"y" * 60 for i in range(40)]
    async with producer:
        results = await (await producer.send_many("t", values, partition=0))
    # The first request was refused whole; the records came back in smaller batches.
    assert fake.requests[0].record_counts == [40]
    assert len(fake.requests) >= 2
    assert [r.offset for r in results] == list(range(40))
    assert [r.value for r in fake.log[TopicPartition("t", 0)]] == values


async def test_keyed_records_of_a_split_batch_and_a_failed_one_are_counted_per_batch() -> None:
    # Keyed records are counted per batch result: a split moves them to new batches, which the
    # call then waits on; a failed batch fails the call with its error.
    producer, fake = make(FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1)), batch_size=4096)
    fake.script.append({TopicPartition("t", 0): Errors.MESSAGE_TOO_LARGE})
    keys = [b"k%d" % (i % 3) for i in range(40)]
    values = [b"r%03d" % i + b"y" * 60 for i in range(40)]
    async with producer:
        results = await (await producer.send_many("t", values, keys=keys))
    assert fake.requests[0].record_counts == [40]
    assert len(fake.requests) >= 2
    assert [r.offset for r in results] == list(range(40))
    assert [r.serialized_key_size for r in results] == [len(k) for k in keys]
    assert [(r.key, r.value) for r in fake.log[TopicPartition("t", 0)]] == list(
        zip(keys, values, strict=True)
    )

    producer, fake = make(retries=0, batch_size=256)
    fake.script.append({TopicPartition("t", p): Errors.INVALID_REQUIRED_ACKS for p in range(3)})
    async with producer:
        future = await producer.send_many("t", [b"x" * 40] * 20, keys=[b"a", b"b"] * 10)
        with pytest.raises(BrokerError) as caught:
            await future
    assert caught.value.errno == Errors.INVALID_REQUIRED_ACKS


async def test_cancelling_the_future_does_not_stop_delivery() -> None:
    producer, fake = make()
    async with producer:
        future = await producer.send_many("t", [b"a", b"b", b"c"], partition=0)
        future.cancel()
        await producer.flush()
    assert [r.value for r in fake.log[TopicPartition("t", 0)]] == [b"a", b"b", b"c"]


async def test_running_out_of_memory_midway_says_how_many_went_in() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def hold(_request: Request) -> asyncio.Future[None]:
        return gate

    fake = FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1), gate=hold)
    producer, _ = make(fake, batch_size=1024, buffer_memory=4096, max_block_ms=200)
    async with producer:
        with pytest.raises(BufferExhaustedError) as caught:
            await producer.send_many("t", [b"z" * 100] * 200)
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        accepted = int(notes.split("accepted ")[1].split(" of ")[0])
        assert 0 < accepted < 200
        assert "of 200 records" in notes
        gate.set_result(None)
        await producer.flush()
    assert len(fake.log[TopicPartition("t", 0)]) == accepted


async def test_bulk_and_single_sends_interleave_in_one_batch() -> None:
    producer, fake = make()
    async with producer:
        first = await producer.send("t", b"one", partition=0)
        bulk = await producer.send_many("t", [b"two", b"three"], partition=0)
        last = await producer.send("t", b"four", partition=0)
        assert [(await first).offset, *[m.offset for m in await bulk], (await last).offset] == [
            0,
            1,
            2,
            3,
        ]
    assert Counter(len(r.record_counts) for r in fake.requests) == {1: 1}


async def test_headers_shared_and_per_record_reach_the_broker() -> None:
    producer, fake = make(batch_size=1024)
    values = [b"v%d" % i for i in range(50)]
    own = [None if i % 2 else [("i", b"%d" % i)] for i in range(50)]
    async with producer:
        results = await (
            await producer.send_many(
                "t", values, headers=[("trace", b"abc")], record_headers=own
            )
        )
    for i, metadata in enumerate(results):
        stored = fake.log[TopicPartition("t", metadata.partition)][metadata.offset]
        assert stored.value == values[i]
        expected = [("trace", b"abc")] + ([] if i % 2 else [("i", b"%d" % i)])
        assert stored.headers == expected


async def test_bad_headers_refuse_the_whole_call() -> None:
    producer, fake = make()
    async with producer:
        with pytest.raises(SerializationError, match="header #0 name must be str"):
            await producer.send_many("t", [b"a", b"b"], record_headers=[None, [(b"k", b"v")]])  # type: ignore[list-item]
        with pytest.raises(ConfigError, match="got 1 record_headers for 2 values"):
            await producer.send_many("t", [b"a", b"b"], record_headers=[None])
        await producer.flush()
    assert not fake.log, "nothing of a refused call was sent"


async def test_the_metadata_sequence_indexes_like_a_list() -> None:
    producer, _ = make(batch_size=1024)
    values = [b"v%04d" % i + b"x" * 40 for i in range(300)]
    async with producer:
        results = await (await producer.send_many("t", values, partition=1))
    every = list(results)
    assert len(results) == 300
    assert [m.offset for m in every] == list(range(300))  # several batches, one partition
    assert results[0] == every[0]
    assert results[-1] == every[-1]
    assert results[10:13] == every[10:13]
    assert results == every
    assert repr(results) == "<ManyOutcomes of 300 records>"
    with pytest.raises(TypeError, match="unhashable"):
        hash(results)
    with pytest.raises(IndexError, match="record index 300 out of range for 300 records"):
        results[300]


async def test_keyed_and_run_records_read_back_in_input_order_however_read() -> None:
    # A keyed record goes one by one and is kept as its future; the records after the first of
    # a batch go in runs: each way of reading the result walks both in input order.
    producer, _ = make(batch_size=1024)
    keyed = [b"k%d" % (i % 5) for i in range(120)]
    values = [b"v%04d" % i + b"x" * 40 for i in range(120)]
    async with producer:
        first = await producer.send_many("t", values, keys=keyed)
        second = await producer.send_many("t", values, partition=2)
        mixed = await first
        runs = await second
    assert isinstance(mixed, ManyOutcomes)
    assert isinstance(runs, ManyOutcomes)
    every = list(mixed)
    assert [m.serialized_key_size for m in every] == [len(k) for k in keyed]
    assert [mixed[i] for i in range(len(mixed))] == every
    assert mixed[-1] == every[-1]
    assert mixed[40:45] == every[40:45]
    counts: dict[int, int] = {}
    for m in every:
        counts[m.partition] = counts.get(m.partition, 0) + 1
    assert mixed.partition_counts() == counts
    assert runs.partition_counts() == {2: 120}
    assert [m.offset for m in runs] == list(range(runs[0].offset, runs[0].offset + 120))
