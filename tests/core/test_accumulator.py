"""RecordAccumulator rules, one test per rule of ready() and drain(), time passed in."""

from __future__ import annotations

import asyncio

import pytest

from aioaccum._core.accumulator import BufferRequest, BufferSupplier, RecordAccumulator
from aioaccum._core.batch import FinalState, ProducerBatch
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool
from aioaccum.errors import ProducerClosedError

BATCH = 1024
T0 = 1000.0
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("t", 2)


class Sink:
    """A record's future, read the way these tests check outcomes."""

    def __init__(self, future: FutureRecordMetadata) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    @property
    def result(self) -> RecordMetadata | None:
        done = self.future.done() and self.future.exception() is None
        return self.future.result() if done else None

    @property
    def error(self) -> BaseException | None:
        return self.future.exception() if self.future.done() else None


def make_acc(
    *,
    linger: float = 0.005,
    memory: int = 64 * BATCH,
    delivery_timeout: float = 120.0,
    txn: TransactionManager | None = None,
) -> tuple[RecordAccumulator, BufferPool]:
    pool = BufferPool(memory, BATCH)
    acc = RecordAccumulator(
        pool,
        batch_size=BATCH,
        linger=linger,
        delivery_timeout=delivery_timeout,
        transaction_manager=txn,
    )
    return acc, pool


TS = 1_700_000_000_000
CLUSTER = StaticCluster.uniform({"t": 3}, nodes=3)  # t-0 -> node 0, t-1 -> node 1, t-2 -> node 2
ONE_NODE = StaticCluster([0], {TP0: 0, TP1: 0, TP2: 0})


async def append(
    acc: RecordAccumulator, tp: TopicPartition, now: float, size: int = 100, n: int = 1
) -> list[Sink]:
    """Append as the producer does: the synchronous append, and the pool wait it asks for."""
    sinks = []
    value = b"v" * size
    bound = estimate_size_in_bytes_upper_bound(b"k", value, [])
    for _ in range(n):
        appended = acc.append(
            tp.topic, tp.partition, TS, b"k", value, [], bound, [0, 1, 2], CLUSTER, now
        )
        if isinstance(appended, BufferRequest):
            buffer = await acc_pool(acc).allocate(appended.size, 1000)
            appended = acc.append(
                tp.topic, tp.partition, TS, b"k", value, [], bound, [0, 1, 2], CLUSTER, now,
                granted=(appended, buffer),
            )
        assert isinstance(appended, FutureRecordMetadata)
        sinks.append(Sink(appended))
    return sinks


def acc_pool(acc: RecordAccumulator) -> BufferSupplier:
    return acc._pool  # the pool make_acc gave it


async def test_fresh_batch_waits_for_linger_and_reports_time_left() -> None:
    acc, _ = make_acc(linger=0.05)
    await append(acc, TP0, T0)
    check = acc.ready(CLUSTER, T0 + 0.01)
    assert check.ready_nodes == frozenset()
    assert check.next_check_in == pytest.approx(0.04)
    assert acc.ready(CLUSTER, T0 + 0.051).ready_nodes == {0}


async def test_full_batch_is_ready_before_linger() -> None:
    acc, _ = make_acc(linger=10.0)
    await append(acc, TP0, T0, size=BATCH // 2, n=2)  # the second does not fit: two batches
    assert acc.queued_batches(TP0) == 2
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}


async def test_single_batch_filled_to_the_limit_is_ready() -> None:
    acc, _ = make_acc(linger=10.0)
    # Fill one batch until appends stop fitting, then check only that batch is queued.
    while acc.queued_batches(TP0) < 2:
        await append(acc, TP0, T0, size=50)
    drained = acc.drain(CLUSTER, [0], 10 * BATCH, T0)
    assert len(drained[0]) == 1
    assert acc.queued_batches(TP0) == 1
    assert acc.ready(CLUSTER, T0).ready_nodes == frozenset()  # the new batch still lingers


async def test_linger_zero_sends_at_once() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP1, T0)
    assert acc.ready(CLUSTER, T0).ready_nodes == {1}


async def test_retry_waits_for_backoff_not_linger() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP0, T0)
    [batch] = acc.drain(CLUSTER, [0], 10 * BATCH, T0)[0]
    acc.reenqueue(batch, T0 + 1, backoff=0.2)
    check = acc.ready(CLUSTER, T0 + 1.1)
    assert check.ready_nodes == frozenset()
    assert check.next_check_in == pytest.approx(0.1)
    assert acc.drain(CLUSTER, [0], 10 * BATCH, T0 + 1.1) == {}
    assert acc.ready(CLUSTER, T0 + 1.2).ready_nodes == {0}
    assert acc.drain(CLUSTER, [0], 10 * BATCH, T0 + 1.2) == {0: [batch]}


async def test_exhausted_pool_makes_everything_ready() -> None:
    acc, pool = make_acc(linger=10.0, memory=2 * BATCH)
    await append(acc, TP0, T0)
    held = await pool.allocate(BATCH, 1000)
    waiter = asyncio.ensure_future(pool.allocate(BATCH, 10_000))
    await asyncio.sleep(0)
    assert pool.queued() == 1
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pool.deallocate(held)
    assert acc.ready(CLUSTER, T0).ready_nodes == frozenset()


async def test_closing_makes_everything_ready_and_refuses_appends() -> None:
    acc, _ = make_acc(linger=10.0)
    await append(acc, TP0, T0)
    acc.close()
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}
    with pytest.raises(ProducerClosedError):
        await append(acc, TP0, T0)


async def test_flush_in_progress_makes_everything_ready() -> None:
    acc, _ = make_acc(linger=10.0)
    await append(acc, TP2, T0)
    acc.begin_flush()
    assert acc.ready(CLUSTER, T0).ready_nodes == {2}
    acc.end_flush()
    assert acc.ready(CLUSTER, T0).ready_nodes == frozenset()


async def test_muted_partition_is_neither_ready_nor_drained() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP0, T0)
    acc.mute(TP0)
    assert acc.ready(CLUSTER, T0).ready_nodes == frozenset()
    assert acc.drain(CLUSTER, [0], 10 * BATCH, T0) == {}
    acc.unmute(TP0)
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}


async def test_unknown_leader_is_reported_not_ready() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP0, T0)
    leaderless = CLUSTER.with_leader(TP0, None)
    check = acc.ready(leaderless, T0)
    assert check.ready_nodes == frozenset()
    assert check.unknown_leader_topics == {"t"}


async def test_drain_rotates_across_partitions_of_a_node() -> None:
    acc, _ = make_acc(linger=0.0)
    for tp in (TP0, TP1, TP2):
        await append(acc, tp, T0, size=BATCH // 2, n=4)  # several batches each
    order = []
    for _ in range(6):
        # A cap below two batches: each drain takes exactly one.
        [batch] = acc.drain(ONE_NODE, [0], BATCH // 2, T0)[0]
        order.append(batch.tp.partition)
    assert order == [0, 1, 2, 0, 1, 2]


async def test_drain_takes_one_batch_per_partition_within_the_cap() -> None:
    acc, _ = make_acc(linger=0.0)
    for tp in (TP0, TP1, TP2):
        await append(acc, tp, T0, size=300, n=2)  # two records share one batch
    drained = acc.drain(ONE_NODE, [0], 10 * BATCH, T0)[0]
    assert [b.tp for b in drained] == [TP0, TP1, TP2]
    sizes = [len(b.records()) for b in drained]
    cap = sizes[0] + sizes[1]  # room for exactly two
    acc2, _ = make_acc(linger=0.0)
    for tp in (TP0, TP1, TP2):
        await append(acc2, tp, T0, size=300, n=2)
    capped = acc2.drain(ONE_NODE, [0], cap, T0)[0]
    assert [b.tp for b in capped] == [TP0, TP1]
    assert sum(len(b.records()) for b in capped) <= cap


async def test_first_batch_always_goes_even_above_the_cap() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP0, T0, size=3 * BATCH)  # one record larger than a batch
    drained = acc.drain(CLUSTER, [0], BATCH, T0)[0]
    assert len(drained) == 1
    assert len(drained[0].records()) > BATCH


async def test_drain_closes_batches_so_new_records_open_a_new_one() -> None:
    acc, _ = make_acc(linger=0.0)
    await append(acc, TP0, T0)
    [batch] = acc.drain(CLUSTER, [0], BATCH, T0)[0]
    assert batch.is_closed
    await append(acc, TP0, T0)
    assert acc.queued_batches(TP0) == 1
    assert batch.record_count == 1


async def test_expired_batches_are_removed_by_delivery_timeout() -> None:
    acc, _ = make_acc(linger=10.0, delivery_timeout=1.0)
    await append(acc, TP0, T0)
    await append(acc, TP1, T0 + 0.5)
    assert acc.expired_batches(T0 + 0.9) == []
    expired = acc.expired_batches(T0 + 1.0)
    assert [b.tp for b in expired] == [TP0]
    assert acc.queued_batches(TP0) == 0
    assert acc.queued_batches(TP1) == 1


async def test_reenqueue_keeps_sequence_order() -> None:
    txn = TransactionManager()
    txn.set_producer_id_and_epoch(7, 0)
    acc, _ = make_acc(linger=0.0, txn=txn)
    batches: list[ProducerBatch] = []
    for _ in range(3):
        await append(acc, TP0, T0, n=2)
        batches.extend(acc.drain(CLUSTER, [0], 10 * BATCH, T0)[0])
    assert [b.base_sequence for b in batches] == [0, 2, 4]
    for batch in reversed(batches):  # failures handled in any order
        acc.reenqueue(batch, T0, backoff=0.0)
    drained = [acc.drain(CLUSTER, [0], 10 * BATCH, T0 + 1)[0][0] for _ in range(3)]
    assert [b.base_sequence for b in drained] == [0, 2, 4]


async def test_append_waits_for_memory_and_returns_it_if_a_batch_appeared() -> None:
    acc, pool = make_acc(linger=0.0, memory=2 * BATCH)
    await append(acc, TP0, T0)
    await append(acc, TP1, T0)
    assert pool.available_memory() == 0
    # TP0's batch is closed by the drain; the next TP0 record needs a new buffer and must wait.
    [b0] = acc.drain(CLUSTER, [0], 10 * BATCH, T0)[0]
    waiting = asyncio.ensure_future(append(acc, TP0, T0))
    await asyncio.sleep(0)
    assert pool.queued() == 1
    b0.complete(0, -1)
    acc.deallocate(b0)
    await waiting
    assert acc.queued_batches(TP0) == 1
    assert pool.available_memory() == 0


async def test_complete_resolves_each_record_with_its_offset() -> None:
    acc, pool = make_acc(linger=0.0)
    sinks = await append(acc, TP1, T0, n=3)
    [batch] = acc.drain(CLUSTER, [1], 10 * BATCH, T0)[1]
    assert batch.complete(base_offset=40, log_append_time=-1)
    assert [s.result.offset for s in sinks if s.result] == [40, 41, 42]
    assert all(s.result and s.result.serialized_value_size == 100 for s in sinks)
    acc.deallocate(batch)
    assert pool.available_memory() == pool.total_memory
    assert batch.final_state is FinalState.SUCCEEDED
    with pytest.raises(RuntimeError, match="already succeeded"):
        batch.fail(RuntimeError("late"))


async def test_split_keeps_each_records_own_result() -> None:
    acc, pool = make_acc(linger=0.0)
    sinks = await append(acc, TP0, T0, size=200, n=4)
    [big] = acc.drain(CLUSTER, [0], 10 * BATCH, T0)[0]
    assert big.record_count == 4
    count = acc.split_and_reenqueue(big, T0, backoff=0.0)
    assert count >= 1
    assert big.final_state is FinalState.ABORTED
    assert all(not s.done() for s in sinks)
    next_offset = 100
    while acc.queued_batches(TP0):
        [part] = acc.drain(CLUSTER, [0], 1, T0 + 1)[0]
        part.complete(next_offset, -1)
        next_offset += part.record_count
        acc.deallocate(part)
    assert [s.result.offset for s in sinks if s.result] == [100, 101, 102, 103]
    assert pool.available_memory() == pool.total_memory


async def test_abort_unended_fails_records_and_returns_memory() -> None:
    acc, pool = make_acc(linger=10.0)
    sinks = await append(acc, TP0, T0, n=2) + await append(acc, TP2, T0)
    error = ProducerClosedError("closing")
    aborted = acc.abort_unended(error)
    assert len(aborted) == 2
    assert all(isinstance(s.error, ProducerClosedError) for s in sinks)
    assert sinks[0].error is not sinks[1].error  # each record its own copy
    assert pool.available_memory() == pool.total_memory
    assert not acc.has_incomplete()
