"""An HTTP front door to a Kafka topic: POST a body, it becomes a record.

Run it with uvicorn (``pip install aioaccum[web,prometheus]``)::

    AIOACCUM_BOOTSTRAP=127.0.0.1:19092 EVENTS_TOPIC=events \\
        uvicorn --factory examples.events_service:create_app --host 127.0.0.1 --port 8000

    curl -X POST --data-binary 'hello' 'http://127.0.0.1:8000/events?key=user-1'
    curl -X POST --data-binary 'hello' 'http://127.0.0.1:8000/events?wait=true'

``POST /events`` answers ``202`` once the record is buffered, or, with ``?wait=true``, ``200``
with ``{"topic", "partition", "offset"}`` once the broker acknowledged it. ``?key=`` sets the
record key. When the producer's buffer stays full for ``max.block.ms`` the answer is ``503``
with ``Retry-After``; a metadata or delivery timeout is ``504``; a body larger than
``max.request.size`` is ``413``. Errors are JSON: ``{"error": <type>, "message": <text>}``.
``GET /metrics`` shows the producer's metrics in Prometheus' text format
(``kafka_producer_record_send_total{client_id="..."}`` and the rest, see docs/observability.md),
and ``GET /metrics.json`` the same by Java name as JSON. On SIGTERM the server stops taking
requests, finishes the open ones and flushes every accepted record before it exits.

Environment:
    AIOACCUM_BOOTSTRAP      bootstrap servers (default 127.0.0.1:9092)
    EVENTS_TOPIC            topic to write to (default "events")
    EVENTS_PRODUCER_PROPS   Java-style producer properties, comma separated, e.g.
                            "linger.ms=10,compression.type=lz4,buffer.memory=8388608"
    EVENTS_CLOSE_TIMEOUT_S  seconds to flush on shutdown (default 25)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioaccum import AioAccumError, RecordMetadata, RecordTooLargeError
from aioaccum.integrations.asgi import get_producer, producer_lifespan
from aioaccum.prometheus import ProducerCollector

from ._common import TRUE_WORDS, ServiceSettings, error_answer

log = logging.getLogger("events_service")


def error_response(exc: AioAccumError) -> JSONResponse:
    """The HTTP answer for an error of the producer's."""
    answer = error_answer(exc)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


def _log_failure(future: asyncio.Future[RecordMetadata]) -> None:
    # The client already has its 202; the log is the only place this failure can go.
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.warning("an accepted event was not delivered: %s: %s", type(exc).__name__, exc)


def create_app(environ: Mapping[str, str] | None = None) -> Starlette:
    """The service, configured from ``environ`` (default: the process environment)."""
    settings = ServiceSettings.from_environ(os.environ if environ is None else environ)
    topic, config = settings.topic, settings.config
    # The app's own registry: one app, one producer, one set of series.
    registry = CollectorRegistry()

    @contextlib.asynccontextmanager
    async def exporting(app: Starlette) -> AsyncIterator[None]:
        # Runs inside the producer's lifespan: the producer is started here, and still open
        # until after this ends.
        collector = ProducerCollector(app.state.producer)
        registry.register(collector)
        try:
            yield
        finally:
            registry.unregister(collector)

    async def post_event(request: Request) -> JSONResponse:
        producer = get_producer(request)
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > config.max_request_size:
            # Refuse before reading a body that could never be sent.
            return error_response(
                RecordTooLargeError(
                    f"the body is {length} bytes, larger than max_request_size="
                    f"{config.max_request_size}"
                )
            )
        body = await request.body()
        key = request.query_params.get("key")
        wait = request.query_params.get("wait", "").lower() in TRUE_WORDS
        try:
            future = await producer.send(
                topic, body, key=None if key is None else key.encode()
            )
            if not wait:
                future.add_done_callback(_log_failure)
                return JSONResponse({"status": "accepted", "topic": topic}, status_code=202)
            # Shielded: a client that goes away must not cancel the record's own future.
            metadata = await asyncio.shield(future)
        except AioAccumError as exc:
            return error_response(exc)
        return JSONResponse(
            {"topic": metadata.topic, "partition": metadata.partition, "offset": metadata.offset}
        )

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def metrics_json(request: Request) -> JSONResponse:
        return JSONResponse(get_producer(request).metrics())

    return Starlette(
        routes=[
            Route("/events", post_event, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/metrics.json", metrics_json, methods=["GET"]),
        ],
        lifespan=producer_lifespan(
            config=config, close_timeout=settings.close_timeout, lifespan=exporting
        ),
    )
