"""Keyless records fill whole batches: the sticky partitioner moves on when its partition's batch
is full (KIP-480's onNewBatch) rather than after a record has opened a batch of its own there,
and a drain leaves the batch being filled until it may go by itself. Time is passed in; there
is no event loop."""

from __future__ import annotations

import random

import pytest

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.partitioner import BuiltInPartitioner
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool

BATCH = 1024
T0 = 1000.0
TS = 1_700_000_000_000
TOPIC = "t"
PARTITIONS = [0, 1, 2]
THREE_NODES = StaticCluster.uniform({TOPIC: 3}, nodes=3)
ONE_NODE = StaticCluster([0], {TopicPartition(TOPIC, p): 0 for p in PARTITIONS})
# 300-byte values: three records fill a 1 KiB batch (61 + 3 x 310 bytes) and a fourth does not
# fit, so the batch size is no multiple of the records' size.
VALUE = b"v" * 300
BOUND = estimate_size_in_bytes_upper_bound(None, VALUE, [])
PER_BATCH = 3


def make_acc(
    cluster: StaticCluster, *, seed: int = 3, chunk_size: int = 0
) -> tuple[RecordAccumulator, BuiltInPartitioner]:
    partitioner = BuiltInPartitioner(BATCH, adaptive=False, rng=random.Random(seed))
    acc = RecordAccumulator(
        BufferPool(64 * BATCH, chunk_size or BATCH),
        batch_size=BATCH,
        linger=10.0,  # nothing lingers out in these tests
        delivery_timeout=120.0,
        partitioner=partitioner,
        chunk_size=chunk_size,
    )
    return acc, partitioner


def put(acc: RecordAccumulator, cluster: StaticCluster) -> None:
    got = acc.append(TOPIC, None, TS, None, VALUE, [], BOUND, PARTITIONS, cluster, T0)
    assert isinstance(got, FutureRecordMetadata)


@pytest.mark.parametrize("chunk_size", [0, 256])
def test_keyless_batches_hold_all_that_fits_when_the_size_does_not_divide(
    chunk_size: int,
) -> None:
    # Before: the fourth record opened a batch on the full batch's partition, and the switch
    # that followed left it there alone: batches of 3, 1, 3, 1, ...
    acc, _ = make_acc(THREE_NODES, chunk_size=chunk_size)
    for _ in range(10 * PER_BATCH + 1):
        put(acc, THREE_NODES)
    counts = sorted(b.record_count for b in acc.incomplete_batches())
    assert counts == [1] + [PER_BATCH] * 10


def test_a_batch_the_switch_leaves_is_closed_and_may_go_at_once() -> None:
    acc, partitioner = make_acc(THREE_NODES)
    for _ in range(PER_BATCH):
        put(acc, THREE_NODES)
    first = partitioner.peek(TOPIC)
    assert first is not None
    put(acc, THREE_NODES)  # does not fit: the next partition takes it
    assert partitioner.peek(TOPIC) != first
    (full,) = [b for b in acc.incomplete_batches() if b.tp.partition == first]
    assert full.is_full
    assert full.record_count == PER_BATCH
    ready = acc.ready(THREE_NODES, T0)
    assert ready.ready_nodes == frozenset({first})  # without waiting for the 10 s linger


def test_a_drain_leaves_the_sticky_batch_to_fill_unless_a_flush_wants_everything() -> None:
    acc, partitioner = make_acc(ONE_NODE)
    for _ in range(PER_BATCH + 1):  # a full batch, and the next partition's first record
        put(acc, ONE_NODE)
    filling = partitioner.peek(TOPIC)
    drained = acc.drain(ONE_NODE, [0], 1 << 20, T0)[0]
    assert [(b.tp.partition != filling, b.record_count) for b in drained] == [(True, PER_BATCH)]
    for _ in range(PER_BATCH - 1):  # the sticky batch fills up and goes with the next drain
        put(acc, ONE_NODE)
    put(acc, ONE_NODE)
    drained = acc.drain(ONE_NODE, [0], 1 << 20, T0)[0]
    assert [(b.tp.partition, b.record_count) for b in drained] == [(filling, PER_BATCH)]
    acc.begin_flush()
    drained = acc.drain(ONE_NODE, [0], 1 << 20, T0)[0]
    assert [b.record_count for b in drained] == [1]  # a flush takes the one being filled too
    acc.end_flush()


def test_on_new_batch_moves_on_after_half_a_batch() -> None:
    partitioner = BuiltInPartitioner(BATCH, adaptive=False, rng=random.Random(1))
    chosen = partitioner.partition(TOPIC, THREE_NODES)
    partitioner.update_partition_info(TOPIC, chosen, BATCH // 2 - 1, enable_switch=False)
    assert not partitioner.on_new_batch(TOPIC, chosen)  # under half a batch: it stays
    assert partitioner.peek(TOPIC) == chosen
    assert not partitioner.on_new_batch(TOPIC, (chosen + 1) % 3)  # not the sticky one
    partitioner.update_partition_info(TOPIC, chosen, 1, enable_switch=False)
    assert partitioner.on_new_batch(TOPIC, chosen)
    assert partitioner.peek(TOPIC) is None
    assert partitioner.produced_bytes(TOPIC) == 0
