"""``wait_all``: wait for many record futures at the cost of their batches, not their records.

``asyncio.gather`` over a million futures schedules a million callbacks, one per future, whatever
the future is. Records share their batch's outcome, so this waits on each distinct batch once:
one listener per batch, one wake-up when all have ended (or when one failed), then one pass over
the records to build their metadata in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar, overload

from aioaccum._core.futures import FutureRecordMetadata, ProduceRequestResult
from aioaccum._runtime.many import ReadOnRead

__all__ = ["Outcomes", "wait_all"]

_T = TypeVar("_T")


@overload
async def wait_all(
    futures: Iterable[Awaitable[_T]], *, return_exceptions: Literal[False] = ...
) -> Sequence[_T]: ...


@overload
async def wait_all(
    futures: Iterable[Awaitable[_T]], *, return_exceptions: Literal[True]
) -> Sequence[_T | BaseException]: ...


async def wait_all(
    futures: Iterable[Awaitable[Any]], *, return_exceptions: bool = False
) -> Sequence[Any]:
    """Wait until every record has ended; return their metadata in input order.

    The fast way to wait for the futures :meth:`Producer.send` returned: its cost follows the
    number of batches, not of records. Other awaitables may be mixed in; they are waited for as
    ``asyncio.gather`` would.

    Args:
        futures: Record futures (and other awaitables).
        return_exceptions: Put each failed record's error in its place instead of raising.

    Returns:
        A sequence with one :class:`RecordMetadata` per input, in order (or its error, with
        ``return_exceptions``), each built when read (``list(...)`` makes them all).

    Raises:
        AioAccumError: The first error seen (a record's batch failed), as soon as it is seen,
            unless ``return_exceptions``; the other records are still sent and keep their
            futures.
        asyncio.CancelledError: A record future was cancelled (unless ``return_exceptions``),
            or this wait was; cancelling the wait cancels none of the records.
    """
    items: list[FutureRecordMetadata | asyncio.Future[Any]] = [
        f if isinstance(f, FutureRecordMetadata) else asyncio.ensure_future(f) for f in futures
    ]
    loop = asyncio.get_running_loop()
    while True:
        results: dict[int, ProduceRequestResult] = {}
        others: list[asyncio.Future[Any]] = []
        failed: BaseException | None = None
        last: ProduceRequestResult | None = None
        for item in items:
            if isinstance(item, FutureRecordMetadata):
                result = item.pending_result()
                if result is not None:
                    if result is not last:  # records of one batch come in runs
                        results[id(result)] = result
                        last = result
                elif not return_exceptions and failed is None:
                    failed = _error_of(item)
            elif not item.done():
                others.append(item)
            elif not return_exceptions and failed is None:
                failed = _error_of(item)
        if failed is not None:
            raise failed
        if not results and not others:
            return Outcomes(items, return_exceptions)
        await _wait_for(loop, list(results.values()), others, fail_fast=not return_exceptions)


class Outcomes(ReadOnRead[Any]):
    """What :func:`wait_all` returns: each input's metadata (or error), in input order.

    Like the record futures it is read from, it builds each :class:`RecordMetadata` when read,
    so waiting for a million records does not hold a million tuples.
    """

    __slots__ = ("_items", "_return_exceptions")

    def __init__(
        self, items: list[FutureRecordMetadata | asyncio.Future[Any]], return_exceptions: bool
    ) -> None:
        self._items = items
        self._return_exceptions = return_exceptions

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._read(item) for item in self._items[index]]
        return self._read(self._items[index])

    def __iter__(self) -> Iterator[Any]:
        read = self._read
        for item in self._items:
            yield read(item)

    def _read(self, item: FutureRecordMetadata | asyncio.Future[Any]) -> Any:
        return _outcome(item) if self._return_exceptions else item.result()


def _error_of(item: FutureRecordMetadata | asyncio.Future[Any]) -> BaseException | None:
    if item.cancelled():
        if isinstance(item, FutureRecordMetadata):
            return item._make_cancelled_error()
        return asyncio.CancelledError()
    return item.exception()


def _outcome(item: FutureRecordMetadata | asyncio.Future[Any]) -> Any:
    error = _error_of(item)
    return item.result() if error is None else error


async def _wait_for(
    loop: asyncio.AbstractEventLoop,
    results: list[ProduceRequestResult],
    others: list[asyncio.Future[Any]],
    *,
    fail_fast: bool,
) -> None:
    """Until every one of ``results`` and ``others`` ended, or (``fail_fast``) one failed, or a
    split moved records to batches the caller must look at again."""
    waiter: asyncio.Future[None] = loop.create_future()
    remaining = len(results) + len(others)

    def on_result(result: ProduceRequestResult) -> None:
        nonlocal remaining
        remaining -= 1
        if waiter.done():
            return
        # A result that ended without being set was split: its records wait elsewhere now.
        if remaining == 0 or not result.done or (fail_fast and result.error is not None):
            waiter.set_result(None)

    def on_other(future: asyncio.Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        if waiter.done():
            return
        failed = future.cancelled() or future.exception() is not None
        if remaining == 0 or (fail_fast and failed):
            waiter.set_result(None)

    for result in results:
        result.add_listener(on_result)
    for other in others:
        other.add_done_callback(on_other)
    try:
        await waiter
    finally:
        for result in results:
            result.remove_listener(on_result)
        for other in others:
            other.remove_done_callback(on_other)
