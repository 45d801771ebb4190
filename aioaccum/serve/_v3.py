"""REST Proxy's v3 API: produce, streaming included, and the cluster it produces to.

``GET /v3/clusters`` lists the one cluster this server produces to and
``GET /v3/clusters/{cluster_id}`` describes it (404 for any other id).

``POST /v3/clusters/{cluster_id}/topics/{topic}/records`` takes one or more JSON objects, one
after the other (separated by whitespace or by nothing), each a record::

    {"partition_id": 1, "timestamp": "2021-02-05T19:14:42Z",
     "headers": [{"name": "h", "value": "<base64>"}],
     "key": {"type": "BINARY", "data": "<base64>"},
     "value": {"type": "JSON", "data": {"any": "json"}}}

``type`` is ``BINARY`` (base64), ``JSON`` (written as compact UTF-8 JSON) or ``STRING`` (UTF-8);
AVRO, PROTOBUF and JSONSCHEMA (with ``schema``, ``schema_id``, ``schema_version``, ``subject``,
``subject_name_strategy``) are written through the registry of ``schema.registry.url``
(``_schemas``), and are 422 without one.
Every part is optional; ``data`` null or absent is a null key or value.

Each record is answered, in the order sent, as soon as it is acknowledged::

    {"error_code": 200, "cluster_id": ..., "topic_name": ..., "partition_id": ..., "offset": ...,
     "timestamp": "2023-03-09T14:07:23.592Z", "key": {"type": "BINARY", "size": 7}, ...}

or, for a record that failed, ``{"error_code": 429, "message": "..."}`` with the status it
would have had alone. With a chunked body the connection is a stream: records keep being read
and handed to the producer while earlier ones wait for their acknowledgements, so one
connection carries a steady flow. The HTTP status is 200 once answers start; a request of a
single record that failed gets that record's status instead (429 with ``Retry-After``, 413 ...).
Problems with the request as a whole come before any answer: 401/403, 404 for an unknown
topic (``error_code`` 404), 413 for a declared length over ``max.body.bytes``, 415.

As in REST Proxy, the cluster id in the path is not checked when producing; answers repeat it.
On SIGTERM, or once it has been read for ``stream.max.duration.ms``, a stream stops reading,
answers the records it read, adds one error answer (503 or 408) if the client had more to send,
and ends. A stream holds in the body budget the bytes of the record object it is in the middle
of; records read and not answered yet are bounded in number and in bytes.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from aioaccum import FutureRecordMetadata, RecordMetadata
from aioaccum._kafka.cluster_view import TopicInfo

from ._errors import (
    RETRY_AFTER_FULL_S,
    RETRY_AFTER_OUTAGE_S,
    ErrorCode,
    RestError,
    bad_request,
    error_response,
)
from ._gateway import STOPS_THE_REST, Gateway
from ._records import ObjectSplitter, decode_json, parse_record

if TYPE_CHECKING:
    from ._schemas import Resolved

__all__ = ["ProduceRecords", "get_cluster", "iso_timestamp", "list_clusters", "routes"]

log = logging.getLogger("aioaccum.serve")

# Records read and not yet answered, per stream, by number and by bytes of their objects:
# beyond either the stream stops reading until answers catch up, so a client that never reads
# its answers cannot make the server hold more.
MAX_UNANSWERED = 10_000
_SEPARATOR = b"\r\n"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def iso_timestamp(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC, e.g. ``2023-03-09T14:07:23.592Z``."""
    try:
        moment = _EPOCH + datetime.timedelta(milliseconds=ms)
    except OverflowError:
        return str(ms)  # outside what ISO 8601 can say; parse_record lets none such in
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass(slots=True)
class _Answer:
    """One record's answer to come: an error now, or a record future to wait for. Only what
    the answer names is kept of the record, not its bytes."""

    error: RestError | None = None
    future: FutureRecordMetadata | None = None
    key_type: str | None = None
    value_type: str | None = None
    size: int = 0
    key_schema: Resolved | None = None
    value_schema: Resolved | None = None


_END = _Answer()


class _Unanswered:
    """Counts records read and not answered, by number and bytes; the stream's one reader
    waits while either is over its bound."""

    def __init__(self, records: int, size: int) -> None:
        self._max_records = records
        self._max_bytes = size
        self.records = 0
        self.bytes = 0
        self._room = asyncio.Event()

    def _fits(self, size: int) -> bool:
        # One record always goes in, however large: the stream must move.
        return self.records < self._max_records and (
            self.records == 0 or self.bytes + size <= self._max_bytes
        )

    async def add(self, size: int) -> None:
        while not self._fits(size):
            self._room.clear()
            await self._room.wait()
        self.add_nowait(size)

    def add_nowait(self, size: int) -> None:
        """Counts one more without waiting: for the answer that ends a failed stream."""
        self.records += 1
        self.bytes += size

    def remove(self, size: int) -> None:
        self.records -= 1
        self.bytes -= size
        self._room.set()


class ProduceRecords:
    """The ASGI endpoint of ``POST /v3/clusters/{cluster_id}/topics/{topic}/records``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway: Gateway = scope["app"].state.gateway
        with gateway.serving():
            await self._produce(gateway, scope, receive, send)

    async def _produce(self, gateway: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
        topic: str = scope["path_params"]["topic"]
        cluster_id: str = scope["path_params"]["cluster_id"]
        headers = Headers(scope=scope)
        try:
            gateway.authorize(headers, topic)
            media = headers.get("content-type", "application/json").split(";", 1)[0].strip()
            if media.lower() != "application/json":
                raise RestError(
                    415,
                    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                    f"Content-Type {media} is not accepted here; send application/json",
                )
            length = headers.get("content-length")
            limit = gateway.settings.max_body_bytes
            if length is not None and length.isdigit() and int(length) > limit:
                raise RestError(
                    413,
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"the request body is {length} bytes, more than max.body.bytes={limit}; "
                    "send the records as a chunked stream, or fewer at a time",
                )
            info = await gateway.topic(topic, not_found=ErrorCode.NOT_FOUND)
        except RestError as error:
            await error_response(error)(scope, receive, send)
            return
        stream = _Stream(gateway, info, cluster_id, scope, receive, send)
        await stream.run()


class _Stream:
    """One request's records: read and handed to the producer by one task, answered in order
    by another, so that reading never waits for acknowledgements."""

    def __init__(
        self,
        gateway: Gateway,
        info: TopicInfo,
        cluster_id: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        self._gateway = gateway
        self._info = info
        self._topic = info.name
        self._cluster_id = cluster_id
        self._scope = scope
        self._receive = receive
        # Bounded by write.timeout.ms (the app's BoundedWrites): a stalled client raises.
        self._send = send
        self._answers: asyncio.Queue[_Answer] = asyncio.Queue()
        self._unanswered = _Unanswered(MAX_UNANSWERED, gateway.settings.max_body_bytes)
        self._records = 0
        self._body_done = False
        # Why reading stopped before the body's end, answered after the records read.
        self._cut_short: RestError | None = None
        self._disconnected = False
        self._held = 0  # body budget bytes held for the object being read

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read())
        try:
            await self._write()
        finally:
            # Also when the writer failed (a client that takes no answers): stop reading.
            reader.cancel()
            # wait(), not the task itself: a cancellation of this request must still reach it.
            await asyncio.wait([reader])

    # --- reading

    async def _read(self) -> None:
        try:
            await self._read_records()
        except Exception as exc:
            # Answered, never dropped: the client learns the stream failed where it did.
            log.exception("a v3 stream to topic %r failed while reading", self._topic)
            self._records += 1
            self._unanswered.add_nowait(0)
            self._answers.put_nowait(
                _Answer(
                    error=RestError(
                        500,
                        ErrorCode.INTERNAL,
                        f"the server failed reading this stream ({type(exc).__name__}); the "
                        "records answered before this were handled, the rest were not read",
                    )
                )
            )
        finally:
            self._gateway.budget.give(self._held)
            self._held = 0
            self._answers.put_nowait(_END)

    async def _read_records(self) -> None:
        gateway = self._gateway
        settings = gateway.settings
        loop = asyncio.get_running_loop()
        stream_end = loop.time() + settings.stream_max_duration_ms / 1000
        splitter = ObjectSplitter()
        started = asyncio.ensure_future(gateway.draining.started.wait())
        try:
            while True:
                left = stream_end - loop.time()
                receiving = asyncio.ensure_future(self._receive())
                done, _ = await asyncio.wait(
                    {receiving, started},
                    timeout=max(min(settings.read_timeout_ms / 1000, left), 0.0),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receiving not in done:
                    receiving.cancel()
                    if started in done:
                        self._cut_short = _shutting_down()
                    elif loop.time() >= stream_end:
                        self._cut_short = RestError(
                            408,
                            ErrorCode.REQUEST_TIMEOUT,
                            "the stream was read for stream.max.duration.ms="
                            f"{settings.stream_max_duration_ms} ms and is closed; send the "
                            "records after the ones answered on a new stream",
                        )
                    else:
                        await self._answer_error(
                            RestError(
                                408,
                                ErrorCode.REQUEST_TIMEOUT,
                                f"no record for read.timeout.ms={settings.read_timeout_ms} ms; "
                                "the stream is closed",
                            )
                        )
                    return
                message = receiving.result()
                if message["type"] == "http.disconnect":
                    self._disconnected = True
                    return
                chunk: bytes = message.get("body", b"")
                # The chunk is held until its objects are parsed; what is left of an object
                # not complete yet stays held. An empty one (the end of a chunked body) holds
                # nothing and must not queue behind other requests for the budget.
                if chunk and not await gateway.budget.take(
                    len(chunk), settings.buffer_wait_ms / 1000
                ):
                    await self._answer_error(
                        RestError(
                            429,
                            ErrorCode.TOO_MANY_REQUESTS,
                            f"the server holds body.budget.bytes={gateway.budget.total} bytes "
                            f"of requests already; the stream is closed, retry after "
                            f"{RETRY_AFTER_FULL_S} s",
                            retry_after=RETRY_AFTER_FULL_S,
                        )
                    )
                    return
                self._held += len(chunk)
                going_on = await self._records_of(splitter, chunk)
                gateway.budget.give(self._held - splitter.pending)
                self._held = splitter.pending
                if not going_on:
                    return
                if not message.get("more_body", False):
                    self._body_done = True
                    if splitter.leftover():
                        await self._answer_error(
                            bad_request("the body ends inside a JSON object")
                        )
                    return
        finally:
            started.cancel()

    async def _records_of(self, splitter: ObjectSplitter, chunk: bytes) -> bool:
        """Hand the chunk's complete records to the producer; False once the stream must end."""
        gateway = self._gateway
        limit = gateway.settings.max_body_bytes
        try:
            objects = splitter.feed(chunk)
        except RestError as error:
            await self._answer_error(error)
            return False
        for raw in objects:
            if gateway.draining.started.is_set():
                self._cut_short = _shutting_down()
                return False
            self._records += 1
            size = len(raw)
            try:
                if size > limit:
                    raise RestError(
                        413,
                        ErrorCode.PAYLOAD_TOO_LARGE,
                        f"a record object is {size} bytes, more than max.body.bytes={limit}",
                    )
                record = parse_record(
                    decode_json(raw, "a record"), schemas=gateway.schemas is not None
                )
                del raw
                gateway.check_partition(self._info, record.partition)
                key_schema = value_schema = None
                if gateway.schemas is not None and (
                    record.key_schema is not None or record.value_schema is not None
                ):
                    # Resolved once per schema, then kept: no registry call per record.
                    from ._schemas import encode_record

                    record, key_schema, value_schema = await encode_record(
                        gateway.schemas, self._topic, record
                    )
                future = await gateway.send(
                    self._topic,
                    record.key,
                    record.value,
                    partition=record.partition,
                    timestamp_ms=record.timestamp_ms,
                    headers=record.headers or None,
                )
            except RestError as error:
                await self._put(_Answer(error=error))
                if error.code in STOPS_THE_REST:
                    # The stream ends with this record's answer.
                    return False
                continue
            await self._put(
                _Answer(
                    future=future,
                    key_type=record.key_type,
                    value_type=record.value_type,
                    size=size,
                    key_schema=key_schema,
                    value_schema=value_schema,
                )
            )
        if splitter.pending > limit:
            await self._answer_error(
                RestError(
                    413,
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"a record object is over max.body.bytes={limit} bytes and still growing; "
                    "the stream is closed",
                )
            )
            return False
        return True

    async def _answer_error(self, error: RestError) -> None:
        """An error that ends the stream, answered in place of the next record."""
        self._records += 1
        await self._put(_Answer(error=error))

    async def _put(self, answer: _Answer) -> None:
        # Waits while too many answers are pending: a client that does not read its answers
        # stops being read (every send of the writer has a bound, so this wait does too).
        await self._unanswered.add(answer.size)
        self._answers.put_nowait(answer)

    # --- answering

    async def _write(self) -> None:
        answer = await self._answers.get()
        if answer is _END:
            if self._disconnected:
                return
            error = self._cut_short or RestError(
                422, ErrorCode.INVALID_PAYLOAD, "Request body is empty. Data is required."
            )
            await self._send_error(error)
            return
        body, failed = await self._resolve(answer)
        following = await self._next_if_ready()
        if (
            failed is not None
            and following is _END
            and self._records == 1
            and self._cut_short is None
        ):
            # A request of one record: its own status, as a plain request would get.
            await self._send_error(failed)
            return
        await self._send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await self._chunk(body)
        answer = following if following is not None else await self._answers.get()
        while answer is not _END:
            if self._disconnected:
                # Nobody to answer; the records are the producer's now, and need no watching.
                self._unanswered.remove(answer.size)
            else:
                body, _ = await self._resolve(answer)
                await self._chunk(body)
            answer = await self._answers.get()
        if self._cut_short is not None and not self._body_done:
            await self._chunk(self._cut_short.json_body())
        if not self._disconnected:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_error(self, error: RestError) -> None:
        await error_response(error)(self._scope, self._receive, self._send)

    async def _next_if_ready(self) -> _Answer | None:
        """The answer after the first when reading is over: the first decides the status only
        if nothing follows it. None while the client may still send."""
        if self._answers.empty() and not self._body_done:
            return None
        return await self._answers.get()

    async def _chunk(self, body: bytes) -> None:
        if self._disconnected:
            return
        await self._send(
            {"type": "http.response.body", "body": body + _SEPARATOR, "more_body": True}
        )

    async def _resolve(self, answer: _Answer) -> tuple[bytes, RestError | None]:
        self._unanswered.remove(answer.size)
        if answer.error is not None:
            return answer.error.json_body(), answer.error
        assert answer.future is not None
        [outcome] = await self._gateway.settle([answer.future])
        if isinstance(outcome, RestError):
            return outcome.json_body(), outcome
        return self._success(outcome, answer), None

    def _success(self, metadata: RecordMetadata, answer: _Answer) -> bytes:
        found: dict[str, object] = {
            "error_code": 200,
            "cluster_id": self._cluster_id,
            "topic_name": metadata.topic,
            "partition_id": metadata.partition,
            "offset": metadata.offset,
            "timestamp": iso_timestamp(metadata.timestamp),
        }
        if answer.key_type is not None:
            found["key"] = _described(
                answer.key_type, answer.key_schema, metadata.serialized_key_size
            )
        if answer.value_type is not None:
            found["value"] = _described(
                answer.value_type, answer.value_schema, metadata.serialized_value_size
            )
        return json.dumps(found, separators=(",", ":")).encode()


def _described(kind: str, schema: Resolved | None, size: int) -> dict[str, object]:
    """A key's or a value's part of a record's answer, with its schema when it has one."""
    if schema is None:
        return {"type": kind, "size": max(size, 0)}
    return {
        "type": kind,
        "subject": schema.subject,
        "schema_id": schema.schema_id,
        "schema_version": schema.version,
        "size": max(size, 0),
    }


def _shutting_down() -> RestError:
    return RestError(
        503,
        ErrorCode.SERVICE_UNAVAILABLE,
        "the server is shutting down: the records sent after the ones answered were not read; "
        "send them again to another instance",
        retry_after=RETRY_AFTER_OUTAGE_S,
    )



# --- the cluster


def _cluster(base: str, cluster_id: str, controller: int) -> dict[str, object]:
    self_url = f"{base}/v3/clusters/{cluster_id}"
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": self_url, "resource_name": f"crn:///kafka={cluster_id}"},
        "cluster_id": cluster_id,
        "controller": {"related": f"{self_url}/brokers/{controller}"},
        "brokers": {"related": f"{self_url}/brokers"},
        "topics": {"related": f"{self_url}/topics"},
    }


async def _cluster_id(request: Request) -> tuple[str, int]:
    gateway: Gateway = request.app.state.gateway
    gateway.principal(request.headers)
    snapshot = await gateway.describe([])
    if snapshot.cluster_id is None:
        raise RestError(
            500, ErrorCode.KAFKA_ERROR, "the brokers gave no cluster id (Kafka older than 0.10.1)"
        )
    return snapshot.cluster_id, snapshot.controller


async def list_clusters(request: Request) -> Response:
    """``GET /v3/clusters``: the one cluster this server produces to."""
    try:
        cluster_id, controller = await _cluster_id(request)
    except RestError as error:
        return error_response(error)
    base = str(request.base_url).rstrip("/")
    return JSONResponse(
        {
            "kind": "KafkaClusterList",
            "metadata": {"self": f"{base}/v3/clusters", "next": None},
            "data": [_cluster(base, cluster_id, controller)],
        }
    )


async def get_cluster(request: Request) -> Response:
    """``GET /v3/clusters/{cluster_id}``: that cluster, or 404 for any other id."""
    try:
        cluster_id, controller = await _cluster_id(request)
    except RestError as error:
        return error_response(error)
    asked = request.path_params["cluster_id"]
    if asked != cluster_id:
        return error_response(
            RestError(
                404,
                ErrorCode.NOT_FOUND,
                f"cluster {asked} cannot be found: this server produces to cluster {cluster_id}",
            )
        )
    return JSONResponse(_cluster(str(request.base_url).rstrip("/"), cluster_id, controller))


def routes() -> list[BaseRoute]:
    return [
        Route("/v3/clusters", list_clusters, methods=["GET"]),
        Route("/v3/clusters/{cluster_id}", get_cluster, methods=["GET"]),
        Route(
            "/v3/clusters/{cluster_id}/topics/{topic}/records", ProduceRecords(), methods=["POST"]
        ),
    ]
