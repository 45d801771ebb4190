"""Sealed batches after a crash: re-sent as they were, under the identity they were sent with.

A batch the previous producer sealed (a SEAL entry: it was sent, or about to be) may be in the
topic already, its acknowledgement lost with the process. Re-sent under a new producer id, the
broker would write it a second time. So a restart rebuilds each such batch exactly as sealed (the
same records, in order, so the same count) and pre-stamps it with the old producer id, epoch and
base sequence (:meth:`TransactionManager.adopt`): the broker answers a copy it holds as a
duplicate, which is success, and writes one it never got.

Order per partition: the rebuilt batches go first, oldest first, and are closed, so the
partition's unsealed recovered records and its new ones go into later batches, stamped under the
new producer id; those are drained only after the last rebuilt batch of the partition has its
answer (the transaction manager keeps the partition to one batch in flight meanwhile).

Fallback: when the broker no longer knows the old identity (it expired the producer's state,
or the sequence fell out of the five batches it remembers per partition) it answers
``UNKNOWN_PRODUCER_ID``, ``OUT_OF_ORDER_SEQUENCE_NUMBER`` or ``INVALID_PRODUCER_EPOCH``; the
sender then makes the batch this producer's (:meth:`TransactionManager.disown`), and it goes
again under the new id: at least once. So do the records of a seal that cannot be rebuilt as it
was (records of it lost to corruption, or a batch larger than the whole pool). Both are counted
in :attr:`RecoveryReport.at_least_once` and logged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.records import RECORD_BATCH_OVERHEAD, estimate_size_in_bytes_upper_bound
from aioaccum._journal.journal import JournaledRecord, SealedBatch
from aioaccum._runtime.journaled import JournaledAccumulator, _Range
from aioaccum.errors import RecordTooLargeError

__all__ = ["RecoveryReport", "at_least_once", "resend_sealed"]

log = logging.getLogger(__name__)

# A batch's records are checked against a write limit; a rebuilt batch takes all of its records
# whatever the limit (its buffer was sized for them), so its limit is out of reach.
_NO_LIMIT = 1 << 62


class RecoveryReport:
    """What a restart recovered, and how much of it went at least once rather than exactly
    once (see the module). One per journaled producer, as ``acc.recovery_report``."""

    def __init__(self, folder: object) -> None:
        self.folder = folder
        self.recovered = 0
        """Owed records re-sent at start."""
        self.rebuilt = 0
        """Records of those in batches rebuilt under their old producer id."""
        self.at_least_once = 0
        """Records of sealed batches re-sent under the new producer id (see the module)."""

    def fell_back(self, count: int, why: str) -> None:
        first = self.at_least_once == 0
        self.at_least_once += count
        # The first says what happens; the rest are counted (producer.journal_at_least_once)
        # and summed up at close, so a broker that forgot the old id does not flood the log.
        (log.warning if first else log.debug)(
            "journal %s: %d recovered record(s) go again under the new producer id, so the "
            "broker may write them twice (at least once): %s; %d so far",
            self.folder, count, why, self.at_least_once,
        )

    def disowned(self, batch: ProducerBatch, error: BaseException) -> None:
        """The transaction manager's ``on_disowned``: a rebuilt batch the broker did not take
        under its old identity."""
        builder = batch.builder
        tp = batch.tp
        self.fell_back(
            batch.record_count,
            f"the broker answered {error} for {tp.topic}-{tp.partition} under producer id "
            f"{builder.producer_id} epoch {builder.producer_epoch} sequence "
            f"{builder.base_sequence}",
        )


def at_least_once(producer: Any) -> int:
    """Records recovered from ``journal_dir`` at :meth:`start` that went again under the new
    producer id, because the broker no longer knew the batch they had been sent in under the old
    one: delivered at least once, so possibly twice (see docs/journal.md). It grows while those
    batches get their answers; 0 without a journal."""
    report = getattr(producer._acc, "recovery_report", None)
    return 0 if report is None else int(report.at_least_once)


async def resend_sealed(
    acc: JournaledAccumulator,
    pool: Any,
    records: Sequence[JournaledRecord],
    sealed: Sequence[SealedBatch],
    partitions_of: Callable[[str], Any],
    report: RecoveryReport,
) -> set[int]:
    """Rebuild each sealed batch and queue it pre-stamped, oldest first per partition.

    ``partitions_of`` is an async function giving a topic's partitions. Returns the journal
    sequence numbers of the records now in rebuilt batches; the caller re-sends the rest.
    """
    txn = acc._txn
    if txn is None or not sealed:
        return set()
    loop = asyncio.get_running_loop()
    owed: dict[tuple[str, int], list[JournaledRecord]] = collections.defaultdict(list)
    for record in records:
        owed[(record.topic, record.partition)].append(record)
    taken: set[int] = set()
    # Partitions with a seal that cannot be rebuilt: their later seals go under the new id
    # too, in acceptance order, since order per partition comes before avoiding duplicates.
    broken: set[tuple[str, int]] = set()
    # Per partition in sequence order: the order the previous producer drained them in.
    for seal in sorted(sealed, key=lambda s: s.first_seq):
        tp = (seal.topic, seal.partition)
        run = [r for r in owed.get(tp, ()) if seal.first_seq <= r.seq <= seal.last_seq]
        if tp in broken:
            report.fell_back(len(run), (
                f"an earlier batch of {seal.topic}-{seal.partition} could not be rebuilt, and "
                f"order per partition comes first"))
            continue
        if len(run) != seal.count:
            broken.add(tp)
            report.fell_back(len(run), (
                f"the batch of {seal.topic}-{seal.partition} sealed with {seal.count} record(s) "
                f"(journal sequence {seal.first_seq} to {seal.last_seq}) has {len(run)} left "
                f"in the journal"))
            continue
        size = RECORD_BATCH_OVERHEAD + sum(
            estimate_size_in_bytes_upper_bound(r.key, r.value, list(r.headers))
            - RECORD_BATCH_OVERHEAD for r in run)
        partitions = await partitions_of(seal.topic)
        if seal.partition >= len(partitions):
            continue  # the topic shrank: the plain re-send reports it for these records
        try:
            buffer = pool.allocate_nowait(size)
            if buffer is None:
                buffer = await pool.allocate(size, math.inf)  # the sender drains meanwhile
        except RecordTooLargeError:
            broken.add(tp)
            report.fell_back(len(run), (
                f"the batch of {seal.topic}-{seal.partition} sealed with {seal.count} record(s) "
                f"needs {size} bytes, more than buffer_memory"))
            continue
        adopt(acc, seal, run, partitions, buffer, loop.time())
        taken.update(r.seq for r in run)
        report.rebuilt += len(run)
    return taken


def adopt(acc: JournaledAccumulator, seal: SealedBatch, run: Sequence[JournaledRecord],
          partitions: Sequence[int], buffer: bytearray, now: float) -> ProducerBatch:
    """Queue ``run`` (the records of ``seal``, in order) as one closed batch in ``buffer``,
    pre-stamped as sealed, with its journal range registered as the journaled append would."""
    txn = acc._txn
    assert txn is not None
    with acc.journal_lock, acc._lock:
        tp = acc._topic_partition(seal.topic, seal.partition, partitions)
        dq = acc._batches.get(tp)
        if dq is None:
            dq = acc._batches[tp] = collections.deque()
        batch: ProducerBatch = acc._new_batch(tp, buffer, now, write_limit=_NO_LIMIT)
        for record in run:
            future = batch.try_append(record.timestamp, record.key, record.value,
                                      list(record.headers))
            assert future is not None, "the buffer was sized for every record of the batch"
        batch.close()
        txn.adopt(batch, seal.producer_id, seal.epoch, seal.base_sequence)
        found = _Range(batch, seal.first_seq)
        found.last = seal.last_seq
        found.count = seal.count
        found.sealed = (seal.producer_id, seal.epoch, seal.base_sequence)  # no second SEAL
        acc._ranges[batch.result] = found
        batch.result.add_listener(acc._ended)
        dq.append(batch)
        acc._incomplete.add(batch)
        acc.batches_created += 1
        if len(dq) == 1:
            acc._index.opened(tp, now)
        else:
            acc._index.touch(tp)
    acc._wakeup()
    return batch
