"""Checks of what callers pass to send: topics, timestamps, keys, values and headers.

Each runs only when a cheap test in the hot path failed (a value that is not ``bytes``, a topic
not yet in metadata), so good input pays nothing for the messages written here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from time import time_ns
from typing import Any

from aioaccum.errors import ConfigError, RecordTooLargeError, SerializationError

try:
    import cython
except ModuleNotFoundError:  # a pure-Python run without Cython installed
    from aioaccum._core import _cython_shim as cython

__all__ = [
    "MAX_TIMESTAMP",
    "as_bytes",
    "checked_column",
    "checked_timestamp",
    "record_too_large",
    "total_len",
    "validate_headers",
    "validate_topic",
    "wall_clock_ms",
]

MAX_TIMESTAMP = 2**63 - 1  # the batch header's int64

_BYTES_TYPES = (bytes, bytearray, memoryview)
_MAX_TOPIC_LENGTH = 249
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic:
        raise ConfigError(f"topic must be a non-empty str, got {topic!r}")
    if topic in (".", "..") or len(topic) > _MAX_TOPIC_LENGTH or not _TOPIC_CHARS.issuperset(topic):
        raise ConfigError(
            f"invalid topic name {topic!r}: use 1 to {_MAX_TOPIC_LENGTH} characters from "
            "[a-zA-Z0-9._-], not '.' or '..'"
        )
    return topic


def wall_clock_ms() -> int:
    """Now, in ms since the epoch (``time.time_ns() // 1_000_000``): a record's create time."""
    if not cython.compiled:
        return time_ns() // 1_000_000
    # Read in C (validate.pxd): no call through Python and no division of Python ints.
    return system_clock_ms()  # type: ignore[no-any-return,name-defined,unused-ignore]  # noqa: F821


def checked_timestamp(timestamp_ms: object) -> int:
    """A record's create time: now when ``timestamp_ms`` is ``None``, else ``timestamp_ms``
    itself, which must be an ``int`` in ``0..MAX_TIMESTAMP`` (ms since the epoch).

    Raises:
        ConfigError: ``timestamp_ms`` is neither ``None`` nor such an ``int``.
    """
    if timestamp_ms is None:
        return wall_clock_ms()
    if type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP:
        raise ConfigError(
            f"timestamp_ms must be an int in 0..{MAX_TIMESTAMP} (ms since the epoch), "
            f"got {timestamp_ms!r}"
        )
    return timestamp_ms


def record_too_large(size: int, max_request_size: int, buffer_memory: int) -> RecordTooLargeError:
    """The error for a record of ``size`` serialized bytes over either limit."""
    if size > max_request_size:
        return RecordTooLargeError(
            f"the record is {size} bytes serialized, larger than max_request_size="
            f"{max_request_size}; raise max_request_size (and the topic's "
            "max.message.bytes) or send smaller records"
        )
    return RecordTooLargeError(
        f"the record is {size} bytes serialized, larger than buffer_memory={buffer_memory}; "
        "raise buffer_memory"
    )


def as_bytes(what: str, data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, _BYTES_TYPES):
        return bytes(data)
    raise SerializationError(_not_bytes_message(what, data))


def _not_bytes_message(what: str, data: object) -> str:
    kind = type(data).__name__
    if what.startswith("header"):
        hint = " (e.g. value.encode())" if isinstance(data, str) else ""
        return f"{what} must be bytes or None, got {kind}; encode it to bytes first{hint}"
    option = "key_serializer" if what.startswith("key") else "value_serializer"
    example = f" (e.g. {option}=str.encode)" if isinstance(data, str) else ""
    return (
        f"{what} must be bytes or None, got {kind}; encode it to bytes first, or pass "
        f"{option}= to the Producer{example}; a serializer must return bytes or None"
    )


def total_len(items: Sequence[bytes | None], start: int, stop: int) -> int:
    return sum(0 if item is None else len(item) for item in items[start:stop])


def validate_headers(headers: object) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    out: list[tuple[str, bytes | None]] = []
    if isinstance(headers, (str, bytes, bytearray, Mapping)):
        # Iterable, but not pairs: each would fail below with a confusing item.
        fix = " (list(headers.items()) turns a dict into pairs)" if isinstance(
            headers, Mapping
        ) else ""
        raise SerializationError(
            f"headers must be a sequence of (str, bytes) pairs, got {type(headers).__name__}"
            f"{fix}"
        )
    try:
        items = list(headers)  # type: ignore[call-overload,unused-ignore]
    except TypeError:
        raise SerializationError(
            f"headers must be a sequence of (str, bytes) pairs, got {type(headers).__name__}"
        ) from None
    for i, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 2:
            raise SerializationError(f"header #{i} must be a (str, bytes) pair, got {item!r}")
        name, value = item
        if not isinstance(name, str):
            fix = "; decode it to str" if isinstance(name, bytes) else ""
            raise SerializationError(
                f"header #{i} name must be str, got {type(name).__name__}{fix}"
            )
        if not name.isascii():
            try:
                name.encode()
            except UnicodeEncodeError as exc:
                raise SerializationError(
                    f"header #{i} name {name!r} cannot be encoded as UTF-8: {exc.reason}"
                ) from None
        out.append((name, as_bytes(f"header {name!r} value", value)))
    return out


def checked_column(
    what: str, items: list[Any], serializer: Callable[[Any], Any] | None
) -> list[bytes | None]:
    """Serialize and check a send_many column, refusing the call at the first bad item."""
    if serializer is not None:
        items = [serializer(item) for item in items]
    if not all(type(item) is bytes or item is None for item in items):
        items = [as_bytes(f"{what} #{i}", item) for i, item in enumerate(items)]
    return items
