"""What a person reading the log sees: one message per trouble a minute, aiokafka's echoes at
DEBUG."""

from __future__ import annotations

import logging

import pytest

from aioaccum import ProducerTimeoutError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum._kafka.logs import REPEAT_EVERY_S, Throttle, demote_aiokafka_noise
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka


def test_a_throttle_says_yes_once_then_once_an_interval_with_the_count_held_back() -> None:
    now = [0.0]
    throttle = Throttle(60.0, clock=lambda: now[0])
    assert throttle.allow("t") == 0
    for _ in range(5):
        now[0] += 10.0
        assert throttle.allow("t") is None
    assert throttle.allow("other") == 0  # keys are apart
    now[0] += 10.0
    assert throttle.allow("t") == 5
    assert throttle.allow("t") is None


def test_aiokafka_noise_is_demoted_to_debug_and_the_rest_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    demote_aiokafka_noise()
    client = logging.getLogger("aiokafka")  # aiokafka.client logs under this name
    caplog.set_level(logging.WARNING)
    client.error('Unable connect to "%s:%s": %s', "127.0.0.1", 9, "refused")
    client.error("something aioaccum does not expect: %s", "x")
    assert [r.getMessage() for r in caplog.records] == ["something aioaccum does not expect: x"]
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    client.error('Unable connect to "%s:%s": %s', "127.0.0.1", 9, "refused")
    [record] = caplog.records
    assert record.levelname == "DEBUG"
    assert "Unable connect" in record.getMessage()


@pytest.mark.looptime
async def test_a_broker_failing_every_request_is_told_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Down(FakeKafka):
        async def produce(self, *args: object, **kwargs: object) -> dict[
            TopicPartition, PartitionResponse
        ]:
            self.requests_failed += 1
            raise ProducerTimeoutError("request timed out after 1000 ms")

        requests_failed = 0

    fake = Down(StaticCluster.uniform({"t": 1}, nodes=1))
    caplog.set_level(logging.WARNING, logger="aioaccum")
    producer = Producer("fake:9092", kafka=fake, linger_ms=0, retry_backoff_ms=100,
                        retry_backoff_max_ms=100, delivery_timeout_ms=30_000,
                        request_timeout_ms=1000)
    async with producer:
        future = await producer.send("t", b"v", partition=0)
        with pytest.raises(ProducerTimeoutError):
            await future
    assert fake.requests_failed >= 20
    told = [r.getMessage() for r in caplog.records if "produce request to broker 0" in
            r.getMessage()]
    # Looptime runs the loop's clock; the throttle reads the real one, which barely moved.
    assert len(told) == 1, told
    assert "delivery_timeout_ms" in told[0]
    assert REPEAT_EVERY_S == 60.0


@pytest.mark.looptime
async def test_a_producer_id_late_at_start_is_quiet_and_one_that_never_comes_is_told_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Loading(FakeKafka):
        refusals = 0
        refuse_first = 0

        async def init_producer_id(self) -> tuple[int, int]:
            if self.refusals < self.refuse_first:
                self.refusals += 1
                raise broker_error_for_code(Errors.COORDINATOR_LOAD_IN_PROGRESS)
            return 7, 0

    caplog.set_level(logging.DEBUG, logger="aioaccum")
    for refuse_first, warnings in ((3, 0), (40, 1)):
        caplog.clear()
        fake = Loading(StaticCluster.uniform({"t": 1}, nodes=1))
        fake.refuse_first = refuse_first
        producer = Producer("fake:9092", kafka=fake, linger_ms=0, retry_backoff_ms=10,
                            retry_backoff_max_ms=50)
        async with producer:
            await (await producer.send("t", b"v", partition=0))
        assert fake.refusals == refuse_first
        told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(told) == warnings, told
        quiet = [r for r in caplog.records if "InitProducerId failed" in r.getMessage()]
        assert {r.levelno for r in quiet} == {logging.DEBUG}
        if warnings:
            assert "no producer id after 5 attempts" in told[0]
