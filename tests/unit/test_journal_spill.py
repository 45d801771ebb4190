"""Records beyond buffer_memory wait in the journal alone (spill), and go in order once the pool
has room (catch-up), against a fake broker that holds every request during an "outage"."""

from __future__ import annotations

import asyncio
import os
import pathlib
from typing import Any

import pytest

from aioaccum import Producer, wait_all
from aioaccum._core.cluster import StaticCluster
from aioaccum._journal.journal import Journal
from aioaccum._runtime.journaling import JournaledAccumulator
from aioaccum._runtime.spill import Spill
from aioaccum.errors import JournalError, JournalFullError, ProducerClosedError

from .fake_kafka import FakeKafka
from .test_interceptors import Recorder
from .test_journal_producer import SEGMENT, TP0, TP1, make, never_answer, owed

MEMORY = 64 << 10
VALUE = b"x" * 1000
# Records spill as soon as the pool has no room (journal_spill_after_ms=0): the spill's own
# tests; the wait before a spill has tests of its own below.
SMALL = {"buffer_memory": MEMORY, "batch_size": 16 << 10, "journal_spill_after_ms": 0}


def spill_of(producer: Producer) -> Spill:
    acc = producer._acc
    assert isinstance(acc, JournaledAccumulator)
    assert isinstance(acc.spill, Spill)
    return acc.spill


def in_use(producer: Producer) -> int:
    pool = producer._pool
    assert pool is not None
    return pool.total_memory - pool.available_memory()


def numbered(i: int) -> bytes:
    return b"%05d" % i + VALUE


async def offer(producer: Producer, count: int, **send: Any) -> tuple[list[Any], int]:
    """Send ``count`` records (partition i % 2); the futures and the peak of the pool's use."""
    futures = []
    peak = 0
    for i in range(count):
        futures.append(await producer.send("t", numbered(i), partition=i % 2, **send))
        peak = max(peak, in_use(producer))
    return futures, peak


def assert_in_order(fake: FakeKafka, count: int) -> None:
    for tp in (TP0, TP1):
        values = [r.value[:5] for r in fake.log[tp] if r.value is not None]
        assert values == [b"%05d" % i for i in range(tp.partition, count, 2)], tp


async def test_records_beyond_memory_spill_and_go_in_order_when_the_pool_has_room(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    async with producer:
        release = await never_answer(fake)
        spill = spill_of(producer)
        futures, peak = await offer(producer, 600)  # 600 KB through a 64 KiB pool
        assert peak <= MEMORY
        assert spill.spilled > 500
        assert spill.pending == spill.spilled
        assert producer.pending_records() == 600
        assert not any(f.done() for f in futures)  # pending: not failed by the outage
        release.set()
        half = len(futures) // 2
        first = await wait_all(futures[:half])  # waits across the move into batches
        rest = await asyncio.gather(*futures[half:])
        assert spill.pending == 0
    metadata = [*first, *rest]
    assert [(m.partition, m.offset) for m in metadata] == [(i % 2, i // 2) for i in range(600)]
    assert all(m.serialized_value_size == len(VALUE) + 5 for m in metadata)
    assert_in_order(fake, 600)
    assert owed(tmp_path) == []


async def test_a_record_sent_while_others_are_spilled_queues_behind_them(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    async with producer:
        release = await never_answer(fake)
        futures, _ = await offer(producer, 300)
        spill = spill_of(producer)
        assert spill.pending > 0
        release.set()
        # The pool has room again soon, but these still go behind the spilled ones: keyed,
        # keyless, in bulk and from a thread.
        for i in range(300, 400):
            futures.append(await producer.send("t", numbered(i), partition=i % 2))
            for _ in range(i % 4):  # the catch-up runs in between, at varying points
                await asyncio.sleep(0)
        many = await producer.send_many("t", [numbered(i) for i in range(400, 440, 2)],
                                        partition=0)
        thread = await asyncio.to_thread(producer.send_from_thread, "t", numbered(441), None, 1)
        await producer.flush()  # waits for the spilled records too
        assert all(f.done() for f in futures)
        assert many.done()
        assert thread.done()
        assert spill.pending == 0
        assert [m.offset for m in await many] == list(range(200, 220))
        assert (await asyncio.to_thread(thread.result, 5)).offset == 200
    values = [r.value[:5] for r in fake.log[TP0] if r.value is not None]
    assert values == [b"%05d" % i for i in range(0, 440, 2)]
    values = [r.value[:5] for r in fake.log[TP1] if r.value is not None]
    assert values == [b"%05d" % i for i in range(1, 400, 2)] + [b"00441"]
    assert owed(tmp_path) == []


async def test_threads_spill_too_and_their_futures_wait_for_the_broker(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    async with producer:
        release = await never_answer(fake)

        def send_all() -> list[Any]:
            return [producer.send_from_thread("t", numbered(i), None, i % 2)
                    for i in range(300)]

        futures = await asyncio.to_thread(send_all)
        spill = spill_of(producer)
        assert spill.pending > 0
        with pytest.raises(TimeoutError):  # still on its way, not failed
            await asyncio.to_thread(futures[-1].result, 0.01)
        release.set()
        metadata = [await asyncio.to_thread(f.result, 10) for f in futures]
    assert [(m.partition, m.offset) for m in metadata] == [(i % 2, i // 2) for i in range(300)]
    assert_in_order(fake, 300)


async def test_close_leaves_spilled_records_owed_for_the_next_producer(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    await producer.start()
    await never_answer(fake)
    futures, _ = await offer(producer, 400)
    spilled = spill_of(producer).pending
    assert spilled > 300
    await producer.close(timeout=0)
    errors = [f.exception() for f in futures]
    assert all(isinstance(e, ProducerClosedError) for e in errors)
    assert sum("stays in journal_dir" in str(e) for e in errors) == spilled
    assert len(owed(tmp_path)) == 400  # the spilled ones and those in batches alike

    fresh = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    restarted, _ = make(tmp_path, fresh, **SMALL)
    async with restarted:
        assert restarted.journal_recovered == 400
    assert_in_order(fresh, 400)
    assert owed(tmp_path) == []


async def test_close_delivers_the_spilled_records_once_the_cluster_answers(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    await producer.start()
    release = await never_answer(fake)
    futures, _ = await offer(producer, 400)
    assert spill_of(producer).pending > 300
    closing = asyncio.ensure_future(producer.close())
    await asyncio.sleep(0.01)
    with pytest.raises(ProducerClosedError):  # closing refuses new records at once
        await producer.send("t", b"late", partition=0)
    release.set()
    await asyncio.wait_for(closing, 10)
    assert all(f.exception() is None for f in futures)
    assert_in_order(fake, 400)
    assert owed(tmp_path) == []


async def test_a_full_journal_still_refuses_after_max_block_ms_while_records_spill(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, journal_max_bytes=2 * SEGMENT, max_block_ms=50, **SMALL)
    async with producer:
        release = await never_answer(fake)
        futures = []
        with pytest.raises(  # noqa: PT012
                JournalFullError, match=r"journal_max_bytes=2400000.*max_block_ms=50"):
            for i in range(10_000):
                futures.append(await producer.send("t", numbered(i), partition=i % 2))
        assert 2000 < len(futures) < 2400  # two segments of 1.2 MB hold that many
        assert spill_of(producer).pending > 2000  # on disk alone, memory stayed bounded
        assert in_use(producer) <= MEMORY
        release.set()
        await asyncio.gather(*futures)
    assert_in_order(fake, len(futures))
    assert owed(tmp_path) == []


async def test_interceptors_hear_of_each_spilled_record_once_with_its_metadata(
    tmp_path: pathlib.Path,
) -> None:
    recorder = Recorder()
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, interceptors=[recorder], **SMALL)
    async with producer:
        release = await never_answer(fake)
        futures, _ = await offer(producer, 300)
        assert spill_of(producer).pending > 200
        assert recorder.acks == []
        release.set()
        await asyncio.gather(*futures)
    assert all(error is None for _, error in recorder.acks)
    acked = sorted((m.partition, m.offset) for m, _ in recorder.acks)
    assert acked == sorted((i % 2, i // 2) for i in range(300))


async def test_a_spilled_record_that_does_not_read_back_fails_alone_and_is_never_sent(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    async with producer:
        release = await never_answer(fake)
        futures, _ = await offer(producer, 600)
        spill = spill_of(producer)
        block = spill._blocks[0]
        # Far enough from the first spilled record to lie beyond what was read ahead so far.
        bad = futures.index(block.futures[400])
        fd = os.open(block.segment.path, os.O_RDWR)
        try:
            os.pwrite(fd, b"#", block.offsets[400] + 40)  # a byte of the value changes
        finally:
            os.close(fd)
        release.set()
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        assert spill.pending == 0
        acc = producer._acc
        assert isinstance(acc, JournaledAccumulator)
        assert [s.records for s in acc.journal._segments] == [0]  # its segment owes nothing
    assert isinstance(outcomes[bad], JournalError)
    assert "does not read back" in str(outcomes[bad])
    assert all(not isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != bad)
    for tp in (TP0, TP1):
        values = [r.value[:5] for r in fake.log[tp] if r.value is not None]
        assert values == [b"%05d" % i for i in range(tp.partition, 600, 2) if i != bad]
    # Its outcome was journaled with the next record of its partition: nothing stays owed, and
    # the next opening reports the changed bytes as corruption.
    journal = Journal.open(tmp_path, segment_bytes=SEGMENT, max_bytes=1 << 30)
    try:
        assert journal.recovery.records == []
        assert len(journal.recovery.corrupt_entries) == 1
    finally:
        journal.close()


async def test_a_catch_up_that_breaks_fails_the_spilled_futures_rather_than_leave_them_pending(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **SMALL)
    await producer.start()
    release = await never_answer(fake)
    futures, _ = await offer(producer, 300)
    spill = spill_of(producer)
    spilled = spill.pending
    acc = producer._acc
    assert isinstance(acc, JournaledAccumulator)
    pool = producer._pool
    assert pool is not None
    for _ in range(1000):  # until the catch-up waits in the pool, for the first spilled record
        if pool.queued():
            break
        await asyncio.sleep(0)
    assert pool.queued() == 1

    def broken(*_args: Any) -> Any:
        raise RuntimeError("adopt broke")

    acc.adopt = broken  # type: ignore[method-assign,assignment]
    release.set()
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failed) == spilled  # the others went through
    assert all(isinstance(e, JournalError) and "adopt broke" in str(e) for e in failed)
    assert in_use(producer) == 0  # the buffer granted for the record that broke went back
    await producer.close()
    assert len(owed(tmp_path)) == spilled  # still owed: the next producer sends them


async def test_while_the_cluster_answers_a_send_waits_for_memory_and_nothing_spills(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **{**SMALL, "journal_spill_after_ms": 60_000})
    async with producer:
        release = await never_answer(fake)
        spill = spill_of(producer)
        futures: list[Any] = []
        waiting = None
        for i in range(600):  # until a send finds the pool without room
            send = asyncio.ensure_future(producer.send("t", numbered(i), partition=i % 2))
            for _ in range(20):
                await asyncio.sleep(0)
            if not send.done():
                waiting = send
                break
            futures.append(send.result())
        assert waiting is not None, "the 64 KiB pool never ran out"
        assert spill.spilled == 0  # it waits in memory's queue, not on disk
        release.set()  # the cluster answers: memory comes back
        futures.append(await waiting)
        futures.append(await producer.send("t", numbered(len(futures)), partition=len(futures) % 2))
        await asyncio.gather(*futures)
        assert spill.spilled == 0
    assert_in_order(fake, len(futures))
    assert owed(tmp_path) == []


async def test_a_send_that_waits_past_spill_after_spills_and_later_records_queue_behind(
    tmp_path: pathlib.Path,
) -> None:
    fake = FakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, **{**SMALL, "journal_spill_after_ms": 50})
    async with producer:
        release = await never_answer(fake)
        spill = spill_of(producer)
        loop = asyncio.get_running_loop()
        futures: list[Any] = []
        took = 0.0
        while spill.spilled == 0:
            start = loop.time()
            futures.append(await producer.send("t", numbered(len(futures)),
                                               partition=len(futures) % 2))
            took = loop.time() - start
        assert took >= 0.05  # the first record past memory waited journal_spill_after_ms
        for i in range(len(futures), len(futures) + 50):  # the next ones spill at once
            before = spill.spilled
            futures.append(await producer.send("t", numbered(i), partition=i % 2))
            assert spill.spilled == before + 1
        assert not any(f.done() for f in futures[-51:])
        release.set()
        await asyncio.gather(*futures)
        assert spill.pending == 0
    assert_in_order(fake, len(futures))
    assert owed(tmp_path) == []
