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
import contextlib
import logging
import math
from array import array
from collections.abc import Sequence
from typing import Any

from aioaccum._core.accumulator import BufferRequest
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.records import RECORD_BATCH_OVERHEAD, estimate_size_in_bytes_upper_bound
from aioaccum._journal.entries import Record
from aioaccum._journal.journal import Owed, SealedBatch
from aioaccum._runtime.journaled import JournaledAccumulator, _Range
from aioaccum._runtime.spill import LOADS_PER_TURN, Spill
from aioaccum.errors import JournalError, ProducerClosedError

__all__ = ["Recovered", "RecoveryReport", "at_least_once"]

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


class Recovered:
    """The records a previous producer left owed, re-sent by the spill's task before any record
    it spilled (so before every record this producer accepts), as places in the segments: no
    payload is in memory but the batch being rebuilt or the record being appended.

    First the sealed batches, per partition oldest first, rebuilt as sealed under their old
    identity (see the module); then every other owed record, in acceptance order, under the new
    producer id, through the spill's catch-up (each waits in the pool's queue for room, like a
    spilled record, and its outcome is journaled when its batch ends; no future of this process
    waits on it). Memory: the :class:`~aioaccum._journal.journal.Owed` arrays (28 bytes a
    record) and one byte a record here, marking those rebuilt.

    Args:
        spill: The :class:`~aioaccum._runtime.spill.Spill` whose task runs this (its reader,
            its pool and its accounting of records on disk alone).
        owed: The journal's owed records.
        sealed: The journal's sealed batches.
        report: Counts rebuilt and fallen-back records.
    """

    def __init__(self, spill: Spill, owed: Owed, sealed: Sequence[SealedBatch],
                 report: RecoveryReport) -> None:
        self._spill = spill
        self._acc: JournaledAccumulator = spill._acc
        self._owed = owed
        self._sealed = sealed
        self._report = report
        self._taken = bytearray(len(owed))  # 1: in a rebuilt batch
        self._known: dict[str, Sequence[int]] = {}
        self._plan = self._plan_seals() if self._acc._txn is not None else {}

    async def run(self) -> None:
        """Rebuild the sealed batches, then append the rest (cancellation-safe: each record is
        counted out of the spill in the step that appends it)."""
        if self._plan:
            await self._rebuild_sealed()
        await self._resend_rest()

    async def _partitions_of(self, topic: str) -> Sequence[int]:
        partitions = self._known.get(topic)
        if partitions is None:
            kafka = self._spill._kafka
            partitions = kafka.partitions_for_topic(topic) or await kafka.wait_for_topic(
                topic, math.inf)
            self._known[topic] = partitions
        return partitions

    def _run_of(self, seal: SealedBatch) -> array[int]:
        """The indexes of the owed records sealed into ``seal``, in order."""
        owed = self._owed
        seqs = owed.seqs
        run = array("q")
        i = owed.find(seal.first_seq)
        while 0 <= i < len(seqs) and seqs[i] <= seal.last_seq:
            if owed.partitions[i] == seal.partition and owed.topic(i) == seal.topic:
                run.append(i)
            i += 1
        return run

    def _read(self, index: int) -> Record:
        owed = self._owed
        return self._spill._reader.read(owed.segments[owed.segment_of[index]],
                                        owed.offsets[index])

    def _size_of(self, run: Sequence[int]) -> int:
        size = RECORD_BATCH_OVERHEAD
        for i in run:
            r = self._read(i)
            size += estimate_size_in_bytes_upper_bound(
                r.key, r.value, list(r.headers)) - RECORD_BATCH_OVERHEAD
        return size

    def _plan_seals(self) -> dict[tuple[str, int], list[tuple[SealedBatch, array[int]]]]:
        """Per partition (in the order of its oldest seal), its seals oldest first with their
        records' indexes. A seal whose records are not all owed any more cannot be rebuilt:
        it and the later seals of its partition go under the new producer id (counted now)."""
        plan: dict[tuple[str, int], list[tuple[SealedBatch, array[int]]]] = {}
        broken: set[tuple[str, int]] = set()
        for seal in sorted(self._sealed, key=lambda s: s.first_seq):
            tp = (seal.topic, seal.partition)
            run = self._run_of(seal)
            if tp in broken:
                self._report.fell_back(len(run), _after_broken(tp))
            elif len(run) != seal.count:
                broken.add(tp)
                self._report.fell_back(len(run), (
                    f"the batch of {tp[0]}-{tp[1]} sealed with {seal.count} record(s) "
                    f"(journal sequence {seal.first_seq} to {seal.last_seq}) has {len(run)} "
                    f"left in the journal"))
            else:
                plan.setdefault(tp, []).append((seal, run))
        return plan

    async def _rebuild_sealed(self) -> None:
        report = self._report
        pool = self._spill._pool
        for (topic, partition), seals in self._plan.items():
            partitions = await self._partitions_of(topic)
            if partition >= len(partitions):
                continue  # the topic shrank: the plain re-send reports these records
            planned: list[tuple[SealedBatch, array[int], int]] = []
            broken = False
            for seal, run in seals:
                if broken:
                    report.fell_back(len(run), _after_broken((topic, partition)))
                    continue
                try:
                    size = self._size_of(run)
                except JournalError as exc:
                    broken = True
                    report.fell_back(len(run), f"a record of it does not read back: {exc}")
                    continue
                if size > pool.total_memory:
                    broken = True
                    report.fell_back(len(run), (
                        f"the batch of {topic}-{partition} sealed with {seal.count} record(s) "
                        f"needs {size} bytes, more than buffer_memory"))
                    continue
                planned.append((seal, run, size))
            await self._queue(planned, partitions)
        self._plan.clear()

    async def _queue(self, planned: list[tuple[SealedBatch, array[int], int]],
                     partitions: Sequence[int]) -> None:
        """Queue one partition's rebuilt batches. When they fit in the pool together, all get
        their memory before the first is queued, so that the sender sees them all at once: the
        broker's answer to an older one can depend on a later one (see ``park``)."""
        pool = self._spill._pool
        if sum(size for _, _, size in planned) > pool.total_memory:
            for seal, run, size in planned:  # one at a time, as the sender frees memory
                buffer = pool.allocate_nowait(size)
                if buffer is None:
                    buffer = await pool.allocate(size, math.inf)
                self._adopt(seal, run, partitions, buffer)
            return
        buffers: list[bytearray] = []
        try:
            for _, _, size in planned:
                buffer = pool.allocate_nowait(size)
                if buffer is None:
                    buffer = await pool.allocate(size, math.inf)  # the sender drains meanwhile
                buffers.append(buffer)
        except BaseException:
            for buffer, (_, _, size) in zip(buffers, planned, strict=False):
                pool.deallocate(buffer, size)  # cancelled while waiting: given back
            raise
        for (seal, run, _size), buffer in zip(planned, buffers, strict=True):
            self._adopt(seal, run, partitions, buffer)

    def _adopt(self, seal: SealedBatch, run: array[int], partitions: Sequence[int],
               buffer: bytearray) -> None:
        records = [self._read(i) for i in run]  # read back a moment ago: sound
        adopt(self._acc, seal, records, partitions, buffer, asyncio.get_running_loop().time())
        for i in run:
            self._taken[i] = 1
        self._report.rebuilt += len(run)
        acc = self._acc
        with acc.journal_lock if acc.threaded else contextlib.nullcontext():
            self._spill.count_loaded(len(run))

    async def _resend_rest(self) -> None:
        owed = self._owed
        spill = self._spill
        acc = self._acc
        kafka = spill._kafka
        taken = self._taken
        lock = acc.journal_lock if acc.threaded else contextlib.nullcontext()
        for i in range(len(owed)):
            if taken[i]:
                continue
            topic = owed.topic(i)
            partitions = await self._partitions_of(topic)
            try:
                record = self._read(i)
            except JournalError as exc:
                log.error("%s; the record is never sent", exc)
                with lock:
                    spill.unread(topic, owed.partitions[i], partitions)
                continue
            headers = list(record.headers)
            size = estimate_size_in_bytes_upper_bound(record.key, record.value, headers)
            args = (record.seq, None, topic, record.partition, record.timestamp, record.key,
                    record.value, headers, size, partitions, kafka)
            granted: tuple[BufferRequest, bytearray] | None = None
            while True:
                try:
                    with lock:
                        tp = acc._topic_partition(topic, record.partition, partitions)
                        appended = acc.adopt(*args, granted, spill._unread.get(tp, 0))
                        if type(appended) is not BufferRequest:
                            spill._unread.pop(tp, None)  # journaled with this one's outcome
                            spill.count_loaded(1)
                            break
                except ProducerClosedError:
                    raise
                except Exception as exc:  # the topic shrank, say: this record only
                    if granted is not None and not acc.closed:
                        spill._pool.deallocate(granted[1], granted[0].size)
                    log.error("journal %s: the owed record %d of %s-%d cannot be appended "
                              "(%r); it is never sent", acc.journal.folder, record.seq, topic,
                              record.partition, exc)
                    with lock:
                        spill.unread(topic, record.partition, partitions)
                    break
                request: BufferRequest = appended
                granted = (request, await spill._pool.allocate(request.size, math.inf))
            if i % LOADS_PER_TURN == 0:
                await asyncio.sleep(0)  # the sender and senders get their turn


def _after_broken(tp: tuple[str, int]) -> str:
    return (f"an earlier batch of {tp[0]}-{tp[1]} could not be rebuilt, and order per partition "
            f"comes first")


def adopt(acc: JournaledAccumulator, seal: SealedBatch, run: Sequence[Record],
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
