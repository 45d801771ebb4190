"""Which partitions have something to send, kept as batches come and go, never found by a scan.

Theory of operation
-------------------
Kafka's ``RecordAccumulator.ready`` and ``drain`` walk every partition on every sender turn,
and so does ``expiredBatches``. With thousands of partitions and records spread over all of
them, that walk costs more than the records. :class:`ReadyIndex` keeps what those walks would
find, and is told whenever a partition's first batch may have changed (:meth:`touch`): a batch
opened in an empty queue, a first batch that filled up, a retry put back, a partition unmuted.
It keeps:

* per broker node, a rotation of the partitions it leads that may be drained now (they have
  data and a leader, are not muted and not backing off). A drain walks it from the front and
  puts a partition that still has data back at the end, so the next drain starts after the
  last partition served: Kafka's ``drainIndex`` rotation;
* which partitions have a first batch that may go now (full, or lingered long enough); a node
  with one is ready;
* the deadlines of first batches: when one will have lingered (in a FIFO: a batch opened later
  lingers until later), when a retry's backoff ends (in a heap);
* a heap of delivery deadlines with one entry per partition, for expiry;
* each partition's leader, looked up once per metadata version; a new version rebuilds the
  node rotations from the partitions with data.

Stale heap and rotation entries are not searched for and removed: each names the batch or the
generation it was made for, and is skipped once that no longer holds. So the work of a sender
turn follows what changed since the last one, not how many partitions exist.

The accumulator owns the batch queues and calls in here with its lock held.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import ClusterView, TopicPartition

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

if TYPE_CHECKING:
    from aioaccum._core.idempotence import TransactionManager

__all__ = ["CLOCK_TOLERANCE", "ReadyIndex"]

# Deadlines within this of now count as reached. Event-loop timers fire at a millisecond's
# resolution (uvloop's), so a wait for less than that can end before the clock moved and turn
# into a busy loop; Kafka's own clock counts whole milliseconds.
CLOCK_TOLERANCE = 0.001
_NO_LEADER = -1
_NOT_LOOKED_UP = -2
_INF = float("inf")


class ReadyIndex:
    """The accumulator's view of sendable partitions; see the module's theory of operation.

    Args:
        batches: The accumulator's queue of batches per partition (shared, not copied).
        muted: Partitions that must not be drained (shared): one batch in flight at a time.
        linger: Seconds a first batch that is not full waits for more records.
        delivery_timeout: Seconds from a batch's creation until it expires.
    """

    def __init__(
        self,
        batches: dict[TopicPartition, collections.deque[ProducerBatch]],
        muted: set[TopicPartition],
        *,
        linger: float,
        delivery_timeout: float,
    ) -> None:
        self._batches = batches
        self._muted = muted
        self._linger = linger
        self._delivery_timeout = delivery_timeout
        self._cluster: object | None = None
        self._version = -1
        self._seq = 0
        self._generation = 0
        self._touched: list[TopicPartition] = []
        self.nonempty: set[TopicPartition] = set()
        """Partitions with queued batches, as of the last :meth:`sync`."""
        self._leaders: dict[TopicPartition, int] = {}
        self._leaderless: set[TopicPartition] = set()
        # Per node, (partition, generation) in drain order; an entry is live while the
        # partition's generation in _queued is the entry's.
        self._rotations: dict[int, collections.deque[tuple[TopicPartition, int]]] = {}
        self._queued: dict[TopicPartition, int] = {}
        self._queued_on: dict[int, int] = {}
        # Partitions whose first batch may go now, to their leader.
        self._sendable: dict[TopicPartition, int] = {}
        self._sendable_on: dict[int, int] = {}
        # (deadline, partition, first batch) for lingers, in the order they end, and (deadline,
        # seq, partition, first batch) for backoffs; an entry counts only while _timed names
        # that batch for the partition.
        self._lingers: collections.deque[tuple[float, TopicPartition, ProducerBatch]] = (
            collections.deque()
        )
        self._timers: list[tuple[float, int, TopicPartition, ProducerBatch]] = []
        self._timed: dict[TopicPartition, ProducerBatch] = {}
        # (deadline, seq, partition); an entry counts only while _expiry_watched names its
        # seq for the partition, so each partition has one live entry at most.
        self._expiry: list[tuple[float, int, TopicPartition]] = []
        self._expiry_watched: dict[TopicPartition, tuple[float, int]] = {}

    # --- told by the accumulator

    def touch(self, tp: TopicPartition) -> None:
        """The first batch of ``tp`` may have changed or filled: look again at the next sync."""
        self._touched.append(tp)

    def put_back(self, tp: TopicPartition, created: float) -> None:
        """A batch went back to the front of ``tp``'s queue (a retry, a split): it may expire
        before the batch that was first."""
        self._unqueue(tp)
        self._touched.append(tp)
        deadline = created + self._delivery_timeout
        watched = self._expiry_watched.get(tp)
        if watched is None or deadline < watched[0]:
            self._watch(tp, deadline)

    def opened(self, tp: TopicPartition, created: float) -> None:
        """A batch was opened in ``tp``'s empty queue: it is the first, and it will expire."""
        self._touched.append(tp)
        if tp not in self._expiry_watched:
            self._watch(tp, created + self._delivery_timeout)

    def mute(self, tp: TopicPartition) -> None:
        """``tp`` must not be drained until unmuted (then :meth:`touch` it)."""
        self._unqueue(tp)

    def clear(self) -> None:
        """Every queue was emptied (an abort): forget everything."""
        self._forget_placement()
        self._touched = []
        self.nonempty = set()
        self._lingers = collections.deque()
        self._timers = []
        self._timed = {}
        self._expiry = []
        self._expiry_watched = {}

    def _watch(self, tp: TopicPartition, deadline: float) -> None:
        self._seq += 1
        watched = (deadline, self._seq)
        entry = (deadline, self._seq, tp)
        if cython.compiled:
            # One pair per partition with batches, kept until its oldest batch ends: with
            # thousands of partitions, thousands of long-lived tuples (_cgc.pxd says why).
            gc_untrack(watched)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
            gc_untrack(entry)  # type: ignore[name-defined,unused-ignore]  # noqa: F821
        self._expiry_watched[tp] = watched
        heapq.heappush(self._expiry, entry)

    # --- a sender turn

    def sync(self, cluster: ClusterView, now: float) -> None:
        """Bring the index up to ``now``: new metadata, touched partitions, ended timers."""
        version = cluster.metadata_version
        if cluster is not self._cluster or version != self._version:
            self._rebuild(cluster, version)
        touched, self._touched = self._touched, []
        for tp in touched:
            self._refresh(tp, cluster, now)
        timed = self._timed
        reached = now + CLOCK_TOLERANCE
        lingers = self._lingers
        while lingers and lingers[0][0] <= reached:
            _, tp, head = lingers.popleft()
            if timed.get(tp) is head:
                del timed[tp]
                self._refresh(tp, cluster, now)
        timers = self._timers
        while timers and timers[0][0] <= reached:
            _, _, tp, head = heapq.heappop(timers)
            if timed.get(tp) is head:
                del timed[tp]
                self._refresh(tp, cluster, now)

    def _rebuild(self, cluster: ClusterView, version: int) -> None:
        """Leaders may have moved: place every partition with data again, those that were in
        a rotation first and in their rotation's order, so the drains go on where they were."""
        queued = self._queued
        order = [
            tp
            for rotation in self._rotations.values()
            for tp, generation in rotation
            if queued.get(tp, -1) == generation
        ]
        placed = set(order)
        order.extend(tp for tp in self.nonempty if tp not in placed)
        order.extend(self._touched)
        self._cluster = cluster
        self._version = version
        self._forget_placement()
        self._touched = order

    def _forget_placement(self) -> None:
        """Forget where each partition was placed: leaders, rotations, sendable, timers."""
        self._leaders = {}
        self._leaderless = set()
        self._rotations = {}
        self._queued = {}
        self._queued_on = {}
        self._sendable = {}
        self._sendable_on = {}
        self._timed = {}

    def ready_nodes(self, forced: bool) -> set[int]:
        """Nodes with a first batch that may go now; with ``forced`` (flush, close, a pool with
        waiters), every node with something it may drain."""
        counts = self._queued_on if forced else self._sendable_on
        return {node for node, count in counts.items() if count > 0}

    def unknown_leader_topics(self) -> set[str]:
        return {tp.topic for tp in self._leaderless}

    def leader(self, tp: TopicPartition) -> int:
        """The leader of a partition with data as of the last sync; negative when it has none."""
        return self._leaders.get(tp, _NO_LEADER)

    def next_deadline(self) -> float:
        """When the next linger, backoff or delivery timeout ends (``inf``: none pending)."""
        timed = self._timed
        lingers = self._lingers
        while lingers and timed.get(lingers[0][1]) is not lingers[0][2]:
            lingers.popleft()
        timers = self._timers
        while timers and timed.get(timers[0][2]) is not timers[0][3]:
            heapq.heappop(timers)
        first = lingers[0][0] if lingers else _INF
        if timers and timers[0][0] < first:
            first = timers[0][0]
        # Expiry is decided on the clock as it is (see expired): wake once it has passed.
        if self._expiry and self._expiry[0][0] + CLOCK_TOLERANCE < first:
            first = self._expiry[0][0] + CLOCK_TOLERANCE
        return first

    def drain_node(
        self,
        cluster: ClusterView,
        node: int,
        max_size: int,
        now: float,
        txn: TransactionManager | None,
        filling: Callable[[str], int | None] | None = None,
    ) -> list[ProducerBatch]:
        """Take the first batch of each drainable partition of ``node`` in rotation order,
        within ``max_size`` bytes (the first batch always goes).

        ``filling`` gives a topic's sticky partition (the one keyless records are filling):
        that partition's batch is left to fill unless it may go by itself (full, lingered, one
        behind it). Kafka takes it along with the rest of the node; but a turn of the sender
        comes just after a batch fills, when the sticky partitioner has opened the next with
        one record, and half the time on the same node: 4 KB records in 16 KiB batches went
        out at 3.1 a batch rather than 4, and 1 KB ones at 11.8 rather than 16. Pass ``None``
        when every batch should go (a flush, a close)."""
        rotation = self._rotations.get(node)
        if not rotation:
            return []
        queued = self._queued
        batches = self._batches
        sendable = self._sendable
        taken: list[ProducerBatch] = []
        size = 0
        # Only the entries there now: a partition put back at the end waits for the next drain.
        for _ in range(len(rotation)):
            tp, generation = rotation.popleft()
            if queued.get(tp, -1) != generation:
                continue
            if filling is not None and tp not in sendable and filling(tp.topic) == tp.partition:
                rotation.append((tp, generation))
                continue
            dq = batches[tp]
            first = dq[0]
            if taken and size + first.estimated_size_in_bytes > max_size:
                # The next drain of this node starts here.
                rotation.appendleft((tp, generation))
                break
            dq.popleft()
            self._unqueue(tp)
            if txn is not None:
                txn.stamp(first)
            first.close()
            size += first.estimated_size_in_bytes  # exact once closed, chunked or not
            taken.append(first)
            if dq:
                self._refresh(tp, cluster, now)
            else:
                self.nonempty.discard(tp)
        return taken

    def expired(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches that reached the delivery timeout, oldest first."""
        heap = self._expiry
        watched = self._expiry_watched
        batches = self._batches
        timeout = self._delivery_timeout
        out: list[ProducerBatch] = []
        again: list[TopicPartition] = []
        # No tolerance here: records fail at their deadline, not a millisecond before it. Both
        # tests are the same sum, so an entry popped always finds its batch expired.
        while heap and heap[0][0] <= now:
            _, seq, tp = heapq.heappop(heap)
            live = watched.get(tp)
            if live is None or live[1] != seq:
                continue  # a later or an earlier entry stands for this partition
            del watched[tp]
            dq = batches.get(tp)
            if not dq:
                continue
            if dq[0].created + timeout <= now:
                while dq and dq[0].created + timeout <= now:
                    batch = dq.popleft()
                    batch.close()
                    out.append(batch)
                self._unqueue(tp)
                self._touched.append(tp)
            if dq:
                again.append(tp)
        for tp in again:
            self._watch(tp, batches[tp][0].created + timeout)
        return out

    # --- one partition

    def _refresh(self, tp: TopicPartition, cluster: ClusterView, now: float) -> None:
        """Place ``tp`` where its first batch says: in its leader's rotation, among the sendable,
        on a timer, or nowhere."""
        dq = self._batches.get(tp)
        if not dq:
            self._unqueue(tp)
            self.nonempty.discard(tp)
            self._leaderless.discard(tp)
            return
        self.nonempty.add(tp)
        leader = self._leaders.get(tp, _NOT_LOOKED_UP)
        if leader == _NOT_LOOKED_UP:
            found = cluster.leader_for(tp)
            leader = _NO_LEADER if found is None else found
            self._leaders[tp] = leader
        if leader == _NO_LEADER:
            self._unqueue(tp)
            self._leaderless.add(tp)
            return
        if tp in self._muted:
            self._unqueue(tp)
            return
        head = dq[0]
        if head.attempts > 0:
            backoff_ends = head.last_attempt + head.backoff
            if now + CLOCK_TOLERANCE < backoff_ends:
                scheduled = self._timed.get(tp) is head
                self._unqueue(tp)
                self._timed[tp] = head
                if not scheduled:
                    self._seq += 1
                    heapq.heappush(self._timers, (backoff_ends, self._seq, tp, head))
                return
        if tp not in self._queued:
            self._generation += 1
            self._queued[tp] = self._generation
            self._queued_on[leader] = self._queued_on.get(leader, 0) + 1
            rotation = self._rotations.get(leader)
            if rotation is None:
                rotation = self._rotations[leader] = collections.deque()
            rotation.append((tp, self._generation))
        if tp in self._sendable:
            return
        lingered = head.created + self._linger
        if len(dq) > 1 or head.is_full or now + CLOCK_TOLERANCE >= lingered:
            self._sendable[tp] = leader
            self._sendable_on[leader] = self._sendable_on.get(leader, 0) + 1
        elif self._timed.get(tp) is not head:
            self._timed[tp] = head
            lingers = self._lingers
            if not lingers or lingers[-1][0] <= lingered:
                lingers.append((lingered, tp, head))
            else:
                # Older than the last linger queued (a batch that waited behind a full one,
                # a clock read before another caller's): out of order, so in the heap.
                self._seq += 1
                heapq.heappush(self._timers, (lingered, self._seq, tp, head))

    def _unqueue(self, tp: TopicPartition) -> None:
        # Whatever timer was set is for a first batch or a state that no longer holds.
        self._timed.pop(tp, None)
        if self._queued.pop(tp, None) is None:
            return
        leader = self._leaders[tp]
        self._queued_on[leader] -= 1
        if self._sendable.pop(tp, None) is not None:
            self._sendable_on[leader] -= 1
