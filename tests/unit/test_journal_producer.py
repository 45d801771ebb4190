"""The journal inside the producer, against a fake broker: what send() journals, what an
acknowledgement forgets, what a restart sends again, and what an outage does not fail."""

from __future__ import annotations

import asyncio
import errno
import math
import os
import pathlib
from typing import Any

import pytest

from aioaccum import Producer
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._journal.journal import Journal
from aioaccum._runtime.journaling import JournaledAccumulator, JournalSyncer
from aioaccum.errors import JournalError, JournalFullError, JournalLockedError

from .fake_kafka import FakeKafka, SequencedFakeKafka

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
SEGMENT = 1_200_000  # just above max_request_size (1 MiB) + 64 KiB


def make(folder: pathlib.Path, fake: FakeKafka | None = None,
         **settings: Any) -> tuple[Producer, FakeKafka]:
    fake = fake or SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    settings.setdefault("linger_ms", 1)
    settings.setdefault("journal_segment_bytes", SEGMENT)
    producer = Producer("fake:9092", kafka=fake, journal_dir=folder, **settings)
    return producer, fake


def owed(folder: pathlib.Path) -> list[tuple[int, bytes | None]]:
    journal = Journal.open(folder, segment_bytes=SEGMENT, max_bytes=1 << 30)
    try:
        return [(r.partition, r.value) for r in journal.recovery.records]
    finally:
        journal.close()


def syncer_of(producer: Producer) -> JournalSyncer:
    acc = producer._acc
    assert isinstance(acc, JournaledAccumulator)
    syncer = acc.syncer
    assert isinstance(syncer, JournalSyncer)
    return syncer


async def never_answer(fake: FakeKafka) -> asyncio.Event:
    """Hold every request until the event is set (a cluster that does not answer)."""
    release = asyncio.Event()

    async def wait() -> None:
        await release.wait()

    def gate(_request: Any) -> asyncio.Future[None]:
        return asyncio.ensure_future(wait())

    fake.gate = gate
    return release


async def test_acknowledged_records_leave_the_journal(tmp_path: pathlib.Path) -> None:
    producer, fake = make(tmp_path)
    async with producer:
        assert isinstance(producer._acc, JournaledAccumulator)
        futures = [await producer.send("t", b"v%d" % i, partition=i % 2) for i in range(20)]
        await asyncio.gather(*futures)
        assert producer._acc.journal.next_seq == 20  # each record journaled before send returned
    assert [r.value for r in fake.log[TP0]] == [b"v%d" % i for i in range(0, 20, 2)]
    assert owed(tmp_path) == []


async def test_a_second_producer_on_the_folder_is_refused(tmp_path: pathlib.Path) -> None:
    producer, _ = make(tmp_path)
    async with producer:
        other, _ = make(tmp_path)
        with pytest.raises(JournalLockedError):
            await other.start()


async def test_unacknowledged_records_are_sent_by_the_next_producer(
    tmp_path: pathlib.Path,
) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake)
    await producer.start()
    await never_answer(fake)
    for i in range(30):
        await producer.send("t", b"v%d" % i, key=b"k%d" % i, partition=i % 2,
                            timestamp_ms=1_700_000_000_000 + i, headers=[("h", b"%d" % i)])
    await producer.close(timeout=0)  # as a crash: no outcome for any record
    assert len(owed(tmp_path)) == 30

    fresh = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    restarted, _ = make(tmp_path, fresh)
    async with restarted:
        assert restarted.journal_recovered == 30
        after = await restarted.send("t", b"new", partition=0)
        await after
    # Recovered first, in order per partition, with keys, headers and timestamps; then new.
    values = [r.value for r in fresh.log[TP0]]
    assert values == [b"v%d" % i for i in range(0, 30, 2)] + [b"new"]
    first = fresh.log[TP1][0]
    assert (first.key, first.headers, first.timestamp) == (
        b"k1", [("h", b"1")], 1_700_000_000_001)
    assert owed(tmp_path) == []


async def test_an_outage_longer_than_the_delivery_timeout_fails_nothing(
    tmp_path: pathlib.Path,
) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    # The leader is away for 30 answers, 5 ms apart at least: far past delivery_timeout_ms.
    fake.script.extend({TP0: Errors.NOT_LEADER_OR_FOLLOWER} for _ in range(30))
    producer, _ = make(tmp_path, fake, request_timeout_ms=10, delivery_timeout_ms=20,
                       retry_backoff_ms=5, retry_backoff_max_ms=5)
    async with producer:
        loop = asyncio.get_running_loop()
        began = loop.time()
        metadata = await (await producer.send("t", b"waits", partition=0))
        waited = loop.time() - began
    assert metadata.offset == 0
    assert len(fake.requests) == 31
    assert waited > 0.02 * 3  # it outlived delivery_timeout_ms several times over


async def test_sync_always_shares_one_fsync_among_concurrent_senders(
    tmp_path: pathlib.Path,
) -> None:
    producer, _ = make(tmp_path, journal_sync="always")
    async with producer:
        sends = [producer.send("t", b"v%d" % i, partition=0) for i in range(50)]
        futures = await asyncio.gather(*sends)
        syncer = syncer_of(producer)
        assert 1 <= syncer.syncs < 50
        await asyncio.gather(*futures)


async def test_sync_always_from_a_thread(tmp_path: pathlib.Path) -> None:
    producer, _ = make(tmp_path, journal_sync="always")
    async with producer:
        future = await asyncio.to_thread(producer.send_from_thread, "t", b"x", None, 1)
        assert syncer_of(producer).syncs >= 1
        await asyncio.to_thread(future.result, 5)
    assert owed(tmp_path) == []


async def test_sync_interval_syncs_on_its_own(tmp_path: pathlib.Path) -> None:
    producer, _ = make(tmp_path, journal_sync="interval", journal_sync_ms=1)
    async with producer:
        await producer.send("t", b"x", partition=0)
        syncer = syncer_of(producer)
        while syncer.syncs == 0:  # noqa: ASYNC110  (the syncer has no event to wait on)
            await asyncio.sleep(0.001)
        assert producer._journal is None  # send() does not wait for it


def failing_fdatasync(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make the next ``failures`` calls of ``os.fdatasync`` fail as a dying disk does (EIO);
    returns the list of descriptors it refused."""
    refused: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if len(refused) < failures:
            refused.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return refused


async def test_a_failed_sync_interval_is_logged_and_the_next_interval_syncs(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    refused = failing_fdatasync(monkeypatch, 2)
    producer, fake = make(tmp_path, journal_sync="interval", journal_sync_ms=1)
    async with producer:
        future = await producer.send("t", b"x", partition=0)
        syncer = syncer_of(producer)
        while syncer.syncs == 0:  # noqa: ASYNC110  (the syncer has no event to wait on)
            await asyncio.sleep(0.001)
        await future
    assert len(refused) == 2
    assert syncer.failures == 2
    failed = [r for r in caplog.records if "fdatasync of the journal" in r.getMessage()]
    assert len(failed) == 2
    assert "Input/output error" in failed[0].getMessage()
    assert "may not survive a power loss" in failed[0].getMessage()
    assert [r.value for r in fake.log[TP0]] == [b"x"]


async def test_a_failed_sync_always_fails_send_with_a_typed_error_and_loses_nothing(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    producer, fake = make(tmp_path, journal_sync="always")
    async with producer:
        await producer.send("t", b"first", partition=0)
        refused = failing_fdatasync(monkeypatch, 1)
        with pytest.raises(JournalError, match=r"fdatasync .* failed \(Input/output error; 1 "):
            await producer.send("t", b"second", partition=0)
        assert len(refused) == 1
        # The disk recovers: the next sync covers both records.
        last = await producer.send("t", b"third", partition=0)
        await last
        await producer.flush()
    assert [r.value for r in fake.log[TP0]] == [b"first", b"second", b"third"]
    assert owed(tmp_path) == []


async def test_send_many_journals_every_record(tmp_path: pathlib.Path) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake)
    await producer.start()
    await never_answer(fake)
    await producer.send_many("t", [b"a", b"b", b"c"], partition=1)
    await producer.close(timeout=0)
    assert owed(tmp_path) == [(1, b"a"), (1, b"b"), (1, b"c")]


async def test_a_full_journal_refuses_with_the_numbers(tmp_path: pathlib.Path) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, journal_max_bytes=2 * SEGMENT,
                       buffer_memory=8 << 20, max_block_ms=50)
    async with producer:
        await never_answer(fake)
        value = b"x" * 100_000
        sent = 0
        # After max_block_ms without an outcome freeing a segment.
        with pytest.raises(JournalFullError,  # noqa: PT012
                           match=r"journal_max_bytes=2400000.*max_block_ms=50"):
            for _ in range(100):
                await producer.send("t", value, partition=0)
                sent += 1
        assert 10 <= sent < 24  # refused once a third segment would be needed
        await producer.close(timeout=0)


def test_delivery_timeout_is_off_with_a_journal(tmp_path: pathlib.Path) -> None:
    async def main() -> float:
        producer, _ = make(tmp_path)
        async with producer:
            assert producer._acc is not None
            return float(producer._acc._delivery_timeout)

    assert asyncio.run(main()) == math.inf


async def test_a_disk_error_on_a_new_segment_refuses_the_record_before_the_batch_takes_it(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    producer, fake = make(tmp_path)
    async with producer:
        release = await never_answer(fake)
        value = b"x" * 100_000

        def refuse(*_args: Any) -> None:
            raise OSError(errno.EIO, "Input/output error")

        sent = [await producer.send("t", value + b"0", partition=0)]  # makes the first segment
        # The disk refuses the next segment's blocks.
        monkeypatch.setattr(os, "posix_fallocate", refuse)
        with pytest.raises(JournalError, match="Input/output error"):  # noqa: PT012
            for i in range(1, 30):  # the first segment holds about 11 of them
                sent.append(await producer.send("t", value + b"%d" % i, partition=0))
        assert 5 <= len(sent) < 30
        refused = value + b"%d" % len(sent)
        monkeypatch.undo()
        release.set()
        await asyncio.gather(*sent)
        await producer.flush()
    delivered = [r.value for r in fake.log[TP0]]
    assert delivered == [value + b"%d" % i for i in range(len(sent))]  # not the refused one
    assert refused not in delivered
    assert owed(tmp_path) == []


async def test_a_full_journal_makes_send_wait_for_outcomes_that_free_a_segment(
        tmp_path: pathlib.Path) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, journal_max_bytes=2 * SEGMENT,
                       buffer_memory=8 << 20, max_block_ms=60_000)
    async with producer:
        release = await never_answer(fake)
        value = b"x" * 100_000
        futures = []
        while True:  # fill the journal: the send that finds it full waits
            waiting = asyncio.ensure_future(producer.send("t", value, partition=0))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            if not waiting.done():
                break
            futures.append(waiting.result())
        assert 10 <= len(futures) < 24
        acc = producer._acc
        assert isinstance(acc, JournaledAccumulator)
        assert len(acc.room_waiters) == 1  # waiting for room, not failed
        release.set()  # the cluster answers: outcomes free the first segment
        futures.append(await asyncio.wait_for(waiting, 10))
        await asyncio.gather(*futures)
    assert len(fake.log[TP0]) == len(futures)
    assert owed(tmp_path) == []


async def test_send_from_thread_waits_for_journal_room_up_to_max_block_ms(
        tmp_path: pathlib.Path) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, journal_max_bytes=2 * SEGMENT,
                       buffer_memory=8 << 20, max_block_ms=60_000)
    async with producer:
        release = await never_answer(fake)
        value = b"x" * 100_000
        futures: list[Any] = []
        while True:  # fill the journal from the loop
            waiting = asyncio.ensure_future(producer.send("t", value, partition=0))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            if not waiting.done():
                break
            futures.append(waiting.result())
        acc = producer._acc
        assert isinstance(acc, JournaledAccumulator)
        from_thread = asyncio.ensure_future(
            asyncio.to_thread(producer.send_from_thread, "t", value, None, 0))
        for _ in range(5000):  # until the thread waits on the condition
            if acc.room_freed._waiters:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.001)
        assert acc.room_freed._waiters  # type: ignore[attr-defined]
        release.set()
        futures.append(await asyncio.wait_for(waiting, 10))
        thread_future = await asyncio.wait_for(from_thread, 10)
        await asyncio.gather(*futures)
        await asyncio.to_thread(thread_future.result, 10)
    assert len(fake.log[TP0]) == len(futures) + 1
    assert owed(tmp_path) == []


async def test_send_from_thread_on_a_full_journal_raises_after_max_block_ms(
        tmp_path: pathlib.Path) -> None:
    fake = SequencedFakeKafka(StaticCluster.uniform({"t": 2}, nodes=1))
    producer, _ = make(tmp_path, fake, journal_max_bytes=2 * SEGMENT,
                       buffer_memory=8 << 20, max_block_ms=50)
    async with producer:
        await never_answer(fake)
        value = b"x" * 100_000
        with pytest.raises(JournalFullError, match="max_block_ms=50"):  # noqa: PT012
            for _ in range(100):
                await asyncio.to_thread(producer.send_from_thread, "t", value, None, 0)
        await producer.close(timeout=0)
