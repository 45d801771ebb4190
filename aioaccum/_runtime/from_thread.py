"""What ``Producer.send_from_thread`` needs of the loop it does not run on.

A plain thread appends records itself (the accumulator takes a lock once threads use it), and
asks the producer's loop only for what lives there: turning the lock on, and the topic's
metadata. It never blocks the loop's own thread, which has to do the work it would wait for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._runtime.loops import LOOP_GRACE_S
from aioaccum.errors import ProducerTimeoutError

__all__ = ["enable_threads", "refuse_to_block_the_loop", "wait_for_topic_from_thread"]


def enable_threads(
    acc: RecordAccumulator, loop: asyncio.AbstractEventLoop, loop_thread: int
) -> None:
    """Make appends lock, once per producer, on the loop's thread: until now the loop
    appended without the lock, and may be in the middle of an append right now."""
    if threading.get_ident() == loop_thread:
        acc.enable_threads()
        return
    enabled: concurrent.futures.Future[None] = concurrent.futures.Future()

    def enable() -> None:
        acc.enable_threads()
        enabled.set_result(None)

    loop.call_soon_threadsafe(enable)
    try:
        enabled.result(LOOP_GRACE_S)
    except concurrent.futures.TimeoutError:
        raise ProducerTimeoutError(
            f"the producer's event loop did not answer within {LOOP_GRACE_S} s; is it "
            "running, and not blocked?"
        ) from None


def refuse_to_block_the_loop(loop_thread: int) -> None:
    """Raise ``RuntimeError`` when called on the loop's thread, which would wait for itself.

    Checked only where the thread is about to block: appending needs no particular thread.
    """
    if threading.get_ident() == loop_thread:
        raise RuntimeError(
            "producer.send_from_thread() would block the producer's own event-loop thread "
            "(called from a record future's callback?), which has to free the memory or "
            "fetch the metadata it waits for; use await producer.send() there"
        )


def wait_for_topic_from_thread(
    wait: Coroutine[Any, Any, tuple[Sequence[int], float]],
    loop: asyncio.AbstractEventLoop,
    topic: str,
    max_block_ms: float,
) -> tuple[Sequence[int], float]:
    """Run ``wait`` (the producer's wait for ``topic``'s metadata, bounded by ``max_block_ms``)
    on ``loop`` and block this thread for its answer."""
    waiting = asyncio.run_coroutine_threadsafe(wait, loop)
    try:
        # The wait bounds itself by max_block_ms; the margin is for a loop slow to answer.
        return waiting.result(max_block_ms / 1000 + LOOP_GRACE_S)
    except concurrent.futures.TimeoutError:
        if waiting.done():
            raise  # the wait's own timeout (ProducerTimeoutError is a TimeoutError)
        waiting.cancel()
        raise ProducerTimeoutError(
            f"the metadata of topic {topic!r} did not arrive within max_block_ms="
            f"{max_block_ms:g} ms (the producer's loop did not answer in time)"
        ) from None
