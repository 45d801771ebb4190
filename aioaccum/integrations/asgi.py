"""A producer that lives as long as an ASGI application: Starlette and FastAPI lifespans.

::

    from starlette.applications import Starlette
    from aioaccum.integrations.asgi import get_producer, producer_lifespan

    app = Starlette(routes=..., lifespan=producer_lifespan("kafka:9092", linger_ms=10))

    async def handler(request):
        producer = get_producer(request)
        await producer.send("events", await request.body())

The producer starts before the server takes requests and is flushed, then closed, after the last
request ended (the server drains connections before it runs the lifespan's shutdown). It is on
``app.state.producer`` and, with servers that support lifespan state, on ``request.state.producer``.
A lifespan of your own runs inside, via ``lifespan=``, so its startup can already send and its
shutdown still can.

Nothing here imports Starlette at run time: any framework that speaks the same lifespan protocol
(``lifespan(app)`` returning an async context manager) can use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from aioaccum.integrations._lifecycle import (
    DEFAULT_CLOSE_TIMEOUT_S,
    resolve_config,
    shutdown_producer,
    start_producer,
)
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

__all__ = ["get_producer", "producer_lifespan"]

AppT = TypeVar("AppT")
UserLifespan = Callable[[AppT], contextlib.AbstractAsyncContextManager[Mapping[str, Any] | None]]


def producer_lifespan(
    bootstrap_servers: str | Sequence[str] | None = None,
    *,
    lifespan: UserLifespan[AppT] | None = None,
    state_name: str = "producer",
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
    **producer_settings: Any,
) -> Callable[[AppT], contextlib.AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan that starts a :class:`~aioaccum.Producer` with the app and closes it after.

    Args:
        bootstrap_servers: Passed to the producer.
        lifespan: Your own lifespan, entered after the producer started and left before it
            closes; the state it yields is merged into the lifespan state.
        state_name: Attribute of ``app.state`` (and key of the lifespan state) for the producer.
        close_timeout: Seconds to flush and close on shutdown; records still unacknowledged
            then are failed, and their number is logged as a warning.
        **producer_settings: Any :class:`~aioaccum.config.ProducerConfig` setting, or
            ``config=`` (a ready config) and ``kafka=`` (an adapter, for tests).

    Returns:
        A callable for ``Starlette(lifespan=...)`` / ``FastAPI(lifespan=...)``. Each entry creates
        a new producer, since a closed producer cannot start again.

    Raises:
        ConfigError: At once, when a setting is invalid.
    """
    config, kafka = resolve_config(bootstrap_servers, producer_settings)

    @contextlib.asynccontextmanager
    async def run(app: AppT) -> AsyncIterator[dict[str, Any]]:
        producer = await start_producer(config, kafka)
        app_state = getattr(app, "state", None)
        try:
            if app_state is not None:
                setattr(app_state, state_name, producer)
            if lifespan is None:
                yield {state_name: producer}
            else:
                async with lifespan(app) as user_state:
                    yield {state_name: producer, **(user_state or {})}
        finally:
            await shutdown_producer(producer, close_timeout)

    return run


def get_producer(connection: HTTPConnection, state_name: str = "producer") -> Producer:
    """The producer a :func:`producer_lifespan` started, from a request or websocket.

    Raises:
        RuntimeError: No producer is there: the app was not given the lifespan, or the server
            did not run it.
    """
    found = getattr(connection.state, state_name, None)
    if found is None:
        found = getattr(connection.app.state, state_name, None)
    if not isinstance(found, Producer):
        raise RuntimeError(
            f"no aioaccum Producer under state name {state_name!r}: pass "
            "lifespan=producer_lifespan(...) to the app, and run it under a server that runs "
            "lifespans (uvicorn does unless started with --lifespan off)"
        )
    return found
