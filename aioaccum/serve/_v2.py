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

Avro, Protobuf and JSON Schema need a schema registry, which this gateway does not use: they
are answered 415, as is any other type.

The bytes of a request count against ``body.budget.bytes`` from the moment they are read until
its last record is in the producer's buffer: first the body, then the parsed records.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, NamedTuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from aioaccum import FutureRecordMetadata

from ._errors import (
    RETRY_AFTER_FULL_S,
    ErrorCode,
    RestError,
    error_response,
    invalid_payload,
    record_error_code,
    topic_not_found,
)
from ._gateway import STOPS_THE_REST, ByteBudget, Gateway
from ._records import decode_json, encode_json

__all__ = ["V2_CONTENT_TYPE", "describe_topic", "list_topics", "produce", "routes"]

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
_SCHEMA_FORMATS = ("avro", "protobuf", "jsonschema")
# What a parsed record costs beyond its key and value bytes (the tuple and two bytes objects),
# charged to the budget with them.
_RECORD_OVERHEAD = 128


class _Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    partition: int | None


def answer(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers=headers, media_type=V2_CONTENT_TYPE)


def _embedded_format(content_type: str | None) -> str:
    """``"binary"`` or ``"json"``, or the 415 for anything else."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _BINARY_TYPES:
        return "binary"
    if media in _JSON_TYPES:
        return "json"
    if any(f".{name}." in media for name in _SCHEMA_FORMATS):
        why = (
            f"{media} needs a schema registry, which this server does not use; send the "
            "records already serialized, as application/vnd.kafka.binary.v2+json (base64)"
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
            did not arrive within ``read.timeout.ms``.
    """
    settings = gateway.settings
    limit = settings.max_body_bytes
    length_header = request.headers.get("content-length")
    declared = int(length_header) if length_header and length_header.isdigit() else None
    if declared is not None and declared > limit:
        raise _too_large(declared, limit)
    budget = gateway.budget
    taken = 0
    try:
        if declared is not None:
            if not budget.take_nowait(declared):
                raise _budget_full(budget.total)
            taken = declared
        chunks: list[bytes] = []
        size = 0
        # One deadline for the whole body: a client trickling a byte at a time holds its
        # budget no longer than one that sends nothing.
        async with asyncio.timeout(settings.read_timeout_ms / 1000):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit)
                if size > taken:
                    # Chunked, or longer than it said: take the rest as it comes.
                    if not budget.take_nowait(size - taken):
                        raise _budget_full(budget.total)
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
    except BaseException:
        budget.give(taken)
        raise
    return b"".join(chunks), taken


def recharge(budget: ByteBudget, held: int, size: int) -> int:
    """Hold ``size`` budget bytes instead of ``held``; returns what is held now.

    Raises:
        RestError: 429 when the budget cannot grow to ``size`` (``held`` is still held).
    """
    if size > held:
        if not budget.take_nowait(size - held):
            raise _budget_full(budget.total)
    else:
        budget.give(held - size)
    return size


def _too_large(size: int, limit: int) -> RestError:
    return RestError(
        413,
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"the request body is {size} bytes, more than max.body.bytes={limit}: send fewer "
        "records per request",
    )


def _budget_full(total: int) -> RestError:
    return RestError(
        429,
        ErrorCode.TOO_MANY_REQUESTS,
        f"the server holds {total} bytes of request bodies (body.budget.bytes) already; retry "
        f"after {RETRY_AFTER_FULL_S} s",
        retry_after=RETRY_AFTER_FULL_S,
    )


def parse_records(body: bytes, embedded: str, max_records: int) -> list[_Record]:
    """The records of a v2 produce body.

    Raises:
        RestError: 400 for a body that is not JSON, 422 for JSON of the wrong shape or a key or
            value that is not base64 (binary format), 413 for more than ``max_records``.
    """
    if not body.strip():
        raise invalid_payload("the request body is empty; send {\"records\": [...]}")
    document = decode_json(body, "the request body")
    records = document.get("records") if isinstance(document, dict) else None
    if not isinstance(records, list) or not records:
        raise invalid_payload(
            "the body must be an object with a non-empty list \"records\", e.g. "
            "{\"records\": [{\"value\": ...}]}"
        )
    if len(records) > max_records:
        raise RestError(
            413,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the request has {len(records)} records, more than max.records.per.request="
            f"{max_records}: send them in several requests",
        )
    parsed: list[_Record] = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise invalid_payload(f"records[{index}] is {type(record).__name__}, not an object")
        partition = record.get("partition")
        if partition is not None and (type(partition) is not int or partition < 0):
            raise invalid_payload(
                f"records[{index}].partition must be a partition number (an integer >= 0), "
                f"not {partition!r}"
            )
        parsed.append(
            _Record(
                _field(record, "key", embedded, index),
                _field(record, "value", embedded, index),
                partition,
            )
        )
    return parsed


def _field(record: dict[str, Any], name: str, embedded: str, index: int) -> bytes | None:
    data = record.get(name)
    if data is None:
        return None
    if embedded == "json":
        return encode_json(data, f"records[{index}].{name}")
    if not isinstance(data, str):
        raise invalid_payload(
            f"records[{index}].{name} must be a base64 string in the binary format, not "
            f"{type(data).__name__}; use application/vnd.kafka.json.v2+json to send JSON"
        )
    try:
        return base64.b64decode(data, validate=True)
    except ValueError as exc:  # binascii.Error, or characters beyond ASCII
        raise invalid_payload(f"records[{index}].{name} is not valid base64: {exc}") from None


async def produce(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    with gateway.serving():
        return await _produce(request, gateway)


async def _produce(request: Request, gateway: Gateway) -> Response:
    topic = request.path_params["topic"]
    path_partition: int | None = request.path_params.get("partition")
    held = 0
    try:
        try:
            gateway.authorize(request.headers, topic)
            embedded = _embedded_format(request.headers.get("content-type"))
            info = await gateway.topic(topic)
            body, held = await read_body(request, gateway)
            records = parse_records(body, embedded, gateway.settings.max_records_per_request)
            del body
            # The parsed records stay in the budget until they are in the producer's buffer.
            held = recharge(gateway.budget, held, _parsed_size(records))
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
    return await _answer_outcomes(gateway, futures, failures)


def _parsed_size(records: list[_Record]) -> int:
    return sum(
        len(r.key or b"") + len(r.value or b"") + _RECORD_OVERHEAD for r in records
    )


async def _send_all(
    gateway: Gateway, topic: str, path_partition: int | None, records: list[_Record]
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
    gateway: Gateway, futures: list[FutureRecordMetadata], failures: dict[int, RestError]
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
    return answer({"key_schema_id": None, "value_schema_id": None, "offsets": offsets})


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
