"""The producing process dies by ``kill -9`` mid-stream: nothing it reported acknowledged is lost.

Three producers are killed while records are buffered and in flight: a process running
:class:`~aioaccum.Producer`, one running :class:`~aioaccum.sync.SyncProducer` (both are
``tests/faults/crash_child.py``, which logs every record it offers and, only once its future
succeeded, every record acknowledged), and the example web service, whose acknowledgements are
the ``200`` answers this test received for ``POST /events?wait=true``. Then the topic is read
to its end offsets with confluent-kafka, which shares no code with aioaccum or aiokafka, and
every acknowledged record must be there exactly once, at the partition and offset its
acknowledgement named. What was offered but not acknowledged may or may not be in the log;
each test prints how much of it was found anyway.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from faults.workload import record_id, record_value

from ._servers import REPO_ROOT, running
from .test_web import EVENTS_SERVICE

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

TESTS_DIR = REPO_ROOT / "tests"
PARTITIONS = 6
VALUE_SIZE = 100
BATCH_SIZE = 16384
# Small enough that a child producing flat out keeps the buffer full, so the kill finds up to
# this much accepted and unacknowledged; the loss bound checked below is this figure.
BUFFER_MEMORY = 1024 * 1024
LINGER_MS = 20
# The children produce tens of thousands of records a second: this many acknowledged is well
# into the stream, a fraction of a second after the first acknowledgement.
CHILD_KILL_AFTER_ACKED = 20_000
# The web service answers a few thousand requests a second on a small machine.
WEB_KILL_AFTER_ACKED = 3_000
WEB_CONCURRENCY = 32
# Every fourth request asks for no wait: its 202 means buffered, not acknowledged.
WEB_ACCEPT_ONLY_EVERY = 4
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 60.0
POLL_S = 0.02


# --- reading the topic back ----------------------------------------------------------------


@dataclass
class TopicContents:
    """Where each id was found: ``positions[id]`` lists its ``(partition, offset)`` pairs."""

    positions: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    consumed: int = 0
    foreign: int = 0
    """Records whose value carries no id of ours."""
    order_violations: int = 0
    """Records whose id is not above the previous one's in their partition (a measure for one
    sequential producer only: concurrent HTTP requests reach the service in any order)."""


def read_topic(bootstrap: str, topic: str) -> TopicContents:
    """Every record of ``topic`` up to the end offsets it has now, read with confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"aioaccum-crash-check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    deadline = time.monotonic() + READ_TIMEOUT_S
    contents = TopicContents()
    try:
        metadata = consumer.list_topics(topic, timeout=READ_TIMEOUT_S)
        partitions = sorted(metadata.topics[topic].partitions)
        assert len(partitions) == PARTITIONS, f"{topic} has partitions {partitions}"
        ends: dict[int, int] = {}
        for partition in partitions:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=READ_TIMEOUT_S
            )
            ends[partition] = int(high)
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(remaining)])
        last_id = dict.fromkeys(partitions, -1)
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read {contents.consumed} records of {topic} in {READ_TIMEOUT_S} s; "
                    f"partitions {sorted(remaining)} did not reach their end offsets {ends}"
                )
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is not None:
                    raise RuntimeError(f"consuming {topic} failed: {message.error()}")
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    raise RuntimeError(f"a record of {topic} came without its position")
                contents.consumed += 1
                rid = record_id(message.value())
                if rid is None:
                    contents.foreign += 1
                else:
                    contents.positions.setdefault(rid, []).append((partition, offset))
                    if rid <= last_id[partition]:
                        contents.order_violations += 1
                    last_id[partition] = rid
                if offset + 1 >= ends[partition]:
                    remaining.discard(partition)
    finally:
        consumer.close()
    return contents


@dataclass
class Verdict:
    """The acknowledged records held against the topic, and what became of the rest."""

    offered: int
    acked: int
    unacked: int
    unacked_found: int
    lost: list[int]
    misplaced: list[int]
    doubled_acked: list[int]
    duplicated: int
    unoffered: int
    contents: TopicContents

    def summary(self, label: str) -> str:
        return (
            f"{label}: offered {self.offered}, acked {self.acked}, found "
            f"{len(self.contents.positions)} ({self.contents.consumed} records), lost "
            f"{len(self.lost)}, misplaced {len(self.misplaced)}, acked found twice "
            f"{len(self.doubled_acked)}, duplicated {self.duplicated}; offered unacked "
            f"{self.unacked}, of which found anyway {self.unacked_found}; not offered "
            f"{self.unoffered}, foreign {self.contents.foreign}; samples lost {self.lost[:5]} "
            f"misplaced {self.misplaced[:5]} doubled {self.doubled_acked[:5]}"
        )


def judge(
    offered: Collection[int], acked: Mapping[int, tuple[int, int]], contents: TopicContents
) -> Verdict:
    lost = sorted(rid for rid in acked if rid not in contents.positions)
    misplaced = sorted(
        rid
        for rid, at in acked.items()
        if rid in contents.positions and at not in contents.positions[rid]
    )
    doubled = sorted(rid for rid in acked if len(contents.positions.get(rid, ())) > 1)
    unacked = [rid for rid in offered if rid not in acked]
    return Verdict(
        offered=len(offered),
        acked=len(acked),
        unacked=len(unacked),
        unacked_found=sum(1 for rid in unacked if rid in contents.positions),
        lost=lost,
        misplaced=misplaced,
        doubled_acked=doubled,
        duplicated=sum(len(at) - 1 for at in contents.positions.values()),
        unoffered=sum(1 for rid in contents.positions if rid not in offered),
        contents=contents,
    )


def assert_nothing_acknowledged_lost(verdict: Verdict, summary: str) -> None:
    assert verdict.acked >= 1, summary
    assert verdict.unacked > 0, f"the kill found nothing in flight, so proved nothing: {summary}"
    assert verdict.lost == [], summary
    assert verdict.misplaced == [], summary
    assert verdict.doubled_acked == [], summary
    # Idempotence on, one producer session: no record is written twice, acknowledged or not.
    assert verdict.duplicated == 0, summary
    assert verdict.unoffered == 0, summary
    assert verdict.contents.foreign == 0, summary


async def crash_topic(topic_factory: TopicFactory, broker_count: int) -> str:
    # On 3 brokers acks=all must mean two copies; a single broker can only have one.
    return await topic_factory(
        partitions=PARTITIONS, configs={"min.insync.replicas": str(min(2, broker_count))}
    )


# --- a child process running Producer or SyncProducer --------------------------------------


class LineCounter:
    """Counts the lines of a file another process appends to, reading only what is new."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._read = 0
        self.lines = 0

    def update(self) -> int:
        if self._path.exists():
            with self._path.open("rb") as file:
                file.seek(self._read)
                chunk = file.read()
            self._read += len(chunk)
            self.lines += chunk.count(b"\n")
        return self.lines


@dataclass
class ChildLogs:
    offered: list[int]
    acked: dict[int, tuple[int, int]]
    acked_lines: int


def read_child_logs(offered_path: Path, acked_path: Path) -> ChildLogs:
    # A line not ended by "\n" would be a torn write; each line is one os.write, so none is
    # expected, and a torn one must not count as a report.
    offered = [int(line) for line in offered_path.read_bytes().split(b"\n")[:-1]]
    acked: dict[int, tuple[int, int]] = {}
    lines = acked_path.read_bytes().split(b"\n")[:-1]
    for line in lines:
        rid, partition, offset = (int(word) for word in line.split())
        acked[rid] = (partition, offset)
    return ChildLogs(offered, acked, len(lines))


async def kill_child_mid_stream(api: str, bootstrap: str, topic: str, tmp_path: Path) -> ChildLogs:
    """Run ``crash_child`` until it logged enough acknowledgements, then ``kill -9`` it."""
    offered_path, acked_path = tmp_path / "offered.log", tmp_path / "acked.log"
    output_path = tmp_path / "child.out"
    # faults.crash_child imports faults.workload: the child needs tests/ on its path.
    path = [str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [
        sys.executable, "-m", "faults.crash_child", api, bootstrap, topic,
        str(offered_path), str(acked_path), "--value-size", str(VALUE_SIZE),
        "--linger-ms", str(LINGER_MS), "--batch-size", str(BATCH_SIZE),
        "--buffer-memory", str(BUFFER_MEMORY), "--max-seconds", str(START_TIMEOUT_S * 2),
    ]  # fmt: skip
    with output_path.open("wb") as output:
        child = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    acked = LineCounter(acked_path)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while acked.update() < CHILD_KILL_AFTER_ACKED:
                if child.poll() is not None:
                    pytest.fail(
                        f"crash_child {api} exited with {child.returncode} after "
                        f"{acked.lines} acknowledgements:\n{output_path.read_text()}"
                    )
                await asyncio.sleep(POLL_S)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        code = await asyncio.to_thread(child.wait, EXIT_TIMEOUT_S)
    assert code == -signal.SIGKILL, f"exit status {code}:\n{output_path.read_text()}"
    return read_child_logs(offered_path, acked_path)


async def check_child_crash(
    api: str, kafka_bootstrap: str, topic_factory: TopicFactory, broker_count: int, tmp_path: Path
) -> None:
    topic = await crash_topic(topic_factory, broker_count)
    logs = await kill_child_mid_stream(api, kafka_bootstrap, topic, tmp_path)
    contents = await asyncio.to_thread(read_topic, kafka_bootstrap, topic)
    verdict = judge(logs.offered, logs.acked, contents)
    # Accepted and unacknowledged records sit in buffers taken from the pool, each at least
    # VALUE_SIZE bytes of it. The slack: batches the broker acknowledged just before the kill,
    # their memory already back in the pool, whose callbacks had not yet logged them (at most
    # one batch per partition per response, two responses deep).
    bound = (BUFFER_MEMORY + 2 * PARTITIONS * BATCH_SIZE) // VALUE_SIZE
    summary = verdict.summary(f"{api} producer killed") + (
        f"; order violations {contents.order_violations}; unacked bound {bound}"
    )
    print(summary)
    assert logs.acked_lines == len(logs.acked), f"an id was acknowledged twice: {summary}"
    assert logs.offered == list(range(len(logs.offered))), summary
    assert_nothing_acknowledged_lost(verdict, summary)
    # One producer, ids in send order: within a partition they rise (idempotence keeps the
    # order through retries).
    assert contents.order_violations == 0, summary
    assert verdict.unacked <= bound, summary


@pytest.mark.timeout(120)
async def test_producer_killed_mid_stream_loses_nothing_acknowledged(
    tmp_path: Path, kafka_bootstrap: str, kafka_broker_count: int, topic_factory: TopicFactory
) -> None:
    await check_child_crash("async", kafka_bootstrap, topic_factory, kafka_broker_count, tmp_path)


@pytest.mark.timeout(120)
async def test_sync_producer_killed_mid_stream_loses_nothing_acknowledged(
    tmp_path: Path, kafka_bootstrap: str, kafka_broker_count: int, topic_factory: TopicFactory
) -> None:
    await check_child_crash("sync", kafka_bootstrap, topic_factory, kafka_broker_count, tmp_path)


# --- the example web service ---------------------------------------------------------------


@dataclass
class WebLedger:
    """What the test posted and what the service answered, by record id."""

    next_id: int = 0
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    accepted: set[int] = field(default_factory=set)
    other_answers: Counter[int] = field(default_factory=Counter)
    connection_errors: Counter[str] = field(default_factory=Counter)

    @property
    def offered(self) -> range:
        return range(self.next_id)

    async def post_until_killed(self, session: aiohttp.ClientSession, base_url: str) -> None:
        """POST record after record until a request fails on the connection."""
        while True:
            rid = self.next_id
            self.next_id += 1
            wait = rid % WEB_ACCEPT_ONLY_EVERY != 0
            url = f"{base_url}/events?wait=true" if wait else f"{base_url}/events"
            try:
                async with session.post(url, data=record_value(rid, VALUE_SIZE)) as response:
                    status = response.status
                    answer: dict[str, Any] = await response.json()
            except aiohttp.ClientError as exc:
                # Only the kill should break a connection; the test checks that it came first.
                self.connection_errors[type(exc).__name__] += 1
                return
            if status == 200 and wait:
                self.acked[rid] = (int(answer["partition"]), int(answer["offset"]))
            elif status == 202 and not wait:
                self.accepted.add(rid)
            else:
                self.other_answers[status] += 1


@pytest.mark.timeout(120)
async def test_web_service_killed_mid_stream_loses_nothing_it_answered_200(
    tmp_path: Path, kafka_bootstrap: str, kafka_broker_count: int, topic_factory: TopicFactory
) -> None:
    topic = await crash_topic(topic_factory, kafka_broker_count)
    props = {
        "acks": "all",
        "enable.idempotence": "true",
        "linger.ms": str(LINGER_MS),
        "batch.size": str(BATCH_SIZE),
        "buffer.memory": str(BUFFER_MEMORY),
    }
    ledger = WebLedger()
    async with (
        running(EVENTS_SERVICE, tmp_path, kafka_bootstrap, topic, props) as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WEB_CONCURRENCY)) as session,
    ):
        workers = [
            asyncio.create_task(ledger.post_until_killed(session, server.base_url))
            for _ in range(WEB_CONCURRENCY)
        ]
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while len(ledger.acked) < WEB_KILL_AFTER_ACKED:
                    if ledger.connection_errors:
                        pytest.fail(
                            f"a request failed before the kill: {ledger.connection_errors}, "
                            f"{len(ledger.acked)} acknowledged:\n{server.log()}"
                        )
                    await asyncio.sleep(POLL_S)
            os.kill(server.process.pid, signal.SIGKILL)
            # Each worker ends on its first failed request; those in flight fail at once.
            async with asyncio.timeout(EXIT_TIMEOUT_S):
                await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        code = await asyncio.to_thread(server.process.wait, EXIT_TIMEOUT_S)
    assert code == -signal.SIGKILL, f"exit status {code}:\n{server.log()}"

    contents = await asyncio.to_thread(read_topic, kafka_bootstrap, topic)
    verdict = judge(ledger.offered, ledger.acked, contents)
    accepted_found = sum(1 for rid in ledger.accepted if rid in contents.positions)
    summary = verdict.summary("web service killed") + (
        f"; answered 202 (buffered only) {len(ledger.accepted)}, of which found "
        f"{accepted_found}; other answers {dict(ledger.other_answers)}; connection errors "
        f"{dict(ledger.connection_errors)}"
    )
    print(summary)
    assert not ledger.other_answers, summary
    assert_nothing_acknowledged_lost(verdict, summary)
