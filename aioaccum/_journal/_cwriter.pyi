"""Types of the compiled entry writer (``_cwriter.pyx``): the API of the pure-Python one.

See :class:`aioaccum._journal.writer.PyEntryWriter` for what each member does.
"""

import mmap
from collections.abc import Sequence

__all__ = ["EntryWriter", "crc32c"]

def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int: ...

class EntryWriter:
    pos: int
    size: int
    def __init__(self, mm: mmap.mmap, pos: int, size: int) -> None: ...
    def append(self, kind: int, payload: bytes) -> bool: ...
    def append_record(
        self,
        seq: int,
        topic_id: int,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> bool: ...
    def release(self) -> None: ...
