"""The Starlette lifespan and the aiohttp cleanup context, against FakeKafka."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from starlette.applications import Starlette

from aioaccum import ConfigError, Producer
from aioaccum._core.cluster import StaticCluster
from aioaccum.integrations.aiohttp import PRODUCER_KEY, producer_context
from aioaccum.integrations.asgi import producer_lifespan

from .fake_kafka import FakeKafka, Request


def fake(**kwargs: object) -> FakeKafka:
    return FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1), **kwargs)  # type: ignore[arg-type]


def values(kafka: FakeKafka) -> list[bytes | None]:
    return [r.value for log in kafka.log.values() for r in log]


async def test_lifespan_runs_the_users_lifespan_inside_the_producers() -> None:
    kafka = fake()
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def mine(app: Starlette) -> AsyncIterator[dict[str, str]]:
        producer = app.state.producer
        assert isinstance(producer, Producer)
        await producer.send("t", b"from startup")
        events.append("user startup")
        yield {"mine": "x"}
        events.append("user shutdown")
        assert not kafka.closed
        await producer.send("t", b"from shutdown")

    app = Starlette(
        lifespan=producer_lifespan("fake:9092", kafka=kafka, linger_ms=60_000, lifespan=mine)
    )
    async with app.router.lifespan_context(app) as state:
        assert kafka.started
        assert state is not None
        assert state["producer"] is app.state.producer
        assert state["mine"] == "x"
        await app.state.producer.send("t", b"from a request")
        assert values(kafka) == []  # lingering: nothing sent until shutdown flushes
    assert events == ["user startup", "user shutdown"]
    assert kafka.closed
    assert values(kafka) == [b"from startup", b"from a request", b"from shutdown"]


async def test_a_failing_user_startup_still_closes_the_producer() -> None:
    kafka = fake()

    @contextlib.asynccontextmanager
    async def broken(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("database unreachable")
        yield

    app = Starlette(lifespan=producer_lifespan("fake:9092", kafka=kafka, lifespan=broken))
    with pytest.raises(RuntimeError, match="database unreachable"):
        async with app.router.lifespan_context(app):
            pass
    assert kafka.started
    assert kafka.closed


async def test_a_producer_that_cannot_start_fails_the_startup() -> None:
    class Unreachable(FakeKafka):
        async def start(self) -> None:
            raise ConnectionError("no broker")

    kafka = Unreachable(StaticCluster.uniform({"t": 1}, nodes=1))
    app = Starlette(lifespan=producer_lifespan("fake:9092", kafka=kafka))
    with pytest.raises(ConnectionError, match="no broker"):
        async with app.router.lifespan_context(app):
            pass
    assert getattr(app.state, "producer", None) is None


def test_invalid_settings_fail_when_the_app_is_defined() -> None:
    with pytest.raises(ConfigError, match="linger"):
        producer_lifespan("fake:9092", linger_ms=-1)
    with pytest.raises(ConfigError, match="linger"):
        producer_context("fake:9092", linger_ms=-1)


async def test_close_timeout_fails_and_logs_the_records_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    held: list[asyncio.Future[None]] = []

    def gate(request: Request) -> asyncio.Future[None]:
        held.append(asyncio.get_running_loop().create_future())
        return held[-1]

    kafka = fake(gate=gate)
    app = Starlette(lifespan=producer_lifespan("fake:9092", kafka=kafka, close_timeout=0.1))
    with caplog.at_level(logging.WARNING, logger="aioaccum.integrations"):
        async with app.router.lifespan_context(app):
            futures = [await app.state.producer.send("t", b"%d" % i) for i in range(3)]
    assert "3 record(s) were not acknowledged within close_timeout=0.1s" in caplog.text
    assert all(f.done() for f in futures)
    assert kafka.closed


async def test_aiohttp_cleanup_context_starts_and_flushes_the_producer() -> None:
    kafka = fake()
    app = web.Application()
    app.cleanup_ctx.append(producer_context("fake:9092", kafka=kafka, linger_ms=60_000))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        producer = app[PRODUCER_KEY]
        assert kafka.started
        future = await producer.send("t", b"hello")
        assert not future.done()
    finally:
        await runner.cleanup()
    assert (await future).offset == 0
    assert values(kafka) == [b"hello"]
    assert kafka.closed


def test_the_core_package_imports_no_web_framework() -> None:
    code = (
        "import sys, aioaccum, aioaccum.sync, aioaccum.producer; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'starlette', 'aiohttp', 'uvicorn', 'fastapi'}))"
    )
    # A fresh interpreter: this one has imported the integrations already.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
