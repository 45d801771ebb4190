"""Sender and Producer against a fake broker adapter, on a fast-forwarded loop clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aioaccum import BrokerError, DeliveryTimeoutError, ProducerClosedError, ProducerState
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.lifecycle import IllegalStateTransition
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka, Request

pytestmark = pytest.mark.looptime

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("t", 2)


def make(fake: FakeKafka | None = None, **settings: Any) -> tuple[Producer, FakeKafka]:
    fake = fake or FakeKafka(StaticCluster.uniform({"t": 3}, nodes=3))
    settings.setdefault("linger_ms", 5)
    producer = Producer("fake:9092", kafka=fake, **settings)
    return producer, fake


async def test_records_are_acknowledged_with_offsets_in_order() -> None:
    producer, fake = make()
    async with producer:
        futures = [await producer.send("t", b"v%d" % i, partition=1) for i in range(10)]
        results = await asyncio.gather(*futures)
    assert [r.offset for r in results] == list(range(10))
    assert [r.value for r in fake.log[TP1]] == [b"v%d" % i for i in range(10)]
    assert {r.partition for r in results} == {1}


async def test_linger_holds_a_trickle_then_sends_one_batch() -> None:
    producer, fake = make(linger_ms=50)
    async with producer:
        for i in range(3):
            await producer.send("t", b"x%d" % i, partition=0)
        await asyncio.sleep(0.049)
        assert fake.requests == []
        await asyncio.sleep(0.002)
        assert len(fake.requests) == 1
        assert fake.requests[0].record_counts == [3]


async def test_linger_zero_sends_promptly() -> None:
    producer, fake = make(linger_ms=0)
    async with producer:
        future = await producer.send("t", b"now", partition=2)
        metadata = await asyncio.wait_for(future, 0.001)
    assert metadata.offset == 0
    assert fake.requests[0].node == 2


async def test_one_request_per_node() -> None:
    producer, fake = make(linger_ms=10)
    async with producer:
        futures = [await producer.send("t", b"v", partition=p) for p in (0, 1, 2, 0, 1, 2)]
        await asyncio.gather(*futures)
    assert sorted(r.node for r in fake.requests) == [0, 1, 2]
    assert all(r.record_counts == [2] for r in fake.requests)


async def test_retriable_error_is_retried_after_backoff() -> None:
    producer, fake = make(linger_ms=0, retry_backoff_ms=100)
    fake.script.append({TP0: Errors.NOT_LEADER_OR_FOLLOWER})
    async with producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        metadata = await (await producer.send("t", b"v", partition=0))
        elapsed = loop.time() - start
        metrics = producer.metrics()
    assert metadata.offset == 0
    assert len(fake.requests) == 2
    assert 0.08 <= elapsed < 0.5  # 100 ms +-20% jitter
    assert fake.metadata_requests >= 1
    assert metrics["record-retry-total"] == 1


async def test_fatal_error_fails_the_records_with_a_typed_error() -> None:
    producer, fake = make(linger_ms=0)
    fake.script.append({TP0: Errors.INVALID_REQUIRED_ACKS})
    async with producer:
        future = await producer.send("t", b"v", partition=0)
        with pytest.raises(BrokerError) as info:
            await future
    assert info.value.errno == Errors.INVALID_REQUIRED_ACKS
    assert not info.value.retriable
    assert len(fake.requests) == 1


async def test_delivery_timeout_names_partition_and_age() -> None:
    producer, fake = make(
        linger_ms=0, delivery_timeout_ms=2000, request_timeout_ms=1000, retry_backoff_ms=100
    )
    fake.script.extend({TP1: Errors.NOT_LEADER_OR_FOLLOWER} for _ in range(1000))
    async with producer:
        future = await producer.send("t", b"v", partition=1)
        with pytest.raises(DeliveryTimeoutError, match=r"t-1: \d+ ms has passed"):
            await future
        assert producer.pool is not None
        assert producer.pool.available_memory() == producer.pool.total_memory
    assert 5 <= len(fake.requests) <= 30


async def test_message_too_large_splits_and_keeps_each_result() -> None:
    producer, fake = make(linger_ms=10)
    fake.script.append({TP2: Errors.MESSAGE_TOO_LARGE})
    async with producer:
        futures = [await producer.send("t", b"r%d" % i, partition=2) for i in range(20)]
        results = await asyncio.gather(*futures)
        metrics = producer.metrics()
    assert sorted(r.offset for r in results) == list(range(20))
    assert [r.value for r in fake.log[TP2]] == [b"r%d" % i for i in range(20)]
    assert metrics["batch-split-total"] == 1


async def test_in_flight_requests_are_capped_per_node() -> None:
    release = asyncio.Event()

    def gate(_request: Request) -> asyncio.Future[None]:
        return asyncio.ensure_future(release.wait())  # type: ignore[arg-type]

    fake = FakeKafka(StaticCluster.uniform({"t": 3}, nodes=1), gate=gate)
    producer, _ = make(fake, linger_ms=0, max_in_flight_requests_per_connection=2)
    async with producer:
        futures = []
        for i in range(6):
            futures.append(await producer.send("t", b"v%d" % i, partition=i % 3))
            await asyncio.sleep(0.001)  # the sender's turn: each record its own request
        await asyncio.sleep(0.01)
        assert fake.max_in_flight_seen == 2
        release.set()
        await asyncio.gather(*futures)
    assert fake.max_in_flight_seen == 2


async def test_idempotent_batches_carry_producer_id_and_sequences() -> None:
    producer, fake = make(linger_ms=0)
    async with producer:
        for _ in range(3):
            await (await producer.send("t", b"v", partition=0))
    assert [r.producer_id for r in fake.log[TP0]] == [4242] * 3
    assert [r.base_sequence for r in fake.log[TP0]] == [0, 1, 2]


async def test_acks_zero_completes_without_offsets() -> None:
    producer, fake = make(linger_ms=0, acks=0)
    async with producer:
        metadata = await (await producer.send("t", b"v", partition=0))
    assert metadata.offset == -1
    assert fake.requests[0].acks == 0


async def test_flush_sends_lingering_records_now() -> None:
    producer, _ = make(linger_ms=60_000)
    async with producer:
        future = await producer.send("t", b"v", partition=0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await producer.flush()
        assert loop.time() - start < 0.01
        assert future.done()
        assert future.result().offset == 0


async def test_close_delivers_what_is_buffered() -> None:
    producer, fake = make(linger_ms=60_000)
    await producer.start()
    futures = [await producer.send("t", b"v", partition=p) for p in (0, 1, 2)]
    await producer.close()
    assert all(f.done() and f.result().offset == 0 for f in futures)
    assert fake.closed
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.send("t", b"late")


async def test_close_with_timeout_fails_what_cannot_be_delivered() -> None:
    producer, fake = make(linger_ms=0, delivery_timeout_ms=60_000, retry_backoff_ms=100)
    fake.script.extend({TP0: Errors.NOT_LEADER_OR_FOLLOWER} for _ in range(10_000))
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    await producer.close(timeout=1.0)
    assert isinstance(future.exception(), ProducerClosedError)
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_keyed_records_follow_murmur2_and_keyless_stick() -> None:
    from aioaccum._core.partitioner import default_partition

    producer, _ = make(linger_ms=0)
    async with producer:
        keyed = [await (await producer.send("t", b"v", key=b"key-%d" % i)) for i in range(30)]
        keyless = [await producer.send("t", b"v") for _ in range(5)]
        results = await asyncio.gather(*keyless)
    assert [m.partition for m in keyed] == [default_partition(b"key-%d" % i, 3) for i in range(30)]
    assert len({m.partition for m in results}) == 1  # a few small records stay on one partition


async def test_pending_records_counts_what_a_flush_would_wait_for() -> None:
    release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fake = FakeKafka(StaticCluster.uniform({"t": 3}, nodes=3), gate=lambda _request: release)
    producer, _ = make(fake, linger_ms=0)
    assert producer.pending_records() == 0  # not started
    async with producer:
        futures = [await producer.send("t", b"v", partition=p % 3) for p in range(7)]
        await asyncio.sleep(0.01)
        assert producer.pending_records() == 7  # in flight, held by the gate
        release.set_result(None)
        await asyncio.gather(*futures)
        assert producer.pending_records() == 0
    assert producer.pending_records() == 0


def state_of(producer: Producer) -> ProducerState:
    return producer.state  # read afresh: each step changes it


async def test_producer_state_moves_new_running_closed() -> None:
    producer, _ = make()
    assert state_of(producer) is ProducerState.NEW
    await producer.start()
    assert state_of(producer) is ProducerState.RUNNING
    assert "running" in repr(producer)
    await producer.close()
    assert state_of(producer) is ProducerState.CLOSED
    await producer.close()  # a second close is allowed and does nothing
    with pytest.raises(ProducerClosedError, match="create a new one"):
        await producer.start()
    with pytest.raises(IllegalStateTransition, match="from CLOSED to RUNNING"):
        producer._move(ProducerState.RUNNING)  # the table refuses, whoever asks


def test_broker_errors_carry_the_flags_of_the_senders_table() -> None:
    moved = broker_error_for_code(Errors.NOT_LEADER_OR_FOLLOWER)
    assert moved.retriable
    assert moved.invalid_metadata
    assert "NOT_LEADER" in str(moved) or "NotLeader" in str(moved)
    assert not broker_error_for_code(Errors.MESSAGE_TOO_LARGE).retriable  # split, not resent
    assert broker_error_for_code(Errors.CORRUPT_MESSAGE).retriable  # Java retries it too
    unknown = broker_error_for_code(9999, "from the future")
    assert not unknown.retriable
    assert str(unknown) == "UnknownError (error code 9999): from the future"
