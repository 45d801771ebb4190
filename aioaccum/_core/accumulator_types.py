"""What the accumulator answers and what it needs: the part of the buffer pool it uses, the
result of a ready check, and the request to wait for memory. Kept apart from
:mod:`aioaccum._core.accumulator` so that callers and fakes can name them without it."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

__all__ = ["BufferRequest", "BufferSupplier", "Lock", "ReadyCheck"]


class Lock(AbstractContextManager[bool], Protocol):
    """A reentrant lock, as ``threading.RLock`` makes."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


class BufferSupplier(Protocol):
    """The part of the BufferPool the accumulator uses."""

    def allocate_nowait(self, size: int) -> bytearray | None: ...

    async def allocate(self, size: int, max_block_ms: float) -> bytearray: ...

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None: ...

    def queued(self) -> int: ...

    @property
    def poolable_size(self) -> int: ...

    @property
    def total_memory(self) -> int: ...

    @property
    def lock(self) -> Lock: ...


class ReadyCheck(NamedTuple):
    """Kafka's ``ReadyCheckResult``. A named tuple, made once per sender turn: it costs a third
    of a frozen dataclass to build. The sets are the check's own, made for it, never shared."""

    ready_nodes: AbstractSet[int]
    next_check_in: float
    unknown_leader_topics: AbstractSet[str]


@dataclass(frozen=True, slots=True)
class BufferRequest:
    """What :meth:`RecordAccumulator.append` answers when the record needs a new batch and the
    pool has no buffer to give at once (Java's ``abortForNewBatch``): wait for ``size`` bytes,
    then call ``append`` again with this request and the buffer."""

    partition: int
    size: int
    sticky: bool
