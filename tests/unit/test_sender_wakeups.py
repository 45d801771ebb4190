"""The sender runs when there is something to do, not once per batch opened: records spread
over many partitions open a batch each, and that must not cost a sender turn each."""

from __future__ import annotations

import asyncio

import pytest

from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

PARTITIONS = 600
RECORDS = 6_000


class CountingKafka(FakeKafka):
    """Counts how often the accumulator asked which metadata it works from (once per
    ``ready`` and once per ``drain``, so about once per sender turn), and for leaders."""

    turns: int = 0
    lookups: int = 0

    @property
    def metadata_version(self) -> int:
        self.turns += 1
        return self.cluster.metadata_version

    def leader_for(self, tp: TopicPartition) -> int | None:
        self.lookups += 1
        return self.cluster.leader_for(tp)


async def test_keyed_records_over_many_partitions_cost_few_sender_turns() -> None:
    fake = CountingKafka(StaticCluster.uniform({"t": PARTITIONS}, nodes=3))
    producer = Producer("fake:9092", kafka=fake, linger_ms=5, enable_idempotence=False)
    async with producer:
        futures = [
            await producer.send("t", b"v", key=b"k%d" % i) for i in range(RECORDS)
        ]
        turns_while_sending = fake.turns
        results = await asyncio.gather(*futures)
    # Nearly every record opened a batch of its own; before, each one woke the sender.
    assert producer.metrics()["batch-size-avg"] < 200
    assert turns_while_sending < RECORDS / 20, turns_while_sending
    # Leaders are looked up once per partition while the metadata stays the same, not once
    # per partition with data on every turn.
    assert fake.lookups <= PARTITIONS, fake.lookups
    assert len({r.partition for r in results}) == PARTITIONS
    assert sum(len(records) for records in fake.log.values()) == RECORDS


async def test_a_new_batch_after_a_quiet_spell_is_sent_after_its_linger() -> None:
    # The sender sleeps without a deadline while nothing is queued; the batch that opens
    # then must bring its wake-up forward to the end of its linger.
    fake = FakeKafka(StaticCluster.uniform({"t": 3}, nodes=3))
    producer = Producer("fake:9092", kafka=fake, linger_ms=20)
    async with producer:
        await asyncio.sleep(1.0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        future = await producer.send("t", b"v", partition=1)
        await future
        waited = loop.time() - start
    assert 0.019 <= waited <= 0.03, waited


async def test_a_batch_a_thread_opens_during_a_sender_turn_wakes_the_sender() -> None:
    # A turn may have looked at the queues before the thread's batch opened; it must not then
    # sleep on a deadline that knows nothing of it.
    fake = CountingKafka(StaticCluster.uniform({"t": 3}, nodes=3))
    producer = Producer("fake:9092", kafka=fake, linger_ms=5)
    async with producer:
        sender = producer._sender
        assert sender is not None
        await asyncio.sleep(0.1)  # the sender sleeps with nothing to do
        turns = fake.turns
        sender._deadline = float("-inf")  # what a thread reads while a turn runs
        await asyncio.to_thread(sender.wake_by_threadsafe, 1e18)
        await asyncio.sleep(0.01)
        assert fake.turns > turns
        # Asleep, a deadline no sooner than its own wakes nothing.
        turns = fake.turns
        await asyncio.to_thread(sender.wake_by_threadsafe, sender._deadline)
        await asyncio.sleep(0.01)
        assert fake.turns == turns
