"""The sender when things go wrong: sequence gaps, splits, crashes, and closing under failure."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from aioaccum import BrokerError, DeliveryTimeoutError, ProducerClosedError, ProducerFailedError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka, Request, SequencedFakeKafka

pytestmark = pytest.mark.looptime

TP0 = TopicPartition("t", 0)
TP2 = TopicPartition("t", 2)
CLUSTER = StaticCluster.uniform({"t": 3}, nodes=3)


def make(fake: FakeKafka, **settings: Any) -> Producer:
    settings.setdefault("linger_ms", 0)
    return Producer("fake:9092", kafka=fake, **settings)


@pytest.mark.parametrize("linger_ms", [0, 5])
async def test_close_returns_once_the_last_response_is_in(linger_ms: int) -> None:
    def gate(_request: Request) -> asyncio.Future[None]:
        return asyncio.ensure_future(asyncio.sleep(0.01))

    fake = FakeKafka(CLUSTER, gate=gate)
    producer = make(fake, linger_ms=linger_ms)
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    await asyncio.sleep(0.001 + linger_ms / 1000)  # the request is on the wire
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(producer.close(), 5)
    assert loop.time() - start < 0.05
    assert future.result().offset == 0


async def test_a_failed_stamped_batch_does_not_wedge_its_partition() -> None:
    fake = SequencedFakeKafka(CLUSTER)
    producer = make(fake, delivery_timeout_ms=10_000, request_timeout_ms=1000)
    fake.script.append({TP0: Errors.MESSAGE_TOO_LARGE})  # one record: cannot split, fails for good
    async with producer:
        first = await producer.send("t", b"a", partition=0)
        with pytest.raises(BrokerError) as info:
            await first
        assert info.value.errno == Errors.MESSAGE_TOO_LARGE
        second = await producer.send("t", b"b", partition=0)
        metadata = await asyncio.wait_for(second, 5)
    assert metadata.offset == 0
    # The gap is closed by the next epoch of the same producer id (KIP-360), not a new id.
    assert fake.producer_ids_issued == 1
    [record] = fake.log[TP0]
    assert record.producer_id == 4243
    assert record.base_sequence == 0
    assert fake.last_sequence[(4243, TP0)] == (1, 0)
    assert [r.value for r in fake.log[TP0]] == [b"b"]


async def test_split_parts_keep_their_sequence_range_and_order() -> None:
    fake = SequencedFakeKafka(CLUSTER)
    producer = make(fake, retry_backoff_ms=100)
    fake.script.append({TP0: Errors.MESSAGE_TOO_LARGE})
    async with producer:
        first = [await producer.send("t", b"a%d" % i, partition=0) for i in range(5)]
        await asyncio.sleep(0.01)  # refused and split; the parts wait out their backoff
        late = [await producer.send("t", b"late%d" % i, partition=0) for i in range(3)]
        results = await asyncio.gather(*first, *late)
    assert [r.offset for r in results] == list(range(8))
    assert [r.value for r in fake.log[TP0]] == [b"a%d" % i for i in range(5)] + [
        b"late%d" % i for i in range(3)
    ]
    assert fake.out_of_order == 0


async def test_flush_waits_for_the_parts_of_a_split_batch() -> None:
    fake = FakeKafka(CLUSTER)
    producer = make(fake, linger_ms=60_000)
    fake.script.append({TP2: Errors.MESSAGE_TOO_LARGE})
    async with producer:
        futures = [await producer.send("t", b"r%d" % i, partition=2) for i in range(20)]
        await producer.flush()
        assert all(f.done() for f in futures)


async def test_an_unexpected_adapter_error_fails_the_records_instead_of_stranding_them() -> None:
    class Broken(FakeKafka):
        async def produce(
            self,
            node: int,
            *,
            acks: int,
            timeout_ms: int,
            batches: Sequence[tuple[TopicPartition, memoryview]],
        ) -> dict[TopicPartition, PartitionResponse]:
            raise RuntimeError("decoder bug")

    producer = make(Broken(CLUSTER))
    await producer.start()
    future = await producer.send("t", b"x", partition=0)
    with pytest.raises(ProducerFailedError, match="decoder bug") as info:
        await asyncio.wait_for(future, 5)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert info.value.possibly_written
    await asyncio.wait_for(producer.close(), 5)
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_expired_in_flight_batch_returns_its_buffer_on_forced_close() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fake = FakeKafka(CLUSTER, gate=lambda _r: never)
    producer = make(fake, delivery_timeout_ms=2000, request_timeout_ms=1000)
    await producer.start()
    future = await producer.send("t", b"x", partition=0)
    with pytest.raises(DeliveryTimeoutError, match="t-0"):
        await asyncio.wait_for(future, 10)
    await producer.close(timeout=0.5)
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_close_timeout_holds_while_producer_id_is_unavailable() -> None:
    class NoProducerId(FakeKafka):
        async def init_producer_id(self) -> tuple[int, int]:
            raise BrokerError(
                "coordinator not available",
                errno=Errors.COORDINATOR_NOT_AVAILABLE,
                retriable=True,
            )

    producer = make(NoProducerId(CLUSTER))
    await producer.start()
    future = await producer.send("t", b"x", partition=0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(producer.close(timeout=1.0), 30)
    assert loop.time() - start < 2.0
    assert isinstance(future.exception(), ProducerClosedError)


async def test_close_cleans_up_after_a_fatal_sender_error() -> None:
    class Unauthorized(FakeKafka):
        async def init_producer_id(self) -> tuple[int, int]:
            raise BrokerError(
                "cluster authorization failed",
                errno=Errors.CLUSTER_AUTHORIZATION_FAILED,
                retriable=False,
            )

    fake = Unauthorized(CLUSTER)
    producer = make(fake)
    await producer.start()
    future = await producer.send("t", b"x", partition=0)
    with pytest.raises(ProducerClosedError, match="cluster authorization failed"):
        await asyncio.wait_for(future, 5)
    await producer.close(timeout=1.0)
    assert fake.closed
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"y")


async def test_a_partition_without_an_acknowledged_batch_has_one_batch_in_flight() -> None:
    # A broker with no sequence state for a producer takes any first sequence, so a second
    # batch must not be able to overtake a first one that fails.
    release = asyncio.Event()
    seen: list[Request] = []

    def gate(request: Request) -> asyncio.Future[None]:
        seen.append(request)
        return asyncio.ensure_future(release.wait())  # type: ignore[arg-type]

    fake = FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1), gate=gate)
    fake.script.append({TP0: 6})  # the first attempt fails with NOT_LEADER_OR_FOLLOWER
    producer = make(fake, batch_size=200, retry_backoff_ms=10)
    async with producer:
        futures = [await producer.send("t", b"%03d" % i * 20, partition=0) for i in range(12)]
        await asyncio.sleep(0.05)
        assert len(seen) == 1  # several batches are full, yet only the first is on the wire
        release.set()
        results = await asyncio.gather(*futures)
    assert [r.offset for r in results] == list(range(12))
    assert [r.value for r in fake.log[TP0]] == [b"%03d" % i * 20 for i in range(12)]
    assert fake.max_in_flight_seen > 1  # after the first acknowledgement, pipelining resumes


async def test_a_bug_while_asking_for_a_producer_id_stops_the_producer() -> None:
    class Broken(FakeKafka):
        async def init_producer_id(self) -> tuple[int, int]:
            raise KeyError("bug in the adapter")

    producer = make(Broken(CLUSTER))
    async with producer:
        future = await producer.send("t", b"v", partition=0)
        with pytest.raises(ProducerClosedError) as info:
            await future
        assert isinstance(info.value.__cause__, KeyError)
        with pytest.raises(ProducerClosedError, match="stopped on an error"):
            await producer.send("t", b"v", partition=0)


async def test_a_record_the_topic_refuses_is_split_off_and_its_batch_mates_go_through() -> None:
    # One record over the topic's limit, batched with small ones under batch_size: splitting
    # must isolate it instead of rebuilding the same batch until the delivery timeout.
    fake = FakeKafka(CLUSTER, max_batch_bytes=3000)
    producer = make(fake, linger_ms=50, batch_size=16384, delivery_timeout_ms=60_000)
    async with producer:
        small = [await producer.send("t", b"s%03d" % i * 25, partition=0) for i in range(40)]
        big = await producer.send("t", b"B" * 4000, partition=0)
        small += [await producer.send("t", b"t%03d" % i * 25, partition=0) for i in range(40)]
        with pytest.raises(BrokerError) as info:
            await asyncio.wait_for(big, 10)
        results = await asyncio.wait_for(asyncio.gather(*small), 10)
    assert info.value.errno == Errors.MESSAGE_TOO_LARGE
    assert len({r.offset for r in results}) == 80
    assert [r.value for r in fake.log[TP0]] == [b"s%03d" % i * 25 for i in range(40)] + [
        b"t%03d" % i * 25 for i in range(40)
    ]
