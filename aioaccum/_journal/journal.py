"""The journal folder: segments in order, what is still owed, and recovery after a crash.

Records get journal sequence numbers in the order they are accepted, across all partitions.
Each record is owed until a DONE entry covers it; a segment is deleted once it owes nothing and
every older segment is gone. Deleting only from the oldest end keeps one rule true: a DONE
entry always lies in the same or a later segment than its records, so no deletion can bring
a settled record back at the next recovery.

Outcomes must be reported per partition in the order the records were accepted (what an
idempotent producer's in-order delivery gives), because a DONE counts records off the front of
the partition's owed runs.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aioaccum._journal import entries
from aioaccum._journal.entries import (
    DONE_FIELDS,
    ENTRY_HEADER,
    SEAL_FIELDS,
    SEGMENT_HEADER,
    Done,
    Record,
    Seal,
)
from aioaccum._journal.lock import FolderLock
from aioaccum._journal.reader import RecordReader
from aioaccum._journal.segment import SPARE, SUFFIX, Problem, Segment, is_disk_full
from aioaccum.errors import JournalError, JournalFullError, RecordTooLargeError

__all__ = ["Journal", "JournaledRecord", "Owed", "Recovery", "SealedBatch", "sync_files"]

Header = tuple[str, bytes | None]
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class JournaledRecord:
    """A record read back at recovery, owed to Kafka."""

    seq: int
    topic: str
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class SealedBatch:
    """Owed records of one partition that were sealed into a batch before the crash."""

    topic: str
    partition: int
    first_seq: int
    last_seq: int
    count: int
    producer_id: int
    epoch: int
    base_sequence: int


class Owed:
    """The owed records, in acceptance order, as places in the segments rather than payloads.

    Per record: its journal sequence number and entry offset (8 bytes each), the index of its
    segment in :attr:`segments`, its topic id and partition (4 bytes each): 28 bytes in five
    arrays, whatever the record's size. Its key, value and headers stay on disk until
    :meth:`read` (or a reader of the runtime) reads them back, CRC-checked.
    """

    __slots__ = ("offsets", "partitions", "segment_of", "segments", "seqs", "topic_ids",
                 "topics")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.offsets = array("q")
        self.segment_of = array("i")
        self.topic_ids = array("i")
        self.partitions = array("i")
        self.segments: list[Segment] = []
        self.topics: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.seqs)

    def add(self, seq: int, segment: int, offset: int, topic_id: int, partition: int) -> None:
        self.seqs.append(seq)
        self.segment_of.append(segment)
        self.offsets.append(offset)
        self.topic_ids.append(topic_id)
        self.partitions.append(partition)

    def find(self, seq: int) -> int:
        """The index of the owed record numbered ``seq``, or -1 (``seqs`` ascends)."""
        seqs = self.seqs
        i = bisect.bisect_left(seqs, seq)
        return i if i < len(seqs) and seqs[i] == seq else -1

    def topic(self, index: int) -> str:
        return self.topics[self.topic_ids[index]]

    def read(self, index: int) -> JournaledRecord:
        """The owed record at ``index``, read back from its segment (a reader per call: for
        inspection and tests; the runtime reads through one reader that it keeps open).

        Raises:
            JournalError: The bytes there are no longer a sound record entry.
        """
        reader = RecordReader()
        try:
            record = reader.read(self.segments[self.segment_of[index]], self.offsets[index])
        finally:
            reader.close()
        return JournaledRecord(record.seq, self.topics[record.topic_id], record.partition,
                               record.timestamp, record.key, record.value, record.headers)


@dataclass(slots=True)
class Recovery:
    """What :meth:`Journal.open` found in the folder.

    Attributes:
        owed: The owed records, in acceptance order, as places in the segments (see
            :class:`Owed`: 28 bytes each, however large the records).
        sealed: The batches some of those records were sealed into, in journal order.
        problems: Bad entries: torn tails (cut off) and corruption (skipped, never sent).
        segments: Segment files read.
    """

    owed: Owed = field(default_factory=Owed)
    sealed: list[SealedBatch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    segments: int = 0

    @property
    def records(self) -> list[JournaledRecord]:
        """Every owed record read back, payloads and all: for inspection and tests only (the
        producer reads them one batch at a time)."""
        return [self.owed.read(i) for i in range(len(self.owed))]

    @property
    def torn_entries(self) -> int:
        return sum(1 for p in self.problems if p.torn)

    @property
    def corrupt_entries(self) -> list[Problem]:
        return [p for p in self.problems if not p.torn]


class Journal:
    """An open journal folder, held by this process alone.

    Use :meth:`open`; then :meth:`append` per accepted record, :meth:`seal` when a batch gets
    its producer state, :meth:`done` when records have their outcome, :meth:`close` at the end.
    Not thread-safe: the caller serialises calls (the producer's pool lock does).
    """

    def __init__(self, folder: Path, segment_bytes: int, max_bytes: int,
                 recycle: bool = True, mapped: int = 2) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        # Recycling (see segment.py): the segments before the newest stay mapped (``_warm``,
        # oldest first, up to ``mapped`` maps with the newest), so that each can become the
        # spare once it owes nothing. A producer that keeps buffer_memory full owes that much
        # at any moment, more than one segment's worth by default: with two maps the oldest
        # owing segment was already let go when its outcomes came, so it was deleted and every
        # new segment a fresh file (a page fault per 4 KiB written: 1 KB records cost up to 0.9 us
        # more each). Off (``recycle``) for a journal_sync that survives power loss: a segment
        # made of the spare must never show its old entries after a crash, so its zeros would
        # have to reach the disk first, and that doubles what the syncs write.
        self.mapped = max(2, mapped)
        self._warm: deque[Segment] = deque()
        self._spare: Segment | None = None
        self.recycle = recycle
        self.recycled = 0  # segments made of the spare (for tests and the docs' figures)
        # The run of records appended to one partition in one segment and not yet counted
        # in it (see append and _flush_run).
        self._run_tp: TopicPartition | None = None
        self._run_segment: Segment | None = None
        self._run_topic_id = -1  # the run's topic, by its id in the run's segment
        self._run = 0
        self._lock = FolderLock(folder)
        self._segments: deque[Segment] = deque()
        self._head: Segment | None = None  # the newest segment, where entries go
        self._topic_ids: dict[str, int] = {}
        self._topic_names: dict[int, str] = {}
        # Per partition: the segments holding its owed records, oldest first (each segment
        # counts them in ``Segment.owed``).
        self._owed: dict[TopicPartition, deque[Segment]] = {}
        self._next_seq = 0
        self.recovery = Recovery()

    # --- opening

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, segment_bytes: int,
             max_bytes: int, recycle: bool = True, mapped: int = 2) -> Journal:
        """Lock ``folder`` (made if missing), read what it holds, and be ready to append.
        ``recycle`` and ``mapped``: see ``__init__`` (``recycle`` is False unless
        ``journal_sync='none'``).

        Raises:
            JournalLockedError: Another producer holds the folder.
            JournalError: The folder cannot be made, read or written.
        """
        path = Path(folder)
        if segment_bytes > max_bytes:
            raise JournalError(
                f"journal_segment_bytes={segment_bytes} exceeds journal_max_bytes={max_bytes};"
                f" raise journal_max_bytes or lower the segment size"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(
                f"cannot make journal_dir {path}: {exc.strerror}; point it at a writable folder"
            ) from exc
        journal = cls(path, segment_bytes, max_bytes, recycle, mapped)
        journal._lock.acquire()
        try:
            # A spare left by a crash holds nothing owed; its zeros may be half written.
            (path / SPARE).unlink(missing_ok=True)
            journal._recover()
            if not os.access(path, os.W_OK):
                raise JournalError(f"journal_dir {path} is not writable; fix its permissions")
        except BaseException:
            journal.close()
            raise
        return journal

    def _recover(self) -> None:
        names = sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX))
        # Every record read, as places: (seq, segment index, offset, topic id, partition), in
        # parallel arrays (no payload stays in memory; see Owed).
        found = Owed()
        seals: list[Seal] = []
        settled: list[Done] = []
        recovery = self.recovery
        for index, path in enumerate(names):
            try:
                segment = Segment.open_existing(path)
            except (OSError, ValueError) as exc:
                raise JournalError(
                    f"cannot read journal segment {path}: {exc}; move the file aside to start "
                    f"without its records"
                ) from exc
            self._segments.append(segment)
            found.segments.append(segment)
            recovery.segments += 1
            last = index == len(names) - 1
            for offset, kind, payload in segment.scan_at(recovery.problems, last):
                try:
                    entry = entries.decode(kind, payload)
                except entries.EntryError as exc:
                    recovery.problems.append(Problem(path.name, offset, False, str(exc), 0))
                    continue
                if kind == entries.TOPIC:
                    topic_id, name = entry  # type: ignore[misc]
                    self._topic_ids[name] = topic_id
                    self._topic_names[topic_id] = name
                elif kind == entries.RECORD:
                    assert isinstance(entry, Record)
                    found.add(entry.seq, index, offset, entry.topic_id, entry.partition)
                    self._next_seq = max(self._next_seq, entry.seq + 1)
                elif kind == entries.SEAL:
                    assert isinstance(entry, Seal)
                    seals.append(entry)
                else:
                    assert isinstance(entry, Done)
                    settled.append(entry)
        seqs = found.seqs
        # Acceptance order; written in it already, unless a segment was given up and re-made.
        order: Sequence[int] = range(len(seqs))
        if any(seqs[i] >= seqs[i + 1] for i in range(len(seqs) - 1)):
            order = sorted(order, key=seqs.__getitem__)
        # Owed indexes per (topic id, partition), ascending by sequence number, so each DONE
        # settles a slice; ``settled_mask`` marks the records a DONE covers.
        by_partition: dict[tuple[int, int], array[int]] = {}
        for i in order:
            key = (found.topic_ids[i], found.partitions[i])
            runs = by_partition.get(key)
            if runs is None:
                runs = by_partition[key] = array("q")
            runs.append(i)
        settled_mask = bytearray(len(seqs))
        for done in settled:
            runs = by_partition.get((done.topic_id, done.partition))
            if runs:
                lo = bisect.bisect_left(runs, done.first_seq, key=seqs.__getitem__)
                hi = bisect.bisect_right(runs, done.last_seq, key=seqs.__getitem__)
                for i in runs[lo:hi]:
                    settled_mask[i] = 1
        del by_partition
        owed = recovery.owed
        owed.segments = found.segments
        owed.topics = self._topic_names
        for i in order:
            if settled_mask[i]:
                continue
            segment = found.segments[found.segment_of[i]]
            topic = self._topic_names.get(found.topic_ids[i])
            if topic is None:
                recovery.problems.append(Problem(
                    segment.path.name, found.offsets[i], False,
                    f"record {seqs[i]} names topic id {found.topic_ids[i]}, which no entry "
                    f"defines", 0))
                continue
            owed.add(seqs[i], found.segment_of[i], found.offsets[i], found.topic_ids[i],
                     found.partitions[i])
            self._owe((topic, found.partitions[i]), segment, 1)
        del found, settled_mask
        # A batch re-stamped (a new epoch or sequence) is sealed again: the last seal counts.
        latest: dict[tuple[int, int, int], Seal] = {}
        for seal in seals:
            if owed.find(seal.first_seq) >= 0 and seal.topic_id in self._topic_names:
                latest[(seal.topic_id, seal.partition, seal.first_seq)] = seal
        recovery.sealed = [
            SealedBatch(self._topic_names[s.topic_id], s.partition, s.first_seq, s.last_seq,
                        s.records, s.producer_id, s.epoch, s.base_sequence)
            for s in latest.values()
        ]
        # Appends continue in the newest segment, after its last sound entry (a torn tail was
        # zeroed; a segment with corruption was closed to appends by its scan).
        for segment in list(self._segments)[:-1]:
            segment.retire()
        self._head = self._segments[-1] if self._segments else None
        self._drop_settled_segments()

    # --- writing

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def bytes_on_disk(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def head(self) -> Segment | None:
        """The newest segment, where entries go (None before the first)."""
        return self._head

    def head_room(self) -> int:
        """Bytes entries may still take in the newest segment (-1: none open)."""
        head = self._head
        return -1 if head is None else head.room()

    def reserve(self, needed: int) -> None:
        """Make room now for entries of ``needed`` bytes in all (a record and its topic's
        definition), so that the :meth:`append` that follows cannot fail for want of it: the
        producer calls this before the batch takes the record, and the errors come while
        nothing depends on the record yet.

        Raises:
            JournalFullError: A new segment is needed and ``max_bytes`` is reached, or the disk
                is full.
            RecordTooLargeError: The record cannot fit in any segment.
            JournalError: The disk refused to make a segment for another reason.
        """
        head = self._head
        if head is None or head.room() < needed:
            self._writable(needed, owed=True)

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
        tp: TopicPartition | None = None,
    ) -> int:
        """Journal one accepted record; returns its sequence number. ``tp`` may give
        ``(topic, partition)`` as a tuple the caller keeps (a ``TopicPartition``), to spare one.

        Raises:
            JournalFullError: A new segment is needed and ``max_bytes`` is reached (wait for
                outcomes to free segments, then call again) or the disk is full.
            RecordTooLargeError: The record cannot fit in any segment.
            JournalError: The disk refused the write for another reason.
        """
        seq = self._next_seq
        segment = self._head
        # The usual case, kept short: the newest segment knows the topic and has room.
        if segment is not None:
            # Records of one partition come in runs (a batch fills before the next): while
            # the run lasts, its topic's id is known to the segment, and only a counter moves
            # (see _flush_run).
            if (tp is self._run_tp and segment is self._run_segment and tp is not None
                    and segment.writer.append_record(seq, self._run_topic_id, partition,
                                                     timestamp, key, value, headers)):
                self._next_seq = seq + 1
                self._run += 1
                return seq
            topic_id = self._topic_ids.get(topic, -1)
            if topic_id in segment.topics and segment.writer.append_record(
                seq, topic_id, partition, timestamp, key, value, headers
            ):
                self._next_seq = seq + 1
                if tp is self._run_tp and segment is self._run_segment and tp is not None:
                    self._run += 1
                    return seq
                if tp is None:
                    tp = (topic, partition)
                self._flush_run()
                owed = segment.owed.get(tp)
                if owed is None:
                    self._owe(tp, segment, 1)  # counts it in segment.records too
                else:
                    segment.records += 1
                    segment.owed[tp] = owed + 1
                self._run_tp = tp
                self._run_segment = segment
                self._run_topic_id = topic_id
                return seq
        topic_id = self._topic_id(topic)
        payload = entries.encode_record(seq, topic_id, partition, timestamp, key, value,
                                        headers)
        segment = self._writable(len(payload) + len(topic) + 2 * ENTRY_HEADER.size + 4,
                                 owed=True)
        self._define(segment, topic_id)
        segment.append(entries.RECORD, payload)
        self._next_seq = seq + 1
        self._owe((topic, partition), segment, 1)
        return seq

    def seal(self, topic: str, partition: int, first_seq: int, last_seq: int, count: int,
             producer_id: int, epoch: int, base_sequence: int) -> None:
        """Journal that records of a partition went into a batch under this producer state."""
        topic_id = self._topic_ids.get(topic)
        if topic_id is None:
            topic_id = self._topic_id(topic)
        payload = SEAL_FIELDS.pack(first_seq, last_seq, topic_id, partition, count, producer_id,
                                   epoch, base_sequence)
        self._append_entry(entries.SEAL, payload, topic, topic_id)

    def done(self, topic: str, partition: int, first_seq: int, last_seq: int,
             count: int) -> None:
        """Journal that ``count`` records of a partition have their outcome, and forget them.

        Segments that owe nothing any more are deleted, oldest first.
        """
        topic_id = self._topic_ids.get(topic)
        if topic_id is None:
            topic_id = self._topic_id(topic)
        self._append_entry(entries.DONE, DONE_FIELDS.pack(first_seq, last_seq, topic_id,
                                                          partition, count), topic, topic_id)
        self._settle((topic, partition), count)
        self._drop_settled_segments()

    def _append_entry(self, kind: int, payload: bytes, topic: str, topic_id: int) -> None:
        """Append a seal or an outcome (never refused for ``max_bytes``: see _writable)."""
        segment = self._head
        if (segment is not None and topic_id in segment.topics
                and segment.writer.append(kind, payload)):
            return  # the usual case: the newest segment knows the topic and has room
        segment = self._writable(len(payload) + len(topic) + 2 * ENTRY_HEADER.size + 4,
                                 owed=False)
        self._define(segment, topic_id)
        segment.append(kind, payload)

    def sync(self) -> None:
        """Make everything written so far survive a power loss (``fdatasync`` per segment
        written since the last sync; the newest is the one that matters in practice)."""
        for segment in self._segments:
            segment.sync()

    def unsynced(self) -> list[tuple[Segment, Path, int]]:
        """Segments written since their last sync: (segment, its file, bytes written). Hand
        the files to :func:`sync_files` on another thread, then :meth:`synced` the list."""
        return [(s, s.path, s.write_pos) for s in self._segments if s.write_pos > s.synced_pos]

    @staticmethod
    def synced(done: list[tuple[Segment, Path, int]]) -> None:
        for segment, _path, pos in done:
            segment.synced_pos = max(segment.synced_pos, pos)

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        self._segments.clear()
        self._head = None
        self._warm.clear()
        if self._spare is not None:
            self._spare.delete()
            self._spare = None
        self._lock.release()

    # --- internals

    def _topic_id(self, topic: str) -> int:
        topic_id = self._topic_ids.get(topic)
        if topic_id is None:
            topic_id = len(self._topic_names)
            while topic_id in self._topic_names:
                topic_id += 1
            self._topic_ids[topic] = topic_id
            self._topic_names[topic_id] = topic
        return topic_id

    def _define(self, segment: Segment, topic_id: int) -> None:
        if topic_id not in segment.topics:
            segment.append(entries.TOPIC,
                           entries.encode_topic(topic_id, self._topic_names[topic_id]))
            segment.topics.add(topic_id)

    def _writable(self, needed: int, *, owed: bool) -> Segment:
        if self._segments and self._segments[-1].room() >= needed:
            return self._segments[-1]
        if needed > self.segment_bytes - SEGMENT_HEADER.size - ENTRY_HEADER.size:
            raise RecordTooLargeError(
                f"a journal entry of {needed} bytes does not fit in a segment of "
                f"journal_segment_bytes={self.segment_bytes}; raise journal_segment_bytes"
            )
        # Outcomes and seals may pass max_bytes by a segment: refusing them would keep the
        # journal full for ever, since only they free room.
        if owed and self.bytes_on_disk() + self.segment_bytes > self.max_bytes:
            raise JournalFullError(
                f"the journal in {self.folder} holds {self.bytes_on_disk()} bytes in "
                f"{len(self._segments)} segment(s) of records without outcome, at "
                f"journal_max_bytes={self.max_bytes}; is the cluster reachable?"
            )
        try:
            segment = self._new_segment()
        except FileExistsError:
            # A segment that recovery gave up on starts at the same number: take the next.
            self._next_seq += 1
            return self._writable(needed, owed=owed)
        except OSError as exc:
            if is_disk_full(exc):
                raise JournalFullError(
                    f"the disk under {self.folder} has no room for a journal segment of "
                    f"{self.segment_bytes} bytes ({exc.strerror}); free disk space or lower "
                    f"journal_segment_bytes"
                ) from exc
            raise JournalError(
                f"cannot create a journal segment in {self.folder}: {exc.strerror}"
            ) from exc
        if self._segments:
            # The old newest stays mapped, to be recycled once it owes nothing; beyond
            # ``mapped`` maps the oldest kept is let go, so that a long outage holds no more.
            if self.recycle:
                warm = self._warm
                warm.append(self._segments[-1])
                while len(warm) >= self.mapped:
                    warm.popleft().retire()
            else:
                self._segments[-1].retire()
        self._segments.append(segment)
        self._head = segment
        return segment

    def _new_segment(self) -> Segment:
        spare = self._spare
        if spare is not None:
            made = spare.reuse(self.folder, self._next_seq)  # FileExistsError: spare kept
            self._spare = None
            self.recycled += 1
            return made
        return Segment.create(self.folder, self._next_seq, self.segment_bytes)

    def _flush_run(self) -> None:
        """Count the current run's records in their segment: before anything reads or
        changes the counts (``Segment.records`` and ``Segment.owed``)."""
        run = self._run
        if run:
            segment, tp = self._run_segment, self._run_tp
            assert segment is not None
            assert tp is not None
            segment.records += run
            segment.owed[tp] += run
            self._run = 0
        # A settle may drop the partition's count from the segment: the next record starts a
        # run of its own, counted as the first of its partition there.
        self._run_tp = self._run_segment = None

    def _owe(self, tp: TopicPartition, segment: Segment, count: int) -> None:
        self._flush_run()
        segment.records += count
        owed = segment.owed.get(tp)
        if owed is None:
            segment.owed[tp] = count
            holders = self._owed.get(tp)
            if holders is None:
                holders = self._owed[tp] = deque()
            holders.append(segment)
        else:
            segment.owed[tp] = owed + count

    def _settle(self, tp: TopicPartition, count: int) -> None:
        self._flush_run()
        holders = self._owed.get(tp)
        while count > 0 and holders:
            segment = holders[0]
            owed = segment.owed[tp]
            taken = min(owed, count)
            segment.records -= taken
            count -= taken
            if taken == owed:
                del segment.owed[tp]
                holders.popleft()
            else:
                segment.owed[tp] = owed - taken
        if holders is not None and not holders:
            del self._owed[tp]
        if count:
            raise JournalError(
                f"{count} outcome(s) for {tp[0]}-{tp[1]} have no journaled record; the "
                f"journal's accounting is broken"
            )

    def _drop_settled_segments(self) -> None:
        self._flush_run()
        # The newest stays: it is where the next entry goes (unless recovery cut it).
        while len(self._segments) > 1 and self._segments[0].records == 0:
            segment = self._segments.popleft()
            if self._warm and segment is self._warm[0]:
                self._warm.popleft()  # the oldest segments go first, from either deque
            if (self.recycle and self._spare is None and not segment.retired
                    and segment.size == self.segment_bytes):
                try:
                    self._spare = segment.make_spare(self.folder)
                    continue
                except OSError:
                    pass  # not recycled: deleted as any other
            segment.delete()


def sync_files(files: list[tuple[Segment, Path, int]]) -> None:
    """``fdatasync`` each file through a descriptor of its own, so that the loop may retire or
    delete the segment meanwhile (a file deleted since owes nothing and is skipped). Pages
    written through a shared map are flushed by any descriptor of the file."""
    for _segment, path, _pos in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
