"""ThreadRecordFuture: a record's future for threads, waiting on its batch's latch.

Batches here end from another thread (or inline), as the sender's loop thread ends them; every
wait is bounded.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from collections.abc import Callable
from typing import cast

import pytest

import aioaccum
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition
from aioaccum._core.futures import RecordMetadata, ThreadRecordFuture
from aioaccum._core.records import MemoryRecordsBuilder
from aioaccum.errors import BrokerError

TP = TopicPartition("t", 1)
TS = 1_700_000_000_000
WAIT_S = 30.0


def new_batch(limit: int = 16384) -> ProducerBatch:
    builder = MemoryRecordsBuilder(bytearray(limit), write_limit=limit)
    return ProducerBatch(TP, builder, 0.0, loop=None)


def fill(batch: ProducerBatch, n: int) -> list[ThreadRecordFuture]:
    futures = []
    for i in range(n):
        future = batch.try_append(TS + i, b"k", b"v" * (i + 1), [], True)
        assert isinstance(future, ThreadRecordFuture)
        futures.append(future)
    return futures


def typed(futures: list[ThreadRecordFuture]) -> list[concurrent.futures.Future[RecordMetadata]]:
    """The same futures, as typeshed wants them: it types ``wait`` and ``as_completed`` for
    ``concurrent.futures.Future`` alone (at run time they take any object with its protocol)."""
    return cast(list[concurrent.futures.Future[RecordMetadata]], futures)


def later(fn: Callable[[], object]) -> threading.Thread:
    """Run ``fn`` in another thread once the caller has started waiting (it cannot tell when,
    so the waits below hold whether ``fn`` runs before or after them)."""
    thread = threading.Thread(target=fn)
    thread.start()
    return thread


def test_result_blocks_until_the_batch_ends_in_another_thread() -> None:
    batch = new_batch()
    futures = fill(batch, 3)
    assert not futures[0].done()
    assert futures[0].running()
    ender = later(lambda: batch.complete(40, -1))
    metadata = [f.result(WAIT_S) for f in futures]
    ender.join(WAIT_S)
    assert metadata == [RecordMetadata("t", 1, 40 + i, TS + i, 1, i + 1) for i in range(3)]
    assert all(f.done() and not f.running() and f.exception() is None for f in futures)


def test_result_times_out_and_the_record_stays_on_its_way() -> None:
    batch = new_batch()
    (future,) = fill(batch, 1)
    with pytest.raises(TimeoutError, match=r"not acknowledged within 0\.01 s"):
        future.result(0.01)
    with pytest.raises(TimeoutError):
        future.exception(0)
    batch.complete(7, -1)
    assert future.result(0).offset == 7


def test_a_failed_record_raises_its_own_copy_of_the_error() -> None:
    batch = new_batch()
    futures = fill(batch, 2)
    cause = OSError("link down")
    error = BrokerError("no answer")
    error.__cause__ = cause
    later(lambda: batch.fail(error)).join(WAIT_S)
    raised = []
    for future in futures:
        with pytest.raises(BrokerError, match="no answer") as info:
            future.result(WAIT_S)
        raised.append(info.value)
        assert info.value.__cause__ is cause
    assert raised[0] is not raised[1]
    assert isinstance(futures[0].exception(0), BrokerError)


def test_it_cannot_be_cancelled_the_record_is_sent_regardless() -> None:
    batch = new_batch()
    (future,) = fill(batch, 1)
    assert future.cancel() is False
    assert not future.cancelled()
    batch.complete(0, -1)
    assert future.result(0).offset == 0


def test_done_callbacks_run_once_the_batch_ends_or_at_once_if_it_has() -> None:
    batch = new_batch()
    futures = fill(batch, 2)
    seen: list[int] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result(0).offset))
    assert seen == []
    batch.complete(10, -1)  # no loop: the batch runs callbacks inline
    assert seen == [10]
    futures[1].add_done_callback(lambda f: seen.append(f.result(0).offset))
    assert seen == [10, 11]


def test_concurrent_futures_wait_and_as_completed_accept_them() -> None:
    first, second = new_batch(), new_batch()
    futures = fill(first, 2) + fill(second, 2)
    done, pending = concurrent.futures.wait(typed(futures), timeout=0)
    assert not done
    assert len(pending) == 4

    later(lambda: first.complete(0, -1)).join(WAIT_S)
    done, pending = concurrent.futures.wait(
        typed(futures), timeout=WAIT_S, return_when=concurrent.futures.FIRST_COMPLETED
    )
    assert done == set(typed(futures[:2]))
    assert pending == set(typed(futures[2:]))

    ender = later(lambda: second.fail(BrokerError("gone")))
    done, pending = concurrent.futures.wait(typed(futures), timeout=WAIT_S)
    ender.join(WAIT_S)
    assert done == set(typed(futures))
    assert not pending
    failed = {f for f in futures if f.exception(0) is not None}
    assert failed == set(futures[2:])


def test_wait_first_exception_returns_at_the_first_failure() -> None:
    good, bad = new_batch(), new_batch()
    futures = fill(good, 1) + fill(bad, 1)
    later(lambda: bad.fail(BrokerError("refused"))).join(WAIT_S)
    done, pending = concurrent.futures.wait(
        typed(futures), timeout=WAIT_S, return_when=concurrent.futures.FIRST_EXCEPTION
    )
    assert done == set(typed(futures[1:]))
    assert pending == set(typed(futures[:1]))
    good.complete(0, -1)


def test_as_completed_yields_each_record_once_as_its_batch_ends() -> None:
    batches = [new_batch() for _ in range(3)]
    futures = [f for batch in batches for f in fill(batch, 2)]
    batches[1].complete(100, -1)  # done before as_completed starts

    def end_the_rest() -> None:
        batches[2].complete(200, -1)
        batches[0].complete(0, -1)

    seen: list[int] = []
    ender = later(end_the_rest)
    for future in concurrent.futures.as_completed(typed(futures), timeout=WAIT_S):
        seen.append(future.result(0).offset)
    ender.join(WAIT_S)
    assert sorted(seen) == [0, 1, 100, 101, 200, 201]  # each once


def test_a_thread_waiting_on_a_split_record_follows_it_to_its_new_batch() -> None:
    big = new_batch()
    futures = fill(big, 4)
    parts = [new_batch(), new_batch()]
    waiting: concurrent.futures.Future[list[int]] = concurrent.futures.Future()
    started = threading.Event()

    def wait_all_of_them() -> None:
        started.set()
        waiting.set_result([f.result(WAIT_S).offset for f in futures])

    thread = threading.Thread(target=wait_all_of_them)
    thread.start()
    started.wait(WAIT_S)
    for i, (ts, key, value, headers, future, _callback) in enumerate(big.split_records()):
        assert future is futures[i]
        assert parts[i // 2].try_append_moved(ts, key, value, headers, future)
    big.detach_records()
    big.abort(RuntimeError("split into smaller batches"))
    parts[0].complete(100, -1)
    parts[1].complete(200, -1)
    assert waiting.result(WAIT_S) == [100, 101, 200, 201]
    thread.join(WAIT_S)


def test_many_threads_wait_on_one_batch_and_all_wake() -> None:
    batch = new_batch()
    futures = fill(batch, 8)
    results: list[int] = []
    lock = threading.Lock()

    def read(future: ThreadRecordFuture) -> None:
        offset = future.result(WAIT_S).offset
        with lock:
            results.append(offset)

    readers = [threading.Thread(target=read, args=(f,)) for f in futures]
    for reader in readers:
        reader.start()
    batch.complete(0, -1)
    for reader in readers:
        reader.join(WAIT_S)
    assert sorted(results) == list(range(8))


def test_thread_futures_are_small_exported_and_not_asyncio_futures() -> None:
    import asyncio

    (future,) = fill(new_batch(), 1)
    assert sys.getsizeof(future) <= 120
    assert aioaccum.ThreadRecordFuture is ThreadRecordFuture
    assert not asyncio.isfuture(future)
    assert "ThreadRecordFuture t-1+0 pending" in repr(future)
