"""One journal segment: a preallocated file, written through a shared memory map.

Why a map: an entry copied into a shared mapping is in the kernel's page cache the moment the
copy ends, so it survives the process being killed (``kill -9``, the OOM killer) without a
system call per record; only a power loss needs the ``fdatasync`` that :meth:`Segment.sync`
does. Why preallocated with ``posix_fallocate``: writing through a map into a sparse file on a
full disk kills the process with SIGBUS, while a failed allocation is an ordinary error at the
moment the segment is created, before any record depends on it.

Why segments are recycled: the first write to each page of a new file costs a page fault, in
which the kernel finds a page, zeroes it and lets the file system prepare its blocks, and a
deleted file's pages are torn down again; at 1 KB a record that is a fault per four records,
more than the copy and the CRC together. A segment that owes nothing while still mapped
becomes the *spare* instead of being deleted: renamed out of the segments' names, its written
bytes zeroed through the map, it is the next segment, whose pages are then already in memory
and mapped for writing.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aioaccum._journal import entries
from aioaccum._journal.entries import ENTRY_HEADER, SEGMENT_HEADER
from aioaccum._journal.writer import EntryWriter

__all__ = ["Problem", "Segment", "segment_name"]

SUFFIX = ".journal"
# The spare's name: not a segment's (recovery reads only names ending in SUFFIX), so a crash
# at any step of recycling leaves either a segment that reads as before or a file to discard.
SPARE = "spare.journal-free"
_ZERO_HEADER = bytes(ENTRY_HEADER.size)
_ZERO_RUN = bytes(1 << 20)


def segment_name(first_seq: int) -> str:
    """Names sort as their first sequence numbers do."""
    return f"{first_seq:020d}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class Problem:
    """An entry that failed its check at recovery.

    ``torn`` is a tail cut short by a crash (nothing but zeros after it): it is cut off. Any
    other bad entry is corruption in the middle of a segment: reported, and never read as data.
    """

    segment: str
    offset: int
    torn: bool
    reason: str
    size: int


class Segment:
    """A segment file open for reading and, when it is the newest, for appending."""

    __slots__ = (
        "_fd", "_map", "first_seq", "owed", "path", "records", "size", "synced_pos", "topics",
        "writer",
    )

    def __init__(self, path: Path, fd: int, size: int, first_seq: int,
                 mapped: mmap.mmap | None = None) -> None:
        self.path = path
        self._fd = fd
        self.size = size
        self.first_seq = first_seq
        self._map = mapped if mapped is not None else mmap.mmap(
            fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.writer = EntryWriter(self._map, SEGMENT_HEADER.size, size)
        # Where the last sync left the writer (a retired segment still needs one, by path).
        self.synced_pos = SEGMENT_HEADER.size
        # Topic ids this segment has defined (a TOPIC entry precedes their first use in it).
        self.topics: set[int] = set()
        # Records in this segment that have no outcome yet, in all and per partition; the
        # segment goes when none remain.
        self.records = 0
        self.owed: dict[tuple[str, int], int] = {}

    @classmethod
    def create(cls, folder: Path, first_seq: int, size: int) -> Segment:
        """A new segment of ``size`` bytes, its blocks reserved on disk.

        Raises:
            OSError: The file cannot be made or its space reserved (ENOSPC: the disk is full).
        """
        path = folder / segment_name(first_seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
            segment = cls(path, fd, size, first_seq)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        SEGMENT_HEADER.pack_into(segment._map, 0, entries.MAGIC, entries.VERSION, first_seq)
        return segment

    @classmethod
    def open_existing(cls, path: Path) -> Segment:
        """An existing segment, for recovery.

        Raises:
            OSError: It cannot be opened.
            ValueError: Its header is not a journal segment's.
        """
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < SEGMENT_HEADER.size:
                raise ValueError(f"{path} is {size} bytes, shorter than a segment header")
            with open(path, "rb") as f:
                magic, version, first_seq = SEGMENT_HEADER.unpack(f.read(SEGMENT_HEADER.size))
            if magic != entries.MAGIC or version != entries.VERSION:
                raise ValueError(
                    f"{path} is not an aioaccum journal segment of format {entries.VERSION}"
                    f" (magic {magic!r}, version {version})"
                )
            return cls(path, fd, size, first_seq)
        except BaseException:
            os.close(fd)
            raise

    # --- recycling

    def make_spare(self, folder: Path) -> Segment:
        """This segment, which owes nothing, as the spare: renamed to :data:`SPARE` in
        ``folder``, its entries zeroed through the map. Returns the spare (a new object on the
        same file and map; this one is left closed, so that nothing holding it reads the
        spare's bytes as its own).

        Raises:
            OSError: The rename failed (the segment is unchanged; delete it instead).
        """
        assert self._fd >= 0, "a retired segment has no map to recycle"
        spare_path = folder / SPARE
        os.rename(self.path, spare_path)
        self.writer.release()
        end = self.write_pos
        view = memoryview(self._map)
        try:
            pos = SEGMENT_HEADER.size
            while pos < end:
                step = min(end - pos, len(_ZERO_RUN))
                view[pos:pos + step] = _ZERO_RUN[:step]
                pos += step
            view[:SEGMENT_HEADER.size] = bytes(SEGMENT_HEADER.size)
        finally:
            view.release()
        spare = Segment(spare_path, self._fd, self.size, -1, self._map)
        self._fd = -1  # the spare owns the descriptor and the map now
        return spare

    def reuse(self, folder: Path, first_seq: int) -> Segment:
        """The spare as the new segment starting at ``first_seq``: its header is written, then
        it takes the segment's name. Returns the segment (a new object; this one is left
        closed).

        Raises:
            FileExistsError: A segment of that name exists (the spare is unchanged).
            OSError: The rename failed (the spare is unchanged).
        """
        path = folder / segment_name(first_seq)
        if path.exists():
            raise FileExistsError(errno.EEXIST, "a segment of that name exists", str(path))
        SEGMENT_HEADER.pack_into(self._map, 0, entries.MAGIC, entries.VERSION, first_seq)
        os.rename(self.path, path)
        self.writer.release()
        segment = Segment(path, self._fd, self.size, first_seq, self._map)
        self._fd = -1
        return segment

    # --- writing

    @property
    def write_pos(self) -> int:
        return int(self.writer.pos)

    def room(self) -> int:
        """Payload bytes the next entry may have."""
        if self._fd < 0:
            return -1  # retired
        return self.size - self.write_pos - ENTRY_HEADER.size

    def append(self, kind: int, payload: bytes) -> bool:
        """Write one entry; False when it does not fit."""
        return bool(self.writer.append(kind, payload))

    def append_record(self, seq: int, topic_id: int, partition: int, timestamp: int,
                      key: bytes | None, value: bytes | None,
                      headers: Sequence[tuple[str, bytes | None]]) -> bool:
        """Write one RECORD entry; False when it does not fit."""
        return bool(self.writer.append_record(seq, topic_id, partition, timestamp, key, value,
                                              headers))

    def sync(self) -> None:
        """Push written entries to the disk (``fdatasync`` reaches pages written by the map)."""
        written = self.write_pos
        if written == self.synced_pos:
            return
        if self._fd >= 0:
            os.fdatasync(self._fd)
        else:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self.synced_pos = written

    @property
    def retired(self) -> bool:
        return self._fd < 0

    def retire(self) -> None:
        """Stop appending: unmap the file and close it, so that old segments hold no file
        descriptors (a long outage can leave thousands). Its pages stay in the page cache;
        :meth:`sync` still reaches them by path."""
        if self._fd >= 0:
            self.writer.release()
            self._map.close()
            os.close(self._fd)
            self._fd = -1

    # --- reading

    def scan_at(self, problems: list[Problem], last: bool) -> Iterator[tuple[int, int, bytes]]:
        """Yield (offset, kind, payload) of each sound entry, and leave the write position after
        them.

        A bad entry followed by zeros only is a torn tail: it is zeroed, so a later scan does
        not see it again. Any other bad entry is skipped when its length still leads to an
        entry that reads back, else the rest of the segment is given up; either way it goes
        into ``problems``. ``last`` says whether this is the newest segment, the only one a
        crash can tear.
        """
        view = self._map
        pos = SEGMENT_HEADER.size
        limit = self.size
        while pos + ENTRY_HEADER.size <= limit:
            if view[pos:pos + ENTRY_HEADER.size] == _ZERO_HEADER:
                break
            length, crc, kind = ENTRY_HEADER.unpack_from(view, pos)
            start = pos + ENTRY_HEADER.size
            end = start + length
            reason = ""
            if kind not in entries.KINDS:
                reason = f"unknown entry kind {kind}"
            elif end > limit:
                reason = f"length {length} runs past the segment's end ({limit} bytes)"
            else:
                payload = bytes(view[start:end])
                if entries.entry_crc(kind, payload) != crc:
                    reason = "CRC-32C mismatch"
            if not reason:
                yield pos, kind, payload
                pos = end
                continue
            tail_from = min(end, limit) if end <= limit else start
            if last and self._zeros(tail_from, limit):
                problems.append(Problem(self.path.name, pos, True, reason, min(end, limit) - pos))
                view[pos:min(end, limit)] = bytes(min(end, limit) - pos)
                break
            problems.append(Problem(self.path.name, pos, False, reason,
                                    length + ENTRY_HEADER.size))
            if end <= limit and self._entry_follows(end):
                pos = end
                continue
            # Nothing trustworthy after this point: never append behind unreadable bytes.
            pos = limit
            break
        self.writer.pos = pos

    def _entry_follows(self, pos: int) -> bool:
        if pos + ENTRY_HEADER.size > self.size:
            return True  # the bad entry ended the segment exactly
        if self._map[pos:pos + ENTRY_HEADER.size] == _ZERO_HEADER:
            return True
        length, crc, kind = ENTRY_HEADER.unpack_from(self._map, pos)
        start = pos + ENTRY_HEADER.size
        if kind not in entries.KINDS or start + length > self.size:
            return False
        return bool(entries.entry_crc(kind, bytes(self._map[start:start + length])) == crc)

    def _zeros(self, start: int, end: int) -> bool:
        view = memoryview(self._map)
        try:
            while start < end:
                step = min(end - start, len(_ZERO_RUN))
                if view[start:start + step] != _ZERO_RUN[:step]:
                    return False
                start += step
            return True
        finally:
            view.release()

    # --- lifetime

    def close(self) -> None:
        if self._fd >= 0:
            self.writer.release()
            self._map.close()
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def is_disk_full(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
