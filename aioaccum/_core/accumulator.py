"""RecordAccumulator: per-partition queues of batches, and the rules for what goes out.

Theory of operation
-------------------
A port of Kafka's ``RecordAccumulator``. Each topic-partition owns a deque of
:class:`ProducerBatch`; appends go to the last batch of the deque, and when it has no room a new
batch is opened in a buffer borrowed from the :class:`~aioaccum.pool.BufferPool`. Borrowing is the
one place a ``send()`` may wait, which is why :meth:`RecordAccumulator.append` is a coroutine.

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
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from aioaccum._core.batch import ProducerBatch, ResultSink, RunSink
from aioaccum._core.cluster import ClusterView, TopicPartition
from aioaccum._core.codecs import CompressionRatioEstimator, CompressionType
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.records import MemoryRecordsBuilder, estimate_size_in_bytes_upper_bound
from aioaccum.errors import ProducerClosedError

if TYPE_CHECKING:
    from aioaccum._core.records import Header

__all__ = ["AppendResult", "BufferSupplier", "ReadyCheck", "RecordAccumulator"]


class BufferSupplier(Protocol):
    """The part of the BufferPool the accumulator uses."""

    def allocate_nowait(self, size: int) -> bytearray | None: ...

    async def allocate(self, size: int, max_block_ms: float) -> bytearray: ...

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None: ...

    def queued(self) -> int: ...

    @property
    def poolable_size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """Kafka's ``ReadyCheckResult``."""

    ready_nodes: frozenset[int]
    next_check_in: float
    unknown_leader_topics: frozenset[str]


class AppendResult(NamedTuple):
    """Tells the producer whether to wake the sender."""

    batch_is_full: bool
    new_batch_created: bool


# Four possible answers, made once: append runs per record.
_CLOCK_TOLERANCE = 1e-6  # seconds
_APPENDED = AppendResult(False, False)
_APPENDED_FULL = AppendResult(True, False)
_NEW_BATCH = AppendResult(False, True)
_NEW_BATCH_FULL = AppendResult(True, True)


class RecordAccumulator:
    """Per-partition batches in pooled buffers (Kafka's ``RecordAccumulator``).

    Args:
        pool: Where batch buffers come from.
        batch_size: Target size of a batch, in bytes.
        linger: How long a batch may wait for more records, in seconds.
        delivery_timeout: How long a record may take from append to acknowledgement, in seconds.
        compression: Codec applied to each closed batch.
        compression_level: Codec level, or None for the codec's default.
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
    ) -> None:
        self._pool = pool
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
        self._drain_index: dict[int, int] = {}
        self._flushes_in_progress = 0
        self._closed = False

    # --- appending

    def try_append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        sink: ResultSink | None,
    ) -> AppendResult | None:
        """Add one record to the partition's open batch, if it has one with room (Kafka's
        ``tryAppend``). Synchronous: most records take only this path.

        Returns:
            What the sender needs to know, or ``None`` when the record needs a new batch: then
            call :meth:`append_to_new_batch`.

        Raises:
            ProducerClosedError: The accumulator was closed.
        """
        if self._closed:
            raise ProducerClosedError("cannot append: the producer is closed")
        dq = self._batches.get(tp)
        if dq:
            last = dq[-1]
            if last.try_append(timestamp, key, value, headers, sink):
                return _APPENDED_FULL if len(dq) > 1 or last.builder.is_full else _APPENDED
        return None

    def try_append_many(
        self,
        tp: TopicPartition,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        run: RunSink,
    ) -> tuple[int, AppendResult]:
        """Append ``values[start:]`` to the partition's open batch until it is full.

        Returns:
            How many records went in (0 when a new batch is needed: then append the next one
            with :meth:`append_to_new_batch`), and what the sender needs to know.

        Raises:
            ProducerClosedError: The accumulator was closed.
        """
        if self._closed:
            raise ProducerClosedError("cannot append: the producer is closed")
        dq = self._batches.get(tp)
        if dq:
            last = dq[-1]
            appended = last.try_append_many(timestamp, keys, values, start, run)
            if appended:
                full = len(dq) > 1 or last.builder.is_full
                return appended, _APPENDED_FULL if full else _APPENDED
        return 0, _APPENDED

    async def append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        sink: ResultSink | None,
        now: float,
        max_block_ms: float,
    ) -> AppendResult:
        """Add one record to the partition's open batch, opening a new batch when it is full.

        Waits for pool memory (up to ``max_block_ms``) only when a new batch is needed and the
        pool has no buffer to give at once.

        Raises:
            ProducerClosedError: The accumulator was closed.
            BufferExhaustedError: No memory became free within ``max_block_ms``.
        """
        result = self.try_append(tp, timestamp, key, value, headers, sink)
        if result is not None:
            return result
        return await self.append_to_new_batch(
            tp, timestamp, key, value, headers, sink, now, max_block_ms
        )

    async def append_to_new_batch(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        sink: ResultSink | None,
        now: float,
        max_block_ms: float,
    ) -> AppendResult:
        """The slow half of :meth:`append`, after :meth:`try_append` found no room.

        Raises:
            ProducerClosedError: The accumulator was closed.
            BufferExhaustedError: No memory became free within ``max_block_ms``.
        """
        if self._closed:
            raise ProducerClosedError("cannot append: the producer is closed")
        dq = self._batches.get(tp)
        if dq is None:
            dq = self._batches[tp] = collections.deque()
        size = max(self._batch_size, estimate_size_in_bytes_upper_bound(key, value, headers))
        buffer = self._pool.allocate_nowait(size)
        if buffer is None:
            buffer = await self._pool.allocate(size, max_block_ms)
            if self._closed:
                self._pool.deallocate(buffer, size)
                raise ProducerClosedError("cannot append: the producer closed while waiting")
            if dq:
                # Another task may have opened a batch while this one waited for memory.
                last = dq[-1]
                if last.try_append(timestamp, key, value, headers, sink):
                    self._pool.deallocate(buffer, size)
                    return _APPENDED_FULL if len(dq) > 1 or last.builder.is_full else _APPENDED

        batch = self._new_batch(tp, buffer, now)
        appended = batch.try_append(timestamp, key, value, headers, sink)
        assert appended, "the first record of a batch always fits"
        dq.append(batch)
        self._incomplete.add(batch)
        return _NEW_BATCH_FULL if len(dq) > 1 or batch.builder.is_full else _NEW_BATCH

    def _new_batch(
        self, tp: TopicPartition, buffer: bytearray, now: float, *, from_pool: bool = True
    ) -> ProducerBatch:
        builder = MemoryRecordsBuilder(
            buffer,
            compression=self._compression,
            compression_level=self._compression_level,
            write_limit=self._batch_size,
            estimated_ratio=self._estimator.estimation(tp.topic, self._compression),
        )
        return ProducerBatch(tp, builder, now, from_pool=from_pool)

    # --- deciding what to send

    def ready(self, cluster: ClusterView, now: float) -> ReadyCheck:
        """Nodes with sendable data, how long until the next may be, and leaderless topics."""
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        next_check = self._linger if self._linger > 0 else float("inf")
        exhausted = self._pool.queued() > 0
        forced = exhausted or self._closed or self._flushes_in_progress > 0
        for tp, dq in self._batches.items():
            if not dq:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                unknown.add(tp.topic)
                continue
            if leader in ready_nodes or tp in self._muted:
                continue
            batch = dq[0]
            waited = now - batch.last_attempt
            backing_off = batch.attempts > 0 and waited + _CLOCK_TOLERANCE < batch.backoff
            time_to_wait = batch.backoff if backing_off else self._linger
            full = len(dq) > 1 or batch.is_full
            # With a tolerance: a timer set for time_to_wait may fire a rounding error early,
            # and a sleep of 1e-17 s would not move a float clock forward, so it would spin.
            expired = waited + _CLOCK_TOLERANCE >= time_to_wait
            if (full or expired or forced) and not backing_off:
                ready_nodes.add(leader)
            else:
                next_check = min(next_check, max(time_to_wait - waited, 0.0))
        return ReadyCheck(frozenset(ready_nodes), next_check, frozenset(unknown))

    def drain(
        self, cluster: ClusterView, nodes: Iterable[int], max_size: int, now: float
    ) -> dict[int, list[ProducerBatch]]:
        """Take at most one batch per partition for each node, within ``max_size`` bytes."""
        out: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            batches = self._drain_node(cluster, node, max_size, now)
            if batches:
                out[node] = batches
        return out

    def _drain_node(
        self, cluster: ClusterView, node: int, max_size: int, now: float
    ) -> list[ProducerBatch]:
        parts = cluster.partitions_for_node(node)
        if not parts:
            return []
        n = len(parts)
        start = self._drain_index.get(node, 0) % n
        taken: list[ProducerBatch] = []
        size = 0
        for step in range(n):
            i = (start + step) % n
            tp = parts[i]
            if tp in self._muted:
                continue
            dq = self._batches.get(tp)
            if not dq:
                continue
            first = dq[0]
            if first.attempts > 0 and now - first.last_attempt < first.backoff:
                continue
            if taken and size + first.estimated_size_in_bytes > max_size:
                # The next drain of this node starts here, so this partition goes first then.
                self._drain_index[node] = i
                return taken
            dq.popleft()
            if self._txn is not None:
                self._txn.stamp(first)
            first.close()
            first.mark_drained(now)
            size += len(first.records())
            taken.append(first)
            self._drain_index[node] = (i + 1) % n
        return taken

    # --- expiry, retries, completion

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery_timeout``."""
        expired: list[ProducerBatch] = []
        for dq in self._batches.values():
            while dq and dq[0].has_reached_delivery_timeout(self._delivery_timeout, now):
                batch = dq.popleft()
                batch.close()
                expired.append(batch)
        return expired

    def reenqueue(self, batch: ProducerBatch, now: float, backoff: float) -> None:
        """Put a batch that must be retried back at the head of its partition's deque.

        Stamped batches go back in sequence order (Kafka's ``insertInSequenceOrder``): when
        several in-flight batches of a partition fail together, they are re-sent in the order the
        broker expects.
        """
        batch.reenqueued(now, backoff)
        self._insert_in_sequence_order(batch)

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
        Returns the number of batches re-stamped.
        """
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

    def split_and_reenqueue(self, big: ProducerBatch, now: float, backoff: float) -> int:
        """Re-batch a batch the broker refused as too large; returns the number of new batches.

        The new batches use buffers outside the pool (as Kafka's split does), keep the original
        creation time for the delivery timeout, keep each record's own result, and take over the
        original's sequence range so an idempotent partition sees no gap.
        """
        if big.compression is not CompressionType.NONE:
            # The estimate was too optimistic: make the next batches of this topic smaller.
            self._estimator.set_estimation(big.tp.topic, big.compression, 1.0)
        parts: list[ProducerBatch] = []
        for timestamp, key, value, headers, sink in big.split_records():
            if parts and parts[-1].try_append(timestamp, key, value, headers, sink):
                continue
            size = max(self._batch_size, estimate_size_in_bytes_upper_bound(key, value, headers))
            part = self._new_batch(big.tp, bytearray(size), big.created, from_pool=False)
            appended = part.try_append(timestamp, key, value, headers, sink)
            assert appended, "the first record of a batch always fits"
            parts.append(part)
        big.detach_sinks()
        big.split_into = parts
        big.abort(RuntimeError("split into smaller batches"))
        self.deallocate(big)
        sequence = big.base_sequence
        for part in parts:
            # Closed at once: each part's record count (and so its sequence range) is final.
            part.close()
            if sequence >= 0 and self._txn is not None:
                producer = self._txn.producer
                part.set_producer_state(producer.producer_id, producer.epoch, sequence)
                sequence += part.record_count
            self._incomplete.add(part)
            part.attempts = big.attempts
            part.reenqueued(now, backoff)
            self._insert_in_sequence_order(part)
        return len(parts)

    def deallocate(self, batch: ProducerBatch) -> None:
        """Return a finished batch's buffer to the pool; only when no request reads it any more."""
        if batch not in self._incomplete:
            return
        self._incomplete.discard(batch)
        if batch.is_closed and batch.compression is not CompressionType.NONE:
            self._estimator.update_estimation(
                batch.tp.topic, batch.compression, batch.builder.compression_ratio
            )
        if batch.from_pool:
            self._pool.deallocate(batch.buffer)

    def mute(self, tp: TopicPartition) -> None:
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    # --- flush and close

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress -= 1

    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress > 0

    def incomplete_batches(self) -> list[ProducerBatch]:
        """Every batch appended to and not yet ended: what a flush waits for."""
        return list(self._incomplete)

    def close(self) -> None:
        """Refuse new appends; what is queued becomes sendable at once."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def abort_undrained_batches(self, error: BaseException) -> list[ProducerBatch]:
        """Abort every queued batch (the sender aborts its in-flight ones itself)."""
        aborted: list[ProducerBatch] = []
        for dq in self._batches.values():
            while dq:
                batch = dq.popleft()
                batch.close()
                batch.abort(error)
                self.deallocate(batch)
                aborted.append(batch)
        return aborted

    def queued_batches(self, tp: TopicPartition) -> int:
        dq = self._batches.get(tp)
        return len(dq) if dq else 0

    def partition_queue_sizes(self, topic: str) -> dict[int, int]:
        """Batches queued per partition of ``topic``: the adaptive partitioner's load signal."""
        return {tp.partition: len(dq) for tp, dq in self._batches.items() if tp.topic == topic}
