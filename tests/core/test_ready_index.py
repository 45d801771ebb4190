"""The accumulator's ready index: a sender turn looks at what changed, not at every partition,
and still keeps Kafka's rules (linger, backoff, rotation, leaders, muting, expiry)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool

BATCH = 1024
T0 = 1000.0
TOPIC = "t"


class CountingCluster:
    """A :class:`StaticCluster` that counts leader lookups; ``move`` makes a new version."""

    def __init__(self, cluster: StaticCluster) -> None:
        self.cluster = cluster
        self.lookups = 0

    def move(self, cluster: StaticCluster) -> None:
        self.cluster = cluster

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        return self.cluster.partitions_for_topic(topic)

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]:
        return self.cluster.available_partitions_for_topic(topic)

    def leader_for(self, tp: TopicPartition) -> int | None:
        self.lookups += 1
        return self.cluster.leader_for(tp)

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]:
        return self.cluster.partitions_for_node(node)

    def rack_of(self, node: int) -> str | None:
        return self.cluster.rack_of(node)

    @property
    def client_rack(self) -> str | None:
        return self.cluster.client_rack

    @property
    def metadata_version(self) -> int:
        return self.cluster.metadata_version


class Wakes:
    def __init__(self) -> None:
        self.now = 0
        self.by: list[float] = []

    def wakeup(self) -> None:
        self.now += 1

    def wake_by(self, deadline: float) -> None:
        self.by.append(deadline)


def make_acc(
    partitions: int, *, linger: float = 0.005, memory: int = 256 * BATCH
) -> tuple[RecordAccumulator, CountingCluster, Wakes]:
    acc = RecordAccumulator(
        BufferPool(memory, BATCH), batch_size=BATCH, linger=linger, delivery_timeout=120.0
    )
    wakes = Wakes()
    acc.set_wakeup(wakes.wakeup, wake_by=wakes.wake_by)
    cluster = CountingCluster(StaticCluster.uniform({TOPIC: partitions}, nodes=3))
    return acc, cluster, wakes


def append(
    acc: RecordAccumulator, cluster: CountingCluster, partition: int, now: float, size: int = 100
) -> FutureRecordMetadata:
    value = b"v" * size
    parts = cluster.partitions_for_topic(TOPIC)
    assert parts is not None
    got = acc.append(
        TOPIC, partition, 0, None, value, (), estimate_size_in_bytes_upper_bound(None, value, ()),
        parts, cluster, now,
    )
    assert not isinstance(got, BufferRequest), "the tests' pools never run dry"
    assert isinstance(got, FutureRecordMetadata)
    return got


def drain_all(
    acc: RecordAccumulator, cluster: CountingCluster, now: float, max_size: int = 1 << 20
) -> list[ProducerBatch]:
    check = acc.ready(cluster, now)
    out = acc.drain(cluster, check.ready_nodes, max_size, now)
    return [batch for node in sorted(out) for batch in out[node]]


def finish(acc: RecordAccumulator, batches: list[ProducerBatch]) -> None:
    for batch in batches:
        batch.complete(0, -1)
        acc.deallocate(batch)


def test_a_turn_looks_up_leaders_only_for_partitions_that_changed() -> None:
    acc, cluster, _ = make_acc(100_000)
    hot = [7, 20_011, 99_999]
    for p in hot:
        append(acc, cluster, p, T0)
    check = acc.ready(cluster, T0)
    assert check.ready_nodes == frozenset()  # lingering
    assert cluster.lookups == 3
    assert check.next_check_in == pytest.approx(0.005, abs=1e-9)
    # Nothing changed: nothing is looked at again.
    acc.ready(cluster, T0 + 0.001)
    assert cluster.lookups == 3
    batches = drain_all(acc, cluster, T0 + 0.005)
    assert sorted(b.tp.partition for b in batches) == hot
    finish(acc, batches)
    # The same partitions again, same metadata: leaders come from the cache.
    for p in hot:
        append(acc, cluster, p, T0 + 0.01)
    assert len(drain_all(acc, cluster, T0 + 0.02)) == 3
    assert cluster.lookups == 3


def test_new_metadata_looks_up_only_partitions_with_data() -> None:
    acc, cluster, _ = make_acc(1_000)
    append(acc, cluster, 4, T0)
    append(acc, cluster, 5, T0)
    acc.ready(cluster, T0)
    cluster.move(cluster.cluster.with_leader(TopicPartition(TOPIC, 4), 2))
    lookups = cluster.lookups
    check = acc.ready(cluster, T0 + 0.005)
    assert cluster.lookups - lookups == 2
    # t-4 moved from node 1 to node 2; t-5 stays on node 2.
    assert check.ready_nodes == {2}
    drained = acc.drain(cluster, [2], 1 << 20, T0 + 0.005)
    assert sorted(b.tp.partition for b in drained[2]) == [4, 5]


def test_a_partition_without_leader_is_reported_until_metadata_brings_one() -> None:
    acc, cluster, _ = make_acc(3)
    tp = TopicPartition(TOPIC, 1)
    cluster.move(cluster.cluster.with_leader(tp, None))
    append(acc, cluster, 1, T0)
    check = acc.ready(cluster, T0 + 1)
    assert check.unknown_leader_topics == {TOPIC}
    assert check.ready_nodes == frozenset()
    assert acc.ready(cluster, T0 + 2).unknown_leader_topics == {TOPIC}
    cluster.move(cluster.cluster.with_leader(tp, 0))
    check = acc.ready(cluster, T0 + 3)
    assert check.unknown_leader_topics == frozenset()
    assert check.ready_nodes == {0}


def test_drain_rotates_over_a_nodes_partitions_when_the_request_is_full() -> None:
    acc, cluster, _ = make_acc(9)  # node 0 leads t-0, t-3, t-6
    for p in (0, 3, 6):
        for _ in range(3):
            append(acc, cluster, p, T0, size=BATCH // 2)  # each record a batch of its own
    order = []
    for turn in range(6):
        batches = drain_all(acc, cluster, T0 + 1 + turn, max_size=1)  # one batch per request
        assert len(batches) == 1
        order.append(batches[0].tp.partition)
        finish(acc, batches)
    # Every partition gets its turn before any gets a second.
    assert sorted(order[:3]) == [0, 3, 6]
    assert order[3:] == order[:3]


def test_drain_takes_one_batch_per_partition_per_request() -> None:
    acc, cluster, _ = make_acc(3)
    for _ in range(4):
        append(acc, cluster, 0, T0, size=BATCH // 2)
    batches = drain_all(acc, cluster, T0)
    assert [b.tp.partition for b in batches] == [0]
    assert acc.queued_batches(TopicPartition(TOPIC, 0)) == 3


def test_a_retry_waits_out_its_backoff_then_goes_first() -> None:
    acc, cluster, _ = make_acc(3, linger=0.0)
    append(acc, cluster, 0, T0)
    [batch] = drain_all(acc, cluster, T0)
    acc.reenqueue(batch, T0 + 1, backoff=0.25)
    append(acc, cluster, 0, T0 + 1)  # behind the retry
    check = acc.ready(cluster, T0 + 1.1)
    assert check.ready_nodes == frozenset()
    assert check.next_check_in == pytest.approx(0.15)
    batches = drain_all(acc, cluster, T0 + 1.25)
    assert batches == [batch]


def test_a_muted_partition_waits_until_unmuted() -> None:
    acc, cluster, _ = make_acc(3, linger=0.0)
    tp = TopicPartition(TOPIC, 0)
    append(acc, cluster, 0, T0)
    acc.ready(cluster, T0)
    acc.mute(tp)
    assert drain_all(acc, cluster, T0 + 1) == []
    assert acc.ready(cluster, T0 + 1, ).ready_nodes == frozenset()
    acc.unmute(tp)
    assert [b.tp for b in drain_all(acc, cluster, T0 + 2)] == [tp]


def test_flush_makes_every_node_with_data_ready_before_linger() -> None:
    acc, cluster, _ = make_acc(3, linger=60.0)
    append(acc, cluster, 0, T0)
    append(acc, cluster, 2, T0)
    assert acc.ready(cluster, T0).ready_nodes == frozenset()
    acc.begin_flush()
    assert acc.ready(cluster, T0).ready_nodes == {0, 2}


def test_a_batch_put_back_expires_at_its_own_deadline() -> None:
    acc, cluster, _ = make_acc(3, linger=0.0)
    append(acc, cluster, 0, T0)
    [old] = drain_all(acc, cluster, T0)
    append(acc, cluster, 0, T0 + 60)  # a newer batch, first in the queue meanwhile
    acc.ready(cluster, T0 + 60)
    acc.reenqueue(old, T0 + 61, backoff=0.1)  # the older one goes back in front of it
    assert acc.expired_batches(T0 + 119.9) == []
    assert acc.expired_batches(T0 + 120) == [old]
    newer = acc.expired_batches(T0 + 180)
    assert [b.created for b in newer] == [T0 + 60]


def test_the_sender_hears_of_first_batches_not_of_every_record() -> None:
    acc, cluster, wakes = make_acc(3, linger=10.0)
    append(acc, cluster, 0, T0, size=BATCH // 3)
    assert (wakes.now, wakes.by) == (0, [T0 + 10.0])  # a linger to time
    append(acc, cluster, 0, T0, size=BATCH // 3)
    append(acc, cluster, 0, T0, size=BATCH // 3)  # no room: a second batch, the first can go
    assert wakes.now == 1
    for _ in range(20):  # a backlog behind a full first batch changes nothing the sender needs
        append(acc, cluster, 0, T0, size=BATCH // 3)
    assert wakes.now == 1
    assert wakes.by == [T0 + 10.0]


def test_a_retry_goes_after_its_backoff_not_after_a_leftover_linger() -> None:
    acc, cluster, _ = make_acc(3, linger=1.0)
    append(acc, cluster, 0, T0)
    acc.ready(cluster, T0)  # a linger timer for this batch, due at T0 + 1
    acc.begin_flush()
    [batch] = drain_all(acc, cluster, T0 + 0.01)  # drained early by a flush
    acc.end_flush()
    acc.reenqueue(batch, T0 + 0.05, backoff=0.1)
    check = acc.ready(cluster, T0 + 0.1)
    assert check.ready_nodes == frozenset()
    assert check.next_check_in == pytest.approx(0.05)
    assert drain_all(acc, cluster, T0 + 0.15) == [batch]


def test_retries_do_not_pile_up_expiry_entries() -> None:
    acc, cluster, _ = make_acc(3, linger=0.0)
    append(acc, cluster, 0, T0)
    for attempt in range(50):
        now = T0 + attempt
        append(acc, cluster, 0, now)  # the partition keeps data behind the retried batch
        [batch] = drain_all(acc, cluster, now)
        acc.reenqueue(batch, now, backoff=0.0)
        acc.expired_batches(now)
    assert len(acc._index._expiry) <= 3


def test_batches_expire_at_their_deadline_not_before() -> None:
    created, timeout = 1076.3774618976613, 51.014
    deadline = created + timeout  # where created + timeout and now - created disagree
    acc = RecordAccumulator(
        BufferPool(64 * BATCH, BATCH), batch_size=BATCH, linger=0.0, delivery_timeout=timeout
    )
    cluster = CountingCluster(StaticCluster.uniform({TOPIC: 3}, nodes=3))
    append(acc, cluster, 0, created)
    assert acc.expired_batches(deadline - 0.0005) == []
    [expired] = acc.expired_batches(deadline)
    assert expired.created == created
    assert acc.queued_batches(TopicPartition(TOPIC, 0)) == 0


def test_new_metadata_keeps_the_drain_rotation_where_it_was() -> None:
    acc, cluster, _ = make_acc(9)  # node 0 leads t-0, t-3, t-6
    for p in (0, 3, 6):
        for _ in range(3):
            append(acc, cluster, p, T0, size=BATCH // 2)
    order = []
    for turn in range(6):
        # Same leaders, new metadata version every turn.
        cluster.move(StaticCluster.uniform({TOPIC: 9}, nodes=3))
        batches = drain_all(acc, cluster, T0 + 1 + turn, max_size=1)
        order.append(batches[0].tp.partition)
        finish(acc, batches)
    assert sorted(order[:3]) == [0, 3, 6]
    assert order[3:] == order[:3]
