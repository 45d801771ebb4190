"""Producer id, epoch and per-partition sequence numbers for the idempotent producer.

The part of Kafka's ``TransactionManager`` an idempotent (non-transactional) producer needs. The
broker de-duplicates retries by (producer id, epoch, partition, sequence), so each batch is
stamped once, when it is first drained, and keeps its sequence across retries.

Everything known about one partition lives in its :class:`TopicPartitionEntry`, as in Kafka: the
next sequence to hand out, the last sequence the broker acknowledged, and the batches in flight
by first sequence. A new producer id or epoch starts every entry over.

Pre-stamped batches: a producer with a journal re-sends, after a crash, the batches its
predecessor had sealed, under the predecessor's producer id, epoch and base sequence, so that the
broker recognises the copies it already holds (:meth:`TransactionManager.adopt`). Such a batch is
*foreign*: it is never re-stamped, and nothing it does touches this producer's own sequence
state. While a partition has one, this producer's batches of that partition wait (see
:meth:`TransactionManager.has_acknowledged`). When the broker no longer knows the old identity,
:meth:`TransactionManager.disown` makes the batch this producer's own: stamped at its next drain,
delivered at least once.
"""

from __future__ import annotations

from collections.abc import Callable

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
        # Pre-stamped batches under an earlier producer's identity, and how many per partition.
        self._foreign: set[ProducerBatch] = set()
        self._foreign_on: dict[TopicPartition, int] = {}
        self._parked: dict[TopicPartition, list[ProducerBatch]] = {}
        self.on_disowned: Callable[[ProducerBatch, BaseException], None] | None = None
        """Told of each foreign batch :meth:`disown` made this producer's own."""

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

        False too while ``tp`` has a foreign batch: one at a time goes, in order, and this
        producer's first batch of ``tp`` only after the last of them has its answer.
        """
        if self._foreign_on and tp in self._foreign_on:
            return False
        entry = self._partitions.get(tp)
        return entry is not None and entry.last_acked_sequence != NO_SEQUENCE

    # --- batches pre-stamped under an earlier producer id

    def adopt(self, batch: ProducerBatch, producer_id: int, epoch: int,
              base_sequence: int) -> None:
        """Stamp ``batch`` with an earlier producer's id, epoch and base sequence, for good
        (until :meth:`disown`): a journaled batch re-sent after a crash exactly as it was
        sealed, so that the broker answers a copy it has as a duplicate."""
        batch.set_producer_state(producer_id, epoch, base_sequence, self.transactional)
        self._foreign.add(batch)
        self._foreign_on[batch.tp] = self._foreign_on.get(batch.tp, 0) + 1

    def is_foreign(self, batch: ProducerBatch) -> bool:
        return bool(self._foreign) and batch in self._foreign

    def _release(self, batch: ProducerBatch) -> bool:
        """Forget a foreign batch; False if ``batch`` is not one."""
        if not self._foreign or batch not in self._foreign:
            return False
        self._foreign.discard(batch)
        left = self._foreign_on[batch.tp] - 1
        if left:
            self._foreign_on[batch.tp] = left
        else:
            del self._foreign_on[batch.tp]
        return True

    @staticmethod
    def _same_identity(a: ProducerBatch, b: ProducerBatch) -> bool:
        return (a.builder.producer_id == b.builder.producer_id
                and a.builder.producer_epoch == b.builder.producer_epoch)

    def park(self, batch: ProducerBatch) -> bool:
        """Set aside a foreign batch answered ``OUT_OF_ORDER_SEQUENCE_NUMBER`` while a later
        foreign batch of its partition under the same identity is still to be answered.

        The broker remembers the last five batches per producer and partition: an older one
        that it wrote is refused as out of order, not recognised. Sequences are written without
        gaps, so the later batch's answer settles it: written or a duplicate, then so was this
        one (:meth:`written_before`); refused too, then neither was (:meth:`disown`). False
        (nothing done) when no later batch can tell.
        """
        if not self.is_foreign(batch):
            return False
        parked = self._parked.get(batch.tp, ())
        for other in self._foreign:
            if (other.tp == batch.tp and other.base_sequence > batch.base_sequence
                    and other not in parked and self._same_identity(other, batch)):
                self._parked.setdefault(batch.tp, []).append(batch)
                return True
        return False

    def _take_parked(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """The parked batches before ``batch`` under its identity, in order, no longer
        parked (still foreign)."""
        parked = self._parked.get(batch.tp)
        if not parked or not self.is_foreign(batch):
            return []
        earlier = [p for p in parked if p.base_sequence < batch.base_sequence
                   and self._same_identity(p, batch)]
        if earlier:
            kept = [p for p in parked if p not in earlier]
            if kept:
                self._parked[batch.tp] = kept
            else:
                del self._parked[batch.tp]
        return earlier

    def written_before(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """A foreign batch was written (or was a duplicate): the parked batches before it under
        its identity were written too. Returns them, in order, for the caller to complete (and
        :meth:`mark_acknowledged`)."""
        return self._take_parked(batch)

    def unpark(self, batch: ProducerBatch, error: BaseException) -> list[ProducerBatch]:
        """A foreign batch ends without a verdict on the parked batches before it: they become
        this producer's (see :meth:`disown`). Returns them, in order, for the caller to queue."""
        earlier = self._take_parked(batch)
        for p in earlier:
            self._release(p)
            self._make_own(p, error)
        return earlier

    def disown(self, batch: ProducerBatch, error: BaseException) -> list[ProducerBatch]:
        """A foreign batch the broker no longer knows under its old identity (``error`` says
        how): it becomes this producer's, without a sequence until its next drain stamps one,
        and so do the batches parked before it. At least once: the broker may hold a copy it
        can no longer recognise. Returns them, in order (``batch`` last), for the caller to
        queue; empty (nothing done) for a batch of this producer's own."""
        if not self.is_foreign(batch):
            return []
        disowned = self.unpark(batch, error)
        self._release(batch)
        self._make_own(batch, error)
        disowned.append(batch)
        return disowned

    def _make_own(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.base_sequence = NO_SEQUENCE
        if self.on_disowned is not None:
            self.on_disowned(batch, error)

    # --- this producer's batches

    def add_in_flight(self, batch: ProducerBatch) -> None:
        if batch.base_sequence >= 0 and not self.is_foreign(batch):
            self.entry(batch.tp).in_flight[batch.base_sequence] = batch

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        entry = self._partitions.get(batch.tp)
        if entry is not None and entry.in_flight.get(batch.base_sequence) is batch:
            del entry.in_flight[batch.base_sequence]

    def mark_acknowledged(self, batch: ProducerBatch) -> None:
        """The broker wrote ``batch`` (or had written it before) under the current id."""
        if batch.base_sequence < 0 or self._release(batch):
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
        if entry is None or self.is_foreign(batch):
            return False  # a foreign batch goes alone: nothing of its partition is ahead
        sequence = batch.base_sequence
        if any(earlier < sequence for earlier in entry.in_flight):
            return True  # the batch ahead is still on its way: its answer decides
        last = entry.last_acked_sequence
        return last != NO_SEQUENCE and sequence > last + 1

    def on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch ended without being written (or with an unknown outcome)."""
        if self._release(batch):
            pass  # its sequences were never this producer's: nothing here waits for them
        elif batch.base_sequence >= 0:
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

        ``again`` re-stamps a batch after a reset, under the new producer id (never a foreign
        one: the reset is of this producer's sequences, not of the earlier producer's).
        """
        if (batch.base_sequence >= 0 and not again) or not self.producer.is_valid:
            return
        if again and self.is_foreign(batch):
            return
        entry = self.entry(batch.tp)
        sequence = entry.next_sequence
        batch.set_producer_state(
            self.producer.producer_id, self.producer.epoch, sequence, self.transactional
        )
        # Sequences wrap at 2**31 like Java's DefaultRecordBatch.incrementSequence.
        entry.next_sequence = (sequence + batch.record_count) % _SEQUENCE_SPACE
