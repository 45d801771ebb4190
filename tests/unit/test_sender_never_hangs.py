"""A failure at any step of the sender's loop ends in typed errors and a producer that stops.

Each case makes one step raise an error aioaccum does not expect (a bug, a broken codec, an
adapter that misbehaves): placing a partition on its leader, compressing a batch, asking for
metadata, sending a request, reading an answer, deciding what an error means, asking for a
producer id. For every one the same promises hold: the record's future fails with an
``AioAccumError`` whose cause chain holds the original error; the producer is failed, so the next
``send()`` raises at once; ``flush()`` and ``close(timeout)`` return within their timeouts; every
buffer goes back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from aioaccum import AioAccumError, BrokerError, ProducerClosedError, ProducerFailedError
from aioaccum._core import codecs
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

TP0 = TopicPartition("t", 0)
CLUSTER = StaticCluster.uniform({"t": 3, "u": 3}, nodes=3)


class Boom(Exception):
    """The unexpected error each case injects."""


class UnreadableError(BrokerError):
    """A broker error whose code cannot be read: deciding what it means raises."""

    @property
    def errno(self) -> int:
        raise Boom("errno unreadable")

    @errno.setter
    def errno(self, _value: int) -> None:
        pass


class UnreadableAnswer:
    """A partition answer whose fields raise when read."""

    @property
    def error(self) -> None:
        raise Boom("answer unreadable")

    base_offset = 0
    log_append_time = -1


class Broken(FakeKafka):
    """A fake broker adapter with one step that raises."""

    step: str = ""

    def leader_for(self, tp: TopicPartition) -> int | None:
        if self.step == "leader":
            raise Boom("leader lookup")
        if self.step == "metadata" or (self.step == "metadata-beside-produce" and tp.topic == "u"):
            return None  # unknown: the sender asks for metadata, which raises
        return super().leader_for(tp)

    def request_metadata_update(self, topics: Sequence[str] = ()) -> None:
        if self.step in ("metadata", "metadata-beside-produce"):
            raise Boom("metadata request")
        super().request_metadata_update(topics)

    async def init_producer_id(self) -> tuple[int, int]:
        if self.step == "producer-id":
            raise Boom("producer id")
        return await super().init_producer_id()

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        if self.step == "produce":
            raise Boom("produce")
        answers = await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)
        if self.step == "answer":
            return {tp: UnreadableAnswer() for tp in answers}  # type: ignore[misc]
        if self.step == "error-answer":
            return {tp: PartitionResponse(UnreadableError("x"), -1, -1) for tp in answers}
        return answers


def _broken_gzip(_data: Any, _level: int | None = None) -> bytes:
    raise Boom("codec")


STEPS = [
    "leader",
    "compress",
    "metadata",
    "metadata-beside-produce",  # a request drained in the same turn is never started
    "produce",
    "answer",
    "error-answer",
    "producer-id",
]


async def _settled(future: Any) -> None:
    with contextlib.suppress(Exception):
        await future


def _caused_by_boom(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, Boom):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.mark.parametrize("step", STEPS)
async def test_a_failure_at_any_step_ends_in_typed_errors_and_a_stopped_producer(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = Broken(CLUSTER)
    fake.step = step
    # Lingering, so every batch is drained in one turn (with "u"'s metadata request).
    settings: dict[str, Any] = {"linger_ms": 20, "enable_idempotence": True}
    if step == "compress":
        monkeypatch.setitem(codecs._COMPRESS, codecs.CompressionType.GZIP, _broken_gzip)
        settings["compression_type"] = "gzip"
    producer = Producer("fake:9092", kafka=fake, **settings)
    await producer.start()
    loop = asyncio.get_running_loop()
    futures = [await producer.send("t", b"v%d" % i, partition=0) for i in range(3)]
    if step == "metadata-beside-produce":
        futures.append(await producer.send("u", b"w", partition=0))

    await asyncio.wait([asyncio.ensure_future(_settled(f)) for f in futures], timeout=5)
    pending = [f for f in futures if not f.done()]
    assert not pending, f"{len(pending)} record future(s) still pending after a {step} failure"
    for future in futures:
        error = future.exception()
        assert isinstance(error, ProducerFailedError), f"{step}: {error!r}"
        assert _caused_by_boom(error), f"{step}: the cause is not chained: {error!r}"

    with pytest.raises(ProducerFailedError, match="Boom") as refused:
        await producer.send("t", b"later", partition=0)
    assert isinstance(refused.value, ProducerClosedError)
    assert _caused_by_boom(refused.value)

    start = loop.time()
    with pytest.raises(ProducerFailedError):
        await producer.flush(timeout=1.0)
    await producer.close(timeout=1.0)
    assert loop.time() - start < 1.0
    assert fake.closed
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_a_flush_waiting_when_the_sender_fails_returns_with_every_record_ended() -> None:
    release = asyncio.Event()

    def gate(_request: object) -> asyncio.Future[None]:
        return asyncio.ensure_future(release.wait())  # type: ignore[arg-type]

    fake = Broken(CLUSTER, gate=gate)
    producer = Producer("fake:9092", kafka=fake, linger_ms=0)
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    flushing = asyncio.ensure_future(producer.flush())  # no timeout of its own
    await asyncio.sleep(0.01)
    fake.step = "answer"
    release.set()
    await asyncio.wait_for(flushing, 5)  # what it waited for has ended, if not well
    assert isinstance(future.exception(), AioAccumError)
    with pytest.raises(ProducerFailedError):
        await producer.flush()
    await producer.close(timeout=1.0)


async def test_close_returns_within_its_timeout_when_a_request_never_answers() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fake = FakeKafka(CLUSTER, gate=lambda _request: never)
    producer = Producer("fake:9092", kafka=fake, linger_ms=0, delivery_timeout_ms=60_000,
                        request_timeout_ms=30_000)
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    await asyncio.sleep(0.01)  # on the wire
    loop = asyncio.get_running_loop()
    start = loop.time()
    await producer.close(timeout=0.5)
    assert loop.time() - start < 0.6
    assert isinstance(future.exception(), ProducerClosedError)
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_close_without_timeout_ends_at_the_delivery_timeout_when_nothing_answers() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fake = FakeKafka(CLUSTER, gate=lambda _request: never)
    producer = Producer("fake:9092", kafka=fake, linger_ms=0, delivery_timeout_ms=3000,
                        request_timeout_ms=2000)
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await producer.close()
    # The record expires in flight at 3 s; its request only held a buffer, so close ends then.
    assert loop.time() - start < 3.1
    assert "delivery_timeout_ms=3000" in str(future.exception())
    assert producer.pool is not None
    assert producer.pool.available_memory() == producer.pool.total_memory


async def test_close_is_bounded_when_the_adapter_ignores_cancellation() -> None:
    class Stubborn(FakeKafka):
        stubborn = True

        async def produce(self, *args: Any, **kwargs: Any) -> dict[TopicPartition, Any]:
            while True:  # swallows cancellation while stubborn: a misbehaving network layer
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if not self.stubborn:
                        raise

        async def close(self) -> None:
            await asyncio.sleep(3600)  # and takes an hour to close

    fake = Stubborn(CLUSTER)
    producer = Producer("fake:9092", kafka=fake, linger_ms=0)
    await producer.start()
    future = await producer.send("t", b"v", partition=0)
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        await producer.close(timeout=0.5)
        # 0.5 s for the records, then at most a second each for the sender and the connections.
        assert loop.time() - start < 2.6
        assert isinstance(future.exception(), ProducerClosedError)
    finally:
        fake.stubborn = False  # lets the test's loop end its tasks


async def test_a_raising_record_callback_does_not_stop_the_producer() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    producer = Producer("fake:9092", kafka=FakeKafka(CLUSTER), linger_ms=0)
    async with producer:
        future = await producer.send("t", b"a", partition=0)

        def explode(_future: object) -> None:
            raise Boom("user callback")

        future.add_done_callback(explode)
        await future
        await asyncio.sleep(0)
        second = await producer.send("t", b"b", partition=0)
        assert (await second).offset == 1
    assert any(isinstance(c.get("exception"), Boom) for c in reported)
