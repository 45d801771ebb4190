"""Producer id, epoch and per-partition sequence numbers for the idempotent producer.

The part of Kafka's ``TransactionManager`` an idempotent (non-transactional) producer needs. The
broker de-duplicates retries by (producer id, epoch, partition, sequence), so each batch is
stamped once, when it is first drained, and keeps its sequence across retries.

Everything known about one partition lives in its :class:`TopicPartitionEntry`, as in Kafka: the
next sequence to hand out, the last sequence the broker acknowledged, and the batches in flight
by first sequence. A new producer id or epoch starts every entry over.
"""

from __future__ import annotations

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition

__all__ = ["MAX_EPOCH", "ProducerIdAndEpoch", "TopicPartitionEntry", "TransactionManager"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_SEQUENCE_SPACE = 2**31
MAX_EPOCH = 2**15 - 1  # an int16 on the wire


class ProducerIdAndEpoch:
    __slots__ = ("epoch", "producer_id")

    def __init__(self, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> None:
        self.producer_id = producer_id
        self.epoch = epoch

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0

    def __repr__(self) -> str:
        return f"ProducerIdAndEpoch(producer_id={self.producer_id}, epoch={self.epoch})"


class TopicPartitionEntry:
    """One partition's sequence state under the current producer id and epoch."""

    __slots__ = ("in_flight", "last_acked_sequence", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked_sequence = NO_SEQUENCE
        self.in_flight: dict[int, ProducerBatch] = {}
        """Batches sent and not yet answered, by first sequence."""

    def __repr__(self) -> str:
        return (
            f"TopicPartitionEntry(next_sequence={self.next_sequence}, "
            f"last_acked_sequence={self.last_acked_sequence}, in_flight={sorted(self.in_flight)})"
        )


class TransactionManager:
    """Hands out sequence numbers per partition for one producer id and epoch.

    With a ``transactional_id``, batches are stamped as transactional, and the producer id and epoch
    come from the transaction coordinator (:mod:`aioaccum._runtime.transactions`), never from the
    sender: a batch that fails then only records the error that makes the current transaction
    abortable, and a needed reset waits for that transaction's abort.
    """

    def __init__(self, transactional_id: str | None = None) -> None:
        self.producer = ProducerIdAndEpoch()
        self._partitions: dict[TopicPartition, TopicPartitionEntry] = {}
        self.needs_reset = False
        self.transactional_id = transactional_id
        self.transactional = transactional_id is not None
        self.batch_error: BaseException | None = None
        """The first error a batch ended with since the transaction began (transactional)."""

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        """Adopt a new id/epoch: the broker tracks sequences from 0 again for it."""
        self.producer = ProducerIdAndEpoch(producer_id, epoch)
        self._partitions.clear()
        self.needs_reset = False

    def entry(self, tp: TopicPartition) -> TopicPartitionEntry:
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = TopicPartitionEntry()
        return entry

    def has_acknowledged(self, tp: TopicPartition) -> bool:
        """Whether the broker acknowledged a batch of ``tp`` under the current producer id.

        Until it has, the broker keeps no sequence state for this producer on ``tp`` and takes
        whatever sequence comes first; a second batch in flight could then overtake a first
        one that failed. So the sender keeps one batch in flight per such partition.
        """
        entry = self._partitions.get(tp)
        return entry is not None and entry.last_acked_sequence != NO_SEQUENCE

    def add_in_flight(self, batch: ProducerBatch) -> None:
        if batch.base_sequence >= 0:
            self.entry(batch.tp).in_flight[batch.base_sequence] = batch

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        entry = self._partitions.get(batch.tp)
        if entry is not None and entry.in_flight.get(batch.base_sequence) is batch:
            del entry.in_flight[batch.base_sequence]

    def mark_acknowledged(self, batch: ProducerBatch) -> None:
        """The broker wrote ``batch`` (or had written it before) under the current id."""
        if batch.base_sequence < 0:
            return
        last = (batch.base_sequence + batch.record_count - 1) % _SEQUENCE_SPACE
        self.entry(batch.tp).last_acked_sequence = last

    def follows_unresolved_batch(self, batch: ProducerBatch) -> bool:
        """Whether an out-of-order answer for ``batch`` only means that an earlier batch is not
        written yet.

        After a leader change, a batch retried to the new leader can arrive before the retry of
        the batch ahead of it. The broker then sees a gap, but no sequence is lost: the batch is
        retried after the earlier one, under the same producer id (Kafka's
        ``TransactionManager.canRetry``). A new producer id here would re-stamp batches whose
        earlier attempt may have been written, and the broker could no longer de-duplicate them.
        """
        entry = self._partitions.get(batch.tp)
        if entry is None:
            return False
        sequence = batch.base_sequence
        if any(earlier < sequence for earlier in entry.in_flight):
            return True  # the batch ahead is still on its way: its answer decides
        last = entry.last_acked_sequence
        return last != NO_SEQUENCE and sequence > last + 1

    def on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch ended without being written (or with an unknown outcome)."""
        if batch.base_sequence >= 0:
            # Its sequence range is never written: later batches must not wait for it.
            self.request_reset()
        if self.transactional and self.batch_error is None:
            self.batch_error = error

    def request_reset(self) -> None:
        """Ask for a new producer id/epoch.

        Needed when a stamped batch ends without being written (or with an unknown outcome), or
        when the broker reports a sequence gap: later batches of that partition could otherwise
        never be accepted. This is the non-transactional part of Kafka's epoch bump.
        """
        if self.producer.is_valid:
            self.needs_reset = True

    def bump_epoch(self) -> bool:
        """Go on under the same producer id with the next epoch (KIP-360, as Java's idempotent
        producer does it on the client): every partition's sequences start again at 0, and
        the broker refuses any request still on its way with the old epoch once the new one
        has written. False when the epoch is exhausted: then only a new producer id helps.

        The broker ignores a producer id and epoch in InitProducerId without a transactional
        id and hands out a new id, so for an idempotent producer the bump is made here.
        """
        producer = self.producer
        if not producer.is_valid or producer.epoch >= MAX_EPOCH or self.transactional:
            # A transactional epoch is the coordinator's to move (the abort does it).
            return False
        self.set_producer_id_and_epoch(producer.producer_id, producer.epoch + 1)
        return True

    @property
    def has_producer_id(self) -> bool:
        return self.producer.is_valid

    def next_sequence(self, tp: TopicPartition) -> int:
        entry = self._partitions.get(tp)
        return 0 if entry is None else entry.next_sequence

    def stamp(self, batch: ProducerBatch, *, again: bool = False) -> None:
        """Give a batch its producer id, epoch and first sequence, once; retries keep them.

        ``again`` re-stamps a batch after a reset, under the new producer id.
        """
        if (batch.base_sequence >= 0 and not again) or not self.producer.is_valid:
            return
        entry = self.entry(batch.tp)
        sequence = entry.next_sequence
        batch.set_producer_state(
            self.producer.producer_id, self.producer.epoch, sequence, self.transactional
        )
        # Sequences wrap at 2**31 like Java's DefaultRecordBatch.incrementSequence.
        entry.next_sequence = (sequence + batch.record_count) % _SEQUENCE_SPACE
