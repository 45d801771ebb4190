"""The producer's write-ahead journal at work: what the accumulator takes is journaled first.

:class:`JournaledAccumulator` is the accumulator a producer with ``journal_dir`` uses. Each
record it appends is journaled (a RECORD entry) before the append returns, so ``send()``,
``send_many()`` and ``send_from_thread()`` return only for journaled records; each batch knows
the journal sequence range of its records. When the sender drains a batch stamped with its
producer id, epoch and base sequence (again after an epoch bump), a SEAL entry records them; when
the batch ends for good (acknowledged, or failed with an error no retry can change), a DONE
entry forgets its records. A batch aborted by ``close()`` or a fatal producer error gets no
DONE: its records stay owed, and the next producer on the folder sends them.

:class:`JournalSyncer` carries out ``journal_sync``: ``interval`` syncs on a thread at most
every ``journal_sync_ms``; ``always`` makes each ``send()`` wait for a sync covering its record,
one sync at a time shared by every sender waiting (a group commit). The loop never blocks on the
disk's flush.

:func:`resend_recovered` re-appends what a previous producer left owed, before anything new, in
the order of acceptance (so in order per partition), with keys, headers and timestamps, under
this producer's id: at-least-once for the records the broker may already have.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import FinalState, ProducerBatch
from aioaccum._core.cluster import ClusterView
from aioaccum._core.futures import ProduceRequestResult, RecordFuture
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._journal.journal import Journal, sync_files
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import JournalFullError

__all__ = [
    "JournalSyncer",
    "JournaledAccumulator",
    "close_journal",
    "open_journal",
    "resend_recovered",
    "start_journal",
]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]


class _Range:
    """The journal sequence numbers of one batch's records, and how it was last sealed."""

    __slots__ = ("batch", "count", "first", "last", "parts", "sealed")

    def __init__(self, batch: ProducerBatch, seq: int) -> None:
        self.batch = batch
        self.first = self.last = seq
        self.count = 1
        self.sealed: tuple[int, int, int] | None = None
        self.parts = 1  # batches the records are in: more after a split


class JournaledAccumulator(RecordAccumulator):
    """A :class:`RecordAccumulator` that journals each record it takes (see the module).

    Args:
        journal: The open journal folder.
        sync: Told of each write, for ``journal_sync``; None for ``none``.
        **kwargs: The accumulator's arguments.
    """

    def __init__(self, *args: Any, journal: Journal, sync: JournalSyncer | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.journal = journal
        self.syncer = sync
        # Threads append too (send_from_thread): the journal and the batches must take records
        # in the same order, so one lock spans both; the sender's seals and outcomes take it too.
        self.journal_lock = threading.Lock()
        self._ranges: dict[ProduceRequestResult, _Range] = {}
        self._adopting = -1  # the journal seq of a recovered record being re-appended

    # --- records in

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
        with self.journal_lock:
            if self._adopting < 0 and not self.journal.has_room(record_size):
                if granted is not None:
                    self._pool.deallocate(granted[1], granted[0].size)
                journal = self.journal
                raise JournalFullError(
                    f"the journal in {journal.folder} holds {journal.bytes_on_disk()} bytes "
                    f"of records without outcome, at journal_max_bytes={journal.max_bytes}; "
                    f"is the cluster reachable? Raise journal_max_bytes to buffer more"
                )
            appended = super().append(
                topic, partition, timestamp, key, value, headers, record_size, partitions,
                cluster, now, granted, for_thread,
            )
            if type(appended) is BufferRequest:
                return appended
            assert isinstance(appended, RecordFuture)
            result = appended.pending_result()
            assert result is not None  # just appended: its batch has not ended
            seq = self._adopting
            if seq < 0:
                # Journaled after the batch took it: the partition is known only now. A full
                # journal refused above, before anything was written.
                seq = self.journal.append(topic, result.partition, timestamp, key, value,
                                          headers)
            ranges = self._ranges
            found = ranges.get(result)
            if found is None:
                batch = self._batches[result.tp][-1]
                ranges[result] = _Range(batch, seq)
                result.add_listener(self._ended)
            else:
                found.last = seq
                found.count += 1
            return appended

    def append_run(self, *args: Any, **kwargs: Any) -> int:
        """Bulk runs are not journaled record by record here: ``send_many`` then appends each
        record through :meth:`append`, which journals it."""
        return 0

    # --- seals and outcomes

    def drain(self, cluster: ClusterView, nodes: Iterable[int], max_size: int,
              now: float) -> dict[int, list[ProducerBatch]]:
        # Under the journal's lock: a thread's append registers its batch's range between
        # taking the record and releasing the lock, so no batch leaves unregistered.
        with self.journal_lock:
            drained: dict[int, list[ProducerBatch]] = super().drain(cluster, nodes, max_size,
                                                                    now)
            txn = self._txn
            if not drained or txn is None:
                return drained
            producer = txn.producer
            ranges = self._ranges
            for batches in drained.values():
                for batch in batches:
                    found = ranges.get(batch.result)
                    if found is None or batch.base_sequence < 0:
                        continue
                    state = (producer.producer_id, producer.epoch, batch.base_sequence)
                    if found.sealed != state:
                        # First sent, or re-stamped after an epoch bump: the last seal counts.
                        found.sealed = state
                        self.journal.seal(batch.tp.topic, batch.tp.partition, found.first,
                                          found.last, found.count, *state)
        return drained

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """None: with a journal, records wait for the cluster rather than fail."""
        return []

    def _ended(self, result: ProduceRequestResult) -> None:
        with self.journal_lock:
            found = self._ranges.pop(result, None)
            if found is None:
                return
            if not result.done:
                # Split after MESSAGE_TOO_LARGE: the records went to new batches; the range
                # ends when the last of them does.
                parts = found.batch.split_into or []
                found.parts += len(parts) - 1
                for part in parts:
                    self._ranges[part.result] = found
                    part.result.add_listener(self._ended)
                return
            found.parts -= 1
            if found.parts > 0:
                return
            state = found.batch.final_state
            if state is FinalState.ABORTED:
                return  # closed before an answer: owed, and sent by the next producer
            tp = found.batch.tp
            self.journal.done(tp.topic, tp.partition, found.first, found.last, found.count)

    def close_journal(self) -> None:
        with self.journal_lock:
            self.journal.close()


class JournalSyncer:
    """``journal_sync`` = ``interval`` or ``always``: fdatasync on a thread of its own.

    Args:
        acc: The journaled accumulator (its lock guards the journal).
        mode: ``interval`` or ``always``.
        interval: Seconds between syncs, for ``interval``.
    """

    def __init__(self, acc: JournaledAccumulator, mode: str, interval: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._acc = acc
        self.mode = mode
        self._interval = interval
        self._loop = loop
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="aioaccum-journal-sync")
        self._running: asyncio.Future[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._loop_thread = threading.get_ident()  # made on the loop's thread
        self.syncs = 0

    def start(self) -> None:
        if self.mode == "interval":
            self._task = self._loop.create_task(self._every_interval(),
                                                name="aioaccum-journal-sync")

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._sync_once()

    async def _sync_once(self) -> int:
        """One sync of what is written now; returns the journal position it covers."""
        acc = self._acc
        with acc.journal_lock:
            covered = acc.journal.next_seq
            files = acc.journal.unsynced()
        if files:
            await self._loop.run_in_executor(self._executor, sync_files, files)
            with acc.journal_lock:
                acc.journal.synced(files)
            self.syncs += 1
        return covered

    async def committed(self) -> None:
        """Return once a sync covers every record journaled before the call (``always``).

        Callers arriving while a sync runs wait for the next one, which covers them all.
        """
        acc = self._acc
        with acc.journal_lock:
            wanted = acc.journal.next_seq
        waiter = self._loop.create_future()
        self._waiters.append((wanted, waiter))
        if self._running is None:
            self._running = asyncio.ensure_future(self._commit_loop())
        await asyncio.shield(waiter)

    def committed_from_thread(self) -> None:
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError(
                "send_from_thread() with journal_sync='always' would wait for the journal's "
                "sync on the loop's own thread; use await producer.send() there"
            )
        asyncio.run_coroutine_threadsafe(self.committed(), self._loop).result()

    async def _commit_loop(self) -> None:
        try:
            while self._waiters:
                covered = await self._sync_once()
                keep = []
                for wanted, waiter in self._waiters:
                    if wanted <= covered:
                        if not waiter.done():
                            waiter.set_result(None)
                    else:
                        keep.append((wanted, waiter))
                self._waiters = keep
        except BaseException as exc:
            for _, waiter in self._waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            self._waiters = []
            raise
        finally:
            self._running = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._sync_once()  # what the last interval did not reach
        self._executor.shutdown(wait=False)


async def resend_recovered(acc: JournaledAccumulator, kafka: Any, pool: Any) -> int:
    """Append the records a previous producer left owed, in acceptance order, before anything
    new; returns how many. Waits for memory as long as it takes (the sender drains meanwhile).
    """
    recovery = acc.journal.recovery
    records = recovery.records
    if not records:
        return 0
    loop = asyncio.get_running_loop()
    partitions_of: dict[str, Sequence[int]] = {}
    for record in records:
        partitions = partitions_of.get(record.topic)
        if partitions is None:
            partitions = kafka.partitions_for_topic(record.topic) or await kafka.wait_for_topic(
                record.topic, math.inf)
            partitions_of[record.topic] = partitions
        headers = list(record.headers)
        size = estimate_size_in_bytes_upper_bound(record.key, record.value, headers)
        acc._adopting = record.seq
        try:
            appended = acc.append(record.topic, record.partition, record.timestamp, record.key,
                                  record.value, headers, size, partitions, kafka, -1.0)
            if type(appended) is BufferRequest:
                acc._adopting = -1
                buffer = await pool.allocate(appended.size, math.inf)
                acc._adopting = record.seq
                acc.append(record.topic, record.partition, record.timestamp, record.key,
                           record.value, headers, size, partitions, kafka, loop.time(),
                           (appended, buffer))
        finally:
            acc._adopting = -1
    sealed = len(recovery.sealed)
    log.warning(
        "journal %s: re-sending %d record(s) a previous producer accepted and did not see "
        "acknowledged (%d in batches it had sealed: the broker may hold those already, so they "
        "can arrive twice); %d torn and %d corrupt entr(y/ies) skipped",
        acc.journal.folder, len(records), sum(s.count for s in recovery.sealed) if sealed else 0,
        recovery.torn_entries, len(recovery.corrupt_entries),
    )
    return len(records)


def open_journal(cfg: ProducerConfig) -> Journal:
    """The producer's journal folder, locked and read (raises the journal's typed errors)."""
    assert cfg.journal_dir is not None
    return Journal.open(cfg.journal_dir, segment_bytes=cfg.journal_segment_bytes,
                        max_bytes=cfg.journal_max_bytes)


async def start_journal(acc: JournaledAccumulator, kafka: Any, pool: Any,
                        cfg: ProducerConfig) -> tuple[Any, int]:
    """Start syncing and re-send what is owed. Returns what ``send()`` awaits after each
    record (``always``: the group commit; else None) and how many records were recovered."""
    loop = asyncio.get_running_loop()
    if cfg.journal_sync != "none":
        acc.syncer = JournalSyncer(acc, cfg.journal_sync, cfg.journal_sync_ms / 1000, loop)
        acc.syncer.start()
    recovered = await resend_recovered(acc, kafka, pool)
    syncer = acc.syncer
    return (syncer if syncer is not None and syncer.mode == "always" else None), recovered


async def close_journal(acc: RecordAccumulator | None) -> None:
    """After the sender stopped: a last sync, then let the folder go."""
    if not isinstance(acc, JournaledAccumulator):
        return
    if acc.syncer is not None:
        await acc.syncer.close()
    acc.close_journal()
