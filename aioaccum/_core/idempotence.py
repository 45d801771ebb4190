"""Producer id, epoch and per-partition sequence numbers for the idempotent producer.

The part of Kafka's ``TransactionManager`` an idempotent (non-transactional) producer needs. The
broker de-duplicates retries by (producer id, epoch, partition, sequence), so each batch is
stamped once, when it is first drained, and keeps its sequence across retries.
"""

from __future__ import annotations

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition

__all__ = ["ProducerIdAndEpoch", "TransactionManager"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_SEQUENCE = 2**31 - 1


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


class TransactionManager:
    """Hands out sequence numbers per partition for one producer id and epoch."""

    def __init__(self) -> None:
        self.producer = ProducerIdAndEpoch()
        self._next_sequence: dict[TopicPartition, int] = {}
        self._acknowledged: set[TopicPartition] = set()
        self.needs_reset = False

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        """Adopt a new id/epoch: the broker tracks sequences from 0 again for it."""
        self.producer = ProducerIdAndEpoch(producer_id, epoch)
        self._next_sequence.clear()
        self._acknowledged.clear()
        self.needs_reset = False

    def has_acknowledged(self, tp: TopicPartition) -> bool:
        """Whether the broker acknowledged a batch of ``tp`` under the current producer id.

        Until it has, the broker keeps no sequence state for this producer on ``tp`` and takes
        whatever sequence comes first; a second batch in flight could then overtake a first
        one that failed. So the sender keeps one batch in flight per such partition.
        """
        return tp in self._acknowledged

    def mark_acknowledged(self, tp: TopicPartition) -> None:
        self._acknowledged.add(tp)

    def request_reset(self) -> None:
        """Ask for a new producer id/epoch.

        Needed when a stamped batch ends without being written (or with an unknown outcome), or
        when the broker reports a sequence gap: later batches of that partition could otherwise
        never be accepted. This is the non-transactional part of Kafka's epoch bump.
        """
        if self.producer.is_valid:
            self.needs_reset = True

    @property
    def has_producer_id(self) -> bool:
        return self.producer.is_valid

    def next_sequence(self, tp: TopicPartition) -> int:
        return self._next_sequence.get(tp, 0)

    def stamp(self, batch: ProducerBatch, *, again: bool = False) -> None:
        """Give a batch its producer id, epoch and first sequence, once; retries keep them.

        ``again`` re-stamps a batch after a reset, under the new producer id.
        """
        if (batch.base_sequence >= 0 and not again) or not self.producer.is_valid:
            return
        tp = batch.tp
        sequence = self._next_sequence.get(tp, 0)
        batch.set_producer_state(self.producer.producer_id, self.producer.epoch, sequence)
        # Sequences wrap at 2**31 like Java's DefaultRecordBatch.incrementSequence.
        self._next_sequence[tp] = (sequence + batch.record_count) % (_MAX_SEQUENCE + 1)
