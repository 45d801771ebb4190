"""Adaptive partitioning (KIP-794) as the accumulator feeds it: queue sizes measured by ready(),
partitions of a stalled node left out, time passed in, no event loop."""

from __future__ import annotations

import random
from collections import Counter

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
CLUSTER = StaticCluster.uniform({TOPIC: 3}, nodes=3)  # t-p is led by node p
# Half a batch: each record opens a batch of its own, so queue lengths are easy to set.
VALUE = b"v" * (BATCH // 2)
BOUND = estimate_size_in_bytes_upper_bound(None, VALUE, [])


def make_acc(
    *, adaptive: bool = True, availability_timeout: float = 0.0, linger: float = 10.0, seed: int = 7
) -> tuple[RecordAccumulator, BuiltInPartitioner]:
    partitioner = BuiltInPartitioner(BATCH, adaptive=adaptive, rng=random.Random(seed))
    acc = RecordAccumulator(
        BufferPool(64 * BATCH, BATCH),
        batch_size=BATCH,
        linger=linger,
        delivery_timeout=120.0,
        partitioner=partitioner,
        availability_timeout=availability_timeout,
    )
    return acc, partitioner


def put(acc: RecordAccumulator, partition: int | None, now: float = T0) -> None:
    """Append one record: to ``partition``, or keyless (the sticky partitioner picks)."""
    got = acc.append(TOPIC, partition, TS, None, VALUE, [], BOUND, PARTITIONS, CLUSTER, now)
    assert isinstance(got, FutureRecordMetadata)


def fill(acc: RecordAccumulator, queued: dict[int, int]) -> None:
    """Queue batches until each partition has the number given."""
    for partition, count in queued.items():
        while acc.queued_batches(TopicPartition(TOPIC, partition)) < count:
            put(acc, partition)


def draws(partitioner: BuiltInPartitioner, n: int) -> Counter[int]:
    """Draw the sticky partition ``n`` times, releasing it after each draw as a full batch
    would."""
    counts: Counter[int] = Counter()
    for _ in range(n):
        chosen = partitioner.partition(TOPIC, CLUSTER)
        counts[chosen] += 1
        assert partitioner.update_partition_info(TOPIC, chosen, BATCH)
    return counts


def test_long_queue_is_drawn_less_after_ready() -> None:
    acc, partitioner = make_acc()
    put(acc, None)  # a keyless record: the topic is now the sticky partitioner's
    fill(acc, {0: 6, 1: 1, 2: 1})
    before = draws(partitioner, 3000)
    assert before[0] > 800  # nothing measured yet: a uniform draw

    # Only node 0 has a full batch; the lingering partitions are measured all the same.
    assert acc.ready(CLUSTER, T0).ready_nodes == {0}
    after = draws(partitioner, 3900)
    # Weights are max_queue + 1 - queue: 1, 6 and 6 out of 13.
    assert 150 < after[0] < 450
    assert after[1] > 1500
    assert after[2] > 1500


def test_loads_follow_the_queues_at_each_ready() -> None:
    acc, partitioner = make_acc()
    put(acc, None)
    fill(acc, {0: 6, 1: 1, 2: 1})
    acc.ready(CLUSTER, T0)
    assert draws(partitioner, 1300)[0] < 200
    # Node 0 catches up: every queue is empty, so the draw is uniform again.
    while any(acc.queued_batches(TopicPartition(TOPIC, p)) for p in PARTITIONS):
        acc.drain(CLUSTER, [0, 1, 2], 100 * BATCH, T0)
    acc.ready(CLUSTER, T0 + 1)
    assert draws(partitioner, 3000)[0] > 800


def test_partition_of_a_stalled_node_is_avoided_until_the_node_drains() -> None:
    acc, partitioner = make_acc(availability_timeout=0.1, linger=0.0)
    put(acc, None)
    fill(acc, {0: 1, 1: 1, 2: 1})
    assert acc.ready(CLUSTER, T0).ready_nodes == {0, 1, 2}
    acc.drain(CLUSTER, [1, 2], 100 * BATCH, T0)  # node 0 cannot be sent to
    assert acc.ready(CLUSTER, T0 + 0.05).ready_nodes == {0}
    assert acc.ready(CLUSTER, T0 + 0.15).ready_nodes == {0}
    # Known ready 0.05 s after its last drain, when this check began: not avoided yet.
    assert draws(partitioner, 300)[0] > 0

    # Ready at T0 + 0.15, not drained since T0: 150 ms > 100 ms.
    acc.ready(CLUSTER, T0 + 0.16)
    assert draws(partitioner, 300)[0] == 0
    acc.ready(CLUSTER, T0 + 0.5)
    assert draws(partitioner, 300)[0] == 0

    assert acc.drain(CLUSTER, [0], 100 * BATCH, T0 + 0.6)  # the node took its batch
    acc.ready(CLUSTER, T0 + 0.61)
    assert draws(partitioner, 300)[0] > 50


def test_node_ready_after_a_quiet_spell_is_not_avoided_when_drained() -> None:
    acc, partitioner = make_acc(availability_timeout=0.1, linger=0.0)
    put(acc, None)
    fill(acc, {0: 1, 1: 1, 2: 1})
    acc.ready(CLUSTER, T0)
    acc.drain(CLUSTER, PARTITIONS, 100 * BATCH, T0)
    # Nothing to send for a second, then a batch on each partition, sent at once.
    fill(acc, {0: 1, 1: 1, 2: 1})
    assert acc.ready(CLUSTER, T0 + 1).ready_nodes == {0, 1, 2}
    acc.drain(CLUSTER, PARTITIONS, 100 * BATCH, T0 + 1)
    fill(acc, {0: 1, 1: 1, 2: 1})
    acc.ready(CLUSTER, T0 + 1.01)
    assert all(draws(partitioner, 300)[p] > 50 for p in PARTITIONS)


def test_zero_availability_timeout_never_avoids_a_partition() -> None:
    acc, partitioner = make_acc(availability_timeout=0.0, linger=0.0)
    put(acc, None)
    fill(acc, {0: 1, 1: 1, 2: 1})
    for step in range(10):
        assert 0 in acc.ready(CLUSTER, T0 + step).ready_nodes  # never drained
    assert draws(partitioner, 300)[0] > 50


def test_stats_are_not_updated_when_adaptive_is_off() -> None:
    acc, partitioner = make_acc(adaptive=False, availability_timeout=0.1, linger=0.0, seed=11)
    put(acc, None)
    fill(acc, {0: 6, 1: 1, 2: 1})
    for step in range(5):
        acc.ready(CLUSTER, T0 + step)  # node 0 is ready and never drained
    # Exactly the draws of a partitioner that never heard of loads (same seed, same history).
    reference = BuiltInPartitioner(BATCH, adaptive=False, rng=random.Random(11))
    reference.partition(TOPIC, CLUSTER)
    assert draws(partitioner, 500) == draws(reference, 500)
