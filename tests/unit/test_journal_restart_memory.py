"""A restart on a folder owing many times ``buffer_memory``: recovery keeps places, not payloads;
``start()`` waits for neither memory nor the cluster; the owed records go through the spill's
catch-up within the pool, once each, in order per partition, and the new records after them."""

from __future__ import annotations

import asyncio
import pathlib
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from aioaccum._core.cluster import StaticCluster
from aioaccum._journal.journal import Journal
from aioaccum.errors import ProducerClosedError

from .test_journal_producer import SEGMENT, TP0, TP1, make, owed
from .test_journal_recovery import LosingFake, until
from .test_journal_spill import in_use, spill_of

MEMORY = 256 << 10
VALUE = b"v" * 1000
OWED = 12_000  # 12 MB of values: 46 times buffer_memory


@dataclass
class HoldingFake(LosingFake):
    """Holds each request, while ``held`` is set, before it checks the request's sequences (a
    gate after the check would refuse the second request in flight as out of order)."""

    held: asyncio.Event | None = None

    async def produce(self, node: int, **kwargs: Any) -> Any:
        if self.held is not None:
            await self.held.wait()
        return await super().produce(node, **kwargs)


def numbered(i: int) -> bytes:
    return b"%06d" % i + VALUE


async def crash_owing(folder: pathlib.Path) -> tuple[HoldingFake, int]:
    """A producer with room for all of them accepts ``OWED`` records; the broker writes the
    batches sent first (so they are sealed) without answering; the rest were never sent. Then
    it dies. Returns the broker and the dead producer's id."""
    fake = HoldingFake(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(folder, fake, buffer_memory=32 << 20, batch_size=16 << 10)
    await producer.start()
    await (await producer.send("t", b"first", partition=0))  # acknowledged: the id is known
    old_id = fake.log[TP0][0].producer_id
    fake.answering = False
    for i in range(OWED):
        await producer.send("t", numbered(i), partition=i % 2)
    await until(lambda: len(fake.requests) == 6)  # the acknowledged one, and 5 in flight
    await producer.close(timeout=0)  # as a crash: no outcome for any of them
    fake.answering = True
    fake.script.clear()  # the answers made for requests the crash left unanswered
    return fake, old_id


def written(fake: LosingFake, tp: Any) -> list[bytes]:
    return [r.value for r in fake.log[tp] if r.value is not None and r.value != b"first"]


async def test_recovery_keeps_places_not_payloads(tmp_path: pathlib.Path) -> None:
    await crash_owing(tmp_path)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        journal = Journal.open(tmp_path, segment_bytes=SEGMENT, max_bytes=1 << 30)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    try:
        owed_records = len(journal.recovery.owed)
        assert owed_records == OWED
        assert journal.recovery.sealed  # some were sealed before the crash
        # 28 bytes a record in arrays, plus the segments and the seals: far from the 12 MB of
        # values (1006 bytes a record).
        assert held < 64 * owed_records, held
        assert journal.recovery.owed.read(OWED - 1).value == numbered(OWED - 1)
    finally:
        journal.close()


# 20 KiB: a partition's sealed batches (here one of 16.5 KB and a few of 1.1 KB) do not fit in
# the pool together, so they get their memory one at a time as the sender frees it.
@pytest.mark.parametrize("memory", [MEMORY, 20 << 10])
async def test_a_folder_owing_many_times_buffer_memory_restarts_within_it(
    tmp_path: pathlib.Path, memory: int,
) -> None:
    fake, old_id = await crash_owing(tmp_path)
    sealed_before = [len(written(fake, tp)) for tp in (TP0, TP1)]
    assert all(sealed_before)  # in the topic already: their copies must be recognised
    release = fake.held = asyncio.Event()  # a cluster that takes requests and answers none
    producer, _ = make(tmp_path, fake, buffer_memory=memory, batch_size=16 << 10)
    peak = 0
    async with producer:  # start() returns though the owed records need 46 pools' worth
        spill = spill_of(producer)
        assert producer.journal_recovered == OWED
        assert spill.pending > OWED - 100  # on disk alone, not in memory
        new = [await producer.send("t", b"new%d" % i, partition=i % 2) for i in range(10)]
        assert spill.pending > OWED - 100  # the new ones queue behind the owed ones
        for _ in range(50):  # the catch-up fills the pool, and waits for room
            await asyncio.sleep(0)
            peak = max(peak, in_use(producer))
        assert spill.pending > OWED - 1000
        assert not any(f.done() for f in new)
        release.set()
        while spill.pending:
            await asyncio.sleep(0)
            peak = max(peak, in_use(producer))
        metadata = await asyncio.gather(*new)
    assert 0 < peak <= memory
    report = producer._acc.recovery_report  # type: ignore[union-attr]
    assert report.rebuilt > 0  # sealed batches went under the old id
    assert producer.journal_at_least_once == 0
    for tp in (TP0, TP1):
        values = written(fake, tp)
        expected = [numbered(i) for i in range(tp.partition, OWED, 2)]
        news = [b"new%d" % i for i in range(tp.partition, 10, 2)]
        assert values == expected + news, tp  # once each, in order, the new ones after
    assert {r.producer_id for r in fake.log[TP0][1:sealed_before[0] + 1]} == {old_id}
    assert [m.partition for m in metadata] == [i % 2 for i in range(10)]
    assert owed(tmp_path) == []


async def test_a_restart_closed_while_recovering_leaves_the_rest_owed_for_the_next(
    tmp_path: pathlib.Path,
) -> None:
    fake, _ = await crash_owing(tmp_path)
    fake.held = asyncio.Event()  # never set: the cluster answers nothing
    producer, _ = make(tmp_path, fake, buffer_memory=MEMORY, batch_size=16 << 10)
    await producer.start()
    new = await producer.send("t", b"new", partition=1)
    for _ in range(50):
        await asyncio.sleep(0)
    assert spill_of(producer).pending > OWED - 1000
    await producer.close(timeout=0)  # gives up while the catch-up waits for memory
    assert new.done()
    assert isinstance(new.exception(), ProducerClosedError)  # it stays in the journal
    fake.held = None
    again, _ = make(tmp_path, fake, buffer_memory=MEMORY, batch_size=16 << 10)
    async with again:
        assert again.journal_recovered == OWED + 1  # every one, and the new one
        await again.flush()
    for tp in (TP0, TP1):
        expected = [numbered(i) for i in range(tp.partition, OWED, 2)]
        assert written(fake, tp) == expected + ([b"new"] if tp.partition else []), tp
    assert owed(tmp_path) == []


async def test_a_caller_sending_flat_out_after_a_restart_lets_the_owed_records_go(
    tmp_path: pathlib.Path,
) -> None:
    fake, _ = await crash_owing(tmp_path)
    producer, _ = make(tmp_path, fake, buffer_memory=MEMORY, batch_size=16 << 10)
    async with producer:
        spill = spill_of(producer)
        # send() suspends only when it yields to the loop: records that spill make no batch of
        # their own, yet every so many of them it must, or nothing would reach the broker
        # until the caller stopped.
        for i in range(OWED):
            await producer.send("t", b"new%d" % i, partition=i % 2)
        assert spill.loaded > OWED // 4
        assert len(written(fake, TP0)) > OWED // 8
        await producer.flush()
    for tp in (TP0, TP1):
        expected = [numbered(i) for i in range(tp.partition, OWED, 2)]
        news = [b"new%d" % i for i in range(tp.partition, OWED, 2)]
        assert written(fake, tp) == expected + news, tp
    assert owed(tmp_path) == []
