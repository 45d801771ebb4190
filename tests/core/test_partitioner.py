"""Keyed hashing identical to the Java client, and the KIP-794 sticky partitioner."""

from __future__ import annotations

import random
import warnings
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioaccum._core.cluster import ClusterView, StaticCluster, TopicPartition
from aioaccum._core.partitioner import (
    BuiltInPartitioner,
    Partitioner,
    default_partition,
    murmur2,
    partition_for,
    to_positive,
)

with warnings.catch_warnings():
    # kafka-python's package import trips a DeprecationWarning in importlib.resources.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# kafka-python's test_murmur2_java_compatibility: partitions chosen by the Java client among 1000.
JAVA_PARTITIONS_OF_1000 = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]


class ScriptedRandom(random.Random):
    """A ``random.Random`` whose ``randrange`` replays given values and records each call."""

    def __init__(self, values: Sequence[int]) -> None:
        super().__init__(0)
        self.values = list(values)
        self.calls: list[int] = []

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        assert stop is None
        assert step == 1
        self.calls.append(start)
        value = self.values.pop(0)
        assert 0 <= value < start
        return value


# -- murmur2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), JAVA_PARTITIONS_OF_1000)
def test_default_partition_matches_java_client(data: bytes, expected: int) -> None:
    assert default_partition(data, 1000) == expected


@given(st.binary(max_size=300))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    ours = murmur2(data)
    assert -(2**31) <= ours < 2**31
    # kafka-python returns the same 32 bits, unsigned.
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(data)


@given(st.binary(max_size=64))
def test_murmur2_accepts_bytearray_and_memoryview(data: bytes) -> None:
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == murmur2(data)


def test_murmur2_covers_every_tail_length() -> None:
    # Lengths 4..7 walk the 0-, 1-, 2- and 3-byte tails after one whole word.
    for n in range(4, 8):
        data = bytes(range(1, n + 1))
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_murmur2_of_long_keys() -> None:
    for n in (4096, 4097, 10_000):
        data = bytes(i * 7 % 256 for i in range(n))
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
        assert murmur2(data) == murmur2(data)


def test_to_positive_clears_the_sign_bit_rather_than_negating() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    assert to_positive(-790332482) == 1357151166


def test_default_partition_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="num_partitions must be > 0, got 0"):
        default_partition(b"k", 0)


# -- partition_for ----------------------------------------------------------------------------

CLUSTER = StaticCluster.uniform({"t": 6, "one": 1}, nodes=3)


def choose_partition(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    cluster: StaticCluster,
    *,
    partition: int | None = None,
    partitioner: Partitioner | None = None,
    ignore_keys: bool = False,
) -> int | None:
    """``partition_for`` as the accumulator calls it: with the topic's partitions at hand."""
    partitions = cluster.partitions_for_topic(topic)
    assert partitions
    return partition_for(
        topic, partition, key, value, partitions, cluster, partitioner, ignore_keys
    )


def test_explicit_partition_wins_over_key_and_partitioner() -> None:
    def never(*_: object) -> int:
        raise AssertionError("custom partitioner consulted")

    assert choose_partition("t", b"k", b"v", CLUSTER, partition=4, partitioner=never) == 4


def test_explicit_partition_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"partition 6 is not a partition of topic 't'.*0\.\.5"):
        choose_partition("t", None, None, CLUSTER, partition=6)


def test_custom_partitioner_gets_documented_arguments() -> None:
    seen: list[tuple[object, ...]] = []

    def custom(
        topic: str,
        key: bytes | None,
        value: bytes | None,
        all_partitions: Sequence[int],
        available: Sequence[int],
    ) -> int:
        seen.append((topic, key, value, list(all_partitions), list(available)))
        return 3

    cluster = CLUSTER.with_leader(TopicPartition("t", 2), None)
    assert choose_partition("t", b"k", b"v", cluster, partitioner=custom) == 3
    assert seen == [("t", b"k", b"v", [0, 1, 2, 3, 4, 5], [0, 1, 3, 4, 5])]


@pytest.mark.parametrize("bad", [-1, 6, True, "2"])
def test_custom_partitioner_result_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="custom partitioner returned"):
        choose_partition("t", b"k", None, CLUSTER, partitioner=lambda *_: bad)  # type: ignore[arg-type]


def test_keyed_records_hash_over_all_partitions() -> None:
    assert choose_partition("t", b"foobar", None, CLUSTER) == 1357151166 % 6
    # A leaderless partition still receives its keys: the mapping must not move.
    cluster = CLUSTER.with_leader(TopicPartition("t", 1357151166 % 6), None)
    assert choose_partition("t", b"foobar", None, cluster) == 1357151166 % 6


def test_keyless_and_ignored_keys_defer_to_the_sticky_partitioner() -> None:
    assert choose_partition("t", None, b"v", CLUSTER) is None
    assert choose_partition("t", b"k", b"v", CLUSTER, ignore_keys=True) is None


# -- BuiltInPartitioner: stickiness -----------------------------------------------------------


def test_partition_sticks_until_batch_size_bytes_then_draws_again() -> None:
    rng = ScriptedRandom([2, 4])
    part = BuiltInPartitioner(1000, rng=rng)
    assert part.partition("t", CLUSTER) == 2
    for _ in range(9):  # 900 bytes: not yet enough
        assert not part.update_partition_info("t", 2, 100, True)
        assert part.partition("t", CLUSTER) == 2
    assert part.produced_bytes("t") == 900
    assert rng.calls == [6]
    assert part.update_partition_info("t", 2, 100, True)  # 1000 bytes: switch
    assert part.peek("t") is None
    assert part.partition("t", CLUSTER) == 4
    assert part.produced_bytes("t") == 0
    assert rng.calls == [6, 6]


def test_switch_waits_for_a_full_batch_but_not_past_twice_batch_size() -> None:
    part = BuiltInPartitioner(1000, rng=ScriptedRandom([0, 1]))
    assert part.partition("t", CLUSTER) == 0
    assert not part.on_append("t", 0, 1500, False)  # enough bytes, but the batch isn't full
    assert part.peek("t") == 0
    assert part.on_append("t", 0, 500, False)  # 2000 = 2 * batch size: switch regardless
    assert part.partition("t", CLUSTER) == 1


def test_appends_to_other_partitions_do_not_count() -> None:
    part = BuiltInPartitioner(1000, rng=ScriptedRandom([3]))
    assert part.partition("t", CLUSTER) == 3
    assert not part.update_partition_info("t", 5, 5000, True)  # a keyed record elsewhere
    assert not part.update_partition_info("other", 3, 5000, True)
    assert part.produced_bytes("t") == 0
    assert part.peek("t") == 3


def test_topics_are_independent_and_can_be_forgotten() -> None:
    part = BuiltInPartitioner(100, rng=ScriptedRandom([5, 0, 2]))
    assert part.partition("t", CLUSTER) == 5
    assert part.partition("one", CLUSTER) == 0
    part.remove_topic("t")
    assert part.peek("t") is None
    assert part.peek("one") == 0
    assert part.partition("t", CLUSTER) == 2


def test_zero_sticky_batch_size_switches_on_every_append() -> None:
    part = BuiltInPartitioner(0, rng=random.Random(1))
    p = part.partition("t", CLUSTER)
    assert part.update_partition_info("t", p, 1, False)


def test_negative_sticky_batch_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="sticky_batch_size must be >= 0, got -1"):
        BuiltInPartitioner(-1)
    assert BuiltInPartitioner(16384).sticky_batch_size == 16384


def _produce(
    part: BuiltInPartitioner, cluster: ClusterView, records: int, size: int
) -> Counter[int]:
    counts: Counter[int] = Counter()
    for _ in range(records):
        p = part.partition("t", cluster)
        counts[p] += 1
        part.update_partition_info("t", p, size, True)
    return counts


def test_keyless_records_spread_evenly_over_time() -> None:
    part = BuiltInPartitioner(1000, rng=random.Random(7))
    counts = _produce(part, CLUSTER, 60_000, 100)  # 6000 switches over 6 partitions
    assert set(counts) == set(range(6))
    for p in range(6):
        assert 9_000 <= counts[p] <= 11_000, counts


def test_only_partitions_with_a_leader_are_chosen() -> None:
    cluster = CLUSTER.with_leader(TopicPartition("t", 1), None).with_leader(
        TopicPartition("t", 4), None
    )
    part = BuiltInPartitioner(100, rng=random.Random(3))
    counts = _produce(part, cluster, 5_000, 100)
    assert set(counts) == {0, 2, 3, 5}


def test_without_any_leader_every_partition_is_a_candidate() -> None:
    cluster = StaticCluster([0], {("t", p): None for p in range(4)})
    part = BuiltInPartitioner(100, rng=random.Random(3))
    assert set(_produce(part, cluster, 2_000, 100)) == {0, 1, 2, 3}


def test_unknown_topic_cannot_be_partitioned() -> None:
    with pytest.raises(ValueError, match="no partitions known for topic 'nope'"):
        BuiltInPartitioner(100).partition("nope", CLUSTER)


# -- BuiltInPartitioner: adaptive -------------------------------------------------------------


def test_adaptive_weights_follow_kafkas_cumulative_table() -> None:
    # Queues 0, 3, 1 give weights 4, 1, 3 and the table 4, 5, 8: draws 0-3 pick partition 0,
    # 4 picks partition 1, 5-7 pick partition 2.
    cluster = StaticCluster.uniform({"t": 3})
    expected = [0, 0, 0, 0, 1, 2, 2, 2]
    rng = ScriptedRandom(range(8))
    part = BuiltInPartitioner(1, rng=rng)
    part.update_partition_load_stats("t", {0: 0, 1: 3, 2: 1})
    chosen = []
    for _ in range(8):
        p = part.partition("t", cluster)
        chosen.append(p)
        part.update_partition_info("t", p, 1, True)
    assert chosen == expected
    assert rng.calls == [8] * 8


def _draws_with_loads_10_1_1(part: BuiltInPartitioner) -> Counter[int]:
    """12,000 switches over three partitions: partition 0 is empty and missing from the
    report, 1 and 2 have nine batches queued, so the weights are 10, 1, 1."""
    part.update_partition_load_stats("t3", {1: 9, 2: 9})
    cluster = StaticCluster.uniform({"t3": 3})
    counts: Counter[int] = Counter()
    for _ in range(12_000):
        p = part.partition("t3", cluster)
        counts[p] += 1
        part.update_partition_info("t3", p, 100, True)
    return counts


def test_adaptive_prefers_less_loaded_partitions() -> None:
    counts = _draws_with_loads_10_1_1(BuiltInPartitioner(100, rng=random.Random(11)))
    share = counts[0] / 12_000
    assert 0.80 <= share <= 0.87, counts
    assert counts[1] > 0
    assert counts[2] > 0


def test_own_generator_draws_with_the_same_weights_and_uniformly() -> None:
    # Without a generator passed in, draws go through random() rather than randrange: the
    # same weights 10, 1, 1 as above, and every partition equally often without load stats.
    counts = _draws_with_loads_10_1_1(BuiltInPartitioner(100))
    assert 0.80 <= counts[0] / 12_000 <= 0.87, counts
    assert counts[1] > 0
    assert counts[2] > 0
    uniform = _produce(BuiltInPartitioner(100), CLUSTER, 60_000, 100)
    assert set(uniform) == set(range(6))
    assert all(0.14 <= n / 60_000 <= 0.193 for n in uniform.values()), uniform


def test_adaptive_skips_excluded_and_leaderless_partitions() -> None:
    part = BuiltInPartitioner(100, rng=random.Random(5))
    part.update_partition_load_stats("t", dict.fromkeys(range(6), 0), excluded={0, 1})
    cluster = CLUSTER.with_leader(TopicPartition("t", 5), None)
    assert set(_produce(part, cluster, 3_000, 100)) == {2, 3, 4}


def test_adaptive_with_everything_excluded_falls_back_to_available() -> None:
    part = BuiltInPartitioner(100, rng=random.Random(5))
    part.update_partition_load_stats("t", {0: 1}, excluded=range(6))
    assert set(_produce(part, CLUSTER, 3_000, 100)) == set(range(6))


def test_clearing_load_stats_restores_uniform_choice() -> None:
    part = BuiltInPartitioner(100, rng=random.Random(5))
    part.update_partition_load_stats("t", dict.fromkeys(range(6), 0), excluded={0, 1, 2, 3, 4})
    assert set(_produce(part, CLUSTER, 500, 100)) == {5}
    part.update_partition_load_stats("t", None)
    assert set(_produce(part, CLUSTER, 3_000, 100)) == set(range(6))


def test_load_stats_are_ignored_when_adaptive_is_off() -> None:
    part = BuiltInPartitioner(100, adaptive=False, rng=random.Random(5))
    part.update_partition_load_stats("t", dict.fromkeys(range(6), 0), excluded={0, 1, 2, 3, 4})
    assert set(_produce(part, CLUSTER, 3_000, 100)) == set(range(6))


# -- StaticCluster ----------------------------------------------------------------------------


def test_static_cluster_answers_the_cluster_view_questions() -> None:
    cluster: ClusterView = StaticCluster(
        [1, 2], {("a", 1): 2, ("a", 0): 1, ("a", 2): None, ("b", 0): 2}
    )
    assert list(cluster.partitions_for_topic("a") or []) == [0, 1, 2]
    assert list(cluster.available_partitions_for_topic("a")) == [0, 1]
    assert cluster.partitions_for_topic("zzz") is None
    assert list(cluster.available_partitions_for_topic("zzz")) == []
    assert cluster.leader_for(TopicPartition("a", 1)) == 2
    assert cluster.leader_for(TopicPartition("a", 2)) is None
    assert cluster.leader_for(TopicPartition("zzz", 0)) is None
    assert list(cluster.partitions_for_node(2)) == [("a", 1), ("b", 0)]
    assert list(cluster.partitions_for_node(9)) == []


def test_static_cluster_is_immutable_and_comparable() -> None:
    base = StaticCluster.uniform({"t": 2}, nodes=2)
    moved = base.with_leader(TopicPartition("t", 0), 1)
    assert base.leader_for(TopicPartition("t", 0)) == 0
    assert moved.leader_for(TopicPartition("t", 0)) == 1
    assert base != moved
    assert base == StaticCluster([0, 1], {("t", 0): 0, ("t", 1): 1})
    assert hash(base) == hash(StaticCluster([0, 1], {("t", 0): 0, ("t", 1): 1}))
    with pytest.raises(AttributeError):
        base.nodes = frozenset()  # type: ignore[misc]


def test_static_cluster_validates_its_table() -> None:
    with pytest.raises(ValueError, match=r"leader 7 of t-0 is not one of the nodes \[0\]"):
        StaticCluster([0], {("t", 0): 7})
    with pytest.raises(ValueError, match="partition numbers are >= 0"):
        StaticCluster([0], {("t", -1): 0})
    with pytest.raises(ValueError, match="at least one node"):
        StaticCluster.uniform({"t": 1}, nodes=0)
