"""RecordAccumulator: per-partition queues of batches, and the rules for what goes out.

Theory of operation
-------------------
A port of Kafka's ``RecordAccumulator``. Each topic-partition owns a deque of
:class:`ProducerBatch`; appends go to the last batch of the deque, and when it has no room a new
batch is opened in a buffer borrowed from the :class:`~aioaccum._runtime.pool.BufferPool`.
:meth:`RecordAccumulator.append` never waits: when the pool has no buffer to give at once it
answers with a :class:`BufferRequest`, and the caller waits for memory (a coroutine on the pool's
queue, a thread blocked in it) and appends again.

Threads append too (``SyncProducer``, ``Producer.send_from_thread``), as in Java, where callers
append under the deque's lock. Here one lock, the pool's, guards batches and memory together: the
loop thread holds it while it reads or changes them, and appends take it once a thread has
appended (:meth:`enable_threads`), so an asyncio-only producer never pays for it. A thread that
finds it taken gives up the GIL rather than wait inside the lock's acquire (see :meth:`append`).

Everything else here is synchronous and takes the time as an argument, as Kafka's ``nowMs``:

* :meth:`ready` says which broker nodes have something worth sending now (a full batch, a batch
  that has lingered long enough, a pool with waiters, a flush or close in progress), and how long
  the sender may sleep before something becomes ready;
* :meth:`drain` takes at most one batch per partition for each ready node, starting each time from
  where the previous drain stopped so that no partition starves, and stops before a request would
  exceed ``max_request_size`` (the first batch always goes);
* :meth:`expired_batches` finds batches that outlived ``delivery_timeout_ms``.

A batch is in the "incomplete" set from its creation until it ends; its buffer goes back to the
pool only through :meth:`deallocate`, which the sender calls once no request can still read it.

With incremental allocation (``chunk_size``, KIP-1332; see :mod:`aioaccum._core.chunks`) the
buffer is a list of chunks that grows as records arrive: a batch opens with one chunk, and takes
the next from the pool without waiting (``allocate_nowait``, so it never overtakes a queued
waiter) when its records outgrow it. When the pool has none, the record does not go in, exactly
as if the batch were full: the batch becomes sendable behind the new one, and the new batch's
chunk is asked for through :class:`BufferRequest`, which waits in the pool's FIFO. A compressed
batch hands back the chunks its compressed bytes no longer fill when it closes; the rest go
back through :meth:`deallocate`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Sequence
from time import sleep
from typing import TYPE_CHECKING

from aioaccum._core.accumulator_types import BufferRequest, BufferSupplier, ReadyCheck
from aioaccum._core.batch import FinalState, ProducerBatch, RunSink, abort_quietly, append_moved
from aioaccum._core.chunks import opening_chunk_size
from aioaccum._core.cluster import ClusterView, TopicPartition
from aioaccum._core.codecs import CompressionRatioEstimator, CompressionType
from aioaccum._core.futures import CallbackLoop, RecordFuture
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.partitioner import (
    BuiltInPartitioner,
    Partitioner,
    partition_for,
)
from aioaccum._core.ready_index import ReadyIndex
from aioaccum._core.records import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    MemoryRecordsBuilder,
    estimate_size_in_bytes_upper_bound,
)
from aioaccum.errors import ProducerClosedError, ProducerFailedError

if TYPE_CHECKING:
    from aioaccum._core.arrow import ArrowRows
    from aioaccum._core.records import Header

__all__ = ["BufferRequest", "BufferSupplier", "ReadyCheck", "RecordAccumulator"]

# Read once per batch that ends: a module constant is a cached lookup, where an enum member read
# from its class goes through the class's attribute hook (Python 3.11).
_NO_COMPRESSION = CompressionType.NONE


# Per record of a bulk run, what counts towards stickiness besides key and value: the bound
# send() uses (two 5-byte length varints on top of the record overhead).
_RECORD_OVERHEAD_BOUND = MAX_RECORD_OVERHEAD + 10


def _nothing() -> None:
    pass


def _no_deadline(deadline: float) -> None:
    pass


def total_len(items: Sequence[bytes | None], start: int, stop: int) -> int:
    return sum(0 if item is None else len(item) for item in items[start:stop])


class RecordAccumulator:
    """Per-partition batches in pooled buffers (Kafka's ``RecordAccumulator``).

    Args:
        pool: Where batch buffers come from.
        batch_size: Target size of a batch, in bytes.
        linger: How long a batch may wait for more records, in seconds.
        delivery_timeout: How long a record may take from append to acknowledgement, in seconds.
        compression: Codec applied to each closed batch.
        compression_level: Codec level, or None for the codec's default.
        partitioner: The sticky partitioner for keyless records (one per producer).
        custom_partitioner: A user's partitioner, consulted for every record without an explicit
            partition.
        ignore_keys: Keyed records too go to the sticky partitioner (``partitioner.ignore.keys``).
        loop: Where record futures report their outcome (``call_soon``); the accumulator only
            hands it to each batch. ``None`` runs callbacks inline (loop-free tests).
        clock: The time of a new batch when ``append`` is not told it (the loop's clock).
        chunk_size: Above 0: incremental allocation (KIP-1332): a new batch takes a chunk of
            this many bytes (or its first record's size, if larger) from ``pool``, whose
            ``poolable_size`` it should be, and more chunks as its records need them, without
            waiting; 0 takes ``batch_size`` bytes per batch (``full``).
        availability_timeout: With adaptive partitioning, keyless records avoid the partitions
            of a node that has had data ready but was not drained for longer than this, in
            seconds (``partitioner_availability_timeout_ms``); 0 never avoids any.
    """

    def __init__(
        self,
        pool: BufferSupplier,
        *,
        batch_size: int,
        linger: float,
        delivery_timeout: float,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
        transaction_manager: TransactionManager | None = None,
        partitioner: BuiltInPartitioner | None = None,
        custom_partitioner: Partitioner | None = None,
        ignore_keys: bool = False,
        loop: CallbackLoop | None = None,
        clock: Callable[[], float] = time.monotonic,
        availability_timeout: float = 0.0,
        chunk_size: int = 0,
    ) -> None:
        self._pool = pool
        # Bound once: a bound method per batch is one more object for the collector to visit.
        self._chunk_source, self._chunk_sink = pool.allocate_nowait, pool.deallocate
        self._chunk_size = chunk_size
        self._open_size = chunk_size or batch_size  # a new batch's least (its record may need more)
        self._clock = clock
        # The pool's lock guards the batches too: threads append while the loop drains, and an
        # append that opens a batch takes memory from the pool in the same step.
        self._lock = pool.lock
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._partitioner = partitioner or BuiltInPartitioner(batch_size)
        # A custom partitioner decides every keyless record, so loads would go unread (Kafka too).
        self._adaptive = self._partitioner.adaptive and custom_partitioner is None
        self._availability_timeout = availability_timeout if self._adaptive else 0.0
        # Per node, when ready() last found data for it and when drain() was last asked for it
        # (Kafka's NodeLatencyStats): kept only while the availability timeout is on.
        self._node_ready_at: dict[int, float] = {}
        self._node_drained_at: dict[int, float] = {}
        # Topics whose load table was last handed over with partitions in it.
        self._loaded_topics: set[str] = set()
        self._custom = custom_partitioner
        self._ignore_keys = ignore_keys
        self._loop = loop
        self._wakeup: Callable[[], None] = _nothing
        self._wakeup_threadsafe: Callable[[], None] = _nothing
        self._wake_by: Callable[[float], None] = _no_deadline
        self._wake_by_threadsafe: Callable[[float], None] = _no_deadline
        self._tps: dict[str, list[TopicPartition]] = {}
        self.threaded = False
        """Whether threads append too: then every append holds the lock. Set once, from the
        loop's thread, by :meth:`enable_threads`."""
        self.batches_created = 0
        """New batches opened so far: the producer yields to the sender once per
        :attr:`batches_per_turn` of them, when its turn is due."""
        self.batches_per_turn = 1
        """Set by the wiring from ``batch_size`` (see the sender's ``TURN_BYTES``)."""
        self.fatal_error: BaseException | None = None
        """Set by the sender when it stopped on an error: appends are refused from then on."""
        self._txn = transaction_manager
        self._batch_size = batch_size
        self._linger = linger
        self._delivery_timeout = delivery_timeout
        self._compression = compression
        self._compression_level = compression_level
        self._estimator = CompressionRatioEstimator()
        self._batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._muted: set[TopicPartition] = set()
        self._index = ReadyIndex(
            self._batches, self._muted, linger=linger, delivery_timeout=delivery_timeout
        )
        self._flushes_in_progress = 0
        self._closed = False

    # --- appending

    def append(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        record_size: int,
        partitions: Sequence[int],
        cluster: ClusterView,
        now: float,
        granted: tuple[BufferRequest, bytearray] | None = None,
        for_thread: bool = False,
    ) -> RecordFuture | BufferRequest:
        """Choose the record's partition and append it (Kafka's ``RecordAccumulator.append``
        with the built-in partitioner inside). Synchronous: it never waits, and any thread may
        call it once :meth:`enable_threads` was called.

        The record goes into the partition's open batch; failing that into a new batch in a
        buffer the pool gives at once. When the pool has none, nothing is appended and a
        :class:`BufferRequest` comes back: wait for the pool, then call again with
        ``granted=(request, buffer)``.

        Args:
            topic: The record's topic; ``partitions`` are its partitions (known, non-empty).
            partition: A partition chosen by the caller, or ``None`` to partition here.
            record_size: An upper bound of the size of a batch holding this record alone
                (``estimate_size_in_bytes_upper_bound`` or above): a new batch gets at least
                that much buffer. It also counts towards stickiness.
            cluster: Leaders and available partitions, for the custom and sticky partitioners.
            now: The caller's clock, in seconds; negative to read ``clock`` only if the record
                opens a batch (the time matters for new batches alone).
            granted: The earlier request and the buffer the pool gave for it.
            for_thread: The caller is a thread, not a coroutine on the loop: its record gets a
                :class:`ThreadRecordFuture`, and the sender is woken across threads.

        Returns:
            The record's future (a :class:`FutureRecordMetadata` unless ``for_thread``), or the
            buffer request.

        Raises:
            ProducerClosedError: The accumulator was closed (a granted buffer is returned).
            ConfigError: The explicit or custom partition is not one of ``partitions``.
        """
        if not self.threaded:
            return self._append(
                topic, partition, timestamp, key, value, headers, record_size, partitions,
                cluster, now, granted, for_thread,
            )
        # Bound methods rather than `with`: half the cost, on every record of a thread.
        acquire = self._acquire
        if not acquire(False):
            # Never wait inside the lock's acquire: it takes the lock without the GIL, then
            # waits for the GIL while holding the lock, and every appending thread queues
            # behind it: a convoy, a context switch per record. The holder lost the GIL within
            # its append; hand the GIL over until that append is through.
            while not acquire(False):
                sleep(0)
        try:
            return self._append(
                topic, partition, timestamp, key, value, headers, record_size, partitions,
                cluster, now, granted, for_thread,
            )
        finally:
            self._release()

    def _append(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        record_size: int,
        partitions: Sequence[int],
        cluster: ClusterView,
        now: float,
        granted: tuple[BufferRequest, bytearray] | None,
        for_thread: bool,
    ) -> RecordFuture | BufferRequest:
        if self._closed or self.fatal_error is not None:
            if granted is not None:
                self._pool.deallocate(granted[1], granted[0].size)
            raise self._refusal()
        if granted is not None:
            chosen = granted[0].partition
            sticky = granted[0].sticky
        else:
            choice = partition_for(
                topic, partition, key, value, partitions, cluster, self._custom,
                self._ignore_keys,
            )
            sticky = choice is None
            chosen = self._partitioner.partition(topic, cluster) if choice is None else choice
        tp = self._topic_partition(topic, chosen, partitions)
        dq = self._batches.get(tp)
        future = None
        opened = False
        if dq:
            last = dq[-1]
            future = last.try_append(timestamp, key, value, headers, for_thread)
            if (future is None and sticky and granted is None
                    and self._partitioner.on_new_batch(topic, chosen)):
                # The sticky partition's batch is full and the partition has had its share:
                # the batch goes now and the record opens a batch on the next partition, not
                # one of its own here that the switch would leave behind (KIP-480's
                # onNewBatch). At 4 KB records in 16 KiB batches, those were over a quarter.
                last.builder.close_for_record_appends()
                if len(dq) == 1:
                    self._index.touch(tp)
                    self._wake(for_thread)
                return self._append(
                    topic, partition, timestamp, key, value, headers, record_size, partitions,
                    cluster, now, None, for_thread,
                )
        if future is not None and dq:
            full = len(dq) > 1 or last.builder.is_full
            if granted is not None:
                # Another caller opened a batch while this one waited for memory.
                self._pool.deallocate(granted[1], granted[0].size)
        else:
            if granted is not None:
                buffer = granted[1]
            else:
                # record_size bounds a batch of this record alone (Java's
                # estimateBatchSizeUpperBound); above a chunk, a doubled size the pool keeps.
                size = max(self._open_size, record_size)
                if size > self._open_size and self._chunk_size:
                    size = opening_chunk_size(
                        self._chunk_size, size, self._pool.total_memory, self._batch_size
                    )
                got = self._pool.allocate_nowait(size)
                if got is None:
                    return BufferRequest(chosen, size, sticky)
                buffer = got
            if dq is None:
                dq = self._batches[tp] = collections.deque()
            if now < 0:
                now = self._clock()
            batch = self._new_batch(tp, buffer, now)
            future = batch.try_append(timestamp, key, value, headers, for_thread)
            assert future is not None, "the first record of a batch always fits"
            dq.append(batch)
            self._incomplete.add(batch)
            full = len(dq) > 1 or batch.builder.is_full
            opened = True
            self.batches_created += 1
        # Only a change of the first batch concerns the sender, once per batch: a batch
        # opened in an empty queue starts a linger it must time, and a first batch that
        # filled up (or has one behind it) can go now. Appends behind a full first batch
        # change nothing it needs to know.
        if opened:
            if len(dq) == 1:
                self._index.opened(tp, now)
                if full:
                    self._wake(for_thread)
                elif for_thread:
                    self._wake_by_threadsafe(now + self._linger)
                else:
                    self._wake_by(now + self._linger)
            elif len(dq) == 2:
                self._index.touch(tp)
                self._wake(for_thread)
        elif full and len(dq) == 1:
            self._index.touch(tp)
            self._wake(for_thread)
        if sticky:
            self._sticky_appended(topic, chosen, record_size - RECORD_BATCH_OVERHEAD, full)
        return future

    def _wake(self, for_thread: bool) -> None:
        if for_thread:
            self._wakeup_threadsafe()
        else:
            self._wakeup()

    def enable_threads(self) -> None:
        """Lock every append from now on. Call it on the loop's thread (or before the loop
        uses the accumulator): an append that thread started without the lock is then over."""
        self.threaded = True

    def _topic_partition(
        self, topic: str, partition: int, partitions: Sequence[int]
    ) -> TopicPartition:
        """The topic-partition key, made once per partition rather than once per record."""
        tps = self._tps.get(topic)
        if tps is None or len(tps) <= partition:
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in range(len(partitions))]
        return tps[partition]

    def _sticky_appended(self, topic: str, partition: int, size: int, full: bool) -> None:
        # Loads reach the partitioner from ready(), as in Kafka: measuring them here would walk
        # every queue on the append path.
        self._partitioner.update_partition_info(topic, partition, size, full)

    def append_run(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        run: RunSink,
        partitions: Sequence[int],
        cluster: ClusterView,
    ) -> int:
        """The bulk form of :meth:`append` for records that share a partition choice (a fixed
        partition, or keyless/ignored keys on the sticky partitioner): append ``values[start:]``
        to the chosen partition's open batch until it is full, one outcome per batch for
        ``run``.

        Returns:
            How many records went in; 0 when the next one needs a new batch (append it alone
            with :meth:`append`, then call this again).

        Raises:
            ProducerClosedError: The accumulator was closed.
            ConfigError: ``partition`` is not one of ``partitions``.
        """
        with self._lock:
            if self._closed or self.fatal_error is not None:
                raise self._refusal()
            # No key and no custom partitioner here: a fixed partition, or the sticky one.
            choice = partition_for(topic, partition, None, None, partitions, cluster, None, True)
            sticky = choice is None
            chosen = self._partitioner.partition(topic, cluster) if choice is None else choice
            dq = self._batches.get(self._topic_partition(topic, chosen, partitions))
            if not dq:
                return 0
            last = dq[-1]
            appended = last.try_append_many(timestamp, keys, values, start, run)
            if not appended:
                return 0
            full = len(dq) > 1 or last.builder.is_full
            if len(dq) == 1 and full:
                self._index.touch(self._topic_partition(topic, chosen, partitions))
                self._wakeup()
            if sticky:
                stop = start + appended
                size = appended * _RECORD_OVERHEAD_BOUND + total_len(values, start, stop)
                if keys is not None:
                    size += total_len(keys, start, stop)
                self._sticky_appended(topic, chosen, size, full)
            return appended

    def append_rows(
        self, topic: str, partition: int | None, timestamp: int, rows: ArrowRows, start: int,
        stop: int, run: RunSink, partitions: Sequence[int], cluster: ClusterView,
    ) -> int:
        """:meth:`append_run` for Arrow rows: positions ``[start, stop)`` of ``rows``, which
        share a partition choice (see :mod:`aioaccum._core.arrow`). Same result and errors."""
        with self._lock:
            if self._closed or self.fatal_error is not None:
                raise self._refusal()
            choice = partition_for(topic, partition, None, None, partitions, cluster, None, True)
            chosen = self._partitioner.partition(topic, cluster) if choice is None else choice
            tp = self._topic_partition(topic, chosen, partitions)
            dq = self._batches.get(tp)
            if not dq:
                return 0
            last = dq[-1]
            appended = last.try_append_rows(timestamp, rows, start, stop, run)
            if not appended:
                return 0
            full = len(dq) > 1 or last.builder.is_full
            if len(dq) == 1 and full:
                self._index.touch(tp)
                self._wakeup()
            if choice is None:
                self._sticky_appended(topic, chosen, rows.size_of(start, start + appended), full)
            return appended

    def _refusal(self) -> ProducerClosedError:
        fatal = self.fatal_error
        if fatal is None:
            return ProducerClosedError("cannot append: the producer is closed")
        error = ProducerFailedError(
            f"the producer stopped on an error and takes no more records: {fatal!r}; "
            "create a new one"
        )
        error.__cause__ = fatal
        return error

    def set_wakeup(
        self,
        wakeup: Callable[[], None],
        threadsafe: Callable[[], None] | None = None,
        *,
        wake_by: Callable[[float], None] | None = None,
        wake_by_threadsafe: Callable[[float], None] | None = None,
    ) -> None:
        """Who to tell (the sender), and how from another thread than the loop's: ``wakeup``
        when a first batch can go now, ``wake_by(deadline)`` when a batch opened in an empty
        queue will have lingered enough at ``deadline`` (on the accumulator's clock)."""
        self._wakeup = wakeup
        self._wakeup_threadsafe = threadsafe or wakeup
        if wake_by is None:
            # Without a deadline to keep, a new linger is a wake-up like any other.
            def wake_by(deadline: float) -> None:
                wakeup()

        self._wake_by = wake_by
        self._wake_by_threadsafe = wake_by_threadsafe or wake_by

    def _new_batch(
        self,
        tp: TopicPartition,
        buffer: bytearray,
        now: float,
        from_pool: bool = True,
        write_limit: int = 0,
    ) -> ProducerBatch:
        # Chunks come without waiting, under the pool's lock: when the pool has none, the
        # record is refused as by a full batch and the caller opens the next one through the
        # BufferRequest path, which waits in the pool's FIFO. A split's parts (outside the pool)
        # are one buffer each.
        chunked = from_pool and self._chunk_size > 0
        # An uncompressed builder never reads the ratio: no lookup (a tuple, and the codec
        # enum's hash in Python) for each of its batches.
        compression = self._compression
        ratio = self._estimator.estimation(tp.topic, compression) if compression else 1.0
        # By position: once per batch, a call with keywords costs as much again to parse.
        builder = MemoryRecordsBuilder(
            buffer,
            write_limit or self._batch_size,
            self._compression,
            self._compression_level,
            None,
            ratio,
            self._chunk_size if chunked else 0,
            self._chunk_source if chunked else None,
            self._chunk_sink if chunked else None,
        )
        return ProducerBatch(tp, builder, now, self._loop, from_pool)

    # --- deciding what to send

    def ready(self, cluster: ClusterView, now: float) -> ReadyCheck:
        """Nodes with sendable data, how long until the next may be, and leaderless topics.

        The index answers from what changed since the last call (see
        :mod:`aioaccum._core.ready_index`), not from a walk of every partition. With adaptive
        partitioning it also hands the sticky partitioner the queue length of each partition
        with data and a leader, leaving out (with the availability timeout on) those whose
        leader has been ready without being drained for longer than that timeout.
        """
        # acquire/release, not ``with`` (see deallocate): once per sender turn.
        self._acquire()
        try:
            index = self._index
            index.sync(cluster, now)
            forced = self._pool.queued() > 0 or self._closed or self._flushes_in_progress > 0
            ready_nodes = index.ready_nodes(forced)
            deadline = index.next_deadline()
            next_check = deadline - now if deadline > now else 0.0
            if self._adaptive:
                self._measure_loads(index)
            if self._availability_timeout > 0:
                # After the check above, as Kafka's sender does: a node that is only now ready
                # after a quiet spell must get one chance to be drained before it counts as
                # stalled.
                ready_at = self._node_ready_at
                drained_at = self._node_drained_at
                for node in ready_nodes:
                    ready_at[node] = now
                    drained_at.setdefault(node, now)
            return ReadyCheck(ready_nodes, next_check, index.unknown_leader_topics())
        finally:
            self._release()

    def _measure_loads(self, index: ReadyIndex) -> None:
        """Queue lengths of the partitions with data, for the topics keyless records went to
        (Kafka measures them in its ready walk).

        Only topics with data now, or with data at the last measure (their table goes back to
        empty, a uniform draw), are handed over: the work follows the partitions with data,
        not the number of topics the partitioner knows."""
        topics = self._partitioner.measured_topics()
        if not topics:
            return
        stalled = self._stalled_nodes() if self._availability_timeout > 0 else None
        loads: dict[str, dict[int, int]] = {}
        excluded: dict[str, set[int]] = {}
        batches = self._batches
        known = self._tps
        for tp in index.nonempty:
            topic = tp.topic
            if topic not in topics:
                continue
            parts = known.get(topic)
            if parts is None or len(parts) < 2:
                continue  # one partition: nothing to choose between, nothing to weigh
            leader = index.leader(tp)
            if leader < 0:
                continue
            sizes = loads.get(topic)
            if sizes is None:
                sizes = loads[topic] = {}
            sizes[tp.partition] = len(batches[tp])
            if stalled is not None and leader in stalled:
                excluded.setdefault(topic, set()).add(tp.partition)
        measured = set(loads)
        for topic in self._loaded_topics:
            if topic not in measured:
                loads[topic] = {}
        self._loaded_topics = measured
        if loads:
            self._partitioner.update_load_stats(loads, excluded)

    def _stalled_nodes(self) -> set[int] | None:
        """Nodes that were last found ready more than the availability timeout after they were
        last drained (``None`` if none)."""
        timeout = self._availability_timeout
        drained_at = self._node_drained_at
        stalled = {
            node
            for node, ready in self._node_ready_at.items()
            if ready - drained_at[node] > timeout
        }
        return stalled or None

    def drain(
        self, cluster: ClusterView, nodes: Iterable[int], max_size: int, now: float
    ) -> dict[int, list[ProducerBatch]]:
        """Take at most one batch per partition for each node, within ``max_size`` bytes,
        starting each node after the partition its previous drain served last."""
        self._acquire()
        try:
            index = self._index
            index.sync(cluster, now)
            out: dict[int, list[ProducerBatch]] = {}
            # The sender passes only nodes it can send to: each is available now (canDrain).
            drained_at = self._node_drained_at if self._availability_timeout > 0 else None
            # Memory short does not force the sticky batch out: it lingers out (linger_ms at
            # most), and its appenders are not the ones waiting (see ReadyIndex.drain_node).
            filling = None if self._closed or self._flushes_in_progress else self._partitioner.peek
            for node in nodes:
                if drained_at is not None:
                    drained_at[node] = now
                batches = index.drain_node(cluster, node, max_size, now, self._txn, filling)
                if batches:
                    out[node] = batches
            return out
        finally:
            self._release()

    # --- expiry, retries, completion

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery_timeout``."""
        self._acquire()
        try:
            return self._index.expired(now)
        finally:
            self._release()

    def reenqueue(self, batch: ProducerBatch, now: float, backoff: float) -> None:
        """Put a batch that must be retried back at the head of its partition's deque.

        Stamped batches go back in sequence order (Kafka's ``insertInSequenceOrder``): when
        several in-flight batches of a partition fail together, they are re-sent in the order the
        broker expects."""
        with self._lock:
            batch.reenqueued(now, backoff)
            self._insert_in_sequence_order(batch)
            self._index.put_back(batch.tp, batch.created)

    def _insert_in_sequence_order(self, batch: ProducerBatch) -> None:
        dq = self._batches.setdefault(batch.tp, collections.deque())
        seq = batch.base_sequence
        if seq < 0:
            dq.appendleft(batch)
            return
        position = 0
        for queued in dq:
            if queued.base_sequence < 0 or queued.base_sequence > seq:
                break
            position += 1
        dq.insert(position, batch)

    def restamp_sequences(self) -> int:
        """After a producer id reset: give queued stamped batches new sequences, in order.

        Call only with no request in flight, so every unfinished batch is in a queue.
        Returns the number of batches re-stamped."""
        with self._lock:
            if self._txn is None:
                return 0
            count = 0
            for dq in self._batches.values():
                for batch in dq:
                    if batch.base_sequence < 0:
                        break  # stamped batches come first; the rest are stamped when drained
                    self._txn.stamp(batch, again=True)
                    count += 1
            return count

    def take_possibly_written(self) -> list[ProducerBatch]:
        """Remove and return the queued batches that were sent without a definite answer.

        Before sequences start over under a new epoch: such a batch may be in the log already,
        and under new sequences the broker could not tell a second copy from new records.
        """
        with self._lock:
            taken: list[ProducerBatch] = []
            for tp, dq in self._batches.items():
                if not any(batch.possibly_written for batch in dq):
                    continue
                keep = [batch for batch in dq if not batch.possibly_written]
                taken.extend(batch for batch in dq if batch.possibly_written)
                dq.clear()
                dq.extend(keep)
                if keep:
                    self._index.put_back(tp, keep[0].created)
                else:
                    self._index.mute(tp)
                    self._index.touch(tp)
            return taken

    def split_and_reenqueue(self, big: ProducerBatch, now: float, backoff: float) -> int:
        """Re-batch a batch the broker refused as too large; returns the number of new batches.

        The new batches use buffers outside the pool (as Kafka's split does), keep the original
        creation time for the delivery timeout, keep each record's own result, and take over the
        original's sequence range so an idempotent partition sees no gap.
        """
        with self._lock:
            if big.compression is not CompressionType.NONE:
                # The estimate was too optimistic: make the next batches of this topic smaller.
                self._estimator.set_estimation(big.tp.topic, big.compression, 1.0)
            parts: list[ProducerBatch] = []
            # Each split at least halves the parts, so a record the topic refuses ends up alone
            # within a few rounds, and the records batched with it go through; splitting at
            # batch_size alone could rebuild the same batch round after round.
            limit = min(self._batch_size, max(big.estimated_size_in_bytes // 2, 1))
            for timestamp, key, value, headers, future, callback in big.split_records():
                if not parts or not append_moved(
                    parts[-1], timestamp, key, value, headers, future, callback
                ):
                    size = max(limit, estimate_size_in_bytes_upper_bound(key, value, headers))
                    part = self._new_batch(
                        big.tp, bytearray(size), big.created, from_pool=False, write_limit=limit
                    )
                    appended = append_moved(part, timestamp, key, value, headers, future, callback)
                    assert appended, "the first record of a batch always fits"
                    parts.append(part)
            big.detach_records()
            big.split_into = parts
            big.abort(RuntimeError("split into smaller batches"))
            self.deallocate(big)
            sequence = big.base_sequence
            for part in parts:
                # Closed at once: each part's record count (and so its sequence range) is final.
                part.close()
                if sequence >= 0 and self._txn is not None:
                    producer = self._txn.producer
                    part.set_producer_state(
                        producer.producer_id, producer.epoch, sequence, self._txn.transactional
                    )
                    sequence += part.record_count
                self._incomplete.add(part)
                part.possibly_written = big.possibly_written
                part.attempts = big.attempts
                part.reenqueued(now, backoff)
            # Unstamped parts go in at the front one by one: the last first keeps their order.
            for part in reversed(parts):
                self._insert_in_sequence_order(part)
            self._index.put_back(big.tp, big.created)
            return len(parts)

    def deallocate(self, batch: ProducerBatch) -> None:
        """Return a finished batch's buffer to the pool; only when no request reads it any more."""
        # acquire/release, not ``with``: once per batch, and compiled, the context protocol's
        # two method lookups cost more than the work.
        self._acquire()
        try:
            if batch not in self._incomplete:
                return
            self._incomplete.discard(batch)
            # The producer's setting first: without compression, no property is read (each a
            # lookup by name, once per batch).
            if (
                self._compression is not _NO_COMPRESSION
                and batch.closed
                and batch.compression is not _NO_COMPRESSION
                and batch.final_state is not FinalState.ABORTED  # never sealed: no ratio
            ):
                self._estimator.update_estimation(
                    batch.tp.topic, batch.compression, batch.builder.compression_ratio
                )
            if batch.from_pool:
                if self._chunk_size:
                    for chunk in batch.builder.chunks:
                        self._pool.deallocate(chunk)
                else:
                    self._pool.deallocate(batch.buffer)
        finally:
            self._release()

    def mute(self, tp: TopicPartition) -> None:
        with self._lock:
            self._muted.add(tp)
            self._index.mute(tp)

    def unmute(self, tp: TopicPartition) -> None:
        if tp not in self._muted:  # the common case, once per batch answered: no lock
            return
        with self._lock:
            self._muted.discard(tp)
            self._index.touch(tp)

    # --- flush and close

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress -= 1

    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress > 0

    def incomplete_batches(self) -> list[ProducerBatch]:
        """Every batch appended to and not yet ended: what a flush waits for."""
        with self._lock:
            return list(self._incomplete)

    def close(self) -> None:
        """Refuse new appends; what is queued becomes sendable at once."""
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def has_unended(self) -> bool:
        """Whether a record appended has neither been acknowledged nor failed yet. A batch
        whose records ended while its request is still out only holds its buffer."""
        with self._lock:
            return any(not batch.is_done for batch in self._incomplete)

    def release_ended(self) -> None:
        """Return the buffer of every batch that has ended but is still held (the last step
        of a stop, once no request can read one)."""
        with self._lock:
            for batch in list(self._incomplete):
                if batch.is_done:
                    self.deallocate(batch)

    def abort_unended(self, error: BaseException) -> list[ProducerBatch]:
        """End every batch that has not ended with ``error``: the queued ones, and any a
        failure left outside both the queues and the sender's requests (a drain that raised
        half-way). The last step of a stop; returns the batches it ended."""
        with self._lock:
            aborted: list[ProducerBatch] = []
            for dq in self._batches.values():
                while dq:
                    batch = dq.popleft()
                    if abort_quietly(batch, error):
                        aborted.append(batch)
                    self.deallocate(batch)
            self._index.clear()
            for batch in list(self._incomplete):
                if abort_quietly(batch, error):
                    aborted.append(batch)
                    self.deallocate(batch)
            return aborted

    def abort_queued(self, error: BaseException) -> list[ProducerBatch]:
        """End every queued batch with ``error``, leaving those in requests alone (Java's
        ``abortUndrainedBatches``): a transaction being aborted sends nothing more. Returns the
        batches it ended."""
        with self._lock:
            aborted: list[ProducerBatch] = []
            for tp, dq in self._batches.items():
                if not dq:
                    continue
                while dq:
                    batch = dq.popleft()
                    if abort_quietly(batch, error):
                        aborted.append(batch)
                    self.deallocate(batch)
                self._index.mute(tp)
                self._index.touch(tp)
            return aborted

    def queued_batches(self, tp: TopicPartition) -> int:
        with self._lock:
            dq = self._batches.get(tp)
            return len(dq) if dq else 0

