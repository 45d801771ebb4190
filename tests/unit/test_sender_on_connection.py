"""The sender on aioaccum's own produce connections, against a fake broker on a loopback
socket: no task per request, and every way a request can end (answered, connection lost,
shutdown with requests in flight, a completion that raises) ends its records with an outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioaccum import Producer
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._kafka.adapter import ProduceDone, ProduceHandle
from aioaccum._kafka.connection import ConnectionSettings, ProduceRequest
from aioaccum._kafka.connections import ProduceConnections
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    ProducerClosedError,
    ProducerFailedError,
)

from .fake_broker import FakeBroker
from .fake_kafka import FakeKafka

pytestmark = pytest.mark.any_loop

CLUSTER = StaticCluster.uniform({"t": 4}, nodes=1)


@dataclass
class OnConnection(FakeKafka):
    """The test suite's fake cluster view, with produce requests on real produce connections
    to a fake broker."""

    port: int = 0
    connections: ProduceConnections | None = None
    # Replaces the answers handed to the sender (a completion that goes wrong inside it).
    tamper: Any = None
    handles: list[ProduceHandle] = field(default_factory=list)

    async def start(self) -> None:
        await super().start()
        self.connections = ProduceConnections(
            ConnectionSettings(client_id="test", request_timeout=5.0),
            lambda node: ("127.0.0.1", self.port),
        )

    async def close(self) -> None:
        if self.connections is not None:
            await self.connections.close()
        await super().close()

    def send_produce(  # type: ignore[override]
        self,
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]],
        done: ProduceDone,
    ) -> ProduceRequest:
        assert self.connections is not None
        if self.tamper is not None:
            inner, tamper = done, self.tamper

            def done(handle: Any, answers: Any, error: BaseException | None) -> None:
                inner(handle, tamper(answers) if error is None else answers, error)

        handle = self.connections.send_produce(
            node, acks=acks, timeout_ms=timeout_ms, batches=batches,
            transactional_id=None, v12=False, done=done,
        )
        self.handles.append(handle)
        return handle


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    found = FakeBroker()
    await found.start()
    yield found
    await found.close()


def make(broker: FakeBroker, **settings: Any) -> tuple[Producer, OnConnection]:
    fake = OnConnection(CLUSTER, port=broker.port)
    settings.setdefault("linger_ms", 0)
    return Producer("fake:9092", kafka=fake, **settings), fake


def produced(broker: FakeBroker) -> list[tuple[str, int, bytes]]:
    return [r for request in broker.received if request.api_key == 0 for r in request.records]


async def test_requests_go_out_and_are_answered_without_a_task_each(broker: FakeBroker) -> None:
    producer, fake = make(broker, acks=1, enable_idempotence=False)
    async with producer:
        # The first request opens the connection (its one task); the rest find it open.
        await (await producer.send("t", b"warm-up", partition=0))
        broker.hold = True
        tasks_before = asyncio.all_tasks()
        futures = [await producer.send("t", b"v%d" % p, partition=p) for p in range(4)]
        await asyncio.wait_for(broker.until(lambda b: len(produced(b)) == 5), 5)
        # The sender's own task and the test's: nothing started for the request in flight.
        assert asyncio.all_tasks() <= tasks_before
        assert not any(f.done() for f in futures)
        broker.release()
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert sorted(r.partition for r in results) == [0, 1, 2, 3]
    assert all(r.offset >= 1 for r in results)
    sent = {partition: value for _, partition, value in produced(broker)[1:]}
    assert all(b"v%d" % p in sent[p] for p in range(4))  # each record in its own batch
    assert isinstance(fake.handles[-1], ProduceRequest)
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_a_lost_connection_ends_every_batch_in_flight_with_a_typed_error(
    broker: FakeBroker,
) -> None:
    producer, _ = make(broker, acks=1, enable_idempotence=False, retries=0)
    async with producer:
        await (await producer.send("t", b"warm-up", partition=0))
        broker.hold = True
        futures = [await producer.send("t", b"v%d" % p, partition=p) for p in range(4)]
        await asyncio.wait_for(broker.until(lambda b: len(produced(b)) == 5), 5)
        for transport in broker.transports:
            transport.abort()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), 5
        )
    assert len(outcomes) == 4
    for outcome in outcomes:
        assert isinstance(outcome, BrokerError)
        assert outcome.retriable
        assert outcome.possibly_written  # sent, and no answer came
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_a_lost_connection_is_retried_on_a_new_one(broker: FakeBroker) -> None:
    producer, _ = make(broker, acks=1, enable_idempotence=False, retry_backoff_ms=1)
    async with producer:
        await (await producer.send("t", b"warm-up", partition=0))
        broker.drop_on_produce = True
        future = await producer.send("t", b"again", partition=1)
        await asyncio.wait_for(broker.until(lambda b: b.kinds().count(0) >= 2), 5)
        broker.drop_on_produce = False
        metadata = await asyncio.wait_for(future, 5)
    assert metadata.partition == 1
    assert broker.kinds().count(18) >= 2  # negotiated again on the new connection


async def test_closing_with_requests_in_flight_ends_them_and_returns_every_buffer(
    broker: FakeBroker,
) -> None:
    producer, fake = make(broker, acks=1, enable_idempotence=False)
    await producer.start()
    try:
        await (await producer.send("t", b"warm-up", partition=0))
        broker.hold = True
        futures = [await producer.send("t", b"v%d" % p, partition=p) for p in range(4)]
        await asyncio.wait_for(broker.until(lambda b: len(produced(b)) == 5), 5)
    finally:
        await asyncio.wait_for(producer.close(timeout=0), 5)
    for future in futures:
        error = future.exception()
        assert isinstance(error, ProducerClosedError)
        assert error.possibly_written
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory
    # A late answer finds no one waiting: the requests were given up.
    assert all(isinstance(h, ProduceRequest) and h.done is None for h in fake.handles)


async def test_a_completion_that_raises_ends_its_records_with_typed_errors(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    class Unreadable:
        @property
        def error(self) -> AioAccumError | None:
            raise KeyError("bug while reading an answer")

        base_offset = 0
        log_append_time = -1

    producer, fake = make(broker, acks=1, enable_idempotence=False)
    async with producer:
        await (await producer.send("t", b"warm-up", partition=0))
        fake.tamper = lambda answers: {tp: Unreadable() for tp in answers}
        future = await producer.send("t", b"v", partition=2)
        with (
            caplog.at_level(logging.ERROR, logger="aioaccum._runtime.sender"),
            pytest.raises(ProducerFailedError) as failed,
        ):
            await asyncio.wait_for(future, 5)
        assert failed.value.possibly_written
        assert isinstance(failed.value.__cause__, KeyError)
        with pytest.raises(ProducerClosedError, match="stopped on an error"):
            await producer.send("t", b"after", partition=0)
    assert "unexpected error while sending to node 0" in caplog.text
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_requests_wait_for_their_node_connection_and_go_in_order(
    broker: FakeBroker,
) -> None:
    conns = ProduceConnections(
        ConnectionSettings(client_id="test", request_timeout=5.0),
        lambda node: ("127.0.0.1", broker.port),
    )
    ended: asyncio.Queue[tuple[int, Any, BaseException | None]] = asyncio.Queue()
    tasks_before = len(asyncio.all_tasks())

    def ends(i: int) -> Callable[[Any, Any, BaseException | None], None]:
        return lambda _r, answers, error: ended.put_nowait((i, answers, error))

    for i in range(3):
        conns.send_produce(
            7, acks=1, timeout_ms=1000,
            batches=[(TopicPartition("t", 0), [memoryview(b"head%d|" % i), memoryview(b"tail")])],
            transactional_id=None, v12=False, done=ends(i),
        )
    assert len(asyncio.all_tasks()) == tasks_before + 1  # one connection attempt for the node
    assert ended.empty()  # never from inside send_produce
    ended_in_order = [await asyncio.wait_for(ended.get(), 5) for _ in range(3)]
    assert [i for i, _, _ in ended_in_order] == [0, 1, 2]
    assert all(error is None for _, _, error in ended_in_order)
    # Each batch's buffers went out as one batch, their sizes summed.
    assert [value for _, _, value in produced(broker)] == [b"head%d|tail" % i for i in range(3)]
    await conns.close()


async def test_requests_waiting_for_a_connection_that_fails_end_as_never_written() -> None:
    broker = FakeBroker()
    await broker.start()
    port = broker.port
    await broker.close()  # nothing listens there any more
    conns = ProduceConnections(
        ConnectionSettings(client_id="test", request_timeout=5.0),
        lambda node: ("127.0.0.1", port),
    )
    ended: asyncio.Queue[BaseException | None] = asyncio.Queue()
    for _ in range(2):
        conns.send_produce(
            1, acks=1, timeout_ms=1000, batches=[(TopicPartition("t", 0), [memoryview(b"x")])],
            transactional_id=None, v12=False,
            done=lambda _r, _a, error: ended.put_nowait(error),
        )
    errors = [await asyncio.wait_for(ended.get(), 5) for _ in range(2)]
    for error in errors:
        assert isinstance(error, AioAccumError)
        assert not error.possibly_written
    await conns.close()


async def test_a_completion_that_raises_does_not_stop_the_connection(broker: FakeBroker) -> None:
    conns = ProduceConnections(
        ConnectionSettings(client_id="test", request_timeout=5.0),
        lambda node: ("127.0.0.1", broker.port),
    )
    ended: asyncio.Queue[Any] = asyncio.Queue()

    def explode(_request: Any, _answers: Any, _error: BaseException | None) -> None:
        raise RuntimeError("a completion with a bug")

    batch = [(TopicPartition("t", 0), [memoryview(b"x")])]
    conns.send_produce(1, acks=1, timeout_ms=1000, batches=batch, transactional_id=None,
                       v12=False, done=explode)
    conns.send_produce(1, acks=1, timeout_ms=1000, batches=batch, transactional_id=None,
                       v12=False, done=lambda _r, answers, _e: ended.put_nowait(answers))
    answers = await asyncio.wait_for(ended.get(), 5)
    assert answers[TopicPartition("t", 0)].base_offset == 1
    conn = conns.connection(1)
    assert conn is not None
    assert conn.usable
    await conns.close()
