"""A restart re-sends what the broker may have under the identity it was sent with, against a fake
broker that keeps each producer id's sequences: copies it has are answered as duplicates (no
record twice), and when it no longer knows the old id the records go again under the new one (at
least once), counted and reported."""

from __future__ import annotations

import asyncio
import logging
import pathlib
from dataclasses import dataclass
from typing import Any

import pytest

from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._journal.journal import Journal
from aioaccum._runtime.journaling import JournaledAccumulator

from .fake_kafka import SequencedFakeKafka
from .test_journal_producer import SEGMENT, make, owed

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


@dataclass
class LosingFake(SequencedFakeKafka):
    """Answers only while ``answering``: otherwise it writes a batch and keeps the answer, as a
    producer that crashed after the broker wrote its batch sees it."""

    answering: bool = True

    async def produce(self, node: int, **kwargs: Any) -> Any:
        out = await super().produce(node, **kwargs)
        if not self.answering:
            await forever()  # until the request is cancelled
        return out


def cluster() -> StaticCluster:
    return StaticCluster.uniform({"t": 2}, nodes=1)


async def forever() -> None:
    await asyncio.Event().wait()


def hold(_request: Any) -> asyncio.Future[None]:
    return asyncio.ensure_future(forever())  # never written, never answered


async def until(condition: Any) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the fake broker never got there")


def sent_records(fake: SequencedFakeKafka, tp: TopicPartition) -> int:
    return sum(n for r in fake.requests for p, n in zip(r.partitions, r.record_counts, strict=True)
               if p == tp)


def values(fake: SequencedFakeKafka, tp: TopicPartition) -> list[tuple[bytes | None, int]]:
    return [(r.value, r.producer_id) for r in fake.log[tp]]


async def crash_leaving_owed(folder: pathlib.Path) -> tuple[LosingFake, int]:
    """A producer that dies with, owed in its journal: on t-0, a batch the broker wrote (a1, a2)
    and one it never got (a3, a4), both sealed under sequences past 0; on t-1, a sealed batch
    the broker never got (b0) and records never sealed (b1, b2). Returns the broker and the dead
    producer's id."""
    fake = LosingFake(cluster())
    producer, _ = make(folder, fake, linger_ms=20)  # a1, a2 in one batch, a3, a4 in one
    await producer.start()
    await (await producer.send("t", b"a0", partition=0))  # acknowledged: sequence 0
    old_id = fake.log[TP0][0].producer_id
    fake.answering = False
    for value in (b"a1", b"a2"):
        await producer.send("t", value, partition=0)
    await until(lambda: len(fake.log[TP0]) == 3)  # written, never acknowledged
    fake.gate = hold
    for value in (b"a3", b"a4"):
        await producer.send("t", value, partition=0)
    await until(lambda: sent_records(fake, TP0) == 5)
    await producer.send("t", b"b0", partition=1)
    await until(lambda: sent_records(fake, TP1) == 1)
    for value in (b"b1", b"b2"):  # t-1 is muted behind b0 (never acknowledged): not drained
        await producer.send("t", value, partition=1)
    await producer.close(timeout=0)  # as a crash: no outcome for any of them
    journal = Journal.open(folder, segment_bytes=SEGMENT, max_bytes=1 << 30)
    try:
        sealed = sorted((s.partition, s.count, s.producer_id, s.base_sequence)
                        for s in journal.recovery.sealed)
    finally:
        journal.close()
    assert sealed[0][2] == old_id
    assert [(p, n, seq) for p, n, _, seq in sealed] == [(0, 2, 1), (0, 2, 3), (1, 1, 0)]
    assert len(owed(folder)) == 7
    fake.answering = True
    fake.gate = None
    fake.script.clear()  # the answers made for requests the crash left unanswered
    return fake, old_id


async def test_sealed_batches_go_under_their_old_producer_id_and_nothing_is_written_twice(
    tmp_path: pathlib.Path,
) -> None:
    fake, old = await crash_leaving_owed(tmp_path)
    restarted, _ = make(tmp_path, fake)  # the same broker, which still knows the old id
    async with restarted:
        assert restarted.journal_recovered == 7
        await (await restarted.send("t", b"c0", partition=0))
        await (await restarted.send("t", b"c1", partition=1))
        new = fake.log[TP0][-1].producer_id
        assert restarted.journal_at_least_once == 0
    assert new != old
    # a1, a2 answered as duplicates (once in the log); a3, a4 written after them; then new.
    assert values(fake, TP0) == [(b"a0", old), (b"a1", old), (b"a2", old), (b"a3", old),
                                 (b"a4", old), (b"c0", new)]
    # b0 as sealed, then what was never sealed under the new id, then new records.
    assert values(fake, TP1) == [(b"b0", old), (b"b1", new), (b"b2", new), (b"c1", new)]
    assert fake.out_of_order == 0
    assert owed(tmp_path) == []


async def test_new_records_wait_until_the_recovered_batches_of_their_partition_are_answered(
    tmp_path: pathlib.Path,
) -> None:
    fake, old = await crash_leaving_owed(tmp_path)
    released = asyncio.Event()

    async def until_released() -> None:
        await released.wait()

    def first_held(_request: Any) -> asyncio.Future[None]:
        return asyncio.ensure_future(until_released())

    fake.gate = first_held
    restarted, _ = make(tmp_path, fake)
    async with restarted:
        acc = restarted._acc
        assert isinstance(acc, JournaledAccumulator)
        await until(lambda: sent_records(fake, TP0) == 5 + 2)  # a1, a2 again, as sealed
        later = await restarted.send("t", b"c0", partition=0)
        for _ in range(20):
            await asyncio.sleep(0)
        # t-0 is muted behind the recovered batch in flight; a3, a4 and c0 wait in order.
        assert TP0 in acc._muted
        assert sent_records(fake, TP0) == 7
        assert acc.queued_batches(TP0) == 2  # a3, a4 as sealed; c0 in a batch of its own
        released.set()
        await later
    assert [v for v, _ in values(fake, TP0)] == [b"a0", b"a1", b"a2", b"a3", b"a4", b"c0"]
    assert [p for _, p in values(fake, TP0)][1:5] == [old] * 4


async def test_a_broker_that_forgot_the_old_producer_id_gets_them_at_least_once_and_says_so(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
) -> None:
    await crash_leaving_owed(tmp_path)
    forgot = SequencedFakeKafka(cluster())  # no state for the dead producer's id
    forgot.producer_ids_issued = 10  # nor does it hand that id out again
    restarted, _ = make(tmp_path, forgot)
    with caplog.at_level(logging.WARNING, logger="aioaccum"):
        async with restarted:
            assert restarted.journal_recovered == 7
            await (await restarted.send("t", b"c0", partition=0))
            await restarted.flush()
            counted = restarted.journal_at_least_once
    # a1..a4 were sealed under sequences 1 and 3: OUT_OF_ORDER for an id the broker does not
    # know, so they went under the new id. b0 was sealed under sequence 0: the broker took it.
    assert counted == 4
    assert forgot.out_of_order == 2
    new = forgot.log[TP0][-1].producer_id
    assert values(forgot, TP0) == [(b"a1", new), (b"a2", new), (b"a3", new), (b"a4", new),
                                   (b"c0", new)]
    assert [v for v, _ in values(forgot, TP1)] == [b"b0", b"b1", b"b2"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("go again under the new producer id" in m and "OUT_OF_ORDER" in m
               for m in messages)
    assert any("4 of the 7 record(s) recovered at start went again" in m for m in messages)
    assert owed(tmp_path) == []


@pytest.mark.parametrize("code", [Errors.UNKNOWN_PRODUCER_ID, Errors.INVALID_PRODUCER_EPOCH])
async def test_the_other_answers_for_a_lost_identity_fall_back_too(
    tmp_path: pathlib.Path, code: Errors,
) -> None:
    fake, old = await crash_leaving_owed(tmp_path)
    fake.script.append({TP0: code})  # the answer to the first request, for a1 and a2
    restarted, _ = make(tmp_path, fake)
    async with restarted:
        await restarted.flush()
        assert restarted.journal_at_least_once == 2
        new = fake.log[TP0][-3].producer_id
    assert new != old
    # a1, a2 again under the new id, still first in the partition; the broker had them, so
    # they are there twice (the at-least-once counted). a3, a4 then under the old id.
    assert values(fake, TP0)[3:] == [(b"a1", new), (b"a2", new), (b"a3", old), (b"a4", old)]
    assert owed(tmp_path) == []


async def test_a_seal_whose_records_are_not_all_owed_any_more_goes_under_the_new_id(
    tmp_path: pathlib.Path,
) -> None:
    fake, _ = await crash_leaving_owed(tmp_path)
    # One record of the a1, a2 batch lost (as to corruption): it cannot be rebuilt as sealed.
    journal = Journal.open(tmp_path, segment_bytes=SEGMENT, max_bytes=1 << 30)
    try:
        a2 = next(r for r in journal.recovery.records if r.value == b"a2")
        journal.done("t", 0, a2.seq, a2.seq, 1)
    finally:
        journal.close()
    restarted, _ = make(tmp_path, fake)
    async with restarted:
        assert restarted.journal_recovered == 6
        # Counted at start: a1, and a3, a4, whose batch could go as sealed only after a1 (the
        # order per partition comes first), so all three go under the new id.
        assert restarted.journal_at_least_once == 3
        await restarted.flush()
        new = fake.log[TP0][-1].producer_id
    assert values(fake, TP0)[3:] == [(b"a1", new), (b"a3", new), (b"a4", new)]
    assert [v for v, _ in values(fake, TP1)] == [b"b0", b"b1", b"b2"]  # t-1 as sealed
    assert owed(tmp_path) == []


async def test_a_restart_killed_while_resending_leaves_them_under_the_first_id(
    tmp_path: pathlib.Path,
) -> None:
    fake, old = await crash_leaving_owed(tmp_path)
    fake.gate = hold  # the second producer's requests never get an answer either
    second, _ = make(tmp_path, fake)
    await second.start()
    await until(lambda: sent_records(fake, TP0) == 5 + 2)
    await second.close(timeout=0)
    journal = Journal.open(tmp_path, segment_bytes=SEGMENT, max_bytes=1 << 30)
    try:
        # Not sealed again under the second producer's id: the next restart still sends them
        # as the broker knows them.
        assert {s.producer_id for s in journal.recovery.sealed if s.partition == 0} == {old}
    finally:
        journal.close()
    fake.gate = None
    fake.script.clear()
    third, _ = make(tmp_path, fake)
    async with third:
        assert third.journal_recovered == 7
        await third.flush()
        assert third.journal_at_least_once == 0
    assert [v for v, _ in values(fake, TP0)] == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert [v for v, _ in values(fake, TP1)] == [b"b0", b"b1", b"b2"]
    assert owed(tmp_path) == []
