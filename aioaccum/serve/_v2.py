"""REST Proxy's v2 API: produce to a topic or a partition, list and describe topics.

``POST /topics/{topic}`` and ``POST /topics/{topic}/partitions/{partition}`` take
``{"records": [{"key": K, "value": V, "partition": P}, ...]}`` in one of two embedded formats,
named by the ``Content-Type``:

* ``application/vnd.kafka.binary.v2+json``: key and value are base64 strings (also the format
  of ``application/json`` and ``application/vnd.kafka.v2+json``, as in REST Proxy);
* ``application/vnd.kafka.json.v2+json``: key and value are any JSON, written to Kafka as
  compact UTF-8 JSON.

The answer comes once every record has an outcome, one ``offsets`` entry per record in order:
``{"partition", "offset", "error_code": null, "error": null}``, or for a failed record
REST Proxy's code (50003 retriable, 50002 not, 40301, 40101) and the reason. When no record
got through, the whole answer is the first record's error instead (429 with ``Retry-After``
when the buffer stayed full, 413, 503 ...), so that a total failure is never a 200.

Avro, Protobuf and JSON Schema (``application/vnd.kafka.avro.v2+json`` ...) are written through
the schema registry of ``schema.registry.url`` (see ``_v2_schemas``); without one they are
answered 415, as is any other type.

The bytes of a request count against ``body.budget.bytes`` from the moment they arrive (not
the length it declares) until its last record is in the producer's buffer: first the body,
then its text and the records parsed from it (see ``_v2_body``).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from aioaccum import FutureRecordMetadata

from ._errors import (
    ErrorCode,
    RestError,
    error_response,
    record_error_code,
    topic_not_found,
)
from ._gateway import STOPS_THE_REST, Gateway
from ._v2_body import Record, budget_full, parse_body, parse_records, recharge
from ._v2_schemas import SCHEMA_MEDIA, encode_records, schema_format

__all__ = [
    "V2_CONTENT_TYPE",
    "describe_topic",
    "list_topics",
    "parse_records",
    "produce",
    "recharge",
    "routes",
]

log = logging.getLogger("aioaccum.serve")

V2_CONTENT_TYPE = "application/vnd.kafka.v2+json"

_BINARY_TYPES = frozenset(
    {
        "application/vnd.kafka.binary.v2+json",
        "application/vnd.kafka.binary.v2",
        "application/vnd.kafka.v2+json",
        "application/vnd.kafka+json",
        "application/json",
        "application/octet-stream",
    }
)
_JSON_TYPES = frozenset({"application/vnd.kafka.json.v2+json", "application/vnd.kafka.json.v2"})
def answer(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers=headers, media_type=V2_CONTENT_TYPE)


def _embedded_format(content_type: str | None, gateway: Gateway) -> str:
    """``"binary"``, ``"json"``, or a schema format (``"AVRO"``, ``"PROTOBUF"``,
    ``"JSONSCHEMA"``) when the server has a registry; the 415 for anything else."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _BINARY_TYPES:
        return "binary"
    if media in _JSON_TYPES:
        return "json"
    fmt = schema_format(media)
    if fmt is not None and gateway.schemas is not None:
        return fmt
    if fmt is not None or any(f".{name}." in media for name in SCHEMA_MEDIA):
        why = (
            f"{media} needs a schema registry, and this server has none configured "
            "(--schema-registry-url, or schema.registry.url in --config); send the records "
            "already serialized, as application/vnd.kafka.binary.v2+json (base64)"
        )
    elif ".v1" in media:
        why = f"{media} is REST Proxy's v1 API, which this server does not serve; use v2"
    else:
        why = (
            f"Content-Type {media or '(none)'} is not a produce format; use "
            "application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        )
    raise RestError(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, why)


async def read_body(request: Request, gateway: Gateway) -> tuple[bytes, int]:
    """The request's body, within the server's byte budget and ``max.body.bytes``, and how many
    budget bytes it holds: the caller gives them back (a failure here gives them back itself).

    Raises:
        RestError: 413 when the body is too large (said by Content-Length before any is read),
            429 when the server holds too many bytes of bodies already, 408 when the whole body
            did not arrive within ``read.timeout.ms``, 400 when the client went away (answered
            to nobody).
    """
    settings = gateway.settings
    limit = settings.max_body_bytes
    length_header = request.headers.get("content-length")
    declared = int(length_header) if length_header and length_header.isdigit() else None
    if declared is not None and declared > limit:
        raise _too_large(declared, limit)
    budget = gateway.budget
    # Bytes are taken as they arrive, never for a declared length: a client that declares a
    # large body and sends nothing holds nothing.
    taken = 0
    try:
        chunks: list[bytes] = []
        size = 0
        # One deadline for the whole body: a client trickling a byte at a time holds its
        # budget no longer than one that sends nothing.
        async with asyncio.timeout(settings.read_timeout_ms / 1000):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit)
                if not budget.take_nowait(len(chunk)):
                    raise budget_full(budget.total)
                taken = size
                chunks.append(chunk)
    except TimeoutError:
        budget.give(taken)
        raise RestError(
            408,
            ErrorCode.REQUEST_TIMEOUT,
            f"the request body did not arrive within read.timeout.ms={settings.read_timeout_ms} "
            "ms",
        ) from None
    except ClientDisconnect:
        budget.give(taken)
        log.info(
            "%s %s: the client went away after %d of its body's bytes",
            request.method,
            request.url.path,
            size,
        )
        raise RestError(
            400, ErrorCode.BAD_REQUEST, "the client went away before its body's end"
        ) from None
    except BaseException:
        budget.give(taken)
        raise
    return b"".join(chunks), taken


def _too_large(size: int, limit: int) -> RestError:
    return RestError(
        413,
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"the request body is {size} bytes, more than max.body.bytes={limit}: send fewer "
        "records per request",
    )


async def produce(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    with gateway.serving():
        return await _produce(request, gateway)


async def _produce(request: Request, gateway: Gateway) -> Response:
    topic = request.path_params["topic"]
    path_partition: int | None = request.path_params.get("partition")
    held = 0
    key_id: int | None = None
    value_id: int | None = None
    try:
        try:
            gateway.authorize(request.headers, topic)
            embedded = _embedded_format(request.headers.get("content-type"), gateway)
            info = await gateway.topic(topic)
            if path_partition is not None:
                # The path's partition must exist even when every record names its own.
                gateway.check_partition(info, path_partition)
            # The body goes to the parser without a reference kept here (its bytes are freed
            # once its text is made); the records stay in the budget until they are in the
            # producer's buffer.
            fields: dict[str, object] = {}
            records, held = await parse_body(
                await read_body(request, gateway),
                embedded,
                gateway.settings.max_records_per_request,
                gateway.budget,
                fields,
            )
            if embedded not in ("binary", "json"):
                records, held, key_id, value_id = await encode_records(
                    gateway, topic, embedded, fields, records, held
                )
            for record in records:
                gateway.check_partition(
                    info, path_partition if record.partition is None else record.partition
                )
        except RestError as error:
            return error_response(error, V2_CONTENT_TYPE)
        futures, failures = await _send_all(gateway, topic, path_partition, records)
        del records
    finally:
        gateway.budget.give(held)
    return await _answer_outcomes(gateway, futures, failures, key_id, value_id)




async def _send_all(
    gateway: Gateway, topic: str, path_partition: int | None, records: list[Record]
) -> tuple[list[FutureRecordMetadata], dict[int, RestError]]:
    futures: list[FutureRecordMetadata] = []
    failures: dict[int, RestError] = {}
    for index, record in enumerate(records):
        partition = path_partition if record.partition is None else record.partition
        try:
            futures.append(
                await gateway.send(topic, record.key, record.value, partition=partition)
            )
        except RestError as error:
            failures[index] = error
            if error.code in STOPS_THE_REST:
                # None of the records after this one is sent; each gets this error.
                for later in range(index + 1, len(records)):
                    failures[later] = error
                break
    return futures, failures


async def _answer_outcomes(
    gateway: Gateway,
    futures: list[FutureRecordMetadata],
    failures: dict[int, RestError],
    key_id: int | None,
    value_id: int | None,
) -> Response:
    outcomes = iter(await gateway.settle(futures))
    offsets: list[dict[str, object]] = []
    first_error: RestError | None = None
    delivered = 0
    for index in range(len(failures) + len(futures)):
        outcome = failures[index] if index in failures else next(outcomes)
        if isinstance(outcome, RestError):
            first_error = first_error or outcome
            offsets.append(
                {
                    "partition": None,
                    "offset": None,
                    "error_code": int(record_error_code(outcome)),
                    "error": str(outcome),
                }
            )
        else:
            delivered += 1
            offsets.append(
                {
                    "partition": outcome.partition,
                    "offset": outcome.offset,
                    "error_code": None,
                    "error": None,
                }
            )
    if delivered == 0 and first_error is not None:
        return error_response(first_error, V2_CONTENT_TYPE)
    return answer({"key_schema_id": key_id, "value_schema_id": value_id, "offsets": offsets})


async def list_topics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    try:
        principal = gateway.principal(request.headers)
        snapshot = await gateway.describe(None)
    except RestError as error:
        return error_response(error, V2_CONTENT_TYPE)
    names = sorted(
        name
        for name, info in snapshot.topics.items()
        if not info.internal and (principal is None or principal.may_write(name))
    )
    return answer(names)


async def describe_topic(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    topic = request.path_params["topic"]
    try:
        gateway.authorize(request.headers, topic)
        snapshot = await gateway.describe([topic])
    except RestError as error:
        return error_response(error, V2_CONTENT_TYPE)
    info = snapshot.topics.get(topic)
    if info is None:
        return error_response(topic_not_found(topic), V2_CONTENT_TYPE)
    return answer(
        {
            "name": info.name,
            "configs": {},
            "partitions": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": [
                        {"broker": r, "leader": r == p.leader, "in_sync": r in p.isr}
                        for r in p.replicas
                    ],
                }
                for p in info.partitions
            ],
        }
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/topics", list_topics, methods=["GET"]),
        Route("/topics/{topic}", describe_topic, methods=["GET"]),
        Route("/topics/{topic}", produce, methods=["POST"]),
        Route("/topics/{topic}/partitions/{partition:int}", produce, methods=["POST"]),
    ]
