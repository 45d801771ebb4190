"""aiokafka's documented producer examples, with only their import line changed, against the
cluster (``tests/compat_examples``, run by ``_run.py``, which points them at it).

The examples use fixed topic names (``my_topic``, ``test-topic``, ``foobar``, ``in_topic``,
``out_topic``) and a broker that creates topics itself; the cluster here does not, so the tests
create them first. Each test reads what its example wrote after the offsets it found before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import IllegalOperation, TopicAlreadyExistsError
from aiokafka.structs import TopicPartition

from aioaccum._core.partitioner import default_partition
from aioaccum.compat.producer import AIOKafkaProducer as CompatProducer

pytestmark = [pytest.mark.kafka]

EXAMPLES = Path(__file__).resolve().parents[1] / "compat_examples"
TOPICS = {"my_topic": 3, "test-topic": 1, "foobar": 10, "in_topic": 2, "out_topic": 2}
WAIT_S = 60.0


@pytest.fixture
async def example_topics(kafka_bootstrap: str) -> dict[str, int]:
    """The examples' topics, created if missing, once each partition has a leader; their
    partition counts."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1) for name, partitions in TOPICS.items()]
        )
        for result in response.to_object()["topic_errors"]:
            if result["error_code"] not in (0, TopicAlreadyExistsError.errno):
                raise RuntimeError(f"creating {result['topic']}: {result}")
        deadline = time.monotonic() + WAIT_S
        while True:
            described = await admin.describe_topics(list(TOPICS))
            counts = {
                t["topic"]: len(t["partitions"])
                for t in described
                if t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if set(counts) == set(TOPICS):
                return counts
            assert time.monotonic() < deadline, f"example topics not ready: {described}"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


class Example:
    """One example running in a child process."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.lines: list[str] = []

    async def read_lines(self, count: int) -> list[str]:
        """Until ``count`` lines of output arrived."""
        assert self.process.stdout is not None
        async with asyncio.timeout(WAIT_S):
            while len(self.lines) < count:
                line = await self.process.stdout.readline()
                if not line:
                    raise AssertionError(f"{self.name} ended early: {await self.stderr()}")
                self.lines.append(line.decode().rstrip("\n"))
        return self.lines

    async def interrupt(self) -> int:
        """Ctrl-C, as a person stops the example; its exit code."""
        self.process.send_signal(signal.SIGINT)
        return await self.wait()

    async def wait(self) -> int:
        async with asyncio.timeout(WAIT_S):
            return await self.process.wait()

    async def output(self) -> str:
        assert self.process.stdout is not None
        rest = (await self.process.stdout.read()).decode()
        return "\n".join(self.lines) + ("\n" if self.lines else "") + rest

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()


@contextlib.asynccontextmanager
async def running(name: str, bootstrap: str, stdin: bytes | None = None) -> AsyncIterator[Example]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "_run.py"), bootstrap, str(EXAMPLES / name),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=EXAMPLES,
    )
    if stdin is not None:
        assert process.stdin is not None
        process.stdin.write(stdin)
        await process.stdin.drain()
        process.stdin.close()
    example = Example(process, name)
    try:
        yield example
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def read_after(
    bootstrap: str,
    topic: str,
    start: dict[int, int],
    expected: int,
    isolation_level: str = "read_uncommitted",
) -> list[Any]:
    """The records of ``topic`` after the offsets ``start``, waiting until ``expected`` came
    (then one more short poll, to see any extra)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(start)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start[tp.partition])
        records: list[Any] = []
        deadline = time.monotonic() + WAIT_S
        while len(records) < expected and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                records.extend(batch)
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            records.extend(batch)
        return records
    finally:
        await consumer.stop()


METADATA_LINE = re.compile(
    r"RecordMetadata\(topic='test-topic', partition=0, topic_partition=TopicPartition\("
    r"topic='test-topic', partition=0\), offset=(\d+), timestamp=(\d+), timestamp_type=0, "
    r"log_start_offset=None\)"
)


@pytest.mark.parametrize("name", ["simple_produce.py", "idempotent_produce.py"])
async def test_the_produce_loops_print_aiokafkas_metadata_until_interrupted(
    name: str, kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    before = await end_offsets(kafka_bootstrap, "test-topic")
    async with running(name, kafka_bootstrap) as example:
        lines = await example.read_lines(2)
        code = await example.interrupt()
        stderr = await example.stderr()
    assert code == -signal.SIGINT, stderr  # the example re-raises KeyboardInterrupt
    assert "KeyboardInterrupt" in stderr
    assert "Unclosed" not in stderr, stderr
    assert "Task was destroyed" not in stderr, stderr
    offsets = []
    for line in lines:
        match = METADATA_LINE.fullmatch(line)
        assert match, line
        offsets.append(int(match[1]))
    assert offsets[1] == offsets[0] + 1
    records = await read_after(kafka_bootstrap, "test-topic", before, 2)
    by_offset = {r.offset: r.value for r in records}
    assert [by_offset[o] for o in offsets] == [b"Super message"] * 2


async def test_the_transactional_example_aborts_on_its_error(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    before = await end_offsets(kafka_bootstrap, "test-topic")
    async with running("transactional_produce.py", kafka_bootstrap, stdin=b"\n") as example:
        code = await example.wait()
        stderr = await example.stderr()
    assert code == 1, stderr
    assert stderr.rstrip().endswith("ValueError"), stderr
    sent = await read_after(kafka_bootstrap, "test-topic", before, 1)
    assert [r.value for r in sent] == [b"Super transactional message"]  # it was written...
    committed = await read_after(kafka_bootstrap, "test-topic", before, 0, "read_committed")
    assert committed == []  # ...and aborted


async def test_the_batch_example_sends_all_its_messages(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    before = await end_offsets(kafka_bootstrap, "my_topic")
    async with running("batch_produce.py", kafka_bootstrap) as example:
        code = await example.wait()
        output, stderr = await example.output(), await example.stderr()
    assert code == 0, stderr
    sent = [tuple(map(int, m)) for m in re.findall(r"^(\d+) messages sent to partition (\d+)$",
                                                   output, flags=re.M)]
    assert len(sent) >= 2, output  # 1000 messages do not fit one 16 KiB batch
    assert sum(count for count, _ in sent) == 1000
    records = await read_after(kafka_bootstrap, "my_topic", before, 1000)
    assert len(records) == 1000
    values = sorted(int(r.value.decode().rsplit(" ", 1)[1]) for r in records)
    assert values == list(range(1000))
    per_partition: dict[int, int] = {}
    for count, partition in sent:
        per_partition[partition] = per_partition.get(partition, 0) + count
    assert per_partition == {
        p: sum(1 for r in records if r.partition == p) for p in {r.partition for r in records}
    }


async def test_the_index_example_sends_one_message(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    before = await end_offsets(kafka_bootstrap, "my_topic")
    async with running("index_produce.py", kafka_bootstrap) as example:
        code = await example.wait()
        stderr = await example.stderr()
    assert code == 0, stderr
    records = await read_after(kafka_bootstrap, "my_topic", before, 1)
    assert [r.value for r in records] == [b"Super message"]


async def test_the_custom_partitioner_example_routes_by_its_partitioner(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    last = example_topics["foobar"] - 1
    async with running("custom_partitioner.py", kafka_bootstrap) as example:
        code = await example.wait()
        output, stderr = await example.output(), await example.stderr()
    assert code == 0, stderr
    lines = output.splitlines()
    assert lines[0] == f"'1' produced in partition: {last}"
    assert re.fullmatch(r"'2' produced in partition: \d+", lines[1])
    assert lines[2] == "'3' produced in partition: 0"


async def test_the_serialize_and_compress_example_writes_json_with_gzip(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    before = await end_offsets(kafka_bootstrap, "foobar")
    async with running("serialize_and_compress.py", kafka_bootstrap) as example:
        code = await example.wait()
        stderr = await example.stderr()
    assert code == 0, stderr
    records = await read_after(kafka_bootstrap, "foobar", before, 2)
    values = sorted((json.loads(r.value) for r in records), key=str)
    assert values == sorted([{"a": 123.4, "b": "some string"}, [1, 2, 3, 4]], key=str)


async def test_the_consume_process_produce_example_commits_output_and_offsets(
    kafka_bootstrap: str, example_topics: dict[str, int]
) -> None:
    out_before = await end_offsets(kafka_bootstrap, "out_topic")
    key = b"key-%s" % uuid.uuid4().hex.encode()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        async with running("transaction_example.py", kafka_bootstrap) as example:
            # The example's group starts at the latest offsets: feed it until it has caught
            # something, and the result is visible to a read_committed reader.
            deadline = time.monotonic() + WAIT_S
            output: list[Any] = []
            while not output:
                assert time.monotonic() < deadline, await example.stderr()
                assert example.process.returncode is None, await example.stderr()
                await producer.send_and_wait("in_topic", b"in", key=key)
                committed = await read_after(
                    kafka_bootstrap, "out_topic", out_before, 0, "read_committed"
                )
                output = [r for r in committed if r.key == key]
            code = await example.interrupt()
            stderr = await example.stderr()
    finally:
        await producer.stop()
    assert code == -signal.SIGINT, stderr
    assert all(int(r.value) >= 1 for r in output)
    assert all(r.timestamp % 60_000 == 0 for r in output)  # the example's minute buckets
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets("processing-group")
    finally:
        await admin.close()
    assert sum(meta.offset for tp, meta in offsets.items() if tp.topic == "in_topic") >= 1


# --- the compat producer's own paths on the cluster


async def test_send_batch_with_headers_and_timestamps(kafka_bootstrap: str, new_topic: str) -> None:
    async with CompatProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as producer:
        batch = producer.create_batch()
        for i in range(10):
            assert batch.append(
                key=b"k%d" % i, value=b"v%d" % i, timestamp=1_700_000_000_000 + i,
                headers=[("i", b"%d" % i)],
            ) is not None
        sent = await (await producer.send_batch(batch, new_topic, partition=3))
        single = await producer.send_and_wait(new_topic, b"one", key=b"k")
    assert sent is not None
    assert single is not None
    assert (sent.partition, sent.offset, sent.timestamp_type) == (3, 0, 0)
    assert single.partition == default_partition(b"k", 6)
    records = await read_after(kafka_bootstrap, new_topic, dict.fromkeys(range(6), 0), 11)
    batch_records = sorted((r for r in records if r.partition == 3), key=lambda r: r.offset)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in batch_records[:10]] == [
        (b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, [("i", b"%d" % i)]) for i in range(10)
    ]


async def test_transactions_through_the_compat_api(kafka_bootstrap: str, new_topic: str) -> None:
    async with CompatProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"compat-{uuid.uuid4().hex}"
    ) as producer:
        await producer.begin_transaction()
        await producer.send(new_topic, b"aborted", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(new_topic, b"committed", partition=0)
            await producer.send_offsets_to_transaction({}, "compat-group")
        with pytest.raises(IllegalOperation):
            await producer.send(new_topic, b"outside", partition=0)
    committed = await read_after(kafka_bootstrap, new_topic, {0: 0}, 1, "read_committed")
    assert [r.value for r in committed] == [b"committed"]
