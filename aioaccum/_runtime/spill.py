"""Records beyond ``buffer_memory`` wait in the journal alone: the spill, and its catch-up.

Without a journal, a ``send()`` that finds the buffer pool empty waits for memory (Kafka's
``max.block.ms``). With one, the record is already on disk, so it need not also wait in memory:
the journaled accumulator hands it to :class:`Spill`, which gives ``send()`` the record's future
at once and keeps, per record, only where the entry lies in its segment. The record's bytes are
read back from the segment and appended to the accumulator, in the order they were accepted, as
the pool gets room: :meth:`Spill.run` is the task that does it.

Order: once one record spilled, every later record (to any partition) goes the same way until
the spill has caught up, so no record overtakes one accepted before it, and each partition's
records reach their batches, and the broker, in acceptance order.

Futures: a spilled record's future waits on a stand-in result, shared by up to
``GROUP_RECORDS`` consecutive spilled records of one partition (one batch result's worth of
memory for many records). When a record reaches a batch, its future is pointed at that batch's
result, as a split does, and the stand-in hands its callbacks and waiters over
(:meth:`ProduceRequestResult.hand_over`); once its last record is in, it ends, which wakes any
thread still blocked on it. So a spilled record's future is simply pending until the broker
acknowledges the record; it never fails for the outage.

Memory per spilled record, fixed whatever its size: its future (48 bytes compiled), one slot
in a list for it and one 8-byte position, and a share of its group's stand-in: about 75 bytes.
No key, value or header is kept in memory; reading back holds at most one record and a read-ahead
window (:class:`~aioaccum._journal.reader.RecordReader`).

Locks: threads (``send_from_thread``) spill too, under the journal's lock, which the task also
takes for every step that reads or changes what is spilled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from array import array
from collections import deque
from typing import Any

from aioaccum._core.accumulator import BufferRequest
from aioaccum._core.futures import (
    THREAD_LOCK,
    FutureRecordMetadata,
    ProduceRequestResult,
    RecordFuture,
    ThreadRecordFuture,
)
from aioaccum._core.partitioner import partition_for
from aioaccum._core.records import RECORD_BATCH_OVERHEAD, estimate_size_in_bytes_upper_bound
from aioaccum._journal.entries import SEGMENT_HEADER
from aioaccum._journal.reader import RecordReader
from aioaccum._journal.segment import Segment
from aioaccum.errors import JournalError, ProducerClosedError

__all__ = ["GROUP_RECORDS", "Spill"]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]

GROUP_RECORDS = 256  # spilled records of one partition sharing one stand-in result
BLOCK_RECORDS = 1024  # positions per block of the queue (one segment each)
LOADS_PER_TURN = 256  # records appended before the task lets the loop run others



def owed_error() -> ProducerClosedError:
    """The error of a spilled record's future when the producer closes before its turn."""
    return ProducerClosedError(
        "the producer closed before this record left the journal for a batch; it stays in "
        "journal_dir, and the next producer opened on the folder sends it"
    )


class _Group:
    """Consecutive spilled records of one partition, and the stand-in result they wait on."""

    __slots__ = ("joined", "left", "result")

    def __init__(self, result: ProduceRequestResult) -> None:
        self.result = result
        self.joined = 0  # records that spilled into it
        self.left = 0  # of those, not yet in a batch


class _Block:
    """Spilled records of one segment, in acceptance order: each one's entry position and
    future; ``taken`` counts those already appended."""

    __slots__ = ("futures", "offsets", "segment", "taken")

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.offsets = array("q")
        self.futures: list[RecordFuture | None] = []
        self.taken = 0


class Spill:
    """The records of a journaled producer that wait on disk for room in the pool.

    Args:
        acc: The :class:`~aioaccum._runtime.journaled.JournaledAccumulator` (``Any`` here: it
            imports this module).
        kafka: The cluster view records are partitioned against (and metadata waited for).
        pool: The buffer pool the task waits in for room.
        loop: The producer's loop.
    """

    def __init__(self, acc: Any, kafka: Any, pool: Any,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._acc = acc
        self._kafka = kafka
        self._pool = pool
        self._loop = loop
        self._blocks: deque[_Block] = deque()
        self._open: dict[Any, _Group] = {}  # per topic-partition: the group still taking records
        self._groups: dict[ProduceRequestResult, _Group] = {}  # by stand-in, until all are in
        self._touched: set[_Group] = set()  # groups with records appended since the last hand-over
        # Per topic-partition: records that did not read back, whose outcome goes with the next
        # record of the partition to reach a batch (see JournaledAccumulator.adopt).
        self._unread: dict[Any, int] = {}
        self._reader = RecordReader()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.spilled = 0
        """Records spilled since the start."""
        self.loaded = 0
        """Of those, the records appended to batches since (or given up at close)."""
        self._recovered: Any = None  # what a previous producer left owed: it goes first
        self.closing = False
        """The producer closes: no record is taken any more; those spilled still go in."""
        self.failure = ""
        """Why the catch-up stopped, if it did: records that would spill are refused."""

    @property
    def pending(self) -> int:
        """Records on disk alone now."""
        return self.spilled - self.loaded

    def start(self) -> None:
        self._task = self._loop.create_task(self.run(), name="aioaccum-journal-spill")

    # --- records in (the journaled accumulator's append, with the journal's lock if threaded)

    def add(self, topic: str, partition: int | None, timestamp: int, key: bytes | None,
            value: bytes | None, headers: Any, record_size: int, partitions: Any,
            cluster: Any, for_thread: bool, chosen: int, sticky: bool) -> RecordFuture:
        """Journal a record that goes to disk alone, and return its future. ``chosen`` is the
        partition the accumulator chose (with ``sticky``), or -1 to choose it here.

        Raises:
            ProducerClosedError: The producer closes or stopped.
            ConfigError: The explicit or custom partition is not one of ``partitions``.
        """
        acc = self._acc
        if self.closing or acc.closed or acc.fatal_error is not None:
            raise acc._refusal()
        if self.failure:
            raise JournalError(self.failure)
        if chosen < 0:
            choice = partition_for(topic, partition, key, value, partitions, cluster,
                                   acc._custom, acc._ignore_keys)
            sticky = choice is None
            chosen = acc._partitioner.partition(topic, cluster) if choice is None else choice
        tp = acc._topic_partition(topic, chosen, partitions)
        journal = acc.journal
        head = journal.head
        offset = -1 if head is None else head.write_pos
        journal.append(topic, chosen, timestamp, key, value, headers, tp)
        if journal.head is not head:  # a new segment, which opens with the record's topic
            head = journal.head
            offset = SEGMENT_HEADER.size
        if sticky:  # batch_size worth of spilled records moves the sticky partition on
            acc._sticky_appended(topic, chosen, record_size - RECORD_BATCH_OVERHEAD, False)
        group = self._open.get(tp)
        if group is None or group.joined >= GROUP_RECORDS:
            group = _Group(ProduceRequestResult(tp, self._loop))
            self._open[tp] = group
            self._groups[group.result] = group
        group.joined += 1
        group.left += 1
        kind = ThreadRecordFuture if for_thread else FutureRecordMetadata
        future = kind(group.result, 0, timestamp, -1 if key is None else len(key),
                      -1 if value is None else len(value))
        block = self._blocks[-1] if self._blocks else None
        if block is None or block.segment is not head or len(block.futures) >= BLOCK_RECORDS:
            block = _Block(head)
            self._blocks.append(block)
        block.offsets.append(offset)
        block.futures.append(future)
        idle = self.spilled == self.loaded
        self.spilled += 1
        acc.spilling = True
        if not for_thread and self.spilled % LOADS_PER_TURN == 0:
            # send() yields to the loop once per batches_per_turn new batches when the sender's
            # turn is due; a record that spills makes no batch, so a caller sending flat out
            # would starve the catch-up and the sender. Every LOADS_PER_TURN spilled records
            # count as a turn's batches for that, with the sender woken so that its turn is due.
            acc.batches_created += acc.batches_per_turn
            acc._wakeup()
        if idle:
            if for_thread:
                self._loop.call_soon_threadsafe(self._wake.set)
            else:
                self._wake.set()
        return future

    # --- records back into batches

    async def run(self) -> None:
        """Append spilled records to the accumulator, oldest first, as the pool has room.

        Cancellation-safe: a record leaves the spill in the same step (with no suspension)
        that appends it, so a cancelled task has appended each record once or not at all."""
        loops = 0
        try:
            if self._recovered is not None:
                await self._recovered.run()
                self._recovered = None
            while True:
                if self.spilled == self.loaded:
                    self._hand_over()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                block = self._blocks[0]
                future = block.futures[block.taken]
                assert future is not None
                group = self._groups[future._result]
                tp = group.result.tp
                try:
                    record = self._reader.read(block.segment, block.offsets[block.taken])
                    if record.partition != tp.partition:
                        raise JournalError(
                            f"the spilled record {record.seq} in {block.segment.path} names "
                            f"partition {record.partition}, not {tp.partition} as written")
                except JournalError as exc:
                    log.error("%s; the record's future fails with this error, and the record "
                              "is never sent", exc)
                    self._fail_one(block, group, future, exc)
                    continue
                partitions = self._kafka.partitions_for_topic(tp.topic)
                if not partitions:
                    self._hand_over()
                    partitions = await self._kafka.wait_for_topic(tp.topic, math.inf)
                    continue  # what is spilled may have changed meanwhile: look again
                headers = list(record.headers)
                size = estimate_size_in_bytes_upper_bound(record.key, record.value, headers)
                args = (record.seq, future, tp.topic, record.partition, record.timestamp,
                        record.key, record.value, headers, size, partitions, self._kafka)
                request = self._take(block, group, args, None)
                if request is not None:
                    # No room: hand the records appended so far their callbacks, then wait.
                    self._hand_over()
                    buffer = await self._pool.allocate(request.size, math.inf)
                    taken = self._take(block, group, args, (request, buffer))
                    assert taken is None, "a granted buffer always takes the record"
                loops += 1
                if loops % LOADS_PER_TURN == 0:
                    self._hand_over()
                    await asyncio.sleep(0)  # the sender and senders get their turn
        except ProducerClosedError:
            pass  # the pool or the accumulator closed: close() settles what is left
        except Exception as exc:  # a bug or an environment gone wrong: fail rather than hang
            log.exception("journal %s: the spill's catch-up stopped", self._acc.journal.folder)
            error = JournalError(
                f"the records spilled to journal_dir could not be appended ({exc!r}); they stay "
                f"owed in the journal, and the next producer opened on the folder sends them")
            self.failure = str(error)
            self.abandon(error)
        finally:
            self._hand_over()

    def _take(self, block: _Block, group: _Group, args: tuple[Any, ...],
              granted: tuple[BufferRequest, bytearray] | None) -> BufferRequest | None:
        """Append the head record (with ``granted``, the buffer the pool gave for it); None
        once it is in a batch and out of the spill, else the request for memory."""
        acc = self._acc
        lock = acc.journal_lock if acc.threaded else contextlib.nullcontext()
        with lock:
            try:
                appended = acc.adopt(*args, granted, self._unread.get(group.result.tp, 0))
            except Exception:
                if granted is not None and not acc.closed:  # a closed one gave it back
                    self._pool.deallocate(granted[1], granted[0].size)
                raise
            if type(appended) is BufferRequest:
                return appended
            self._took(block, group)
        return None

    def _took(self, block: _Block, group: _Group) -> None:
        """The head record is in a batch: let it go (with the journal's lock if threaded)."""
        block.futures[block.taken] = None
        block.taken += 1
        if block.taken == len(block.futures):
            self._blocks.popleft()
        group.left -= 1
        self._unread.pop(group.result.tp, None)  # journaled with this record's outcome
        self._touched.add(group)
        self.count_loaded(1)

    def count_loaded(self, count: int) -> None:
        """``count`` more records left the disk for batches (or were given up); with the
        journal's lock if threaded."""
        self.loaded += count
        if self.spilled == self.loaded:
            acc = self._acc
            if self.closing:
                acc.close_now()  # close() waited for this: no record is taken any more
            acc.spilling = False

    def unread(self, topic: str, partition: int, partitions: Any) -> None:
        """A record that cannot be read back or appended is given up: its outcome (failed) is
        journaled with the next record of its partition (with the journal's lock if
        threaded)."""
        try:
            tp = self._acc._topic_partition(topic, partition, partitions)
        except IndexError:
            pass  # the partition is gone: no later record of it can carry the outcome
        else:
            self._unread[tp] = self._unread.get(tp, 0) + 1
        self.count_loaded(1)

    def recover(self, recovered: Any) -> None:
        """Before :meth:`start`: ``recovered`` (a :class:`~aioaccum._runtime.recovery.Recovered`
        of ``count`` records) goes first, and every record accepted meanwhile queues behind
        it."""
        count = len(recovered._owed)
        if not count:
            return
        self._recovered = recovered
        self.spilled += count
        self._acc.spilling = True

    def _fail_one(self, block: _Block, group: _Group, future: RecordFuture,
                  error: BaseException) -> None:
        """A record that cannot be read back: its future fails alone (the group goes on), and
        its outcome is journaled with the next record of its partition."""
        tp = group.result.tp
        own = ProduceRequestResult(tp, self._loop)
        future.retarget(own, 0)
        acc = self._acc
        with acc.journal_lock if acc.threaded else contextlib.nullcontext():
            unread = self._unread.get(tp, 0) + 1
            self._took(block, group)
            self._unread[tp] = unread
        self._hand_over()
        own.set(-1, -1, error)

    def _hand_over(self) -> None:
        """Move the callbacks and waiters of records appended since the last call to their
        batches; a group whose records are all in ends its stand-in."""
        touched, self._touched = self._touched, set()
        for group in touched:
            self._settle(group, None)

    def _settle(self, group: _Group, error: BaseException | None) -> None:
        result = group.result
        # Under THREAD_LOCK: a thread adding a callback sees either the stand-in before the
        # hand-over (and its callback moves) or the record's batch after it.
        with THREAD_LOCK:
            result.hand_over()
            if group.left == 0 or error is not None:
                self._groups.pop(result, None)
                if self._open.get(result.tp) is group:
                    del self._open[result.tp]
                # Ends the stand-in (waking threads blocked on it): only futures still on it
                # take this outcome, those given up at close.
                result.set(-1, -1, error)

    # --- the end

    def abandon(self, error: BaseException | None = None) -> int:
        """The producer stops: every record still spilled stays owed in the journal (the next
        producer on the folder sends it) and its future fails with ``error``, by default a
        ``ProducerClosedError`` that says so. Returns how many."""
        if self._task is not None:
            self._task.cancel()
        acc = self._acc
        with acc.journal_lock if acc.threaded else contextlib.nullcontext():
            left = self.spilled - self.loaded
            self.loaded = self.spilled
            self._blocks.clear()
            groups = list(self._groups.values())
            self._groups.clear()
            self._open.clear()
            acc.spilling = False
        self._hand_over()
        if error is None:
            error = owed_error()
        for group in groups:
            self._settle(group, error)
        self._reader.close()
        if left:
            log.warning("journal %s: %d spilled record(s) not sent before close; they stay "
                        "owed, and the next producer on the folder sends them",
                        acc.journal.folder, left)
        return left

    async def stop(self) -> None:
        """Abandon what is left and wait for the task to end."""
        self.abandon()
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task
