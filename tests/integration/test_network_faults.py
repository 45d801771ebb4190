"""Network faults between the producer and the brokers, through the loopback fault proxy.

The producer bootstraps at the proxy ports (the PROXIED listener advertises them), so every
connection it opens, metadata included, goes through tests/faults/proxy.py.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from faults import cluster
from faults.proxy import Direction, Fault, FaultProxy
from faults.workload import Ledger, read_back, wait_until

from aioaccum import (
    BufferExhaustedError,
    DeliveryTimeoutError,
    FutureRecordMetadata,
    PoolStats,
    Producer,
)

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

PARTITIONS = 3
DELIVERY_TIMEOUT_MS = 3000
REQUEST_TIMEOUT_MS = 1500
BUFFER_MEMORY = 64 * 1024
BATCH_SIZE = 16 * 1024
VALUE = b"v" * 200
# How far past delivery_timeout_ms a batch may be failed: an in-flight batch is checked when
# the sender wakes, which it does for the timeout itself, so this only absorbs a busy machine.
EXPIRY_SLACK_MS = 5000
WAIT_S = 60.0
AGE = re.compile(r"for (?P<tp>\S+): (?P<age>\d+) ms has passed since batch creation")


@pytest.fixture
async def proxy(kafka_bootstrap: str) -> AsyncIterator[FaultProxy]:
    await cluster.check_managed(kafka_bootstrap)
    async with FaultProxy.for_cluster(await cluster.cluster_ports()) as running:
        yield running


def others(proxy: FaultProxy, baseline: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """Tasks still running that neither the test, the proxy nor pytest own."""
    current = asyncio.current_task()
    return {
        task
        for task in asyncio.all_tasks() - baseline - set(proxy.tasks())
        if task is not current and not task.done()
    }


def assert_pool_whole(stats: PoolStats) -> None:
    assert stats.closed
    assert stats.available == stats.total, stats
    assert stats.allocated == 0, stats
    assert stats.waiters == 0, stats
    assert (stats.unallocated + stats.free_buffers * stats.poolable_size + stats.free_sized
            == stats.total), stats


async def warm_up(producer: Producer, topic: str) -> None:
    """One acknowledged record per partition: connections open, producer id granted."""
    for partition in range(PARTITIONS):
        await (await producer.send(topic, b"warm-up", partition=partition))


@pytest.mark.parametrize(
    "fault",
    [
        Fault.stall(),
        Fault.half_open(Direction.TO_SERVER),
        Fault.half_open(Direction.TO_CLIENT, drop=False),
    ],
    ids=str,
)
async def test_cut_link_expires_records_with_partition_and_age_and_bounded_memory(
    proxy: FaultProxy, topic_factory: TopicFactory, fault: Fault
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    baseline = asyncio.all_tasks()
    loop = asyncio.get_running_loop()
    producer = Producer(
        proxy.bootstrap,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        buffer_memory=BUFFER_MEMORY,
        batch_size=BATCH_SIZE,
        max_block_ms=200,
    )
    await producer.start()
    try:
        await warm_up(producer, topic)
        pool = producer.pool
        assert pool is not None

        proxy.set_fault(fault)
        cut_at = loop.time()
        sent: list[tuple[int, FutureRecordMetadata]] = []
        failed_at: dict[int, float] = {}
        peak = 0

        def note_end(i: int, _: object) -> None:
            failed_at[i] = loop.time()

        exhausted: BufferExhaustedError | None = None
        # Twice the pool's worth of records: without a bound on memory all would be taken.
        for i in range(2 * BUFFER_MEMORY // len(VALUE)):
            try:
                fut = await producer.send(topic, VALUE, partition=i % PARTITIONS)
            except BufferExhaustedError as exc:
                exhausted = exc
                break
            fut.add_done_callback(functools.partial(note_end, i))
            sent.append((i % PARTITIONS, fut))
            peak = max(peak, pool.statistics().allocated)
        assert exhausted is not None, "the pool never ran out while the link was cut"
        assert str(BUFFER_MEMORY) in str(exhausted)
        assert peak <= BUFFER_MEMORY

        async with asyncio.timeout(WAIT_S):
            outcomes = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        kinds = Counter(type(o).__name__ for o in outcomes)
        assert kinds == {"DeliveryTimeoutError": len(sent)}, kinds
        for (partition, _), outcome in zip(sent, outcomes, strict=True):
            assert isinstance(outcome, DeliveryTimeoutError)
            match = AGE.search(str(outcome))
            assert match is not None, str(outcome)
            assert match["tp"] == f"{topic}-{partition}", str(outcome)
            age_ms = int(match["age"])
            assert DELIVERY_TIMEOUT_MS <= age_ms <= DELIVERY_TIMEOUT_MS + EXPIRY_SLACK_MS, str(
                outcome
            )
            assert f"delivery_timeout_ms={DELIVERY_TIMEOUT_MS}" in str(outcome)
        # Every batch after the cut was opened after it, so none may expire sooner.
        assert min(failed_at.values()) >= cut_at + DELIVERY_TIMEOUT_MS / 1000

        # The link heals: the same producer delivers again.
        proxy.clear()
        async with asyncio.timeout(WAIT_S):
            metadata = await (await producer.send(topic, b"after", partition=1))
        assert metadata.partition == 1
    finally:
        await producer.close()
    await asyncio.sleep(0)  # done-callbacks of the last futures
    assert producer.pool is not None
    assert_pool_whole(producer.pool.statistics())
    assert not others(proxy, baseline)


async def test_close_during_stall_fails_every_record_and_returns_all_memory(
    proxy: FaultProxy, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    baseline = asyncio.all_tasks()
    producer = Producer(proxy.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    await producer.start()
    ledger = Ledger(value_size=len(VALUE))
    try:
        await warm_up(producer, topic)
        proxy.set_fault(Fault.stall())
        for _ in range(3000):
            await ledger.send(producer, topic)
    finally:
        await producer.close(timeout=0.5)
    assert await ledger.settle() == 0
    assert ledger.not_sent == 0
    assert not ledger.untyped, ledger.samples
    assert ledger.failed + ledger.indeterminate == ledger.offered, (ledger.acked, ledger.errors)
    assert ledger.indeterminate > 0  # the records on the stalled wire may have been written
    assert set(ledger.errors) == {"ProducerClosedError"}, ledger.errors
    assert producer.pool is not None
    assert_pool_whole(producer.pool.statistics())
    assert not others(proxy, baseline)


async def test_reset_connections_are_retried_until_the_link_passes(
    proxy: FaultProxy, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=PARTITIONS, configs={"min.insync.replicas": "2"})
    baseline = asyncio.all_tasks()
    ledger = Ledger(value_size=len(VALUE))
    producer = Producer(proxy.bootstrap, delivery_timeout_ms=60000, linger_ms=5)
    await producer.start()
    try:
        await warm_up(producer, topic)
        producing = asyncio.create_task(
            ledger.produce(producer, topic, rate=2000, stop=lambda: False, limit=6000)
        )
        # Requests are in flight when the connections are reset.
        await wait_until(lambda: ledger.acked >= 500, timeout=WAIT_S)
        proxy.set_fault(Fault.reset())
        resets_at_cut = proxy.statistics().resets
        await wait_until(
            lambda: producer.metrics()["record-retry-total"] > 0 and producing.done(),
            timeout=WAIT_S,
        )
        assert proxy.statistics().resets > resets_at_cut
        proxy.set_fault(Fault.passing())
        await producing
        await producer.flush(timeout=WAIT_S)
    finally:
        await producer.close()
    assert await ledger.settle() == 0
    assert ledger.offered == 6000
    assert ledger.acked == ledger.offered, (ledger.errors, ledger.send_errors, ledger.samples)
    found = await read_back(kafka_bootstrap, topic, ledger)
    assert (found.lost, found.duplicated, found.misplaced, found.order_violations) == (0, 0, 0, 0)
    assert found.found == ledger.offered
    assert producer.pool is not None
    assert_pool_whole(producer.pool.statistics())
    assert not others(proxy, baseline)


async def test_slow_link_delivers_everything(
    proxy: FaultProxy, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    baseline = asyncio.all_tasks()
    ledger = Ledger(value_size=len(VALUE))
    producer = Producer(proxy.bootstrap, linger_ms=20)
    await producer.start()
    try:
        await warm_up(producer, topic)
        before = proxy.statistics().bytes_to_server
        proxy.set_fault(Fault.slow(100_000))
        for _ in range(5000):
            await ledger.send(producer, topic)
        await producer.flush(timeout=WAIT_S)
    finally:
        await producer.close()
    assert await ledger.settle() == 0
    assert ledger.acked == ledger.offered == 5000, (ledger.errors, ledger.samples)
    # All of it went through the throttled proxy, not around it.
    assert proxy.statistics().bytes_to_server - before >= 5000 * len(VALUE)
    found = await read_back(kafka_bootstrap, topic, ledger)
    assert (found.found, found.lost, found.duplicated, found.order_violations) == (5000, 0, 0, 0)
    assert producer.pool is not None
    assert_pool_whole(producer.pool.statistics())
    assert not others(proxy, baseline)
