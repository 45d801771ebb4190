"""Which event loop aioaccum makes when it makes one: uvloop where installed, else asyncio's.

This applies only where aioaccum itself creates the loop: the command line and
:class:`~aioaccum.sync.SyncProducer`'s background thread (the Spark sink's own loop, in
``_spark_rows``, makes the same choice). A :class:`~aioaccum.Producer` that a
caller starts runs on the caller's own loop, whatever it is. aioaccum never installs an
event-loop policy and never replaces a loop it did not make.

:func:`read_on` runs a read on a loop from another thread, for what must be read where it is
written (the producer's metrics, read by a scrape thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "LOOP_BUSY",
    "LOOP_GRACE_S",
    "LOOP_STOPPED",
    "LoopFactory",
    "close_kafka",
    "default_loop_factory",
    "describe_loop",
    "read_on",
]

_T = TypeVar("_T")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

LOOP_GRACE_S = 5.0
"""Seconds a thread waits beyond the time it gave, for the loop thread to answer at all."""


def default_loop_factory() -> LoopFactory:
    """Return ``uvloop.new_event_loop`` if uvloop can be imported, else ``asyncio.new_event_loop``.

    uvloop is a dependency everywhere except on Windows, where it does not exist.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def describe_loop(loop: asyncio.AbstractEventLoop) -> str:
    """Name the kind of loop, e.g. ``"uvloop 0.23.0"`` or ``"asyncio (_UnixSelectorEventLoop)"``."""
    kind = type(loop)
    if kind.__module__.split(".", 1)[0] == "uvloop":
        from importlib.metadata import version

        return f"uvloop {version('uvloop')}"
    if kind.__module__.split(".", 1)[0] == "asyncio":
        return f"asyncio ({kind.__name__})"
    return f"{kind.__module__}.{kind.__qualname__}"


LOOP_STOPPED = object()
"""What :func:`read_on` returns when the loop closed."""
LOOP_BUSY = object()
"""What :func:`read_on` returns when the loop did not answer in time."""


def read_on(loop: asyncio.AbstractEventLoop, read: Coroutine[Any, Any, _T]) -> _T | object:
    """Run ``read`` on ``loop`` from another thread. ``LOOP_STOPPED`` when the loop closed
    (the caller may read where it is: nothing writes any more); ``LOOP_BUSY`` when it did not
    answer within ``LOOP_GRACE_S``."""
    try:
        future = asyncio.run_coroutine_threadsafe(read, loop)
    except RuntimeError:  # the loop closed
        read.close()
        return LOOP_STOPPED
    try:
        return future.result(LOOP_GRACE_S)
    except concurrent.futures.TimeoutError:
        future.cancel()
        return LOOP_STOPPED if not loop.is_running() else LOOP_BUSY


async def close_kafka(kafka: Any, grace: float) -> None:
    """Close the broker connections, waiting ``grace`` seconds at most (then they finish in
    the background); a failure is logged, not raised: close() is ending anyway."""
    log = logging.getLogger("aioaccum.producer")
    closing = asyncio.ensure_future(kafka.close())
    done, _ = await asyncio.wait({closing}, timeout=grace)
    if not done:
        log.warning("closing the broker connections took over %.1f s; left to finish "
                    "in the background", grace)
    elif not closing.cancelled() and closing.exception() is not None:
        log.warning("closing the broker connections failed: %r", closing.exception())
