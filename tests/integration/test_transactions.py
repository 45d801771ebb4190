"""Transactions against the real 3-broker cluster, on both protocols, read back by librdkafka.

Every test takes the ``transaction_version`` fixture, so it runs once with the classic protocol
(``transaction.version=1``) and once with KIP-890's (``2``). What the transactions left in the
log is read with confluent-kafka as ``read_committed`` (and, to show that aborted records were
written and then hidden, as ``read_uncommitted``) only after :func:`wait_stable` has seen every
transaction on the topic end: an empty read of a topic with an open transaction would prove
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest
from faults import cluster
from faults.txn_reader import (
    Record,
    group_offsets,
    read_from_committed,
    read_topic,
    stable_group_offsets,
    transaction_coordinator,
    wait_stable,
)
from faults.workload import wait_until

from aioaccum import (
    AioAccumError,
    ConfigError,
    FutureRecordMetadata,
    InvalidTxnStateError,
    Producer,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from aioaccum._runtime.transactions import commit_prepared

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

PARTITIONS = 3
STEP_S = 60.0  # bound on any one producer call or read-back
STABLE_S = 60.0  # bound on the cluster finishing a transaction's markers


class Boom(Exception):
    """Raised inside ``async with producer.transaction()`` to make it abort."""


def txn_id(tag: str) -> str:
    return f"aioaccum-test-{tag}-{uuid.uuid4().hex[:10]}"


Sent = list[tuple[bytes, int, FutureRecordMetadata]]


async def send_each(
    producer: Producer, topic: str, prefix: str, per_partition: int, partitions: int = PARTITIONS
) -> Sent:
    """``per_partition`` records to each partition; returns (value, partition, future)."""
    sent: Sent = []
    for i in range(per_partition):
        for p in range(partitions):
            value = f"{prefix}:{p}:{i}".encode()
            sent.append((value, p, await producer.send(topic, value, partition=p)))
    return sent


async def acked_records(sent: Sent) -> list[Record]:
    """The records of ``sent`` as their (all successful) futures place them."""
    async with asyncio.timeout(STEP_S):
        metas = await asyncio.gather(*(fut for _, _, fut in sent))
    out = []
    for (value, partition, _), meta in zip(sent, metas, strict=True):
        assert meta.partition == partition
        out.append(Record(meta.partition, meta.offset, value))
    return out


def duplicates(records: Iterable[Record]) -> dict[bytes | None, int]:
    return {v: n for v, n in Counter(r.value for r in records).items() if n > 1}


async def close_bounded(producer: Producer) -> None:
    async with asyncio.timeout(STEP_S):
        await producer.close()


# --- 1. commit and abort -------------------------------------------------------------------


async def fail_inside(producer: Producer, topic: str, prefix: str, per: int, sent: Sent) -> None:
    """Send and flush in ``async with producer.transaction()``, then raise :class:`Boom`."""
    async with producer.transaction():
        sent += await send_each(producer, topic, prefix, per)
        await producer.flush()
        raise Boom


async def test_committed_records_visible_once_aborted_never(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    committed: Sent = []
    aborted_flushed: Sent = []  # aborted after flush(): in the log, behind an abort marker
    aborted_unflushed: Sent = []  # aborted at once: sent or never sent, either is allowed
    per = 40
    async with asyncio.timeout(4 * STEP_S):
        producer = Producer(kafka_bootstrap, transactional_id=txn_id("once"), linger_ms=5)
        async with producer:
            assert producer.transaction_version == transaction_version
            # 0: begin / commit
            producer.begin_transaction()
            committed += await send_each(producer, topic, "t0", per)
            await producer.commit_transaction()
            # 1: begin / flush / abort
            producer.begin_transaction()
            aborted_flushed += await send_each(producer, topic, "t1", per)
            await producer.flush()
            await producer.abort_transaction()
            # 2: the context manager commits on a normal exit
            async with producer.transaction():
                committed += await send_each(producer, topic, "t2", per)
            # 3: ... and aborts on an exception, which it re-raises
            with pytest.raises(Boom):
                await fail_inside(producer, topic, "t3", per, aborted_flushed)
            # 4: abort with records still in the accumulator
            producer.begin_transaction()
            aborted_unflushed += await send_each(producer, topic, "t4", per)
            await producer.abort_transaction()
            # 5: a commit after the aborts
            async with producer.transaction():
                committed += await send_each(producer, topic, "t5", per)
            # Every record of an aborted transaction has its outcome by now.
            assert all(fut.done() for _, _, fut in aborted_flushed + aborted_unflushed)

    expected = await acked_records(committed)
    written_aborted = await acked_records(aborted_flushed)
    for value, _, fut in aborted_unflushed:
        exc = fut.exception()
        if exc is not None:
            assert isinstance(exc, TransactionAbortedError), (value, repr(exc))
        else:
            meta = fut.result()
            written_aborted.append(Record(meta.partition, meta.offset, value))

    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    visible = await read_topic(kafka_bootstrap, topic)
    assert duplicates(visible) == {}
    assert sorted(visible) == sorted(expected)
    # The aborted records did reach the log; read_committed skipped them.
    everything = set(await read_topic(kafka_bootstrap, topic, isolation="read_uncommitted"))
    assert set(written_aborted) <= everything
    assert set(expected) <= everything


# --- 2. fencing ----------------------------------------------------------------------------


async def test_second_producer_fences_the_first(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    tid = txn_id("fence")
    first = Producer(kafka_bootstrap, transactional_id=tid, linger_ms=5)
    async with asyncio.timeout(4 * STEP_S):
        await first.start()
        try:
            assert first.transaction_version == transaction_version
            first.begin_transaction()
            fenced = await send_each(first, topic, "first", 30)
            await first.flush()  # in the log, the transaction still open
            async with Producer(kafka_bootstrap, transactional_id=tid, linger_ms=5) as second:
                with pytest.raises(ProducerFencedError) as raised:
                    await first.commit_transaction()
                assert isinstance(raised.value, TransactionFatalError)
                second.begin_transaction()
                winner = await send_each(second, topic, "second", 30)
                await second.commit_transaction()
        finally:
            await close_bounded(first)

    expected = await acked_records(winner)
    written_fenced = await acked_records(fenced)
    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    visible = await read_topic(kafka_bootstrap, topic)
    assert duplicates(visible) == {}
    assert sorted(visible) == sorted(expected)
    everything = set(await read_topic(kafka_bootstrap, topic, isolation="read_uncommitted"))
    assert set(written_fenced) <= everything


# --- 3. kill -9 during commit --------------------------------------------------------------

KILLED_FOR_S = 2.0
COMMIT_BOUND_S = 150.0


@pytest.mark.timeout(600)
async def test_coordinator_kill_during_commit_all_or_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await topic_factory(
        partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    tid = txn_id("kill")
    producer = Producer(
        kafka_bootstrap,
        transactional_id=tid,
        linger_ms=20,
        request_timeout_ms=10_000,
        delivery_timeout_ms=60_000,
        max_block_ms=60_000,
    )
    outcome: AioAccumError | None = None
    victim: int | None = None
    fault: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(STEP_S):
            await producer.start()
        assert producer.transaction_version == transaction_version
        victim = await transaction_coordinator(kafka_bootstrap, tid)
        leaders = await cluster.leader_counts(kafka_bootstrap, topic)
        producer.begin_transaction()
        sent = await send_each(producer, topic, "kill", 300, partitions=6)

        pid = cluster.broker_pid(victim)
        assert pid is not None, f"node {victim} is not running"

        async def restart(node: int) -> None:
            await wait_until(lambda: cluster.broker_pid(node) is None, timeout=STEP_S)
            await asyncio.sleep(KILLED_FOR_S)
            await cluster.start_broker(node)

        # The commit flushes first: kill -9 lands while batches, AddPartitionsToTxn or EndTxn
        # are in flight to the coordinator, which also leads some of the partitions.
        commit = asyncio.create_task(producer.commit_transaction())
        await asyncio.sleep(0)  # let the commit start
        assert not commit.done(), "the commit ended before the kill"
        os.kill(pid, signal.SIGKILL)
        fault = asyncio.create_task(restart(victim))
        try:
            async with asyncio.timeout(COMMIT_BOUND_S):
                await commit
        except TimeoutError:
            pytest.fail(
                f"commit_transaction hung over {COMMIT_BOUND_S:.0f} s after node {victim} "
                "(its coordinator) was killed"
            )
        except AioAccumError as exc:
            outcome = exc
        await fault
    except BaseException:
        with contextlib.suppress(Exception):
            await close_bounded(producer)
        raise
    finally:
        if fault is not None and not fault.done():
            fault.cancel()
            with contextlib.suppress(BaseException):
                await fault
        if victim is not None and cluster.broker_pid(victim) is None:
            await cluster.start_broker(victim)
    await cluster.wait_fully_replicated(kafka_bootstrap, topic)
    print(
        f"killed node {victim} (coordinator of {tid}, leader of {leaders[victim]} of 6): "
        f"commit -> {outcome!r}"
    )

    if outcome is None:
        await close_bounded(producer)
        expected = await acked_records(sent)
        await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
        visible = await read_topic(kafka_bootstrap, topic)
        assert duplicates(visible) == {}
        assert sorted(visible) == sorted(expected)
        return

    # A failed commit: abort (a fatal error may refuse it), close, and fence whatever is left
    # open with a new producer of the same id; then nothing of the transaction may be visible.
    with contextlib.suppress(TransactionFatalError):
        async with asyncio.timeout(STEP_S):
            await producer.abort_transaction()
    await close_bounded(producer)
    async with asyncio.timeout(STEP_S):
        async with Producer(kafka_bootstrap, transactional_id=tid):
            pass
    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    visible = await read_topic(kafka_bootstrap, topic)
    assert visible == [], f"commit raised {outcome!r}, yet {len(visible)} records are visible"


# --- 4. the broker's transaction timeout ---------------------------------------------------

TRANSACTION_TIMEOUT_MS = 3000
# The broker looks for timed-out transactions every
# transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s by default).
BROKER_ABORT_S = 60.0


async def test_transaction_left_open_is_aborted_by_the_broker(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    producer = Producer(
        kafka_bootstrap,
        transactional_id=txn_id("timeout"),
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        linger_ms=5,
    )
    async with asyncio.timeout(2 * STEP_S + BROKER_ABORT_S):
        await producer.start()
        try:
            assert producer.transaction_version == transaction_version
            producer.begin_transaction()
            sent = await send_each(producer, topic, "late", 20)
            await producer.flush()
            started = time.monotonic()
            # Waiting for the broker's timeout is the point: the transaction ends (the last
            # stable offsets catch up) only when the broker aborts it.
            await wait_stable(kafka_bootstrap, topic, timeout=BROKER_ABORT_S)
            assert time.monotonic() - started >= TRANSACTION_TIMEOUT_MS / 1000 - 1.0
            with pytest.raises((ProducerFencedError, TransactionAbortableError)) as raised:
                await producer.commit_transaction()
            assert any(
                word in str(raised.value).lower()
                for word in ("transaction_timeout_ms", "transaction.timeout.ms", "timed out")
            ), f"the error does not name the timeout: {raised.value!r}"
        finally:
            await close_bounded(producer)

    written = await acked_records(sent)
    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    assert await read_topic(kafka_bootstrap, topic) == []
    everything = set(await read_topic(kafka_bootstrap, topic, isolation="read_uncommitted"))
    assert set(written) <= everything


# --- 5. consume-transform-produce ----------------------------------------------------------


async def test_offsets_commit_with_the_transaction_only(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    source = await topic_factory(partitions=2)
    sink = await topic_factory(partitions=2)
    group = f"aioaccum-test-ctp-{uuid.uuid4().hex[:10]}"
    parts = [0, 1]
    batch = 10
    async with asyncio.timeout(STEP_S), Producer(kafka_bootstrap, acks="all") as plain:
        await send_each(plain, source, "in", 2 * batch, partitions=2)
        await plain.flush()

    async def offsets() -> dict[int, int]:
        return await stable_group_offsets(kafka_bootstrap, group, source, parts, timeout=STABLE_S)

    none = await offsets()
    assert all(offset < 0 for offset in none.values()), none
    producer = Producer(kafka_bootstrap, transactional_id=txn_id("ctp"), linger_ms=5)
    async with asyncio.timeout(6 * STEP_S), producer:
        assert producer.transaction_version == transaction_version
        # Rounds: abort, commit, abort, commit. Each round starts from the group's offsets,
        # so an aborted round is done again, and each input is produced once in the end.
        for round_no, commit in enumerate((False, True, False, True)):
            before = await offsets()
            records = await read_from_committed(kafka_bootstrap, group, source, parts, batch)
            producer.begin_transaction()
            for p, got in records.items():
                for record in got:
                    assert record.value is not None
                    await producer.send(sink, b"out|" + record.value, partition=p)
            advanced = {p: got[-1].offset + 1 for p, got in records.items()}
            await producer.send_offsets_to_transaction(
                {(source, p): offset for p, offset in advanced.items()}, group
            )
            # Sent, but the transaction is open: not committed yet.
            pending = await group_offsets(kafka_bootstrap, group, source, parts)
            assert pending == before, (round_no, pending, before)
            if commit:
                await producer.commit_transaction()
                assert await offsets() == advanced, round_no
            else:
                await producer.abort_transaction()
                assert await offsets() == before, round_no
    assert await offsets() == {0: 2 * batch, 1: 2 * batch}

    await wait_stable(kafka_bootstrap, sink, timeout=STABLE_S)
    visible = await read_topic(kafka_bootstrap, sink)
    assert duplicates(visible) == {}
    expected = {p: [f"out|in:{p}:{i}".encode() for i in range(2 * batch)] for p in parts}
    assert {p: [r.value for r in visible if r.partition == p] for p in parts} == expected


# --- 6. calls in the wrong state -----------------------------------------------------------


async def test_calls_in_the_wrong_state(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=1)
    with pytest.raises(ConfigError, match="idempotence"):
        Producer(kafka_bootstrap, transactional_id=txn_id("cfg"), enable_idempotence=False)
    with pytest.raises(ConfigError, match="idempotence"):
        Producer.from_properties(
            {
                "bootstrap.servers": kafka_bootstrap,
                "transactional.id": txn_id("cfg"),
                "enable.idempotence": "false",
            }
        )
    async with asyncio.timeout(2 * STEP_S):
        async with Producer(kafka_bootstrap, transactional_id=txn_id("state")) as producer:
            assert producer.transaction_version == transaction_version
            with pytest.raises(InvalidTxnStateError):
                await producer.send(topic, b"outside")
            with pytest.raises(InvalidTxnStateError):
                await producer.commit_transaction()
            producer.begin_transaction()
            with pytest.raises(InvalidTxnStateError):
                producer.begin_transaction()
            # The wrong calls changed nothing: the transaction still works.
            sent = await send_each(producer, topic, "inside", 5, partitions=1)
            await producer.commit_transaction()
        async with Producer(kafka_bootstrap) as plain:
            with pytest.raises(InvalidTxnStateError):
                plain.begin_transaction()
    expected = await acked_records(sent)
    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    assert await read_topic(kafka_bootstrap, topic) == expected


# --- 7. prepared transactions and close() --------------------------------------------------


async def test_a_prepared_transaction_is_committed_elsewhere_and_close_leaves_it(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    tid = txn_id("prepared")
    async with asyncio.timeout(3 * STEP_S):
        async with Producer(kafka_bootstrap, transactional_id=tid, linger_ms=5) as producer:
            producer.begin_transaction()
            sent = await send_each(producer, topic, "prepared", 10)
            prepared = await producer.prepare_transaction()
            assert (prepared.transactional_id, prepared.empty) == (tid, False)
            assert prepared.transaction_version == transaction_version
            with pytest.raises(InvalidTxnStateError, match="prepared"):
                await producer.send(topic, b"after prepare")
        # close() above left the prepared transaction open: nothing is visible yet...
        expected = await acked_records(sent)
        assert await read_topic(kafka_bootstrap, topic, isolation="read_uncommitted") != []
        # ...until another client commits it, as the producer that prepared it would have.
        committed: list[str] = []
        count = await commit_prepared(
            [prepared], on_committed=lambda p: committed.append(p.transactional_id),
            bootstrap_servers=kafka_bootstrap,
        )
        assert (count, committed) == (1, [tid])
    await wait_stable(kafka_bootstrap, topic, timeout=STABLE_S)
    assert sorted(await read_topic(kafka_bootstrap, topic)) == sorted(expected)


async def test_close_aborts_an_open_transaction_and_a_late_commit_of_it_is_fenced(
    kafka_bootstrap: str, topic_factory: TopicFactory, transaction_version: int
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    tid = txn_id("close")
    async with asyncio.timeout(3 * STEP_S):
        async with Producer(kafka_bootstrap, transactional_id=tid) as producer:
            producer.begin_transaction()
            sent = await send_each(producer, topic, "closed", 10)
            await producer.flush()
            prepared = await producer.prepare_transaction()
            await producer.abort_transaction()  # a prepared transaction may still be aborted
        await acked_records(sent)
        with pytest.raises(ProducerFencedError):
            await commit_prepared([prepared], bootstrap_servers=kafka_bootstrap)

        producer = Producer(kafka_bootstrap, transactional_id=tid)
        await producer.start()
        producer.begin_transaction()
        more = await send_each(producer, topic, "open at close", 10)
        await producer.flush()
        await producer.close()  # aborts the open transaction, as Java's producer does
        await acked_records(more)
        # Nothing is left open: the abort ended it, rather than the transaction timeout.
        await wait_stable(kafka_bootstrap, topic, timeout=10)
    assert await read_topic(kafka_bootstrap, topic) == []
    written = await read_topic(kafka_bootstrap, topic, isolation="read_uncommitted")
    assert len(written) == len(sent) + len(more)


async def test_nothing_sent_prepares_an_empty_transaction_with_nothing_to_commit(
    kafka_bootstrap: str, transaction_version: int
) -> None:
    async with asyncio.timeout(2 * STEP_S):
        async with Producer(kafka_bootstrap, transactional_id=txn_id("empty")) as producer:
            producer.begin_transaction()
            prepared = await producer.prepare_transaction()
        assert prepared.empty
        assert await commit_prepared([prepared], bootstrap_servers=kafka_bootstrap) == 0
