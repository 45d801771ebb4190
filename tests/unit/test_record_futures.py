"""Record futures: asyncio futures wherever users put one, at the cost of one result per batch."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import aioaccum
from aioaccum import wait_all
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition
from aioaccum._core.futures import FutureRecordMetadata, ProduceRequestResult, RecordMetadata
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.records import MemoryRecordsBuilder
from aioaccum._speedups import describe
from aioaccum.errors import BrokerError, DeliveryTimeoutError

TP = TopicPartition("t", 3)
TS = 1_700_000_000_000


def new_batch(loop: Any, limit: int = 16384) -> ProducerBatch:
    builder = MemoryRecordsBuilder(bytearray(limit), write_limit=limit)
    return ProducerBatch(TP, builder, 0.0, loop=loop)


def fill(batch: ProducerBatch, n: int, key: bytes | None = b"k") -> list[FutureRecordMetadata]:
    futures = []
    for i in range(n):
        future = batch.try_append(TS + i, key, b"v" * (i + 1), [])
        assert isinstance(future, FutureRecordMetadata)
        futures.append(future)
    return futures


class CountingLoop:
    """Delegates to the running loop and counts what a batch result schedules."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.scheduled = 0

    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> Any:
        self.scheduled += 1
        return self.loop.call_soon(callback, *args, context=context)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.loop.call_exception_handler(context)


async def test_metadata_is_built_from_the_batch_result_when_read() -> None:
    batch = new_batch(asyncio.get_running_loop())
    futures = fill(batch, 3)
    assert not any(f.done() for f in futures)
    batch.complete(500, -1)
    assert [await f for f in futures] == [
        RecordMetadata("t", 3, 500 + i, TS + i, 1, i + 1) for i in range(3)
    ]
    batch2 = new_batch(asyncio.get_running_loop())
    (keyless,) = fill(batch2, 1, key=None)
    batch2.complete(-1, 42)  # acks=0 gives no offset; a log-append-time topic gives its time
    assert keyless.result() == RecordMetadata("t", 3, -1, 42, -1, 1)


async def test_is_an_asyncio_future_for_every_helper() -> None:
    loop = asyncio.get_running_loop()
    batch = new_batch(loop)
    futures = fill(batch, 6)
    assert all(asyncio.isfuture(f) for f in futures)
    assert futures[0].get_loop() is loop
    loop.call_later(0.01, batch.complete, 10, -1)
    gathered = await asyncio.gather(*futures[:2])
    assert [m.offset for m in gathered] == [10, 11]
    # typeshed types asyncio.wait for asyncio.Future subclasses; at run time any future does.
    done, pending = await asyncio.wait([futures[2]])  # type: ignore[type-var]
    assert done == {futures[2]}
    assert not pending
    assert (await asyncio.wait_for(futures[3], 1)).offset == 13
    assert (await asyncio.shield(futures[4])).offset == 14
    seen = [(await f).offset for f in asyncio.as_completed([futures[5]])]
    assert seen == [15]


async def test_done_callbacks_run_in_their_context_with_one_loop_callback_per_batch() -> None:
    counting = CountingLoop(asyncio.get_running_loop())
    batch = new_batch(counting)
    futures = fill(batch, 50)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")
    seen: list[tuple[int, str]] = []

    def record(f: FutureRecordMetadata) -> None:
        seen.append((f.result().offset, var.get()))

    for i, future in enumerate(futures):
        ctx = contextvars.copy_context()
        ctx.run(var.set, f"ctx{i}")
        future.add_done_callback(record, context=ctx)
    removed = futures[0].remove_done_callback(record)
    assert removed == 1
    batch.complete(0, -1)
    assert counting.scheduled == 1
    await asyncio.sleep(0)
    assert seen == [(i, f"ctx{i}") for i in range(1, 50)]


async def test_a_failing_callback_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        batch = new_batch(loop)
        first, second = fill(batch, 2)
        ran: list[int] = []

        def boom(_: FutureRecordMetadata) -> None:
            raise ValueError("callback bug")

        first.add_done_callback(boom)
        second.add_done_callback(lambda f: ran.append(f.result().offset))
        batch.complete(7, -1)
        await asyncio.sleep(0)
        assert ran == [8]
        assert isinstance(reported[0]["exception"], ValueError)
    finally:
        loop.set_exception_handler(None)


async def test_cancelling_a_task_cancels_only_its_record() -> None:
    loop = asyncio.get_running_loop()
    batch = new_batch(loop)
    mine, other = fill(batch, 2)
    waiter = asyncio.ensure_future(mine)
    task = asyncio.create_task(asyncio.wait_for(other, 10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert other.cancelled()
    assert not mine.done()
    assert not batch.is_done  # the record is still sent: cancelling reports nothing more
    batch.complete(1, -1)
    assert (await waiter).offset == 1
    assert other.cancelled()
    with pytest.raises(asyncio.CancelledError):
        other.result()


async def test_cancel_message_reaches_gather() -> None:
    batch = new_batch(asyncio.get_running_loop())
    (future,) = fill(batch, 1)
    assert future.cancel("stop reporting")
    assert not future.cancel()
    with pytest.raises(asyncio.CancelledError, match="stop reporting"):
        await asyncio.gather(future)


async def test_a_cancel_message_follows_its_record_through_a_split() -> None:
    loop = asyncio.get_running_loop()
    batch = new_batch(loop)
    first, second = fill(batch, 2)
    assert second.cancel("caller gave up")
    assert first.cancel()  # no message: nothing is kept for it
    assert batch.result.cancel_message(1) == "caller gave up"
    assert batch.result.cancel_message(0) is None
    # A split moves the records to a new batch, at other offsets: the message moves with it.
    target = new_batch(loop)
    fill(target, 3)
    second.retarget(target.result, 3)
    assert batch.result.cancel_message(1) is None
    with pytest.raises(asyncio.CancelledError, match="caller gave up"):
        await asyncio.gather(second)
    with pytest.raises(asyncio.CancelledError) as info:
        await asyncio.gather(first)
    assert info.value.args == ()


async def test_each_reader_gets_its_own_error_chained_to_the_cause() -> None:
    batch = new_batch(asyncio.get_running_loop())
    futures = fill(batch, 3)
    cause = OSError("connection reset")
    error = BrokerError("NOT_ENOUGH_REPLICAS", errno=Errors.NOT_ENOUGH_REPLICAS, retriable=True)
    error.__cause__ = cause
    batch.fail(error)
    errors = []
    for future in futures:
        with pytest.raises(BrokerError) as info:
            await future
        errors.append(info.value)
        assert info.value.__cause__ is cause
        assert info.value.errno == Errors.NOT_ENOUGH_REPLICAS
    assert len({id(e) for e in errors}) == 3
    assert error.__traceback__ is None  # raised copies never touch the batch's own error


async def test_kept_futures_do_not_keep_waiters_alive_after_the_batch_ends() -> None:
    loop = asyncio.get_running_loop()
    batch = new_batch(loop)
    (future,) = fill(batch, 1)

    class Holder:
        pass

    holder = Holder()
    ref = weakref.ref(holder)
    future.add_done_callback(lambda _f, h=holder: None)  # type: ignore[misc]
    del holder
    assert ref() is not None
    batch.fail(DeliveryTimeoutError("expired"))
    await asyncio.sleep(0)
    gc.collect()
    assert ref() is None, "a failed batch must release the callbacks it held"
    assert batch.result.waiters == 0


async def test_a_closed_loop_releases_callbacks() -> None:
    other = asyncio.new_event_loop()
    other.close()
    result = ProduceRequestResult(TP, other)
    batch = new_batch(other)
    batch.result = result
    (future,) = fill(batch, 1)
    future.add_done_callback(lambda _f: None)
    batch.complete(0, -1)
    assert result.waiters == 0


def test_record_futures_are_small() -> None:
    batch = new_batch(None)
    futures = fill(batch, 1)
    # Compiled, 48 bytes: a million kept futures are 46 MiB; pure Python, a slotted object.
    compiled = describe().startswith("compiled")
    assert sys.getsizeof(futures[0]) <= (48 if compiled else 120)


def test_stepping_an_await_by_hand_yields_the_future_once_then_returns_its_metadata() -> None:
    batch = new_batch(None)
    (future,) = fill(batch, 1)
    steps = future.__await__()
    assert next(steps) is future  # pending: handed to the awaiting task
    assert future._asyncio_future_blocking
    with pytest.raises(RuntimeError, match="await wasn't used with future"):
        next(steps)  # resumed while still pending, the flag not taken by a task
    batch.complete(41, -1)
    with pytest.raises(StopIteration) as stop:
        next(future.__await__())
    assert stop.value.value == RecordMetadata("t", 3, 41, TS, 1, 1)


async def test_await_returns_metadata_or_raises_a_copy_of_the_error() -> None:
    loop = asyncio.get_running_loop()
    ok, failed = new_batch(loop), new_batch(loop)
    (first,) = fill(ok, 1)
    (second,) = fill(failed, 1)
    waiting = asyncio.ensure_future(_awaited(first))
    await asyncio.sleep(0)
    assert not waiting.done()
    ok.complete(7, 99)
    assert await waiting == RecordMetadata("t", 3, 7, 99, 1, 1)
    failed.fail(BrokerError("down", errno=Errors.CORRUPT_MESSAGE, retriable=False))
    with pytest.raises(BrokerError, match="down"):
        await second


async def _awaited(future: FutureRecordMetadata) -> RecordMetadata:
    return await future


async def test_split_moves_futures_and_callbacks() -> None:
    loop = asyncio.get_running_loop()
    big = new_batch(loop)
    futures = fill(big, 4)
    seen: list[int] = []
    futures[3].add_done_callback(lambda f: seen.append(f.result().offset))
    parts = [new_batch(loop), new_batch(loop)]
    for i, (ts, key, value, headers, future, callback) in enumerate(big.split_records()):
        assert future is futures[i]
        assert callback is None
        assert parts[i // 2].try_append_moved(ts, key, value, headers, future)
    big.detach_records()
    big.abort(RuntimeError("split"))
    parts[0].complete(100, -1)
    parts[1].complete(200, -1)
    assert [(await f).offset for f in futures] == [100, 101, 200, 201]
    await asyncio.sleep(0)
    assert seen == [201]


# -- wait_all ------------------------------------------------------------------------------------


async def test_wait_all_returns_metadata_in_order_with_one_listener_per_batch() -> None:
    loop = asyncio.get_running_loop()
    batches = [new_batch(loop) for _ in range(3)]
    futures = [f for batch in batches for f in fill(batch, 100)]
    futures.reverse()
    task = asyncio.create_task(wait_all(futures))
    await asyncio.sleep(0)
    assert [b.result.waiters for b in batches] == [1, 1, 1]
    for i, batch in enumerate(batches):
        batch.complete(1000 * i, -1)
    out = await task
    assert [m.offset for m in out] == [
        1000 * i + j for i in reversed(range(3)) for j in reversed(range(100))
    ]
    assert [b.result.waiters for b in batches] == [0, 0, 0]
    assert out == list(out)
    assert out[-1] == futures[-1].result()
    assert repr(out) == "<Outcomes of 300 records>"


async def test_wait_all_raises_the_first_error_at_once() -> None:
    loop = asyncio.get_running_loop()
    ok, bad = new_batch(loop), new_batch(loop)
    futures = fill(ok, 2) + fill(bad, 2)
    task = asyncio.create_task(wait_all(futures))
    await asyncio.sleep(0)
    bad.fail(DeliveryTimeoutError("expiring 2 record(s)"))
    with pytest.raises(DeliveryTimeoutError, match="expiring 2"):
        await task
    assert ok.result.waiters == 0  # the listener left with the error


async def test_wait_all_with_return_exceptions_and_other_awaitables() -> None:
    loop = asyncio.get_running_loop()
    ok, bad = new_batch(loop), new_batch(loop)
    (good,) = fill(ok, 1)
    (failed,) = fill(bad, 1)
    plain: asyncio.Future[int] = loop.create_future()
    loop.call_soon(ok.complete, 5, -1)
    loop.call_soon(bad.fail, BrokerError("boom", errno=Errors.CORRUPT_MESSAGE, retriable=False))
    loop.call_soon(plain.set_result, 9)
    mixed: list[Awaitable[object]] = [good, failed, plain]
    out = await wait_all(mixed, return_exceptions=True)
    assert out[0] == good.result()
    assert isinstance(out[1], BrokerError)
    assert out[2] == 9


async def test_wait_all_follows_records_a_split_moved() -> None:
    loop = asyncio.get_running_loop()
    big = new_batch(loop)
    futures = fill(big, 2)
    task = asyncio.create_task(wait_all(futures))
    await asyncio.sleep(0)
    part = new_batch(loop)
    for ts, key, value, headers, future, _ in big.split_records():
        assert future is not None
        part.try_append_moved(ts, key, value, headers, future)
    big.detach_records()
    big.abort(RuntimeError("split"))
    await asyncio.sleep(0)
    assert not task.done()
    part.complete(50, -1)
    assert [m.offset for m in await task] == [50, 51]


async def test_cancelling_wait_all_leaves_the_records_alone() -> None:
    loop = asyncio.get_running_loop()
    batch = new_batch(loop)
    futures = fill(batch, 3)
    task = asyncio.create_task(wait_all(futures))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert batch.result.waiters == 0
    assert not any(f.cancelled() for f in futures)


def test_wait_all_is_exported() -> None:
    assert aioaccum.wait_all is wait_all
    assert aioaccum.FutureRecordMetadata is FutureRecordMetadata


async def test_a_settled_result_leaves_the_collector_and_a_late_listener_brings_it_back() -> None:
    # Futures kept by the million hold one result per batch: compiled, a result that ended well
    # and told everyone is not tracked, so the collector's full passes do not walk them all.
    compiled = describe().startswith("compiled")
    loop = asyncio.get_running_loop()
    quiet = ProduceRequestResult(TP, loop)
    # Open, it holds nothing that could point back at it yet: compiled, it starts untracked.
    assert gc.is_tracked(quiet) is not compiled
    quiet.set(5, -1, None)
    assert gc.is_tracked(quiet) is not compiled
    assert quiet.waiters == 0

    awaited = new_batch(loop)
    futures = fill(awaited, 2)
    assert gc.is_tracked(awaited.result) is not compiled
    seen: list[int] = []
    futures[1].add_done_callback(lambda f: seen.append(f.result().offset))
    assert gc.is_tracked(awaited.result)  # its first waiter list: tracked from here
    awaited.result.set(10, -1, None)
    assert gc.is_tracked(awaited.result)  # a callback still to run holds a closure
    await asyncio.sleep(0)
    assert seen == [11]
    assert gc.is_tracked(awaited.result) is not compiled
    assert (await futures[0]).offset == 10

    told: list[ProduceRequestResult] = []
    quiet.add_listener(told.append)
    assert gc.is_tracked(quiet)  # the listener may point back at it
    quiet.remove_listener(told.append)

    failed = ProduceRequestResult(TP, loop)
    failed.set(-1, -1, BrokerError("NOT_LEADER", errno=6, retriable=True))
    assert gc.is_tracked(failed)  # an error's traceback may reach back to it

    # An open batch, its builder and their lists: compiled, none is walked by the collector.
    batch = new_batch(loop)
    fill(batch, 3)
    for held in (batch, batch.builder, batch._futures):
        assert gc.is_tracked(held) is not compiled
    batch.close()
    assert gc.is_tracked(batch.request_entry()) is not compiled
    batch.complete(0, -1)
