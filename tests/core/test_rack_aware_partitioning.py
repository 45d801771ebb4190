"""Rack-aware partitioning (KIP-1123): keyless records keep to partitions led in the client's
rack when there are any, as Kafka 4.4's BuiltInPartitioner does; no event loop.

The racks come from the cluster view (brokers' ``broker.rack`` from metadata, the client's own
from ``client_rack`` with ``partitioner_rack_aware``), so a :class:`StaticCluster` with racks
stands in for the brokers here.
"""

from __future__ import annotations

import importlib.util
import random
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aioaccum import _speedups
from aioaccum._core import partitioner as partitioner_module
from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.partitioner import BuiltInPartitioner, default_partition
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool

TOPIC = "t"
RACKS = {0: "use1-az1", 1: "use1-az2", 2: "use1-az3"}
# Partition p is led by node p % 3: partitions 1 and 4 are led in use1-az2.
CLUSTER = StaticCluster.uniform({TOPIC: 6}, nodes=3, racks=RACKS, client_rack="use1-az2")
IN_RACK = {1, 4}


def produce(part: Any, cluster: StaticCluster, switches: int, topic: str = TOPIC) -> Counter[int]:
    """Draw the sticky partition ``switches`` times, each draw ended by a full batch."""
    counts: Counter[int] = Counter()
    for _ in range(switches):
        chosen = part.partition(topic, cluster)
        counts[chosen] += 1
        assert part.update_partition_info(topic, chosen, 100, True)
    return counts


# -- the draw without load statistics ---------------------------------------------------------


def test_keyless_records_keep_to_partitions_led_in_the_clients_rack() -> None:
    counts = produce(BuiltInPartitioner(100, rng=random.Random(1)), CLUSTER, 2_000)
    assert set(counts) == IN_RACK
    # Uniform among them, as Kafka's random pick over the filtered list.
    assert 850 <= counts[1] <= 1_150, counts


def test_without_a_client_rack_every_available_partition_is_drawn() -> None:
    cluster = StaticCluster.uniform({TOPIC: 6}, nodes=3, racks=RACKS)
    assert set(produce(BuiltInPartitioner(100, rng=random.Random(1)), cluster, 600)) == set(
        range(6)
    )


def test_no_leader_in_the_rack_falls_back_to_every_available_partition() -> None:
    cluster = StaticCluster.uniform({TOPIC: 6}, nodes=3, racks=RACKS, client_rack="eu-west")
    assert set(produce(BuiltInPartitioner(100, rng=random.Random(2)), cluster, 600)) == set(
        range(6)
    )


def test_brokers_without_a_rack_never_match() -> None:
    # Node 1 declares no rack: only node 0's partitions are in the client's rack "r".
    cluster = StaticCluster.uniform({TOPIC: 6}, nodes=3, racks={0: "r", 2: "s"}, client_rack="r")
    assert set(produce(BuiltInPartitioner(100, rng=random.Random(3)), cluster, 600)) == {0, 3}


def test_a_leaderless_partition_of_the_rack_is_not_drawn() -> None:
    cluster = CLUSTER.with_leader(TopicPartition(TOPIC, 4), None)
    assert set(produce(BuiltInPartitioner(100, rng=random.Random(4)), cluster, 300)) == {1}


def test_with_no_leader_at_all_racks_do_not_matter() -> None:
    cluster = StaticCluster(
        [0, 1], {(TOPIC, p): None for p in range(4)}, racks={0: "a", 1: "b"}, client_rack="a"
    )
    assert set(produce(BuiltInPartitioner(100, rng=random.Random(5)), cluster, 400)) == {0, 1, 2, 3}


def test_the_draw_follows_leaders_that_move_between_racks() -> None:
    part = BuiltInPartitioner(100, rng=random.Random(6))
    assert set(produce(part, CLUSTER, 300)) == IN_RACK
    # Partition 0's leadership moves to node 1 (use1-az2), partition 4's away from it: a new
    # metadata version, so the partitions of the rack are found again.
    moved = CLUSTER.with_leader(TopicPartition(TOPIC, 0), 1).with_leader(
        TopicPartition(TOPIC, 4), 2
    )
    assert set(produce(part, moved, 300)) == {0, 1}


def test_racks_narrow_each_topic_on_its_own() -> None:
    cluster = StaticCluster.uniform({"a": 3, "b": 2}, nodes=3, racks=RACKS, client_rack="use1-az3")
    part = BuiltInPartitioner(100, rng=random.Random(7))
    assert set(produce(part, cluster, 200, "a")) == {2}
    # Topic b has no partition led by node 2: all of its partitions stay candidates.
    assert set(produce(part, cluster, 200, "b")) == {0, 1}


# -- with load statistics (adaptive) ----------------------------------------------------------


def test_load_weights_apply_among_the_partitions_of_the_rack() -> None:
    # Rack "a" holds nodes 0 and 1: partitions 0, 1, 3 and 4. Partition 0 is empty and the
    # other three have nine batches queued, so within the rack the weights are 10, 1, 1, 1;
    # partitions 2 and 5 (node 2, rack "b") are never drawn although they are empty too.
    cluster = StaticCluster.uniform(
        {TOPIC: 6}, nodes=3, racks={0: "a", 1: "a", 2: "b"}, client_rack="a"
    )
    part = BuiltInPartitioner(100, rng=random.Random(8))
    part.update_partition_load_stats(TOPIC, {1: 9, 3: 9, 4: 9})
    counts = produce(part, cluster, 13_000)
    assert set(counts) == {0, 1, 3, 4}
    assert 0.73 <= counts[0] / 13_000 <= 0.81, counts


def test_excluded_partitions_of_the_rack_fall_back_to_the_other_candidates() -> None:
    part = BuiltInPartitioner(100, rng=random.Random(9))
    part.update_partition_load_stats(TOPIC, {0: 1}, excluded={1, 4})
    assert set(produce(part, CLUSTER, 600)) == {0, 2, 3, 5}


def test_the_rack_still_applies_when_adaptive_is_off() -> None:
    part = BuiltInPartitioner(100, adaptive=False, rng=random.Random(10))
    part.update_partition_load_stats(TOPIC, {1: 9}, excluded={4})
    assert set(produce(part, CLUSTER, 300)) == IN_RACK


# -- through the accumulator ------------------------------------------------------------------

BATCH = 1024
VALUE = b"v" * (BATCH // 2)
BOUND = estimate_size_in_bytes_upper_bound(None, VALUE, [])
BOUND_KEYED = estimate_size_in_bytes_upper_bound(b"key-17", VALUE, [])


def make_acc(*, ignore_keys: bool = False) -> RecordAccumulator:
    return RecordAccumulator(
        BufferPool(256 * BATCH, BATCH),
        batch_size=BATCH,
        linger=10.0,
        delivery_timeout=120.0,
        partitioner=BuiltInPartitioner(BATCH, rng=random.Random(11)),
        ignore_keys=ignore_keys,
    )


def append(acc: RecordAccumulator, key: bytes | None) -> TopicPartition:
    bound = BOUND if key is None else BOUND_KEYED
    got = acc.append(TOPIC, None, 0, key, VALUE, [], bound, range(6), CLUSTER, 1000.0)
    assert isinstance(got, FutureRecordMetadata)
    result = got.pending_result()
    assert result is not None
    return result.tp


def test_keyless_appends_land_in_the_rack_and_keyed_ones_hash_over_all() -> None:
    acc = make_acc()
    keyless = {append(acc, None).partition for _ in range(200)}
    assert keyless == IN_RACK
    key = b"key-17"
    expected = default_partition(key, 6)
    assert expected not in IN_RACK  # the key's partition is outside the rack
    assert {append(acc, key).partition for _ in range(5)} == {expected}


def test_ignored_keys_are_placed_like_keyless_records() -> None:
    acc = make_acc(ignore_keys=True)
    assert {append(acc, b"key-17").partition for _ in range(200)} == IN_RACK


def test_ready_loads_weigh_the_partitions_of_the_rack() -> None:
    acc = make_acc()
    # Loads are measured for the topics the partitioner has drawn for: one keyless record.
    # Then twelve batches queued on partition 1: after ready() reports the queues, new keyless
    # batches go mostly to partition 4 and never out of the rack.
    first = append(acc, None).partition
    assert first in IN_RACK
    for _ in range(12):
        got = acc.append(TOPIC, 1, 0, None, VALUE, [], BOUND, range(6), CLUSTER, 1000.0)
        assert isinstance(got, FutureRecordMetadata)
    acc.ready(CLUSTER, 1000.0)
    counts = Counter(append(acc, None).partition for _ in range(40))
    assert set(counts) <= IN_RACK
    assert counts[4] > 3 * counts[1], counts


# -- the compiled partitioner against the pure-Python reference -------------------------------


def pure_partitioner() -> ModuleType:
    """partitioner.py loaded from its source, whether or not the compiled module is in use."""
    source = Path(partitioner_module.__file__ or "").with_name("partitioner.py")
    spec = importlib.util.spec_from_file_location("pure_partitioner", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_compiled_module_is_the_one_in_use_when_the_hot_path_is_compiled() -> None:
    compiled = not (partitioner_module.__file__ or "").endswith(".py")
    assert compiled == _speedups.describe().startswith("compiled")


@pytest.mark.parametrize("adaptive", [True, False])
def test_compiled_and_pure_python_draw_the_same_partitions(adaptive: bool) -> None:
    pure = pure_partitioner()
    assert (pure.__file__ or "").endswith(".py")
    racks = {0: "a", 1: "b", 2: "a", 3: "c"}
    views = [
        StaticCluster.uniform({TOPIC: 12, "u": 5}, nodes=4, racks=racks, client_rack="a"),
        StaticCluster.uniform({TOPIC: 12, "u": 5}, nodes=4, racks=racks, client_rack="c"),
        StaticCluster.uniform({TOPIC: 12, "u": 5}, nodes=4, racks=racks, client_rack="zz"),
        StaticCluster.uniform({TOPIC: 12, "u": 5}, nodes=4, racks=racks),
    ]
    views.append(views[0].with_leader(TopicPartition(TOPIC, 0), None))
    views.append(views[0].with_leader(TopicPartition(TOPIC, 1), 2))
    draws = []
    for make in (partitioner_module.BuiltInPartitioner, pure.BuiltInPartitioner):
        part = make(300, adaptive=adaptive, rng=random.Random(12))
        script = random.Random(13)
        seen = []
        for step in range(3_000):
            cluster = views[(step // 97) % len(views)]
            topic = TOPIC if step % 5 else "u"
            if step % 211 == 0:
                loads = {p: script.randrange(6) for p in range(12)}
                part.update_load_stats({TOPIC: loads}, {TOPIC: {script.randrange(12)}})
            chosen = part.partition(topic, cluster)
            switched = part.update_partition_info(topic, chosen, script.randrange(50, 200), True)
            seen.append((chosen, switched))
        draws.append(seen)
    assert draws[0] == draws[1]
    assert len({chosen for chosen, _ in draws[0]}) > 5


# -- the racks of a StaticCluster -------------------------------------------------------------


def test_static_cluster_answers_racks_and_keeps_them_when_leaders_move() -> None:
    assert [CLUSTER.rack_of(node) for node in (0, 1, 2, 7)] == [*RACKS.values(), None]
    moved = CLUSTER.with_leader(TopicPartition(TOPIC, 0), 1)
    assert (moved.racks, moved.client_rack) == (RACKS, "use1-az2")
    # The client's rack is part of the view.
    assert moved != StaticCluster(moved.nodes, moved.partitions, racks=RACKS)
    assert moved == StaticCluster(
        moved.nodes, moved.partitions, racks=RACKS, client_rack="use1-az2"
    )
    with pytest.raises(ValueError, match=r"racks given for \[9\], which are not among the nodes"):
        StaticCluster([0], {(TOPIC, 0): 0}, racks={9: "x"})
