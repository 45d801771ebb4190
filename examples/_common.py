"""What the two example services share: their settings, and the answer to a producer's error.

``events_service.py`` (asyncio, on uvicorn) and ``sync_service.py`` (threads, on waitress) read
the same environment variables and give the producer's errors the same status codes; each wraps
the answer in its own framework's response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from aioaccum import (
    AioAccumError,
    BrokerError,
    BufferExhaustedError,
    ProducerClosedError,
    ProducerConfig,
    ProducerTimeoutError,
    RecordTooLargeError,
)

# A full buffer drains in about a linger plus a round trip: retry soon. A timeout means the
# cluster itself is slow or unreachable: retry later.
RETRY_AFTER_FULL_S = 1
RETRY_AFTER_TIMEOUT_S = 5
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """What both services read from their environment."""

    topic: str
    config: ProducerConfig
    close_timeout: float

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> ServiceSettings:
        """The settings in ``env``: ``AIOACCUM_BOOTSTRAP``, ``EVENTS_TOPIC``,
        ``EVENTS_PRODUCER_PROPS`` and ``EVENTS_CLOSE_TIMEOUT_S``.

        Raises:
            ValueError: A variable cannot be parsed (``ConfigError`` for producer settings).
        """
        props = parse_properties(env.get("EVENTS_PRODUCER_PROPS", ""))
        props.setdefault("bootstrap.servers", env.get("AIOACCUM_BOOTSTRAP", "127.0.0.1:9092"))
        return cls(
            topic=env.get("EVENTS_TOPIC", "events"),
            config=ProducerConfig.from_properties(props),
            close_timeout=float(env.get("EVENTS_CLOSE_TIMEOUT_S", "25")),
        )


def parse_properties(text: str) -> dict[str, str]:
    """``"a.b=1, c=x"`` -> ``{"a.b": "1", "c": "x"}``."""
    props: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"EVENTS_PRODUCER_PROPS: {item!r} is not name=value")
        props[name.strip()] = value.strip()
    return props


class ErrorAnswer(NamedTuple):
    """An HTTP answer, for a service to send in its framework's JSON response."""

    status: int
    body: dict[str, str]
    headers: dict[str, str]


def error_answer(exc: AioAccumError) -> ErrorAnswer:
    """The HTTP answer for an error of the producer's."""
    headers: dict[str, str] = {}
    if isinstance(exc, RecordTooLargeError):
        status = 413
    elif isinstance(exc, BufferExhaustedError | ProducerClosedError):
        # Overloaded or shutting down: another instance, or this one shortly, will take it.
        status = 503
        headers["Retry-After"] = str(RETRY_AFTER_FULL_S)
    elif isinstance(exc, ProducerTimeoutError):
        status = 504
        headers["Retry-After"] = str(RETRY_AFTER_TIMEOUT_S)
    elif isinstance(exc, BrokerError):
        status = 503 if exc.retriable else 502
        if exc.retriable:
            headers["Retry-After"] = str(RETRY_AFTER_TIMEOUT_S)
    else:
        status = 500
    return ErrorAnswer(status, {"error": type(exc).__name__, "message": str(exc)}, headers)
