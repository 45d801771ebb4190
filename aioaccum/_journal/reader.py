"""Reading journaled records back from their segment files by offset: the spill's catch-up,
a restart's re-sends and the recovery's inspection all read through :class:`RecordReader`."""

from __future__ import annotations

import os
from typing import Any

from aioaccum._journal import entries
from aioaccum._journal.entries import ENTRY_HEADER, Record
from aioaccum._journal.segment import Segment
from aioaccum.errors import JournalError

__all__ = ["READ_AHEAD", "RecordReader"]

READ_AHEAD = 256 << 10  # bytes read from a segment at a time
_ZERO_HEADER = (0, 0, 0)


class RecordReader:
    """Reads RECORD entries back from segment files, through a descriptor of its own (the
    writer's map may be retired meanwhile) and a read-ahead window."""

    def __init__(self) -> None:
        self._path: Any = None
        self._fd = -1
        self._window = b""
        self._start = 0

    def read(self, segment: Segment, offset: int) -> Record:
        """The record whose entry is at ``offset`` (or just after a TOPIC entry there).

        Raises:
            JournalError: The bytes there are not a sound record entry.
        """
        if segment.path != self._path:
            self.close()
            try:
                self._fd = os.open(segment.path, os.O_RDONLY)
            except OSError as exc:
                raise JournalError(
                    f"cannot read journaled records back from {segment.path}: {exc.strerror}"
                ) from exc
            self._path = segment.path
        while True:
            kind, payload = self._entry(offset, segment)
            if kind == entries.RECORD:
                decoded = entries.decode(kind, payload)
                assert isinstance(decoded, Record)
                return decoded
            if kind != entries.TOPIC:  # the one entry a record's append may write before it
                raise JournalError(
                    f"{segment.path} holds an entry of kind {kind} at offset {offset}, where "
                    f"a record was journaled"
                )
            offset += ENTRY_HEADER.size + len(payload)

    def _entry(self, offset: int, segment: Segment) -> tuple[int, bytes]:
        # The window may predate entries written since (zeros there, or a header without its
        # payload's CRC matching yet): read afresh once before calling the bytes bad.
        for fresh in (False, True):
            if fresh or not self._start <= offset <= self._start + len(self._window) - 9:
                self._fill(offset, ENTRY_HEADER.size)
            at = offset - self._start
            header = ENTRY_HEADER.unpack_from(self._window, at)
            length, crc, kind = header
            if header == _ZERO_HEADER:
                continue
            end = at + ENTRY_HEADER.size + length
            if end > len(self._window):
                self._fill(offset, ENTRY_HEADER.size + length)
                at = 0
                end = ENTRY_HEADER.size + length
            payload = self._window[at + ENTRY_HEADER.size:end]
            if len(payload) == length and entries.entry_crc(kind, payload) == crc:
                return kind, payload
        raise JournalError(
            f"the journaled record at offset {offset} of {segment.path} does not read back (no "
            f"entry, or a CRC-32C mismatch): the disk changed the bytes the journal wrote"
        )

    def _fill(self, offset: int, needed: int) -> None:
        self._window = os.pread(self._fd, max(READ_AHEAD, needed), offset)
        self._start = offset
        if len(self._window) < ENTRY_HEADER.size:
            self._window += bytes(ENTRY_HEADER.size)  # past the file's end: reads as no entry

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._path = None
        self._window = b""
