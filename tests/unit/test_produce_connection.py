"""aioaccum's produce connection against a fake broker on a loopback socket: pipelining,
the deadline structure, lost connections, reconnects, SASL and re-authentication, and the rule
that a buffer is never read by the transport once its request has completed."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator

import pytest

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.connection import ConnectionSettings, ProduceConnection, open_connection
from aioaccum._kafka.connections import ProduceConnections
from aioaccum._kafka.sasl import Credentials
from aioaccum._kafka.write_thread import SUPPORTED
from aioaccum.errors import AioAccumError, AuthenticationError, BrokerError

from .fake_broker import FakeBroker

# Every test runs on asyncio's loop and on uvloop (whose transports write differently).
pytestmark = pytest.mark.any_loop

TP = TopicPartition("t", 0)


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    found = FakeBroker()
    await found.start()
    yield found
    await found.close()


# Every test also runs with a write thread per connection (compiled path only: the pure-Python
# path has none), which must keep the same buffer-lifetime rules.
_threads = False


def _write_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "aioaccum-produce-writes"]


@pytest.fixture(autouse=True, params=["transport", "thread"] if SUPPORTED else ["transport"])
async def write_mode(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    global _threads
    _threads = request.param == "thread"
    yield request.param
    _threads = False
    # Every connection the test ended stopped its thread (a closed or lost one joins it).
    assert _write_threads() == []


def settings(**overrides: object) -> ConnectionSettings:
    values: dict[str, object] = {"client_id": "test", "request_timeout": 5.0}
    values.update(overrides)
    return ConnectionSettings(**values)  # type: ignore[arg-type]


async def connect(broker: FakeBroker, **overrides: object) -> ProduceConnection:
    conn = await open_connection("127.0.0.1", broker.port, settings(**overrides), _threads)
    # A thread of its own writes on every plaintext connection that asks for one.
    assert (conn._slot is not None) == _threads
    return conn


def produce(conn: ProduceConnection, records: bytes | bytearray, *, acks: int = 1,
            v12: bool = False) -> asyncio.Future[object]:
    return conn.produce(acks=acks, timeout_ms=1000, batches=[(TP, [memoryview(records)])],
                        transactional_id=None, v12=v12)


async def test_requests_are_pipelined_and_answered_in_order_without_a_task_each(
    broker: FakeBroker,
) -> None:
    conn = await connect(broker)
    tasks_before = len(asyncio.all_tasks())
    broker.hold = True
    futures = [produce(conn, b"batch%d" % i) for i in range(5)]
    assert len(asyncio.all_tasks()) == tasks_before  # nothing scheduled per request
    await asyncio.wait_for(broker.until(lambda b: b.kinds().count(0) == 5), 5)
    assert conn.in_flight == 5  # all written before any answer
    assert not any(f.done() for f in futures)
    broker.release()
    answers = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert [a[TP].base_offset for a in answers] == [0, 1, 2, 3, 4]  # type: ignore[index]
    produced = [r for r in broker.received if r.api_key == 0]
    assert [r.records[0][2] for r in produced] == [b"batch%d" % i for i in range(5)]
    ids = [r.correlation_id for r in produced]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert produced[0].version == 7
    conn.close()
    await conn.wait_closed()


async def test_v12_is_written_when_asked_for_and_its_answer_read(broker: FakeBroker) -> None:
    conn = await connect(broker)
    answer = await asyncio.wait_for(produce(conn, b"txn-batch", v12=True), 5)
    produced = broker.received[-1]
    assert (produced.api_key, produced.version) == (0, 12)
    assert produced.records == [("t", 0, b"txn-batch")]
    assert answer[TP].error is None  # type: ignore[index]
    assert answer[TP].base_offset == 0  # type: ignore[index]
    conn.close()
    await conn.wait_closed()


async def test_one_timer_times_out_every_request_in_flight(broker: FakeBroker) -> None:
    conn = await connect(broker, request_timeout=0.2)
    broker.hold = True
    first = produce(conn, b"a")
    timer = conn._timer
    second = produce(conn, b"b")
    assert conn._timer is timer  # the second request armed nothing
    results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 5)
    for result in results:
        assert isinstance(result, BrokerError)
        assert result.retriable
        assert result.possibly_written
    assert not conn.usable  # a timed-out connection is closed, as Java does


async def test_a_lost_connection_fails_what_is_in_flight_and_the_next_request_reconnects(
    broker: FakeBroker,
) -> None:
    conns = ProduceConnections(
        settings(), lambda node: ("127.0.0.1", broker.port), write_thread=_threads
    )
    broker.drop_on_produce = True
    with pytest.raises(BrokerError) as lost:
        await asyncio.wait_for(
            conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"x")])],
                          transactional_id=None, v12=False), 5)
    assert lost.value.retriable
    assert lost.value.possibly_written
    broker.drop_on_produce = False
    answer = await asyncio.wait_for(
        conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"y")])],
                      transactional_id=None, v12=False), 5)
    assert answer[TP].error is None
    assert broker.kinds().count(18) == 2  # a second connection, negotiated again
    await conns.close()


async def test_a_refused_connection_backs_off_and_fails_as_never_written() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    conns = ProduceConnections(
        settings(), lambda node: ("127.0.0.1", port), write_thread=_threads
    )
    errors = []
    for _ in range(2):  # refused, then refused at once within the back-off
        with pytest.raises(AioAccumError) as failed:
            await asyncio.wait_for(
                conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"x")])],
                              transactional_id=None, v12=False), 5)
        errors.append(failed.value)
    assert all(not e.possibly_written for e in errors)
    assert "reconnecting in" in str(errors[1])
    await conns.close()


async def test_a_node_missing_from_the_metadata_asks_for_a_refresh() -> None:
    # A broker that was down when the metadata was fetched is not in it; only a refresh brings
    # it back, so the error says the metadata is stale (the sender then refreshes it).
    conns = ProduceConnections(settings(), lambda node: None)
    with pytest.raises(BrokerError) as failed:
        await asyncio.wait_for(
            conns.produce(2, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"x")])],
                          transactional_id=None, v12=False), 5)
    assert "not in the cluster's metadata" in str(failed.value)
    assert failed.value.invalid_metadata
    assert failed.value.retriable
    assert not failed.value.possibly_written
    await conns.close()


async def test_sasl_plain_authenticates_before_producing() -> None:
    broker = FakeBroker()
    await broker.start()
    try:
        conn = await connect(broker, credentials=Credentials("PLAIN", "app", "secret"))
        await asyncio.wait_for(produce(conn, b"r"), 5)
        assert broker.kinds() == [18, 17, 36, 0]
        assert conn.authentications == 1
        conn.close()
        await conn.wait_closed()
        with pytest.raises(AuthenticationError) as refused:
            await connect(broker, credentials=Credentials("PLAIN", "app", "wrong"))
        assert "wrong" not in str(refused.value)
        assert not refused.value.possibly_written
    finally:
        await broker.close()


async def test_reauthentication_waits_for_requests_in_flight_and_holds_new_ones() -> None:
    broker = FakeBroker(session_lifetime_ms=1)  # every produce finds the session expired
    await broker.start()
    try:
        conn = await connect(broker, credentials=Credentials("PLAIN", "app", "secret"))
        conn._reauth_at = float("inf")
        broker.hold = True
        first = produce(conn, b"first")
        conn._reauth_at = 0.0  # the session ends now
        second = produce(conn, b"second")
        await asyncio.wait_for(broker.until(lambda b: b.kinds()[-1] == 17), 5)
        assert conn.in_flight == 2  # the produce request, then the handshake behind it
        broker.release()
        answers = await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert broker.kinds() == [18, 17, 36, 0, 17, 36, 0]
        assert [r.records[0][2] for r in broker.received if r.api_key == 0] == [
            b"first", b"second"
        ]
        assert all(a[TP].error is None for a in answers)  # type: ignore[index]
        assert conn.reauthentications == 1
        conn.close()
        await conn.wait_closed()
    finally:
        await broker.close()


# --- the buffer-lifetime rule (Java's KAFKA-19012)

_BIG = 8 * 1024 * 1024  # more than the socket buffers of both ends hold


async def test_acks0_completes_only_once_the_transport_has_let_go_of_the_buffer(
    broker: FakeBroker,
) -> None:
    conn = await connect(broker)
    broker.stop_reading()
    records = bytearray(b"A" * _BIG)
    fut = produce(conn, records, acks=0)
    assert not conn.flushed  # the transport holds part of it
    for _ in range(20):
        await asyncio.sleep(0)
    assert not fut.done()
    broker.resume_reading()
    await asyncio.wait_for(fut, 10)
    assert conn.flushed
    records[:] = b"B" * _BIG  # the pool may reuse the buffer now
    await asyncio.wait_for(broker.until(lambda b: b.kinds()[-1] == 0), 10)
    assert broker.received[-1].records[0][2] == b"A" * _BIG
    conn.close()
    await conn.wait_closed()


async def test_an_acks0_request_completes_once_written_with_requests_queued_behind_it(
    broker: FakeBroker,
) -> None:
    conn = await connect(broker)
    broker.stop_reading()
    first = produce(conn, bytearray(b"A" * _BIG), acks=0)
    second = produce(conn, bytearray(b"B" * _BIG), acks=1)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not first.done()
    broker.resume_reading()
    # The first completes once its own bytes are out, not when everything queued is.
    await asyncio.wait_for(first, 10)
    await asyncio.wait_for(second, 10)
    assert conn.flushed
    conn.close()
    await conn.wait_closed()


async def test_a_broker_that_stops_reading_holds_only_its_own_connections_writes() -> None:
    stalled, healthy = FakeBroker(), FakeBroker()
    await stalled.start()
    await healthy.start()
    ports = {1: stalled.port, 2: healthy.port}
    conns = ProduceConnections(
        settings(), lambda node: ("127.0.0.1", ports[node]), write_thread=_threads
    )
    try:
        for node in (1, 2):  # both connections open
            await asyncio.wait_for(
                conns.produce(node, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"w")])],
                              transactional_id=None, v12=False), 5)
        stalled.stop_reading()
        held = asyncio.ensure_future(
            conns.produce(1, acks=1, timeout_ms=1000,
                          batches=[(TP, [memoryview(bytearray(b"A" * _BIG))])],
                          transactional_id=None, v12=False))
        await asyncio.sleep(0.05)
        # Node 1's socket is full; node 2's request still goes out and is answered.
        answered = await asyncio.wait_for(
            conns.produce(2, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"ok")])],
                          transactional_id=None, v12=False), 5)
        assert answered is not None
        assert not held.done()
        stalled.resume_reading()
        await asyncio.wait_for(held, 10)
    finally:
        await conns.close()
        await stalled.close()
        await healthy.close()


async def test_cancelling_a_request_already_written_keeps_the_connection(
    broker: FakeBroker,
) -> None:
    conns = ProduceConnections(
        settings(), lambda node: ("127.0.0.1", broker.port), write_thread=_threads
    )
    await asyncio.wait_for(
        conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"warm-up")])],
                      transactional_id=None, v12=False), 5)
    conn = conns.connection(1)
    assert conn is not None
    broker.hold = True  # the broker reads it but does not answer yet
    task = asyncio.ensure_future(
        conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"small")])],
                      transactional_id=None, v12=False))
    await asyncio.wait_for(broker.until(lambda b: b.kinds().count(0) == 2), 5)
    assert conn.flushed  # every byte of it reached the socket
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert conn.usable  # nothing of it was held, so nothing to drop by closing
    broker.hold = False
    await conns.close()


async def test_a_request_given_up_while_queued_drops_its_bytes_before_the_caller_goes_on(
    broker: FakeBroker,
) -> None:
    conns = ProduceConnections(
        settings(),
        lambda node: ("127.0.0.1", broker.port),
        write_thread=_threads,
    )
    records = bytearray(b"A" * _BIG)
    await asyncio.wait_for(
        conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(b"warm-up")])],
                      transactional_id=None, v12=False), 5)
    conn = conns.connection(1)
    assert conn is not None
    broker.stop_reading()
    task = asyncio.ensure_future(
        conns.produce(1, acks=1, timeout_ms=1000, batches=[(TP, [memoryview(records)])],
                      transactional_id=None, v12=False))
    await asyncio.sleep(0)
    assert not conn.flushed
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Now the sender would hand the buffer back to the pool, which may fill it again.
    assert not conn.usable
    transport = conn._transport
    assert transport is None or transport.get_write_buffer_size() == 0
    records[:] = b"B" * _BIG
    broker.resume_reading()
    await asyncio.wait_for(conn.wait_closed(), 5)
    await asyncio.sleep(0.05)  # let the broker side read what reached it
    assert b"B" * 64 not in broker.raw
    await conns.close()


async def test_a_timed_out_request_fails_only_after_the_transport_dropped_its_bytes(
    broker: FakeBroker,
) -> None:
    conn = await connect(broker, request_timeout=0.2)
    broker.stop_reading()
    records = bytearray(b"A" * _BIG)
    fut = produce(conn, records)
    assert not conn.flushed
    seen: list[object] = []
    fut.add_done_callback(lambda _f: seen.append(conn._transport))
    with pytest.raises(BrokerError):
        await asyncio.wait_for(fut, 5)
    assert seen == [None]  # failed in connection_lost, after abort() dropped the queue
    records[:] = b"B" * _BIG
    broker.resume_reading()
    await asyncio.sleep(0.05)
    assert b"B" * 64 not in broker.raw


async def test_a_broker_silent_at_set_up_is_a_retriable_error_never_written() -> None:
    writers: list[asyncio.StreamWriter] = []
    silent = await asyncio.start_server(
        lambda reader, writer: writers.append(writer), "127.0.0.1", 0
    )
    port = silent.sockets[0].getsockname()[1]
    try:
        with pytest.raises(BrokerError) as failed:
            await asyncio.wait_for(
                open_connection("127.0.0.1", port, settings(request_timeout=0.2)), 5
            )
        assert failed.value.retriable
        assert not failed.value.possibly_written
    finally:
        for writer in writers:
            writer.close()
        silent.close()
        await silent.wait_closed()
