"""The ASGI application assembled: the routes of v2 and v3 beside health and metrics, error
bodies for what no route answers, and the lifespan that owns the producer.

One producer per process, started before the first request is taken and flushed, then closed,
after the last one ended (the server drains connections before the lifespan's shutdown runs).
A :class:`~aioaccum._kafka.cluster_view.ClusterReader`
beside it answers topic and cluster questions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import aioaccum
from aioaccum import AioAccumError, Producer, ProducerState
from aioaccum._kafka.cluster_view import ClusterReader
from aioaccum.integrations._lifecycle import shutdown_producer, start_producer
from aioaccum.prometheus import ProducerCollector

from . import _v2, _v3
from ._auth import AuthFile
from ._errors import ErrorCode, RestError, error_response
from ._gateway import Draining, Gateway
from ._metrics import TopicsOf
from ._openapi import OPENAPI_PATH, document
from ._settings import ServeSettings

if TYPE_CHECKING:
    from ._schemas import SchemaResolver

__all__ = ["create_app"]

log = logging.getLogger("aioaccum.serve")


async def healthz(request: Request) -> Response:
    # The pid tells the workers of --workers apart.
    return JSONResponse({"status": "ok", "pid": os.getpid()})


async def openapi(request: Request) -> Response:
    # No credentials needed: the document describes the API, nothing of the cluster.
    return JSONResponse(request.app.state.openapi)


async def readyz(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    if gateway.producer.state is not ProducerState.RUNNING or gateway.draining.started.is_set():
        return error_response(
            RestError(503, ErrorCode.SERVICE_UNAVAILABLE, "the producer is not running")
        )
    try:
        snapshot = await gateway.probe()
    except AioAccumError as exc:
        return error_response(RestError(503, ErrorCode.BROKER_NOT_AVAILABLE, f"not ready: {exc}"))
    found: dict[str, object] = {"status": "ready"}
    # The cluster's id and brokers only to a caller who may see them: /readyz needs no
    # credentials, and they help an attacker map the cluster.
    if gateway.auth is None or _authenticated(gateway, request):
        found.update(cluster_id=snapshot.cluster_id, brokers=list(snapshot.brokers))
    return JSONResponse(found)


def _authenticated(gateway: Gateway, request: Request) -> bool:
    try:
        gateway.principal(request.headers)
    except RestError:
        return False
    return True


async def metrics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    try:
        principal = gateway.principal(request.headers)
    except RestError as error:
        return error_response(error)
    registry: CollectorRegistry = request.app.state.registry
    # A credential sees the series of its own topics only.
    source = registry if principal is None else TopicsOf(registry, principal)
    return Response(generate_latest(source), media_type=CONTENT_TYPE_LATEST)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    elif exc.status_code == 404:
        message = f"HTTP 404 Not Found: no route {request.url.path}"
    else:
        message = str(exc.detail)
    return JSONResponse(
        {"error_code": exc.status_code, "message": message},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    # The server logs the exception with its traceback; the client gets REST Proxy's body.
    return error_response(
        RestError(
            500,
            ErrorCode.INTERNAL,
            f"internal server error ({type(exc).__name__}); the server's log has the details",
        )
    )


def _failed_records(producer: Producer) -> int:
    """Records that failed since the producer started (a lifetime total, kept even with
    metrics_enabled=False)."""
    return int(producer.metrics().get("record-error-total", 0.0))


async def _flush_when_draining(gateway: Gateway) -> None:
    """Send what is buffered as soon as a shutdown starts: requests in flight wait for those
    acknowledgements, and would otherwise wait out a long linger.ms into the grace period."""
    await gateway.draining.started.wait()
    try:
        await gateway.producer.flush(gateway.settings.shutdown_grace_ms / 1000)
    except (TimeoutError, AioAccumError) as exc:
        # The lifespan's own flush, with close.timeout.ms, tries again and reports the loss.
        log.warning("flush at the start of the shutdown did not complete: %r", exc)


class GatewayCollector(Collector):
    """The gateway's own series beside the producer's: requests being served, records taken."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        gateway = self._gateway
        yield GaugeMetricFamily(
            "aioaccum_serve_requests_in_flight",
            "Produce requests being read, sent or waiting for acknowledgements",
            value=gateway.in_flight,
        )
        yield CounterMetricFamily(
            "aioaccum_serve_records_accepted",
            "Records handed to the producer (each is then acknowledged or failed)",
            value=gateway.records_accepted,
        )
        yield GaugeMetricFamily(
            "aioaccum_serve_body_bytes_held",
            "Bytes of request bodies held before they reach the producer",
            value=gateway.budget.held,
        )


def _schema_resolver(settings: ServeSettings) -> SchemaResolver | None:
    """The registry behind the schema formats, when schema.registry.url is set."""
    url = settings.schema_registry_url
    if url is None:
        return None
    # Imported only then: the schema formats need the schemas extra (aiohttp, fastavro ...).
    from aioaccum.schemas.registry import SchemaRegistryClient

    from ._schemas import SchemaResolver

    basic_auth = None
    user_info = settings.schema_registry_basic_auth_user_info
    if user_info is not None and settings.schema_registry_basic_auth_credentials_source != "URL":
        user, _, password = user_info.partition(":")
        basic_auth = (user, password)
    client = SchemaRegistryClient(
        url, basic_auth=basic_auth, timeout=settings.schema_registry_timeout_ms / 1000
    )
    return SchemaResolver(client)


def create_app(settings: ServeSettings) -> Starlette:
    """The gateway for one process: routes, and a lifespan that starts and stops its producer.

    Args:
        settings: What :class:`ServeSettings` parsed; the producer's config is built from its
            properties.

    Raises:
        ConfigError: At once, when the auth file is malformed.
    """
    auth = AuthFile.load(settings.auth_file) if settings.auth_file is not None else None
    draining = Draining()
    registry = CollectorRegistry()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        config = settings.producer_config
        reader = ClusterReader(config)
        await reader.start()
        try:
            producer = await start_producer(config, None)
            failed_before = 0
            try:
                gateway = Gateway(
                    settings, producer, reader, auth, draining, _schema_resolver(settings)
                )
                app.state.gateway = gateway
                collectors = [ProducerCollector(producer), GatewayCollector(gateway)]
                for collector in collectors:
                    registry.register(collector)
                flusher = asyncio.ensure_future(_flush_when_draining(gateway))
                try:
                    yield
                finally:
                    flusher.cancel()
                    # Failures from here on reach no client that could send the record again
                    # (those answered 503 at the grace's end were told it may still be written).
                    failed_before = _failed_records(producer)
                    for collector in collectors:
                        registry.unregister(collector)
            finally:
                dropped = await shutdown_producer(producer, settings.close_timeout_ms / 1000)
                failed = _failed_records(producer) - failed_before
                if failed > dropped:
                    log.warning(
                        "%d record(s) failed while the producer flushed at shutdown "
                        "(delivery timeout or broker refusals; see above)",
                        failed - dropped,
                    )
                    dropped = failed
                # The exit status says whether accepted records were lost (see _run).
                app.state.dropped = dropped
                app.state.shutdown_ran = True
                log.info("worker %d drained: %d record(s) dropped", os.getpid(), dropped)
        finally:
            await reader.close()

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route(OPENAPI_PATH, openapi, methods=["GET"]),
            *_v2.routes(),
            *_v3.routes(),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    # A path with a trailing slash is 404, not a redirect built from the Host header.
    app.router.redirect_slashes = False
    app.state.draining = draining
    app.state.dropped = 0
    app.state.shutdown_ran = False
    app.state.registry = registry
    app.state.openapi = document(aioaccum.__version__)
    return app
