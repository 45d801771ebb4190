"""The accumulator of a producer with ``journal_dir``: what it takes is journaled first.

Each record :meth:`JournaledAccumulator.append` takes is journaled (a RECORD entry) before the
append returns, so ``send()``, ``send_many()`` and ``send_from_thread()`` return only for
journaled records; each batch knows the journal sequence range of its records. When the sender
drains a batch stamped with its producer id, epoch and base sequence (again after an epoch
bump), a SEAL entry records them; when the batch ends for good (acknowledged, or failed with an
error no retry can change), a DONE entry forgets its records. A batch aborted by ``close()`` or a
fatal producer error gets no DONE: its records stay owed, and the next producer on the folder
sends them.

Room before the record: the journal makes room for the entry (a new segment if the newest one
is full) before the batch takes the record, so every error the disk or ``journal_max_bytes`` can
raise comes while nothing has been taken, and a ``send()`` that raises never delivers. Once the
batch holds the record, the journal's write is a copy into memory already reserved.

Memory: when the pool has no room for a record, it is not made to wait for memory: having
been journaled, it waits on disk alone, spilled (see :mod:`aioaccum._runtime.spill`), and so do
the records after it until the spill has caught up; :meth:`JournaledAccumulator.adopt` appends
them back, each with the future its ``send()`` returned.

Compiled (see the ``.pxd``): one record per ``send()`` crosses this class, and Python's
overhead here was most of the journal's price.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, cast

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import FinalState, ProducerBatch
from aioaccum._core.cluster import ClusterView
from aioaccum._core.futures import FutureRecordMetadata, ProduceRequestResult, RecordFuture
from aioaccum._journal.entries import ENTRY_HEADER
from aioaccum._journal.journal import Journal
from aioaccum.errors import BufferExhaustedError, JournalError, JournalFullError

__all__ = [
    "JOURNAL_ROOM", "JournaledAccumulator", "entry_bound", "journal_full", "journal_room",
    "journaled_wait", "load_spilled", "spilled_records",
]

# What append() answers a coroutine whose record the full journal cannot take now: a request
# for journal room rather than memory (size 0), which the producer's wait for memory turns
# into a wait for outcomes (see journaling.journal_room).
JOURNAL_ROOM = BufferRequest(-1, 0, False)

Header = tuple[str, bytes | None]

# A RECORD entry's bytes beyond key, value and headers (entry header, seq, topic id, partition,
# timestamp, two lengths, the header count), and a TOPIC entry's beyond the name.
_RECORD_FIXED = ENTRY_HEADER.size + 8 + 4 + 4 + 8 + 4 + 4 + 2
_TOPIC_FIXED = ENTRY_HEADER.size + 4
# The part of entry_bound that no record changes, in one constant (typed in the .pxd, so that
# the compiled bound is C arithmetic, not boxed numbers).
_BOUND_FIXED = _RECORD_FIXED + _TOPIC_FIXED + 64


def entry_bound(topic: str, record_size: int, headers: int) -> int:
    """An upper bound of the journal bytes a record takes, with its topic's definition:
    ``record_size`` (the batch bound ``send()`` computes) covers key, value and the headers'
    bytes; each header adds two 4-byte lengths; a name is at most 4 bytes per character."""
    return record_size + 8 * headers + 4 * len(topic) + _BOUND_FIXED


def journal_full(journal: Journal, waited_ms: float) -> JournalFullError:
    """The error of a ``send()`` that found no journal room within ``max_block_ms``."""
    return JournalFullError(
        f"the journal in {journal.folder} holds {journal.bytes_on_disk()} bytes of records "
        f"without outcome, at journal_max_bytes={journal.max_bytes}, and no outcome freed a "
        f"segment within max_block_ms={waited_ms:.0f}; is the cluster reachable? Raise "
        f"journal_max_bytes to buffer more"
    )


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

    def __init__(self, *args: Any, journal: Journal, sync: Any = None, **kwargs: Any) -> None:
        RecordAccumulator.__init__(self, *args, **kwargs)
        self.journal = journal
        self.syncer = sync
        # Threads append too (send_from_thread): the journal and the batches must take records
        # in the same order, so one lock spans both; the sender's seals and outcomes take it too.
        self.journal_lock = threading.Lock()
        self._ranges: dict[ProduceRequestResult, _Range] = {}
        self._room = -1  # bytes records may still take in the newest segment (see append)
        # The range append found last, and its batch's result (see append; _ended forgets it).
        self._last_result: ProduceRequestResult | None = None
        self._last_range: _Range | None = None
        # send()s waiting for journal room (on the loop): woken when an outcome frees some.
        self.room_waiters: list[Any] = []
        # Threads waiting for journal room (send_from_thread), up to max_block_ms.
        self.room_freed = threading.Condition(self.journal_lock)
        self.threads_waiting = 0  # of those (notify_all is Python code: skipped without any)
        self.thread_block = 60.0  # set from max_block_ms by start_journal
        # Records beyond buffer_memory wait in the journal alone (see spill.py): set by
        # start_journal; ``spilling`` while any does, so that later records queue behind them.
        self.spill: Any = None
        self.spilling = False
        # How long a coroutine's record waits for memory before it spills instead (ms; set
        # from journal_spill_after_ms by start_journal). Threads spill at once.
        self.spill_after_ms = 0.0
        self.recovery_report: Any = None  # what start_journal recovered (a RecoveryReport)

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
        # Threads append too once enable_threads() ran (on the loop's thread, between two of
        # its appends): only then can another append, a drain or an outcome interleave.
        threaded = self.threaded
        lock = self.journal_lock
        if threaded:
            lock.acquire()
        try:
            journal: Journal = self.journal
            needed = entry_bound(topic, record_size, len(headers))
            if needed > self._room:
                try:
                    if len(headers) > 0xFFFF:
                        raise JournalError(
                            f"a journaled record may carry at most 65535 headers, not "
                            f"{len(headers)}; send fewer")
                    self._reserve(needed, threaded and for_thread and granted is None)
                    self._room = journal.head_room()
                except JournalFullError:
                    if granted is not None:
                        self._pool.deallocate(granted[1], granted[0].size)
                    elif not for_thread:
                        return JOURNAL_ROOM  # a coroutine: it waits up to max_block_ms
                    raise
                except BaseException:
                    if granted is not None:
                        self._pool.deallocate(granted[1], granted[0].size)
                    raise
            # What is left of the newest segment, counted without asking it: each record takes
            # at most its bound; seals and outcomes, which write too, reset the count.
            self._room -= needed
            if self.spilling:
                # Records wait on disk for the pool: this one queues behind them, in order.
                if granted is not None:
                    self._pool.deallocate(granted[1], granted[0].size)
                spilled: RecordFuture = self.spill.add(
                    topic, partition, timestamp, key, value, headers, record_size, partitions,
                    cluster, for_thread, -1, False)
                return spilled
            appended = RecordAccumulator.append(
                self, topic, partition, timestamp, key, value, headers, record_size,
                partitions, cluster, now, granted, for_thread,
            )
            if type(appended) is BufferRequest:
                if self.spill is not None and (for_thread or self.spill_after_ms <= 0):
                    # No memory: rather than wait for it, the record waits on disk alone. A
                    # coroutine waits for memory first (see journaled_wait): reading records
                    # back from disk costs more than waiting while the cluster keeps up.
                    request: BufferRequest = appended
                    spilled = self.spill.add(
                        topic, partition, timestamp, key, value, headers, record_size,
                        partitions, cluster, for_thread, request.partition, request.sticky)
                    return spilled
                return appended
            # Not typing.cast: compiled, that is a Python call per record.
            future: RecordFuture = appended  # type: ignore[assignment]
            result = future._result  # just appended: not done
            # The partition is known only now; the room was made above, so this write cannot
            # fail for want of it.
            seq = journal.append(topic, result.partition, timestamp, key, value, headers,
                                 result.tp)
            # Records of a batch come one after another: the last range found is most often
            # the one again, which spares a dictionary lookup per record.
            found = (self._last_range if result is self._last_result
                     else self._ranges.get(result))
            if found is None:
                batch = self._batches[result.tp][-1]
                found = self._ranges[result] = _Range(batch, seq)
                result.add_listener(self._ended)
            else:
                found.last = seq
                found.count += 1
            self._last_result = result
            self._last_range = found
            return appended
        finally:
            if threaded:
                lock.release()

    def adopt(self, seq: int, future: RecordFuture | None, topic: str, partition: int,
              timestamp: int, key: bytes | None, value: bytes | None,
              headers: Sequence[Header], record_size: int, partitions: Sequence[int],
              cluster: ClusterView, granted: tuple[BufferRequest, bytearray] | None = None,
              unread: int = 0) -> RecordFuture | BufferRequest:
        """Append a spilled record read back from the journal (entry ``seq``): ``future``, the
        one its ``send()`` returned, follows it into the batch (None for a record a previous
        producer left owed: no ``send()`` of this process waits on it, so the batch's own future
        stays). The caller holds the journal's
        lock when threads append (the spill's task does). ``unread`` records of the partition
        before this one did not read back: their outcome (failed) is journaled with this
        batch's, so that the partition's outcomes still count off its records in order.

        Returns:
            ``future``, or the :class:`BufferRequest` when the pool has no room for it.
        """
        appended = RecordAccumulator.append(
            self, topic, partition, timestamp, key, value, headers, record_size, partitions,
            cluster, -1.0, granted, False)
        if type(appended) is BufferRequest:
            return appended
        made = cast(RecordFuture, appended)
        result = made._result
        # The batch made a future of its own for the record, last in its list (nothing else
        # appended meanwhile, under the lock): the spilled record's future takes its place,
        # as a split moves one.
        found = self._ranges.get(result)
        if found is None:
            batch = self._batches[result.tp][-1]
            found = self._ranges[result] = _Range(batch, seq)
            found.count += unread
            result.add_listener(self._ended)
        else:
            batch = found.batch
            found.last = seq
            found.count += 1 + unread
        if future is None:
            return made
        futures = batch._futures
        futures[len(futures) - 1] = future
        future.retarget(result, made._relative_offset)
        return future

    def close(self) -> None:
        """Refuse new records; while some wait on disk, the spill's task still appends them
        and closes the accumulator once the last is in (the sender runs until then)."""
        spill = self.spill
        if spill is not None and self.spilling:
            spill.closing = True
            return
        RecordAccumulator.close(self)

    def close_now(self) -> None:
        """Refuse new records now (the spill's task, once its last record is in)."""
        RecordAccumulator.close(self)

    def has_unended(self) -> bool:
        return self.spilling or RecordAccumulator.has_unended(self)

    def abort_unended(self, error: BaseException) -> list[ProducerBatch]:
        """The last step of a stop: spilled records stay owed (their futures fail with
        ``ProducerClosedError``), then the batches end as without a journal."""
        spill = self.spill
        if spill is not None:
            spill.abandon()
        RecordAccumulator.close(self)
        aborted: list[ProducerBatch] = RecordAccumulator.abort_unended(self, error)
        return aborted

    def _reserve(self, needed: int, wait: bool) -> None:
        """:meth:`Journal.reserve`; with ``wait`` (a thread's append, which holds the journal's
        lock), first wait up to ``thread_block`` seconds for outcomes to free room."""
        journal: Journal = self.journal
        if not wait:
            journal.reserve(needed)
            return
        deadline = time.monotonic() + self.thread_block
        while True:
            try:
                journal.reserve(needed)
                return
            except JournalFullError:
                left = deadline - time.monotonic()
                # Releases the lock while it waits; an outcome (on the loop) notifies.
                if left <= 0:
                    raise journal_full(journal, self.thread_block * 1000) from None
                self.threads_waiting += 1
                try:
                    woken = self.room_freed.wait(left)
                finally:
                    self.threads_waiting -= 1
                if not woken:
                    raise journal_full(journal, self.thread_block * 1000) from None

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
            drained: dict[int, list[ProducerBatch]] = RecordAccumulator.drain(
                self, cluster, nodes, max_size, now)
            txn = self._txn
            if not drained or txn is None:
                return drained
            ranges = self._ranges
            for batches in drained.values():
                for batch in batches:
                    found = ranges.get(batch.result)
                    if found is None or batch.base_sequence < 0:
                        continue
                    if found.batch is not batch:
                        # A part of a split batch: the journal knows only the whole range, and
                        # a part's sequence is not the whole's (its last seal stands).
                        continue
                    # The batch's own stamp: a recovered batch keeps an earlier producer's.
                    builder = batch.builder
                    state = (builder.producer_id, builder.producer_epoch, batch.base_sequence)
                    if found.sealed != state:
                        # First sent, or re-stamped after an epoch bump: the last seal counts.
                        found.sealed = state
                        self.journal.seal(batch.tp.topic, batch.tp.partition, found.first,
                                          found.last, found.count, *state)
                        self._room = -1
        return drained

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """None: with a journal, records wait for the cluster rather than fail."""
        return []

    def _ended(self, result: ProduceRequestResult) -> None:
        with self.journal_lock:
            found = self._ranges.pop(result, None)
            if result is self._last_result:
                self._last_result = self._last_range = None
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
            self._room = -1
            if self.threads_waiting:
                self.room_freed.notify_all()
            waiters = self.room_waiters
            if waiters:  # on the loop's thread, as every listener of a batch's result
                self.room_waiters = []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    def close_journal(self) -> None:
        with self.journal_lock:
            self.journal.close()


async def journaled_wait(
    producer: Any,
    acc: RecordAccumulator,
    request: BufferRequest,
    max_block_ms: float,
    topic: str,
    partition: int | None,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    size: int,
    partitions: Sequence[int],
    kafka: Any,
) -> FutureRecordMetadata:
    """A coroutine's append that a journaled accumulator could not make at once: for journal
    room (see :func:`journal_room`), or for memory. Memory is waited for at most
    ``journal_spill_after_ms`` (and ``max_block_ms``), as a producer without a journal waits:
    while the cluster keeps up, memory comes back within a round trip, and a record that waits
    in memory costs less than one written to disk alone and read back. Past that wait (an
    outage, say) the record spills, and every later one with it until the spill catches up.
    Nothing is appended until it returns, so a cancelled wait took nothing.
    """
    assert isinstance(acc, JournaledAccumulator)  # the producer asks only for these
    if request.size == 0:
        return await journal_room(producer, acc, max_block_ms, topic, partition, timestamp,
                                  key, value, headers, size, partitions, kafka)
    pool = producer._pool
    loop = asyncio.get_running_loop()
    try:
        buffer = await pool.allocate(request.size, min(acc.spill_after_ms, max_block_ms))
    except BufferExhaustedError:
        if producer._parts is None:
            producer._running_parts()  # closed meanwhile: raises why
        acc.spilling = True  # this record and those after it wait on disk, in order
        try:
            appended = acc.append(topic, partition, timestamp, key, value, headers, size,
                                  partitions, kafka, loop.time())
        except BaseException:
            if acc.spill.pending == 0:  # refused before it spilled: nothing to queue behind
                acc.spilling = False
            raise
        if type(appended) is BufferRequest:  # the journal is full: wait for its room
            return await journal_room(producer, acc, max_block_ms, topic, partition,
                                      timestamp, key, value, headers, size, partitions, kafka)
        return cast(FutureRecordMetadata, appended)
    if producer._parts is None:
        pool.deallocate(buffer)  # closed, or the transaction ended, while this send waited
        producer._running_parts()
    granted = acc.append(topic, partition, timestamp, key, value, headers, size, partitions,
                         kafka, loop.time(), granted=(request, buffer))
    return cast(FutureRecordMetadata, granted)


async def journal_room(
    producer: Any,
    acc: RecordAccumulator,
    max_block_ms: float,
    topic: str,
    partition: int | None,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    size: int,
    partitions: Sequence[int],
    kafka: Any,
) -> FutureRecordMetadata:
    """A coroutine's append that the full journal answered with ``JOURNAL_ROOM``: wait for
    outcomes to free room, up to ``max_block_ms`` in all, then append (and wait for memory if
    the pool has none). Nothing is appended until it returns, so a cancelled wait took nothing.

    Raises:
        JournalFullError: No room came within ``max_block_ms`` (the message has the numbers).
    """
    assert isinstance(acc, JournaledAccumulator)  # only it answers JOURNAL_ROOM
    journal: Journal = acc.journal
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_block_ms / 1000
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise journal_full(journal, max_block_ms)
        waiter = loop.create_future()
        acc.room_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, remaining)
        except TimeoutError:
            raise journal_full(journal, max_block_ms) from None
        finally:
            if waiter in acc.room_waiters:
                acc.room_waiters.remove(waiter)
        if producer._parts is None:
            producer._running_parts()  # closed meanwhile: raises why
        appended = acc.append(topic, partition, timestamp, key, value, headers, size,
                              partitions, kafka, loop.time())
        if type(appended) is not BufferRequest:
            return cast(FutureRecordMetadata, appended)  # what try_append makes for the loop
        if appended.size:  # room in the journal, none in the pool: wait for memory too
            left_ms = max(0.0, (deadline - loop.time()) * 1000)
            return cast(FutureRecordMetadata, await producer._append_after_wait(
                acc, appended, left_ms, topic, partition, timestamp, key, value, headers, size,
                partitions, kafka))


async def load_spilled(acc: RecordAccumulator, sender: Any) -> list[ProducerBatch]:
    """For ``flush()``: wait until the records spilled before the call are in batches (the
    sender's progress makes room for them), then return the batches to wait for; at once and
    empty without a journal, or with nothing spilled."""
    if not isinstance(acc, JournaledAccumulator) or not acc.spilling:
        return []
    spill = acc.spill
    mark = spill.spilled
    while spill.loaded < mark and sender.fatal_error is None and not sender.stopped:
        await sender.wait_for_progress()
    return acc.incomplete_batches()


def spilled_records(acc: RecordAccumulator) -> int:
    """Records on disk alone now (0 without a journal)."""
    if not isinstance(acc, JournaledAccumulator) or acc.spill is None:
        return 0
    return int(acc.spill.pending)
