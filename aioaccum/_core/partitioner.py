"""Choosing a partition: murmur2 for keyed records, sticky batches for keyless ones.

Theory of operation
-------------------
Keyed records go to ``to_positive(murmur2(key)) % num_partitions``, bit for bit what Kafka's Java
client computes (``Utils.murmur2`` / ``BuiltInPartitioner.partitionForKey``), so a key lands on the
same partition whichever Kafka client produced it.

Keyless records use :class:`BuiltInPartitioner`, a port of Kafka's KIP-794 "uniform sticky"
partitioner. Each topic has one *sticky* partition that receives every keyless record until about
``batch_size`` bytes have been appended to it; then a new sticky partition is drawn at random
among the partitions that have a leader. Sticking fills batches (fewer, larger requests); switching
after a batch's worth of bytes spreads the load evenly over time. The switch is refused while the
caller says the current batch is not yet full (``enable_switch=False``), which keeps batches
aligned with ``batch_size``, but never once twice ``batch_size`` bytes have gone to the partition.

With adaptive partitioning, the accumulator reports on each ready check how many batches each
partition has queued, and the draw favours short queues: a partition's weight is
``max_queue + 1 - its_queue`` (Kafka's ``PartitionLoadStats``), so a broker that drains slowly
receives less new data. It may also exclude partitions whose leader has had data waiting without
being drained for longer than ``partitioner_availability_timeout_ms``.

With rack-aware partitioning (KIP-1123: ``partitioner_rack_aware`` with ``client_rack``, which
the cluster view reports as :attr:`~aioaccum._core.cluster.ClusterView.client_rack`), the draw
keeps to the partitions whose leader declares the client's rack, when any of the candidates has
one; otherwise it falls back on all the candidates, so records never wait for a rack that has
no leader. Racks only narrow the candidates: the load weights and exclusions above apply within
them, as in Kafka's ``BuiltInPartitioner``. Keyed records, explicit partitions and custom
partitioners ignore racks.

Unlike Kafka, the next partition is drawn lazily, on the first :meth:`BuiltInPartitioner.partition`
call after the switch, because that call carries the freshest cluster view. The result is the
same draw from the same distribution.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeAlias

from aioaccum._core.cluster import ClusterView, TopicPartition
from aioaccum.errors import ConfigError

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = [
    "BuiltInPartitioner",
    "Partitioner",
    "checked_partition",
    "custom_partition",
    "default_partition",
    "murmur2",
    "partition_for",
    "to_positive",
]

Partitioner = Callable[[str, bytes | None, bytes | None, Sequence[int], Sequence[int]], int]
"""A custom partitioner: ``(topic, key_bytes, value_bytes, all_partitions, available_partitions)``.

It returns the partition number for the record. ``key_bytes``/``value_bytes`` are the serialized
key and value (``None`` when absent); ``all_partitions`` lists every partition of the topic and
``available_partitions`` those that currently have a leader (it may be empty).
"""

_ByteLike: TypeAlias = bytes | bytearray | memoryview

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_SIGN = 0x80000000
# Unpackers of n little-endian words, by byte length, for the key sizes seen so far.
_UNPACKERS: dict[int, Callable[[_ByteLike], tuple[int, ...]]] = {}
_CACHED_UNPACK_LIMIT = 4096


def murmur2(data: _ByteLike) -> int:
    """Kafka's 32-bit murmur2 hash of ``data``, as a signed 32-bit int (Java ``Utils.murmur2``).

    Args:
        data: The bytes to hash.

    Returns:
        The hash in ``[-2**31, 2**31)``, equal to what the Java client returns.
    """
    if cython.compiled and type(data) is bytes:
        # 32-bit C arithmetic: the loop below costs a Python int per operation.
        return murmur2_at(data, len(data))  # type: ignore[name-defined,no-any-return,unused-ignore]  # noqa: F821
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    if whole:
        # One C-level unpack of all the little-endian words, then a tight integer loop: the
        # per-byte indexing of a literal port is several times slower in CPython.
        unpack = _UNPACKERS.get(whole)
        if unpack is None:
            unpack = struct.Struct(f"<{whole >> 2}I").unpack_from
            if whole <= _CACHED_UNPACK_LIMIT:
                _UNPACKERS[whole] = unpack
        for k in unpack(data):
            k = (k * _M) & _MASK
            k = ((k ^ (k >> 24)) * _M) & _MASK
            h = ((h * _M) ^ k) & _MASK
    rest = length - whole
    if rest:
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & _SIGN else h


def to_positive(n: int) -> int:
    """Clear the sign bit of a 32-bit int, as Kafka's ``Utils.toPositive`` (not ``abs``)."""
    return n & 0x7FFFFFFF


def default_partition(key_bytes: _ByteLike, num_partitions: int) -> int:
    """The partition Kafka's Java client picks for a serialized key.

    Args:
        key_bytes: The serialized key.
        num_partitions: The number of partitions of the topic (all of them, available or not).

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be > 0, got {num_partitions}")
    return to_positive(murmur2(key_bytes)) % num_partitions


def partition_for(
    topic: str,
    partition: int | None,
    key_bytes: bytes | None,
    value_bytes: bytes | None,
    partitions: Sequence[int],
    cluster: ClusterView,
    partitioner: Partitioner | None,
    ignore_keys: bool,
) -> int | None:
    """Pick the partition for a record the way Kafka's ``KafkaProducer.partition`` does: the one
    place that says which rule wins.

    In order: an explicit ``partition``; a custom ``partitioner``; murmur2 of the key over all
    ``partitions`` (unless ``ignore_keys``). ``None`` means keyless: the sticky
    :class:`BuiltInPartitioner` chooses.

    Raises:
        ConfigError: The explicit or custom partition is not one of ``partitions``.
    """
    if partition is not None:
        return checked_partition(topic, partition, partitions)
    if partitioner is not None:
        return custom_partition(partitioner, topic, key_bytes, value_bytes, partitions, cluster)
    if key_bytes is not None and not ignore_keys:
        return to_positive(murmur2(key_bytes)) % len(partitions)
    return None


def custom_partition(
    partitioner: Partitioner,
    topic: str,
    key_bytes: bytes | None,
    value_bytes: bytes | None,
    partitions: Sequence[int],
    cluster: ClusterView,
) -> int:
    """Ask a user's partitioner, and check that its answer is one of the topic's partitions.

    Raises:
        ConfigError: The answer is not an int (bools included) or not a partition of ``topic``.
    """
    chosen = partitioner(
        topic, key_bytes, value_bytes, partitions, cluster.available_partitions_for_topic(topic)
    )
    if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen not in partitions:
        raise ConfigError(
            f"the custom partitioner returned {chosen!r} for topic {topic!r}, "
            f"which has partitions 0..{len(partitions) - 1}"
        )
    return chosen


def checked_partition(topic: str, partition: object, partitions: Sequence[int]) -> int:
    """``partition`` if it is one of the topic's partitions, else a ConfigError saying which are.

    Raises:
        ConfigError: ``partition`` is not an int (bools included) or not a partition of ``topic``.
    """
    if isinstance(partition, bool) or not isinstance(partition, int) or partition not in partitions:
        raise ConfigError(
            f"partition {partition!r} is not a partition of topic {topic!r}, "
            f"which has partitions 0..{len(partitions) - 1}"
        )
    return partition


_NOTHING_EXCLUDED: frozenset[int] = frozenset()


class _TopicState:
    __slots__ = ("excluded", "in_rack", "partition", "produced", "queue_sizes", "rack_seen")

    def __init__(self) -> None:
        self.partition: int | None = None
        self.produced = 0
        self.queue_sizes: Mapping[int, int] | None = None
        self.excluded: frozenset[int] = frozenset()
        # The available partitions led in the client's rack, and the (metadata version, rack)
        # they were found for: found again only when leaders may have moved.
        self.in_rack: tuple[int, ...] = ()
        self.rack_seen: tuple[int, str] | None = None

    def set_load(self, queue_sizes: Mapping[int, int] | None, excluded: Collection[int]) -> None:
        if excluded and queue_sizes is not None:
            self.queue_sizes = queue_sizes
            self.excluded = frozenset(excluded)
        else:
            # Empty queues everywhere weigh every partition alike: the plain draw is cheaper.
            self.queue_sizes = queue_sizes or None
            self.excluded = _NOTHING_EXCLUDED


class BuiltInPartitioner:
    """Kafka's sticky partitioner for keyless records (KIP-794), one state per topic.

    The accumulator's loop for a keyless record is: ``p = partition(topic, cluster)``; append to
    ``p``; ``update_partition_info(topic, p, appended_bytes, enable_switch)``, where
    ``enable_switch`` is true when every batch queued for ``p`` is full (as Kafka does), so a
    switch never strands a half-filled batch.

    Args:
        sticky_batch_size: Bytes to send to one partition before switching (``batch_size``).
        adaptive: Weight the choice of the next partition by queue sizes reported through
            :meth:`update_partition_load_stats` or :meth:`update_load_stats`
            (``partitioner_adaptive_partitioning_enable``).
        rng: The random source; pass a seeded ``random.Random`` for repeatable tests.
    """

    def __init__(
        self,
        sticky_batch_size: int,
        *,
        adaptive: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        if sticky_batch_size < 0:
            raise ValueError(f"sticky_batch_size must be >= 0, got {sticky_batch_size}")
        self._sticky_batch_size = sticky_batch_size
        self._adaptive = adaptive
        self._rng = rng if rng is not None else random.Random()
        # A switch draws once per batch. ``randrange`` runs as Python bytecode (about 0.5 us);
        # our own generator draws through ``random()``, which is C. A generator passed in keeps
        # ``randrange``, so that a test may script the draws.
        self._scripted = rng is not None
        self._topics: dict[str, _TopicState] = {}

    @property
    def adaptive(self) -> bool:
        return self._adaptive

    @property
    def sticky_batch_size(self) -> int:
        return self._sticky_batch_size

    def partition(self, topic: str, cluster: ClusterView) -> int:
        """The current sticky partition of ``topic``, drawing a new one if there is none.

        Raises:
            ValueError: The topic has no known partitions.
        """
        state = self._topics.get(topic)
        if state is not None and state.partition is not None:
            return state.partition
        if state is None:
            state = self._topics[topic] = _TopicState()
        state.partition = self._next_partition(topic, state, cluster)
        state.produced = 0
        return state.partition

    def peek(self, topic: str) -> int | None:
        """The current sticky partition of ``topic`` without drawing one (``None`` if none)."""
        state = self._topics.get(topic)
        return None if state is None else state.partition

    def produced_bytes(self, topic: str) -> int:
        """Bytes counted towards the current sticky partition of ``topic``."""
        state = self._topics.get(topic)
        return 0 if state is None else state.produced

    def update_partition_info(
        self, topic: str, partition: int, appended_bytes: int, enable_switch: bool = True
    ) -> bool:
        """Count bytes appended to ``partition``, and end its stickiness once it has had enough.

        Appends to any partition other than the current sticky one are ignored: they are keyed
        records, or keyless ones that raced a switch.

        Args:
            topic: The topic appended to.
            partition: The partition appended to.
            appended_bytes: The size the append added to the batch.
            enable_switch: Whether switching now is welcome (all of the partition's batches are
                full). Past ``2 * sticky_batch_size`` bytes the switch happens regardless.

        Returns:
            Whether the sticky partition was released; the next :meth:`partition` draws anew.
        """
        state = self._topics.get(topic)
        if state is None or state.partition != partition:
            return False
        state.produced += appended_bytes
        produced = state.produced
        limit = self._sticky_batch_size
        if (enable_switch and produced >= limit) or produced >= 2 * limit:
            state.partition = None
            state.produced = 0
            return True
        return False

    on_append = update_partition_info

    def on_new_batch(self, topic: str, partition: int) -> bool:
        """A keyless record for ``partition``, the sticky one of ``topic``, did not fit its last
        batch: end the stickiness if the partition has had half a sticky batch or more since it
        was drawn, so that the record opens its batch on the next partition.

        Counting bytes alone (KIP-794) switches just after a record that did not fit opened a
        batch here: records whose size does not divide ``batch_size`` left a batch of one
        record behind at each switch. Below half a batch the partition keeps the record (a
        drawn partition whose last batch was nearly full from its previous turn).

        Returns:
            Whether the stickiness ended; the next :meth:`partition` draws anew.
        """
        state = self._topics.get(topic)
        if state is None or state.partition != partition:
            return False
        if 2 * state.produced < self._sticky_batch_size:
            return False
        state.partition = None
        state.produced = 0
        return True

    def update_partition_load_stats(
        self,
        topic: str,
        queue_sizes: Mapping[int, int] | None,
        excluded: Collection[int] = (),
    ) -> None:
        """Record how loaded each partition of ``topic`` is, for the adaptive draw.

        Ignored when adaptive partitioning is off.

        Args:
            topic: The topic.
            queue_sizes: Partition number mapped to its queue length (Kafka uses the number of
                batches queued). Partitions missing from the mapping count as empty. ``None``
                forgets the stats, so the next draw is uniform.
            excluded: Partitions not to choose although they have a leader, e.g. those whose
                leader has not accepted a request for ``partitioner_availability_timeout_ms``.
        """
        if not self._adaptive:
            return
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _TopicState()
        state.set_load(None if queue_sizes is None else dict(queue_sizes), excluded)

    def measured_topics(self) -> Collection[str]:
        """The topics whose queue sizes are worth handing to :meth:`update_load_stats`: those
        this partitioner has drawn for (keyed records never consult the draw); none when
        adaptive is off."""
        if not self._adaptive:
            return ()
        return self._topics.keys()

    def update_load_stats(
        self,
        queue_sizes: dict[str, dict[int, int]],
        excluded: Mapping[str, Collection[int]],
    ) -> None:
        """:meth:`update_partition_load_stats` for many topics at once, as the accumulator's
        ready check measures them (Kafka's ``RecordAccumulator.partitionReady``).

        The tables are kept as given, not copied: the caller builds fresh ones each time.

        Args:
            queue_sizes: Per topic, partition number mapped to its number of queued batches;
                a partition left out has none. An empty table makes the next draw uniform.
            excluded: Per topic, partitions not to choose although they have a leader.
        """
        if not self._adaptive:
            return
        topics = self._topics
        for topic, sizes in queue_sizes.items():
            state = topics.get(topic)
            if state is not None:
                state.set_load(sizes, excluded.get(topic, _NOTHING_EXCLUDED))

    def remove_topic(self, topic: str) -> None:
        """Forget everything about ``topic`` (it expired from metadata, or was deleted)."""
        self._topics.pop(topic, None)

    def _next_partition(self, topic: str, state: _TopicState, cluster: ClusterView) -> int:
        available = cluster.available_partitions_for_topic(topic)
        if not available:
            # No partition has a leader: pick among all of them and let the records wait there
            # for a leader, as Kafka does.
            everything = cluster.partitions_for_topic(topic)
            if not everything:
                raise ValueError(
                    f"no partitions known for topic {topic!r}; fetch its metadata first"
                )
            return everything[self._below(len(everything))]
        rack = cluster.client_rack
        sizes = state.queue_sizes
        if sizes is None:
            if rack is not None:
                available = _in_rack(topic, state, available, rack, cluster) or available
            return available[self._below(len(available))]
        excluded = state.excluded
        candidates = [p for p in available if p not in excluded] if excluded else available
        if not candidates:
            candidates = available
        if rack is not None:
            in_rack = set(_in_rack(topic, state, available, rack, cluster))
            candidates = [p for p in candidates if p in in_rack] or candidates
        # Each candidate weighs how much shorter its queue is than the longest, plus one.
        # One pass for the loads, their maximum and their sum. Compiled, ``sizes`` is a typed
        # dict and the sums C integers: no bound ``get``, ``max()`` or ``sum()`` called through
        # Python's protocol (~600 instructions a call) once per batch.
        loads = []
        top = total = 0
        for p in candidates:
            load = sizes.get(p, 0)
            loads.append(load)
            total += load
            if load > top:
                top = load
        top += 1
        pick = self._below(top * len(loads) - total)
        # By index: zip(strict=True) parses a keyword argument per call.
        for i in range(len(loads)):
            load = loads[i]
            pick -= top - load
            if pick < 0:
                return candidates[i]
        return candidates[-1]

    def _below(self, n: int) -> int:
        """A uniform draw from ``range(n)``, ``n`` >= 1."""
        if self._scripted:
            return self._rng.randrange(n)
        # random() < 1, so the product stays below n; min() guards the rounding of a huge n.
        return min(int(self._rng.random() * n), n - 1)


def _in_rack(
    topic: str, state: _TopicState, available: Sequence[int], rack: str, cluster: ClusterView
) -> tuple[int, ...]:
    """The ``available`` partitions of ``topic`` whose leader is in ``rack``, in their order.

    Found once per metadata version and kept in ``state``: a sticky switch then looks up no
    leader and no rack, only when leaders may have moved.
    """
    seen = (cluster.metadata_version, rack)
    if state.rack_seen != seen:
        found = []
        for p in available:
            leader = cluster.leader_for(TopicPartition(topic, p))
            if leader is not None and cluster.rack_of(leader) == rack:
                found.append(p)
        state.in_rack = tuple(found)
        state.rack_seen = seen
    return state.in_rack
