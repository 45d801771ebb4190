"""Writes journal entries into a segment's memory map: the reference for ``_cwriter.pyx``.

One record per ``send()`` makes this the journal's hot path, so it has a compiled twin that
copies fields straight into the map and computes the CRC-32C in C; both write the same bytes
(see :mod:`aioaccum._journal.entries` for the layout, and the parity tests).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

from aioaccum._journal import entries
from aioaccum._journal.entries import ENTRY_HEADER

__all__ = ["EntryWriter", "PyEntryWriter"]

Header = tuple[str, bytes | None]


class EntryWriter:
    """Appends entries to ``mm`` from ``pos`` up to ``size``; ``pos`` follows the last one.

    Each append writes the payload first and the entry header last, so a crash between the
    two leaves zeros where the header goes: the end of the segment, not a half-written entry.
    """

    __slots__ = ("_map", "pos", "size")

    def __init__(self, mm: mmap.mmap, pos: int, size: int) -> None:
        self._map = mm
        self.pos = pos
        self.size = size

    def append(self, kind: int, payload: bytes) -> bool:
        """Write one entry; False (and nothing written) when it does not fit."""
        pos = self.pos
        start = pos + ENTRY_HEADER.size
        end = start + len(payload)
        if end > self.size:
            return False
        self._map[start:end] = payload
        ENTRY_HEADER.pack_into(self._map, pos, len(payload), entries.entry_crc(kind, payload),
                               kind)
        self.pos = end
        return True

    def append_record(
        self,
        seq: int,
        topic_id: int,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> bool:
        """Write one RECORD entry; False (and nothing written) when it does not fit."""
        payload = entries.encode_record(seq, topic_id, partition, timestamp, key, value,
                                        headers)
        return self.append(entries.RECORD, payload)

    def release(self) -> None:
        """Let go of the map (the compiled writer holds a buffer export that blocks closing)."""


# --------------------------------------------------------------------- which implementation
from aioaccum import _speedups  # noqa: E402  (must follow the reference class it aliases)

PyEntryWriter = EntryWriter

if _speedups.EXTENSIONS:
    from aioaccum._journal._cwriter import EntryWriter  # type: ignore[assignment]
