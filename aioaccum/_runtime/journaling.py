"""The producer's write-ahead journal at work: what the accumulator takes is journaled first.

:class:`JournaledAccumulator` (compiled, in :mod:`aioaccum._runtime.journaled`) is the
accumulator a producer with ``journal_dir`` uses: it journals each record it takes.

:class:`JournalSyncer` carries out ``journal_sync``: ``interval`` syncs on a thread at most
every ``journal_sync_ms``; ``always`` makes each ``send()`` wait for a sync covering its record,
one sync at a time shared by every sender waiting (a group commit). The loop never blocks on the
disk's flush.

:class:`~aioaccum._runtime.spill.Spill` keeps the records beyond ``buffer_memory`` on disk
alone and appends them as the pool gets room (started here, stopped at close).

:func:`resend_recovered` queues what a previous producer left owed ahead of anything new, with
keys, headers and timestamps, in the spill: its task reads them back from the segments and
appends them as the pool has room, so ``start()`` waits for neither memory nor the cluster.
First the batches it had sealed, rebuilt as they were and sent under its producer id, epoch and
sequences so that the broker recognises copies it has (see :mod:`aioaccum._runtime.recovery`);
then, in the order of acceptance, the records it never sealed, under this producer's id. So in
order per partition.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from typing import Any

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._journal.journal import Journal, sync_files
from aioaccum._runtime.journaled import JournaledAccumulator
from aioaccum._runtime.recovery import Recovered, RecoveryReport, at_least_once
from aioaccum._runtime.spill import Spill
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import JournalError

__all__ = [
    "JournalSyncer",
    "JournaledAccumulator",
    "at_least_once",
    "close_journal",
    "open_journal",
    "resend_recovered",
    "start_journal",
]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]


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
        self.failures = 0  # syncs that fdatasync refused

    def start(self) -> None:
        if self.mode == "interval":
            self._task = self._loop.create_task(self._every_interval(),
                                                name="aioaccum-journal-sync")

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._sync_once()
            except JournalError as exc:
                # The records stay journaled and go to Kafka as usual; only their survival
                # of a power loss is in doubt. The next interval tries again.
                log.error("%s", exc)

    async def _sync_once(self) -> int:
        """One sync of what is written now; returns the journal position it covers.

        Raises:
            JournalError: ``fdatasync`` failed (the files stay unsynced, for the next try).
        """
        acc = self._acc
        with acc.journal_lock:
            covered = acc.journal.next_seq
            files = acc.journal.unsynced()
        if files:
            try:
                await self._loop.run_in_executor(self._executor, sync_files, files)
            except OSError as exc:
                self.failures += 1
                raise JournalError(
                    f"fdatasync of the journal in {acc.journal.folder} failed "
                    f"({exc.strerror or exc}; {self.failures} failed sync(s) so far): the "
                    f"records journaled up to number {covered - 1} stay in the journal and "
                    f"are sent to Kafka, but may not survive a power loss; check the disk"
                ) from exc
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
        try:
            await self._sync_once()  # what the last interval did not reach
        except JournalError as exc:
            log.error("%s", exc)  # close goes on: the folder is let go, its records kept
        finally:
            self._executor.shutdown(wait=False)


def resend_recovered(acc: JournaledAccumulator, spill: Spill) -> int:
    """Queue the records a previous producer left owed ahead of anything new, in ``spill``
    (before its task starts): its sealed batches as they were, then the rest in acceptance
    order. Returns how many, at once: nothing is read or waited for here (the spill's task
    reads them back and appends them as the pool has room)."""
    recovery = acc.journal.recovery
    owed = recovery.owed
    report = acc.recovery_report = RecoveryReport(acc.journal.folder)
    if acc._txn is not None:
        acc._txn.on_disowned = report.disowned
    if not len(owed):
        return 0
    spill.recover(Recovered(spill, owed, recovery.sealed, report))
    report.recovered = len(owed)
    log.warning(
        "journal %s: re-sending %d record(s) a previous producer accepted and did not see "
        "acknowledged (those of the %d batch(es) it had sent go under its producer id, so that "
        "the broker drops copies it has), ahead of any new record; %d torn and %d corrupt "
        "entr(y/ies) skipped",
        acc.journal.folder, len(owed), len(recovery.sealed), recovery.torn_entries,
        len(recovery.corrupt_entries),
    )
    return len(owed)


# Most segments kept mapped for recycling (see Journal.__init__): 64 MiB of maps by default.
MOST_MAPPED = 4


def mapped_segments(buffer_memory: int, segment_bytes: int) -> int:
    """How many segments a producer keeps mapped, the newest included: enough to span what a
    full ``buffer_memory`` owes, whose entries take up to half as much again as its batches (a
    100-byte record is 100 + 11 bytes in a batch, 100 + 43 in the journal), plus the newest;
    at least two, at most :data:`MOST_MAPPED`."""
    owed = -(-buffer_memory * 3 // (2 * segment_bytes))  # ceil(1.5 x buffer_memory / size)
    return max(2, min(MOST_MAPPED, owed + 1))


def open_journal(cfg: ProducerConfig) -> Journal:
    """The producer's journal folder, locked and read (raises the journal's typed errors)."""
    assert cfg.journal_dir is not None
    return Journal.open(cfg.journal_dir, segment_bytes=cfg.journal_segment_bytes,
                        max_bytes=cfg.journal_max_bytes,
                        recycle=cfg.journal_sync == "none",
                        mapped=mapped_segments(cfg.buffer_memory, cfg.journal_segment_bytes))


async def start_journal(acc: RecordAccumulator, kafka: Any, pool: Any,
                        cfg: ProducerConfig) -> tuple[Any, int]:
    """Start syncing and re-send what is owed. Returns what ``send()`` awaits after each
    record (``always``: the group commit; else None) and how many records were recovered;
    (None, 0) at once without a journal."""
    if not isinstance(acc, JournaledAccumulator):
        return None, 0
    loop = asyncio.get_running_loop()
    acc.thread_block = cfg.max_block_ms / 1000  # send_from_thread's wait for journal room
    if cfg.journal_sync != "none":
        acc.syncer = JournalSyncer(acc, cfg.journal_sync, cfg.journal_sync_ms / 1000, loop)
        acc.syncer.start()
    # From now on a send() waits for memory at most journal_spill_after_ms, then its record
    # waits on disk; the owed records go first, through the spill.
    acc.spill_after_ms = cfg.journal_spill_after_ms
    spill = acc.spill = Spill(acc, kafka, pool, loop)
    recovered = resend_recovered(acc, spill)
    spill.start()
    syncer = acc.syncer
    return (syncer if syncer is not None and syncer.mode == "always" else None), recovered


async def close_journal(acc: RecordAccumulator | None) -> None:
    """After the sender stopped: a last sync, then let the folder go."""
    if not isinstance(acc, JournaledAccumulator):
        return
    if acc.spill is not None:
        await acc.spill.stop()  # what is still spilled stays owed
    if acc.syncer is not None:
        await acc.syncer.close()
    acc.close_journal()
    report = acc.recovery_report
    if report is not None and report.at_least_once:
        log.warning("journal %s: %d of the %d record(s) recovered at start went again under the "
                    "new producer id (at least once: the broker may hold them twice)",
                    report.folder, report.at_least_once, report.recovered)
