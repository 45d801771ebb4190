"""Sequence gaps that only mean "an earlier batch is being retried" keep the producer id."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum.producer import Producer

from .fake_kafka import SequencedFakeKafka

pytestmark = pytest.mark.looptime

TP0 = TopicPartition("t", 0)
CLUSTER = StaticCluster.uniform({"t": 3}, nodes=3)


@dataclass
class HeldSequencedFake(SequencedFakeKafka):
    """Holds requests on arrival while ``hold`` is set; each is judged when released."""

    hold: bool = False
    held: list[asyncio.Future[None]] = field(default_factory=list)

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        if self.hold:
            waiter = asyncio.get_running_loop().create_future()
            self.held.append(waiter)
            await waiter
        return await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)


async def test_a_batch_overtaking_a_retried_one_is_retried_under_the_same_producer_id() -> None:
    fake = HeldSequencedFake(CLUSTER)
    producer = Producer("fake:9092", kafka=fake, linger_ms=0, retry_backoff_ms=100)
    async with producer:
        first = await (await producer.send("t", b"a", partition=0))
        assert first.offset == 0  # acknowledged: the partition may have several in flight
        fake.hold = True
        earlier = await producer.send("t", b"b1", partition=0)
        await asyncio.sleep(0.001)  # drained and held
        later = await producer.send("t", b"b2", partition=0)
        await asyncio.sleep(0.001)
        assert len(fake.held) == 2
        fake.hold = False
        # The leader moved: the earlier batch is refused, so the later one meets a gap.
        fake.script.append({TP0: Errors.NOT_LEADER_OR_FOLLOWER})
        fake.held[0].set_result(None)
        await asyncio.sleep(0.001)
        fake.held[1].set_result(None)
        results = await asyncio.wait_for(asyncio.gather(earlier, later), 10)

    assert fake.out_of_order == 1
    # A new producer id would re-stamp batches whose first attempt may have been written,
    # which the broker could then no longer recognise as duplicates.
    assert fake.producer_ids_issued == 1
    assert [r.offset for r in results] == [1, 2]
    assert [r.value for r in fake.log[TP0]] == [b"a", b"b1", b"b2"]
