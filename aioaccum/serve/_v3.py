"""REST Proxy's v3 produce API, streaming included.

``POST /v3/clusters/{cluster_id}/topics/{topic}/records`` takes one or more JSON objects, one
after the other (separated by whitespace or by nothing), each a record::

    {"partition_id": 1, "timestamp": "2021-02-05T19:14:42Z",
     "headers": [{"name": "h", "value": "<base64>"}],
     "key": {"type": "BINARY", "data": "<base64>"},
     "value": {"type": "JSON", "data": {"any": "json"}}}

``type`` is ``BINARY`` (base64), ``JSON`` (written as compact UTF-8 JSON) or ``STRING`` (UTF-8);
AVRO, PROTOBUF and JSONSCHEMA need a schema registry, which this gateway does not use (422).
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
On SIGTERM a stream stops reading, answers the records it read, adds one 503 answer if the
client had more to send, and ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers

from aioaccum import FutureRecordMetadata, RecordMetadata

from ._errors import ErrorCode, RestError, bad_request
from ._gateway import Gateway

__all__ = ["ProduceRecords", "iso_timestamp", "json_error"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Records read and not yet answered, per stream: beyond it the stream stops reading until
# answers catch up, so a client that never reads its answers cannot make the server hold more.
MAX_UNANSWERED = 10_000
_SEPARATOR = b"\r\n"
_TYPES = ("BINARY", "JSON", "STRING")
_SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSONSCHEMA")
_SCHEMA_FIELDS = ("schema", "schema_id", "schema_version", "subject", "subject_name_strategy")


def iso_timestamp(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC, e.g. ``2023-03-09T14:07:23.592Z``."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def json_error(error: RestError) -> bytes:
    return json.dumps(error.body(), separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class _Record:
    key: bytes | None
    value: bytes | None
    key_type: str | None
    value_type: str | None
    partition: int | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes | None]]


def parse_record(document: object) -> _Record:
    """One record object of a v3 body.

    Raises:
        RestError: 400 for a malformed record, 422 for a schema-registry format.
    """
    if not isinstance(document, dict):
        raise bad_request(f"a record must be a JSON object, not {type(document).__name__}")
    partition = document.get("partition_id")
    if partition is not None and (type(partition) is not int or partition < 0):
        raise bad_request(f"partition_id must be an integer >= 0, not {partition!r}")
    headers: list[tuple[str, bytes | None]] = []
    for index, header in enumerate(document.get("headers") or []):
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise bad_request(f"headers[{index}] must be {{\"name\": str, \"value\": base64}}")
        raw = header.get("value")
        headers.append((header["name"], None if raw is None else _base64(raw, f"headers[{index}]")))
    key, key_type = _data(document.get("key"), "key")
    value, value_type = _data(document.get("value"), "value")
    return _Record(
        key, value, key_type, value_type, partition, _timestamp(document.get("timestamp")), headers
    )


def _data(spec: object, where: str) -> tuple[bytes | None, str | None]:
    if spec is None:
        return None, None
    if not isinstance(spec, dict):
        raise bad_request(f"{where} must be an object like {{\"type\": \"BINARY\", \"data\": ...}}")
    kind = spec.get("type")
    if kind is None or str(kind).upper() in _SCHEMA_TYPES:
        named = kind or "a schema (" + ", ".join(f for f in _SCHEMA_FIELDS if f in spec) + ")"
        raise RestError(
            422,
            ErrorCode.UNPROCESSABLE,
            f"{where}: {named} needs a schema registry, which this server does not use; give "
            f"\"type\" as one of {', '.join(_TYPES)}",
        )
    kind = str(kind).upper()
    data = spec.get("data")
    if kind not in _TYPES:
        raise bad_request(f"{where}.type {spec['type']!r} is not one of {', '.join(_TYPES)}")
    if data is None:
        return None, kind
    if kind == "BINARY":
        return _base64(data, f"{where}.data"), kind
    if kind == "STRING":
        if not isinstance(data, str):
            raise bad_request(f"{where}.data must be a string for type STRING")
        return data.encode(), kind
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode(), kind


def _base64(data: object, where: str) -> bytes:
    if not isinstance(data, str):
        raise bad_request(f"{where} must be a base64 string, not {type(data).__name__}")
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise bad_request(f"{where}={data[:40]!r} is not base64: {exc}") from None


def _timestamp(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            return int(moment.timestamp() * 1000)
    raise bad_request(
        f"timestamp {value!r} is neither ISO 8601 (2021-02-05T19:14:42Z) nor milliseconds"
    )


class ObjectSplitter:
    """Cuts a byte stream of concatenated JSON objects into one bytes slice per object.

    Only the nesting of braces outside strings is followed; each slice is parsed afterwards.
    """

    _OUTSIDE = re.compile(rb'[{}"]')
    _INSIDE = re.compile(rb'["\\]')
    _SPACE = b" \t\r\n"

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scan = 0  # where scanning resumes
        self._depth = 0
        self._in_string = False

    @property
    def pending(self) -> int:
        """Bytes held of an object not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The objects completed by ``data``.

        Raises:
            RestError: 400 when something other than an object starts at the top level.
        """
        buffer = self._buffer
        buffer += data
        found: list[bytes] = []
        position = self._scan
        while position < len(buffer):
            if self._depth == 0:
                while position < len(buffer) and buffer[position] in self._SPACE:
                    position += 1
                if position == len(buffer):
                    break
                if buffer[position] != ord("{"):
                    raise bad_request(
                        "the body must be JSON objects one after the other; found "
                        f"{bytes(buffer[position : position + 20])!r}"
                    )
                del buffer[:position]
                position = 0
            pattern = self._INSIDE if self._in_string else self._OUTSIDE
            match = pattern.search(buffer, position)
            if match is None:
                position = len(buffer)
                break
            char = buffer[match.start()]
            position = match.end()
            if self._in_string:
                if char == ord("\\"):
                    position += 1  # the escaped character, whatever it is
                else:
                    self._in_string = False
            elif char == ord('"'):
                self._in_string = True
            elif char == ord("{"):
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    found.append(bytes(buffer[:position]))
                    del buffer[:position]
                    position = 0
        self._scan = position
        return found

    def leftover(self) -> bool:
        """Whether bytes other than whitespace remain (an object cut off by the body's end)."""
        return bool(bytes(self._buffer).strip())


@dataclass(slots=True)
class _Answer:
    """One record's answer to come: an error now, or a record future to wait for."""

    error: RestError | None = None
    future: FutureRecordMetadata | None = None
    record: _Record | None = None


_END = _Answer()


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
            await _send_whole(send, error.status, json_error(error), error.headers())
            return
        stream = _Stream(gateway, info.name, len(info.partitions), cluster_id, receive, send)
        await stream.run()


class _Stream:
    """One request's records: read and handed to the producer by one task, answered in order
    by another, so that reading never waits for acknowledgements."""

    def __init__(
        self,
        gateway: Gateway,
        topic: str,
        partitions: int,
        cluster_id: str,
        receive: Receive,
        send: Send,
    ) -> None:
        self._gateway = gateway
        self._topic = topic
        self._partitions = partitions
        self._cluster_id = cluster_id
        self._receive = receive
        self._send = send
        self._answers: asyncio.Queue[_Answer] = asyncio.Queue()
        self._unanswered = asyncio.Semaphore(MAX_UNANSWERED)
        self._records = 0
        self._body_done = False
        self._cut_short = False
        self._disconnected = False

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read())
        try:
            await self._write()
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    # --- reading

    async def _read(self) -> None:
        try:
            await self._read_records()
        finally:
            self._answers.put_nowait(_END)

    async def _read_records(self) -> None:
        gateway = self._gateway
        settings = gateway.settings
        splitter = ObjectSplitter()
        started = asyncio.ensure_future(gateway.draining.started.wait())
        try:
            while True:
                receiving = asyncio.ensure_future(self._receive())
                done, _ = await asyncio.wait(
                    {receiving, started},
                    timeout=settings.read_timeout_ms / 1000,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receiving not in done:
                    receiving.cancel()
                    if started in done:
                        self._cut_short = True
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
                if not await gateway.budget.take(len(chunk), settings.buffer_wait_ms / 1000):
                    await self._answer_error(
                        RestError(
                            429,
                            ErrorCode.TOO_MANY_REQUESTS,
                            f"the server holds body.budget.bytes={gateway.budget.total} bytes "
                            "of requests already; the stream is closed, retry after 1 s",
                            retry_after=1,
                        )
                    )
                    return
                try:
                    if not await self._records_of(splitter, chunk):
                        return
                finally:
                    gateway.budget.give(len(chunk))
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
                self._cut_short = True
                return False
            self._records += 1
            try:
                if len(raw) > limit:
                    raise RestError(
                        413,
                        ErrorCode.PAYLOAD_TOO_LARGE,
                        f"a record object is {len(raw)} bytes, more than max.body.bytes={limit}",
                    )
                try:
                    document = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise bad_request(f"a record is not valid JSON: {exc}") from None
                record = parse_record(document)
                partition = record.partition
                if partition is not None and partition >= self._partitions:
                    raise RestError(
                        404,
                        ErrorCode.PARTITION_NOT_FOUND,
                        f"partition {partition} not found: topic {self._topic!r} has "
                        f"{self._partitions} partition(s)",
                    )
                future = await gateway.send(
                    self._topic,
                    record.key,
                    record.value,
                    partition=partition,
                    timestamp_ms=record.timestamp_ms,
                    headers=record.headers or None,
                )
            except RestError as error:
                await self._put(_Answer(error=error))
                continue
            await self._put(_Answer(future=future, record=record))
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
        # Waits while MAX_UNANSWERED answers are pending: a client that does not read its
        # answers stops being read (every wait of the writer has a bound, so this one does).
        await self._unanswered.acquire()
        self._answers.put_nowait(answer)

    # --- answering

    async def _write(self) -> None:
        answer = await self._answers.get()
        if answer is _END:
            if self._disconnected:
                return
            error = (
                _shutting_down()
                if self._cut_short
                else RestError(
                    422, ErrorCode.UNPROCESSABLE, "Payload error. Request body is empty."
                )
            )
            await _send_whole(self._send, error.status, json_error(error), error.headers())
            return
        body, failed = await self._resolve(answer)
        following = await self._next_if_ready()
        if failed is not None and following is _END and self._records == 1 and not self._cut_short:
            # A request of one record: its own status, as a plain request would get.
            await _send_whole(self._send, failed.status, body, failed.headers())
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
                self._unanswered.release()
            else:
                body, _ = await self._resolve(answer)
                await self._chunk(body)
            answer = await self._answers.get()
        if self._cut_short and not self._body_done:
            await self._chunk(json_error(_shutting_down()))
        if not self._disconnected:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _next_if_ready(self) -> _Answer | None:
        """The answer after the first when reading is over: the first decides the status only
        if nothing follows it. None while the client may still send."""
        if self._answers.empty() and not self._body_done:
            return None
        return await self._answers.get()

    async def _chunk(self, body: bytes) -> None:
        if self._disconnected:
            return
        try:
            # A client that stops reading its answers fills the socket; it gets as long as one
            # that stops sending.
            async with asyncio.timeout(self._gateway.settings.read_timeout_ms / 1000):
                await self._send(
                    {"type": "http.response.body", "body": body + _SEPARATOR, "more_body": True}
                )
        except TimeoutError:
            self._disconnected = True

    async def _resolve(self, answer: _Answer) -> tuple[bytes, RestError | None]:
        self._unanswered.release()
        if answer.error is not None:
            return json_error(answer.error), answer.error
        assert answer.future is not None
        assert answer.record is not None
        [outcome] = await self._gateway.settle([answer.future])
        if isinstance(outcome, RestError):
            return json_error(outcome), outcome
        return self._success(outcome, answer.record), None

    def _success(self, metadata: RecordMetadata, record: _Record) -> bytes:
        found: dict[str, object] = {
            "error_code": 200,
            "cluster_id": self._cluster_id,
            "topic_name": metadata.topic,
            "partition_id": metadata.partition,
            "offset": metadata.offset,
            "timestamp": iso_timestamp(metadata.timestamp),
        }
        if record.key_type is not None:
            found["key"] = {"type": record.key_type, "size": max(metadata.serialized_key_size, 0)}
        if record.value_type is not None:
            found["value"] = {
                "type": record.value_type,
                "size": max(metadata.serialized_value_size, 0),
            }
        return json.dumps(found, separators=(",", ":")).encode()


def _shutting_down() -> RestError:
    return RestError(
        503,
        ErrorCode.SERVICE_UNAVAILABLE,
        "the server is shutting down: the records sent after the ones answered were not read; "
        "send them again to another instance",
        retry_after=5,
    )


async def _send_whole(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw_headers = [(b"content-type", b"application/json")]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
