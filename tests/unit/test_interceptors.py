"""Interceptors (Java's ProducerInterceptor) against a fake broker adapter."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from typing import Any

import pytest

from aioaccum import (
    BrokerError,
    ConfigError,
    ProducerClosedError,
    RecordMetadata,
    RecordTooLargeError,
    SerializationError,
)
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum.interceptors import ProducerInterceptor, ProducerRecord
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

TP0 = TopicPartition("t", 0)
Ack = tuple[RecordMetadata, BaseException | None]


class Recorder(ProducerInterceptor):
    """Keeps what it saw; optionally changes each record with ``change``."""

    def __init__(self, name: str = "r", change: Any = None) -> None:
        self.name = name
        self.change = change
        self.sent: list[ProducerRecord] = []
        self.acks: list[Ack] = []
        self.closed = 0

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        return record if self.change is None else self.change(record)

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        self.acks.append((metadata, error))

    def close(self) -> None:
        self.closed += 1


def make(*interceptors: object, **settings: Any) -> tuple[Producer, FakeKafka]:
    fake = FakeKafka(StaticCluster.uniform({"t": 3, "other": 1}, nodes=1))
    settings.setdefault("linger_ms", 5)
    return Producer("fake:9092", kafka=fake, interceptors=list(interceptors), **settings), fake


async def test_a_replaced_record_is_what_is_written() -> None:
    def rewrite(record: ProducerRecord) -> ProducerRecord:
        return record.replace(
            topic="other",
            value=record.value.upper(),
            key=b"k2",
            headers=[*(record.headers or ()), ("seen", b"1")],
        )

    recorder = Recorder(change=rewrite)
    producer, fake = make(recorder)
    async with producer:
        metadata = await (await producer.send("t", b"abc", key=b"k1", headers=[("h", b"v")]))
    assert (metadata.topic, metadata.partition, metadata.offset) == ("other", 0, 0)
    (stored,) = fake.log[TopicPartition("other", 0)]
    assert (stored.key, stored.value) == (b"k2", b"ABC")
    assert stored.headers == [("h", b"v"), ("seen", b"1")]
    assert recorder.sent == [ProducerRecord("t", b"abc", b"k1", None, None, [("h", b"v")])]
    assert recorder.acks == [(metadata, None)]
    assert not fake.log[TP0]


async def test_interceptors_run_in_order_each_on_what_the_one_before_returned() -> None:
    first = Recorder("first", lambda r: r.replace(value=r.value + b"1"))
    second = Recorder("second", lambda r: r.replace(value=r.value + b"2"))
    producer, fake = make(first, second)
    async with producer:
        await (await producer.send("t", b"v", partition=1))
    assert [r.value for r in first.sent] == [b"v"]
    assert [r.value for r in second.sent] == [b"v1"]
    assert [r.value for r in fake.log[TopicPartition("t", 1)]] == [b"v12"]


class Broken(ProducerInterceptor):
    def __init__(self, result: Any = None) -> None:
        self.result = result
        self.calls = 0

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.calls += 1
        if self.result is None:
            raise RuntimeError("on_send is broken")
        return self.result  # type: ignore[no-any-return]

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        raise RuntimeError("on_acknowledgement is broken")

    def close(self) -> None:
        raise RuntimeError("close is broken")


async def test_a_raising_interceptor_never_fails_the_send(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, not_a_record = Broken(), Broken(result="not a record")
    after = Recorder("after", lambda r: r.replace(value=r.value + b"!"))
    producer, fake = make(broken, not_a_record, after)
    with caplog.at_level(logging.DEBUG, logger="aioaccum._runtime.hooks"):
        async with producer:
            futures = [await producer.send("t", b"v%d" % i, partition=0) for i in range(3)]
            results = await asyncio.gather(*futures)
    # Each broken one was skipped: the next interceptor got the record it was given.
    assert [r.value for r in after.sent] == [b"v0", b"v1", b"v2"]
    assert [r.value for r in fake.log[TP0]] == [b"v0!", b"v1!", b"v2!"]
    assert [m for m, _ in after.acks] == results  # the broken on_acknowledgement before it too
    assert broken.calls == not_a_record.calls == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # Once per interceptor and method at WARNING, then at DEBUG.
    assert len(warnings) == 6, [r.getMessage() for r in warnings]
    assert any("returned str, not a ProducerRecord" in r.getMessage() for r in warnings)
    assert any("close" in r.getMessage() for r in warnings)
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) >= 4


async def test_on_acknowledgement_gets_each_outcome_once_errors_included() -> None:
    recorder = Recorder()
    producer, fake = make(recorder, linger_ms=0)
    fake.script.append({TP0: Errors.TOPIC_AUTHORIZATION_FAILED})
    async with producer:
        refused = await producer.send("t", b"refused", partition=0)
        ok = await producer.send("t", b"ok", partition=1)
        with pytest.raises(BrokerError):
            await refused
        good = await ok
    assert len(recorder.acks) == 2
    by_value = dict(zip([r.value for r in recorder.sent], recorder.acks, strict=True))
    metadata, error = by_value[b"refused"]
    assert isinstance(error, BrokerError)
    assert error.errno == Errors.TOPIC_AUTHORIZATION_FAILED
    assert metadata == RecordMetadata("t", 0, -1, -1, -1, -1)  # Java's: offset unknown
    assert by_value[b"ok"] == (good, None)


async def test_records_refused_before_sending_are_acknowledged_with_the_error() -> None:
    recorder = Recorder()
    producer, _ = make(recorder, max_request_size=1000)
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"not started")
    async with producer:
        with pytest.raises(SerializationError):
            await producer.send("t", "a str, no serializer")
        with pytest.raises(RecordTooLargeError):
            await producer.send("t", b"x" * 2000, partition=2)
        with pytest.raises(SerializationError, match=r"list\(headers.items\(\)\)"):
            await producer.send("t", b"v", headers={"h": b"v"})  # type: ignore[arg-type]
    errors = [(m, type(e)) for m, e in recorder.acks]
    assert errors == [
        (RecordMetadata("t", -1, -1, -1, -1, -1), ProducerClosedError),
        (RecordMetadata("t", -1, -1, -1, -1, -1), SerializationError),
        (RecordMetadata("t", 2, -1, -1, -1, -1), RecordTooLargeError),
        (RecordMetadata("t", -1, -1, -1, -1, -1), SerializationError),
    ]


async def test_a_cancelled_record_future_still_reports_the_real_outcome() -> None:
    recorder = Recorder()
    producer, fake = make(recorder, linger_ms=50)
    async with producer:
        future = await producer.send("t", b"v", partition=0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(future, 0.01)  # cancels the record future
        assert future.cancelled()
        await producer.flush()
        await asyncio.sleep(0)
    ((metadata, error),) = recorder.acks
    assert error is None
    assert (metadata.partition, metadata.offset) == (0, 0)
    assert [r.value for r in fake.log[TP0]] == [b"v"]


async def test_records_of_a_split_batch_are_acknowledged_once_from_their_new_batches() -> None:
    # The hooks follow each batch, not each record future: a split moves the records to new
    # batches, and each must still be heard of once, with the offset it was written at.
    recorder = Recorder()
    producer, fake = make(recorder, linger_ms=50, delivery_timeout_ms=60_000)
    fake.max_batch_bytes = 3000
    async with producer:
        futures = [await producer.send("t", b"s%03d" % i * 25, partition=0) for i in range(40)]
        kept = futures[::7]
        for future in kept:
            future.cancel()  # stops only the future's reporting, not the interceptor's
        big = await producer.send("t", b"B" * 4000, partition=0)
        with pytest.raises(BrokerError):
            await asyncio.wait_for(big, 10)
        await producer.flush()
    assert len(recorder.acks) == 41
    by_value = dict(zip([r.value for r in recorder.sent], recorder.acks, strict=True))
    written = {record.value: offset for offset, record in enumerate(fake.log[TP0])}
    for i in range(40):
        value = b"s%03d" % i * 25
        metadata, error = by_value[value]
        assert error is None
        assert (metadata.partition, metadata.offset) == (0, written[value])
    metadata, error = by_value[b"B" * 4000]
    assert isinstance(error, BrokerError)
    assert error.errno == Errors.MESSAGE_TOO_LARGE
    assert (metadata.partition, metadata.offset) == (0, -1)


async def test_send_many_takes_each_record_through_the_interceptors() -> None:
    recorder = Recorder(change=lambda r: r.replace(value=r.value * 2))
    producer, fake = make(recorder)
    async with producer:
        results = await (
            await producer.send_many(
                "t", [b"a", b"b", b"c"], keys=[b"1", b"2", b"3"], partition=2,
                headers=[("all", b"1")], record_headers=[None, [("own", b"b")], None],
                timestamp_ms=1234,
            )
        )
        with pytest.raises(ConfigError, match="2 keys for 1 values"):
            await producer.send_many("t", [b"x"], keys=[b"1", b"2"])
        assert await (await producer.send_many("t", [])) == []
    assert [r.value for r in fake.log[TopicPartition("t", 2)]] == [b"aa", b"bb", b"cc"]
    assert [r.headers for r in fake.log[TopicPartition("t", 2)]] == [
        [("all", b"1")], [("all", b"1"), ("own", b"b")], [("all", b"1")]
    ]
    assert {r.timestamp_ms for r in recorder.sent} == {1234}
    assert [m for m, _ in recorder.acks] == list(results)


async def test_send_many_fails_with_the_first_error_once_all_ended() -> None:
    recorder = Recorder()
    producer, fake = make(recorder, linger_ms=0)
    fake.script.append({TopicPartition("t", 1): Errors.TOPIC_AUTHORIZATION_FAILED})
    async with producer:
        future = await producer.send_many("t", [b"a", b"b"], partition=1)
        with pytest.raises(BrokerError):
            await future
    assert [isinstance(e, BrokerError) for _, e in recorder.acks] == [True, True]


async def test_send_from_thread_runs_on_send_in_the_thread() -> None:
    threads: list[int] = []

    def note_thread(record: ProducerRecord) -> ProducerRecord:
        threads.append(threading.get_ident())
        return record.replace(value=b"from thread")

    recorder = Recorder(change=note_thread)
    producer, fake = make(recorder)
    async with producer:
        future = await asyncio.to_thread(producer.send_from_thread, "t", b"v", partition=0)
        metadata = await asyncio.to_thread(future.result, 10)
        await asyncio.sleep(0)
    assert threads
    assert threads[0] != threading.get_ident()
    assert [r.value for r in fake.log[TP0]] == [b"from thread"]
    assert recorder.acks == [(metadata, None)]


async def test_close_closes_each_interceptor_once() -> None:
    recorder = Recorder()
    producer, _ = make(recorder)
    async with producer:
        pass
    await producer.close()
    assert recorder.closed == 1


def test_objects_with_one_method_are_enough_and_the_rest_is_refused() -> None:
    class AcksOnly:
        def on_acknowledgement(self, metadata: RecordMetadata, error: object) -> None:
            pass

    assert Producer("fake:9092", interceptors=[AcksOnly()]).config.interceptors
    with pytest.raises(ConfigError, match=r"interceptors\[0\] is the class Recorder; pass an"):
        Producer("fake:9092", interceptors=[Recorder])
    with pytest.raises(ConfigError, match="has neither on_send nor on_acknowledgement"):
        Producer("fake:9092", interceptors=[object()])
    with pytest.raises(ConfigError, match="must be a list of interceptor objects"):
        Producer("fake:9092", interceptors=Recorder())
    with pytest.raises(ConfigError, match="Java class names can't be loaded"):
        Producer.from_properties({"interceptors": "com.example.Interceptor"})


def test_nothing_is_set_up_and_nothing_imported_without_interceptors_or_tracing() -> None:
    code = (
        "import sys, aioaccum\n"
        "p = aioaccum.Producer('fake:9092')\n"
        "assert p._hooks is None\n"
        "optional = ('opentelemetry', 'aioaccum.otel', 'aioaccum._runtime.tracing')\n"
        "loaded = [m for m in sys.modules if m.startswith(optional)]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_on_send_runs_once_per_record_on_every_send_path() -> None:
    recorder = Recorder()
    producer, fake = make(recorder)
    async with producer:
        sent = await producer.send("t", b"send", partition=0)
        threaded = await asyncio.to_thread(producer.send_from_thread, "t", b"thread", partition=0)
        many = await producer.send_many("t", [b"many0", b"many1", b"many2"], partition=0)
        results = [await sent, await asyncio.to_thread(threaded.result, 10), *await many]
        await asyncio.sleep(0)  # the thread's outcome is handed to the loop
    values = [b"send", b"thread", b"many0", b"many1", b"many2"]
    assert [r.value for r in recorder.sent] == values
    assert [r.value for r in fake.log[TP0]] == values
    assert sorted(m.offset for m, _ in recorder.acks) == sorted(m.offset for m in results)
    assert len(recorder.acks) == len(values)


def test_the_hooks_never_name_the_producer() -> None:
    # The layer test covers imports; this covers the rest: no parameter, attribute or name of
    # the hooks module reaches the producer or its send methods (the hooks used to call
    # producer.send back, with a marker on the headers for the second pass).
    import ast
    from pathlib import Path

    import aioaccum

    source = Path(aioaccum.__file__).parent / "_runtime" / "hooks.py"  # compiled or not
    tree = ast.parse(source.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.name for alias in node.names)
            names.add(getattr(node, "module", None) or "")
    forbidden = {
        "Producer", "producer", "aioaccum.producer", "aioaccum", "send", "send_from_thread",
        "send_many", "_loop", "Intercepted",
    }
    assert not names & forbidden, names & forbidden
    assert {"begin", "follow", "refused"} <= names  # the reader did see the module
