"""REST Proxy's error answers, and the one place aioaccum's errors become HTTP statuses.

Every failure the gateway answers is a :class:`RestError`: an HTTP status, REST Proxy's numeric
``error_code`` and a message with the numbers and the fix, sent as
``{"error_code": N, "message": "..."}``. Codes are REST Proxy's (its ``Errors`` and Kafka
exception mapper): five digits, the HTTP status followed by a sub-code, or the bare status.

How the producer's errors map (:func:`rest_error_for`):

=========================================  ======  ==========  =============================
error                                      status  error_code  meaning for the client
=========================================  ======  ==========  =============================
pool full (``buffer.wait.ms`` passed,      429     42901       retry after ``Retry-After``
``BufferExhaustedError``)
``RecordTooLargeError``                    413     413         never fits: send less
``ProducerTimeoutError`` (no metadata),    503     50302       brokers unreachable: retry
``DeliveryTimeoutError``                                       later (``Retry-After``)
retriable ``BrokerError``                  503     50003       retry later
``TopicAuthorizationError``                403     40301       this gateway's principal may
                                                               not write the topic
``AuthenticationError``                    401     40101       the gateway's own credentials
                                                               were refused by the cluster
``ProducerClosedError`` (shutting down)    503     50302       retry on another instance
``ConfigError`` (e.g. a timestamp the      422     42201       the record is invalid: fix it
producer refuses), a broker's
INVALID_TIMESTAMP, INVALID_RECORD or
CORRUPT_MESSAGE
anything else                              500     50002       a Kafka error, not retriable
=========================================  ======  ==========  =============================

REST Proxy v2 also puts an error in a record's own ``offsets`` entry, with the codes REST
Proxy's produce action gives there: 50003 (retriable: the record may go through if sent again),
50002 (not retriable), 40301 (the gateway's principal may not write the topic) and 40101 (the
gateway's principal could not authenticate to the cluster).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aioaccum.errors import (
    AioAccumError,
    AuthenticationError,
    BrokerError,
    BufferExhaustedError,
    ConfigError,
    ProducerClosedError,
    ProducerTimeoutError,
    RecordTooLargeError,
    TopicAuthorizationError,
)

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = ["ErrorCode", "RestError", "error_response", "record_error_code", "rest_error_for"]

JSON_TYPE = "application/json"

# A full buffer drains within about a linger and a round trip: come back soon. An unreachable
# cluster takes longer.
RETRY_AFTER_FULL_S = 1
RETRY_AFTER_OUTAGE_S = 5
# Messages echo what the client sent (a type, a name ...): beyond this they are cut, so that an
# answer never grows with the input.
MAX_MESSAGE_CHARS = 1024


class ErrorCode(enum.IntEnum):
    """REST Proxy's ``error_code`` values that this gateway answers with."""

    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404
    METHOD_NOT_ALLOWED = 405
    REQUEST_TIMEOUT = 408
    CONFLICT = 409
    PAYLOAD_TOO_LARGE = 413
    UNSUPPORTED_MEDIA_TYPE = 415
    UNPROCESSABLE = 422
    INTERNAL = 500
    SERVICE_UNAVAILABLE = 503
    KAFKA_AUTHENTICATION = 40101
    KAFKA_AUTHORIZATION = 40301
    TOPIC_NOT_FOUND = 40401
    PARTITION_NOT_FOUND = 40402
    SCHEMA_NOT_FOUND = 40403
    INVALID_RECORD = 42201
    KEY_SCHEMA_MISSING = 42201  # REST Proxy gives 42201 both meanings; the message tells
    VALUE_SCHEMA_MISSING = 42202
    CONVERSION_FAILED = 42203
    INVALID_SCHEMA = 42205
    INVALID_PAYLOAD = 42206
    TOO_MANY_REQUESTS = 42901
    KAFKA_ERROR = 50002
    KAFKA_RETRIABLE = 50003
    BROKER_NOT_AVAILABLE = 50302


class RestError(AioAccumError):
    """A failure answered over HTTP with REST Proxy's error body.

    Attributes:
        status: The HTTP status.
        code: REST Proxy's ``error_code``.
        retry_after: Seconds for the ``Retry-After`` header, when retrying later can help.
    """

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        *,
        retry_after: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            cut = len(message) - MAX_MESSAGE_CHARS
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({cut} more characters)"
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self._headers = dict(headers or {})

    @property
    def retriable(self) -> bool:
        return self.retry_after is not None

    def body(self) -> dict[str, object]:
        return {"error_code": int(self.code), "message": str(self)}

    def json_body(self) -> bytes:
        """:meth:`body` as compact JSON, the bytes of every error answer. Non-ASCII is escaped,
        so any message encodes (a lone surrogate from a JSON string included)."""
        return json.dumps(self.body(), separators=(",", ":")).encode()

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return dict(self._headers)
        return {**self._headers, "Retry-After": str(self.retry_after)}


def error_response(error: RestError, media_type: str = JSON_TYPE) -> Response:
    """The error as a whole HTTP answer: its status, its headers (``Retry-After``) and
    :meth:`RestError.json_body`."""
    # Imported here: the command line imports this package to build its help, and must not
    # need the web stack (the serve extra) for that.
    from starlette.responses import Response

    return Response(error.json_body(), error.status, error.headers(), media_type)


def buffer_full(buffer_memory: int, waited_ms: int) -> RestError:
    return RestError(
        429,
        ErrorCode.TOO_MANY_REQUESTS,
        f"the producer's buffer (buffer.memory={buffer_memory} bytes) stayed full for "
        f"{waited_ms} ms: the brokers take records more slowly than they arrive; retry after "
        f"{RETRY_AFTER_FULL_S} s, or raise buffer.memory",
        retry_after=RETRY_AFTER_FULL_S,
    )


# Kafka's error codes that refuse a record for its content: CORRUPT_MESSAGE (2),
# INVALID_TIMESTAMP (32), INVALID_RECORD (87).
_RECORD_REFUSALS = frozenset({2, 32, 87})


def rest_error_for(exc: AioAccumError) -> RestError:
    """The HTTP answer for an error of the producer's (see the module's table)."""
    if isinstance(exc, RestError):
        return exc
    text = str(exc)
    if isinstance(exc, BufferExhaustedError):
        return RestError(
            429, ErrorCode.TOO_MANY_REQUESTS, text, retry_after=RETRY_AFTER_FULL_S
        )
    if isinstance(exc, RecordTooLargeError):
        return RestError(413, ErrorCode.PAYLOAD_TOO_LARGE, text)
    if isinstance(exc, ProducerTimeoutError):
        return RestError(
            503, ErrorCode.BROKER_NOT_AVAILABLE, text, retry_after=RETRY_AFTER_OUTAGE_S
        )
    if isinstance(exc, TopicAuthorizationError):
        return RestError(403, ErrorCode.KAFKA_AUTHORIZATION, text)
    if isinstance(exc, BrokerError) and exc.errno in _RECORD_REFUSALS:
        # The broker refused the record for what the request put in it (a timestamp out of
        # the topic's range, no key on a compacted topic ...): the client's to fix.
        return RestError(422, ErrorCode.INVALID_RECORD, f"the record is invalid: {text}")
    if isinstance(exc, BrokerError) and exc.retriable:
        return RestError(503, ErrorCode.KAFKA_RETRIABLE, text, retry_after=RETRY_AFTER_OUTAGE_S)
    if isinstance(exc, AuthenticationError):
        return RestError(
            401,
            ErrorCode.KAFKA_AUTHENTICATION,
            f"the cluster refused this gateway's own credentials: {text}; check the sasl/ssl "
            "settings of --producer.config",
        )
    if isinstance(exc, ConfigError):
        return RestError(422, ErrorCode.INVALID_RECORD, f"the record is invalid: {text}")
    if isinstance(exc, ProducerClosedError):
        return RestError(
            503, ErrorCode.BROKER_NOT_AVAILABLE, text, retry_after=RETRY_AFTER_OUTAGE_S
        )
    return RestError(500, ErrorCode.KAFKA_ERROR, f"{type(exc).__name__}: {text}")


def record_error_code(error: RestError) -> ErrorCode:
    """The code of a failed record's entry in a v2 answer, as REST Proxy's produce action
    gives it: authorization and authentication by name, else retriable or not."""
    if error.code in (ErrorCode.KAFKA_AUTHORIZATION, ErrorCode.KAFKA_AUTHENTICATION):
        return error.code
    return ErrorCode.KAFKA_RETRIABLE if error.retriable else ErrorCode.KAFKA_ERROR


def bad_request(message: str) -> RestError:
    return RestError(400, ErrorCode.BAD_REQUEST, message)


def invalid_payload(message: str) -> RestError:
    return RestError(422, ErrorCode.INVALID_PAYLOAD, message)


def topic_not_found(topic: str, code: ErrorCode = ErrorCode.TOPIC_NOT_FOUND) -> RestError:
    """404 for a topic the cluster does not have (v2 says 40401, v3 a bare 404)."""
    return RestError(
        404,
        code,
        f"topic {topic!r} not found: the cluster has no such topic (this gateway never creates "
        "topics); create it first",
    )


def partition_not_found(topic: str, partition: int, count: int) -> RestError:
    return RestError(
        404,
        ErrorCode.PARTITION_NOT_FOUND,
        f"partition {partition} not found: topic {topic!r} has {count} partition(s), "
        f"0 to {count - 1}",
    )
