"""SyncProducer against FakeKafka: threads, ordering, blocking on a full pool, errors, close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from aioaccum import (
    BufferExhaustedError,
    ProducerClosedError,
    ProducerTimeoutError,
    RecordTooLargeError,
    SerializationError,
    ThreadRecordFuture,
)
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.partitioner import default_partition
from aioaccum.sync import SyncProducer

from .fake_kafka import FakeKafka, Request

WAIT_S = 30.0


class Gate:
    """Holds every produce request until opened; safe to open from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._open = False
        self.seen = 0

    def __call__(self, request: Request) -> asyncio.Future[None] | None:
        with self._lock:
            self.seen += 1
            if self._open:
                return None
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._held.append((loop, fut))
            return fut

    def open(self) -> None:
        with self._lock:
            self._open = True
            held, self._held = self._held, []
        for loop, fut in held:
            if not loop.is_closed():  # a producer closed with a timeout left it behind
                loop.call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def fake(partitions: int = 6, gate: Gate | None = None) -> FakeKafka:
    return FakeKafka(StaticCluster.uniform({"t": partitions}, nodes=3), gate=gate)


@pytest.fixture
def held() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.open()


def test_threads_keep_their_order_per_partition() -> None:
    kafka = fake()
    per_thread, threads = 400, 4
    results: dict[int, list[ThreadRecordFuture]] = {}

    with SyncProducer("fake:9092", kafka=kafka, linger_ms=1, batch_size=1024) as producer:

        def work(n: int) -> None:
            results[n] = [
                producer.send("t", b"%d:%d" % (n, i), key=b"thread-%d" % n)
                for i in range(per_thread)
            ]

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        producer.flush()
    for n, futures in results.items():
        partition = default_partition(b"thread-%d" % n, 6)
        offsets = [f.result(0).offset for f in futures]
        assert [f.result(0).partition for f in futures] == [partition] * per_thread
        assert offsets == sorted(offsets)
        log = kafka.log[TopicPartition("t", partition)]
        mine = [r.value for r in log if r.key == b"thread-%d" % n]
        assert mine == [b"%d:%d" % (n, i) for i in range(per_thread)]
        assert [log[o].value for o in offsets] == mine


def test_send_blocks_while_the_pool_is_full_and_resumes_when_memory_returns(
    held: Gate,
) -> None:
    kafka = fake(partitions=1, gate=held)
    # Four 1 KiB buffers; each ~900-byte record fills a batch of its own.
    with SyncProducer(
        "fake:9092", kafka=kafka, batch_size=1024, buffer_memory=4096, linger_ms=0
    ) as producer:
        first = [producer.send("t", bytes(900)) for _ in range(4)]
        wait_until(lambda: producer.metrics()["buffer-available-bytes"] == 0, "a full pool")
        returned: list[ThreadRecordFuture] = []
        blocked = threading.Thread(target=lambda: returned.append(producer.send("t", bytes(900))))
        blocked.start()
        wait_until(lambda: producer.metrics()["waiting-threads"] == 1, "the send to wait")
        assert blocked.is_alive()
        assert not returned
        held.open()
        blocked.join(WAIT_S)
        assert len(returned) == 1
        offsets = [f.result(WAIT_S).offset for f in [*first, returned[0]]]
    assert offsets == [0, 1, 2, 3, 4]


def test_a_full_pool_raises_buffer_exhausted_in_the_caller_after_max_block_ms(
    held: Gate,
) -> None:
    kafka = fake(partitions=1, gate=held)
    with SyncProducer(
        "fake:9092", kafka=kafka, batch_size=1024, buffer_memory=2048, max_block_ms=200
    ) as producer:
        producer.send("t", bytes(900))
        producer.send("t", bytes(900))
        started = time.monotonic()
        with pytest.raises(BufferExhaustedError, match="200 ms"):
            producer.send("t", bytes(900))
        # uvloop (SyncProducer's default loop) keeps time in whole milliseconds, so its timer
        # may fire up to a millisecond before the monotonic clock says 200 ms have passed.
        assert time.monotonic() - started >= 0.2 - 0.002
        held.open()


def test_errors_reach_the_calling_thread_with_their_types() -> None:
    with SyncProducer(
        "fake:9092", kafka=fake(), max_block_ms=50, max_request_size=10_000
    ) as producer:
        with pytest.raises(ProducerTimeoutError, match="not present"):
            producer.send("no-such-topic", b"x")
        with pytest.raises(RecordTooLargeError, match="max_request_size=10000"):
            producer.send("t", bytes(20_000))
        with pytest.raises(SerializationError, match="value must be bytes"):
            producer.send("t", "text")
        with pytest.raises(SerializationError, match="header"):
            producer.send("t", b"x", headers=[("h", "text")])  # type: ignore[list-item]
        # Still usable after each of them.
        assert producer.send_and_wait("t", b"ok", timeout=WAIT_S).topic == "t"


def test_serializers_run_in_the_calling_thread() -> None:
    threads: set[int] = set()

    def serialize(value: object) -> bytes:
        threads.add(threading.get_ident())
        return str(value).encode()

    kafka = fake()
    with SyncProducer("fake:9092", kafka=kafka, value_serializer=serialize) as producer:
        producer.send_and_wait("t", {"a": 1}, key=b"k", timeout=WAIT_S)
    assert threads == {threading.get_ident()}
    assert [r.value for log in kafka.log.values() for r in log] == [b"{'a': 1}"]


def test_a_bytearray_is_copied_when_sent() -> None:
    kafka = fake()
    buffer = bytearray(b"before")
    with SyncProducer("fake:9092", kafka=kafka, linger_ms=50) as producer:
        producer.send_and_wait("t", b"warm-up", key=b"k", timeout=WAIT_S)
        future = producer.send("t", buffer, key=b"k")
        buffer[:] = b"after!"
        future.result(WAIT_S)
    assert [r.value for log in kafka.log.values() for r in log] == [b"warm-up", b"before"]


def test_calling_back_from_the_loop_thread_raises_instead_of_deadlocking(held: Gate) -> None:
    seen: list[BaseException] = []
    sent: list[ThreadRecordFuture] = []
    with SyncProducer("fake:9092", kafka=fake(gate=held)) as producer:
        future = producer.send("t", b"x")

        def callback(_: ThreadRecordFuture) -> None:
            # Appending never waits, so it is allowed on the loop thread; waiting is not.
            sent.append(producer.send("t", b"y"))
            for call in (producer.flush, producer.close):
                try:
                    call()
                except RuntimeError as exc:
                    seen.append(exc)

        future.add_done_callback(callback)
        held.open()
        future.result(WAIT_S)
        producer.flush(WAIT_S)
        assert len(sent) == 1
        assert sent[0].result(WAIT_S).offset == 1
    assert len(seen) == 2
    assert all("own event-loop thread" in str(exc) for exc in seen)


def test_a_send_that_would_block_the_loop_thread_raises() -> None:
    seen: list[BaseException] = []
    sent: list[ThreadRecordFuture] = []
    kafka = fake(partitions=1)
    # Two 1 KiB buffers; each ~900-byte record fills a batch of its own.
    with SyncProducer(
        "fake:9092", kafka=kafka, batch_size=1024, buffer_memory=2048, linger_ms=0
    ) as producer:

        def callback(_: ThreadRecordFuture) -> None:
            try:
                for _attempt in range(3):  # the third finds the pool empty
                    sent.append(producer.send("t", bytes(900)))
            except RuntimeError as exc:
                seen.append(exc)
            try:
                producer.send("no-such-topic", b"x")
            except RuntimeError as exc:
                seen.append(exc)

        producer.send("t", b"first").add_done_callback(callback)
        producer.flush(WAIT_S)
        assert len(sent) == 2
        assert [f.result(WAIT_S).offset for f in sent] == [1, 2]
    assert len(seen) == 2, seen
    assert all("would block the producer's own event-loop thread" in str(e) for e in seen)


def test_close_flushes_is_idempotent_and_joins_the_thread() -> None:
    kafka = fake()
    producer = SyncProducer("fake:9092", kafka=kafka, linger_ms=60_000, batch_size=1 << 20)
    futures = [producer.send("t", b"%d" % i, key=b"k") for i in range(100)]
    assert not any(f.done() for f in futures)
    producer.close()
    assert not producer._thread.is_alive()
    producer.close()
    assert [f.result(0).offset for f in futures] == list(range(100))
    assert kafka.closed
    assert producer.metrics()["record-send-total"] == 100
    with pytest.raises(ProducerClosedError):
        producer.send("t", b"late")
    with pytest.raises(ProducerClosedError):
        producer.flush()


def test_close_with_a_timeout_fails_what_the_broker_never_acknowledged(held: Gate) -> None:
    producer = SyncProducer("fake:9092", kafka=fake(gate=held), linger_ms=0)
    future = producer.send("t", b"x")
    wait_until(lambda: held.seen > 0, "the produce request")
    started = time.monotonic()
    producer.close(timeout=0.2)
    assert time.monotonic() - started < WAIT_S
    assert not producer._thread.is_alive()
    with pytest.raises(ProducerClosedError):
        future.result(0)


def test_flush_times_out_with_a_producer_timeout_error(held: Gate) -> None:
    with SyncProducer("fake:9092", kafka=fake(gate=held), linger_ms=0) as producer:
        producer.send("t", b"x")
        with pytest.raises(ProducerTimeoutError, match="flush"):
            producer.flush(timeout=0.1)
        held.open()
        producer.flush(WAIT_S)


def test_a_producer_that_cannot_start_raises_in_the_constructor() -> None:
    class Unreachable(FakeKafka):
        async def start(self) -> None:
            raise ProducerTimeoutError("no broker answered")

    with pytest.raises(ProducerTimeoutError, match="no broker answered"):
        SyncProducer("fake:9092", kafka=Unreachable(StaticCluster.uniform({"t": 1}, nodes=1)))
    assert not [t for t in threading.enumerate() if t.name == "aioaccum-sync"]
