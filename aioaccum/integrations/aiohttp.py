"""A producer that lives as long as an aiohttp application, as a cleanup context.

::

    from aiohttp import web
    from aioaccum.integrations.aiohttp import PRODUCER_KEY, producer_context

    app = web.Application()
    app.cleanup_ctx.append(producer_context("kafka:9092", linger_ms=10))

    async def handler(request: web.Request) -> web.Response:
        producer = request.app[PRODUCER_KEY]        # typed: Producer
        await producer.send("events", await request.read())
        return web.Response(status=202)

The producer starts with the application and, on shutdown, after aiohttp has drained the
connections, is flushed and then closed within ``close_timeout``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from aiohttp import web

from aioaccum.integrations._lifecycle import (
    DEFAULT_CLOSE_TIMEOUT_S,
    resolve_config,
    shutdown_producer,
    start_producer,
)
from aioaccum.producer import Producer

__all__ = ["PRODUCER_KEY", "producer_context"]

PRODUCER_KEY: web.AppKey[Producer] = web.AppKey("aioaccum_producer", Producer)


def producer_context(
    bootstrap_servers: str | Sequence[str] | None = None,
    *,
    key: web.AppKey[Producer] = PRODUCER_KEY,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
    **producer_settings: Any,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context for ``app.cleanup_ctx.append(...)`` that owns one producer.

    Args:
        bootstrap_servers: Passed to the producer.
        key: Where the producer goes in the application (use your own ``web.AppKey`` to run
            several producers).
        close_timeout: Seconds to flush and close on shutdown; records still unacknowledged
            then are failed, and their number is logged as a warning.
        **producer_settings: Any :class:`~aioaccum.config.ProducerConfig` setting, or
            ``config=`` (a ready config) and ``kafka=`` (an adapter, for tests).

    Raises:
        ConfigError: At once, when a setting is invalid.
    """
    config, kafka = resolve_config(bootstrap_servers, producer_settings)

    async def context(app: web.Application) -> AsyncIterator[None]:
        producer = await start_producer(config, kafka)
        app[key] = producer
        try:
            yield
        finally:
            await shutdown_producer(producer, close_timeout)

    return context
