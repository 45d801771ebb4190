"""The errors :mod:`aioaccum.compat` raises: aioaccum's errors that are aiokafka's as well.

Code written for aiokafka catches ``aiokafka.errors.KafkaTimeoutError``, ``KafkaConnectionError``
and the broker's error classes; code written for aioaccum catches ``ProducerTimeoutError``,
``BrokerError`` and the rest of :mod:`aioaccum.errors`. Each class here derives from both, so
either ``except`` clause catches what the compat layer raises. :func:`aiokafka_error` is the
one place that turns an aioaccum error into its twin: a copy of it (message, attributes, cause,
traceback and notes) whose class is the twin.

A broker's error code picks aiokafka's class for that code (``aiokafka.errors.for_code``); the
twin of such a class is made once, on first use, with the aioaccum class the error already had
(``BrokerError``, ``TopicAuthorizationError``, a ``TransactionError``) as its first base.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from aiokafka import errors as kerr

from aioaccum import errors as ours

__all__ = [
    "AuthenticationFailedError",
    "BufferExhaustedError",
    "DeliveryTimeoutError",
    "IllegalOperation",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "ProducerClosed",
    "ProducerFenced",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "aiokafka_error",
]

_E = TypeVar("_E", bound=BaseException)


class KafkaTimeoutError(ours.ProducerTimeoutError, kerr.KafkaTimeoutError):  # type: ignore[misc]
    """A deadline passed: aiokafka's ``KafkaTimeoutError``, aioaccum's ``ProducerTimeoutError``."""


class BufferExhaustedError(KafkaTimeoutError, ours.BufferExhaustedError):
    """No buffer memory within ``max_block_ms`` (aiokafka raises ``KafkaTimeoutError`` here)."""


class DeliveryTimeoutError(KafkaTimeoutError, ours.DeliveryTimeoutError):
    """A record was not acknowledged in time (aiokafka: an expired batch's
    ``KafkaTimeoutError``)."""


class UnknownTopicOrPartitionError(KafkaTimeoutError, kerr.UnknownTopicOrPartitionError):  # type: ignore[misc]
    """The topic's metadata did not arrive within ``max_block_ms`` (``request_timeout_ms``):
    what aiokafka's ``send()`` and ``partitions_for()`` raise for a topic that does not exist."""

    errno = kerr.UnknownTopicOrPartitionError.errno  # not OSError's errno, which is None here


class KafkaConnectionError(ours.BrokerError, kerr.KafkaConnectionError):  # type: ignore[misc]
    """No connection to a broker (at start: none of the bootstrap servers answered)."""


class MessageSizeTooLargeError(ours.RecordTooLargeError, kerr.MessageSizeTooLargeError):  # type: ignore[misc]
    """The record is larger than ``max_request_size`` (or ``buffer_memory``)."""


class ProducerClosed(ours.ProducerClosedError, kerr.ProducerClosed):  # type: ignore[misc]
    """The producer is stopped, or not started yet."""


class IllegalOperation(ours.InvalidTxnStateError, kerr.IllegalOperation):  # type: ignore[misc]
    """A transaction method, or ``send()``, called in a state that does not allow it."""


class ProducerFenced(ours.ProducerFencedError, kerr.ProducerFenced):  # type: ignore[misc]
    """Another producer took this ``transactional_id``: stop this one."""


class AuthenticationFailedError(ours.AuthenticationError, kerr.AuthenticationFailedError):  # type: ignore[misc]
    """SASL credentials or the TLS handshake were refused."""


class UnsupportedVersionError(ours.BrokerError, kerr.UnsupportedVersionError):  # type: ignore[misc]
    """The broker does not support a request this producer needs (error code 35)."""


# aioaccum's class -> its twin, most specific first: the first that matches wins.
_BY_CLASS: tuple[tuple[type[ours.AioAccumError], type[ours.AioAccumError]], ...] = (
    (ours.BufferExhaustedError, BufferExhaustedError),
    (ours.DeliveryTimeoutError, DeliveryTimeoutError),
    (ours.ProducerTimeoutError, KafkaTimeoutError),
    (ours.RecordTooLargeError, MessageSizeTooLargeError),
    (ours.ProducerClosedError, ProducerClosed),
    (ours.InvalidTxnStateError, IllegalOperation),
    (ours.ProducerFencedError, ProducerFenced),
    (ours.AuthenticationError, AuthenticationFailedError),
)
# Broker error codes whose twin has a name here; other codes take aiokafka's for_code class.
_BY_CODE: dict[int, type[BaseException]] = {
    kerr.UnsupportedVersionError.errno: UnsupportedVersionError,
}
_TWINS: dict[tuple[type[BaseException], type[BaseException]], type[BaseException]] = {}


def _twin(mine: type[BaseException], theirs: type[BaseException]) -> type[BaseException]:
    """A class deriving from ``mine`` and ``theirs``: ``theirs`` itself when it already does."""
    if issubclass(theirs, mine):
        return theirs
    twin = _TWINS.get((mine, theirs))
    if twin is None:
        twin = type(
            theirs.__name__,
            (mine, theirs),
            {"__module__": __name__, "__doc__": f"{mine.__name__} and aiokafka's {theirs}."},
        )
        _TWINS[(mine, theirs)] = twin
    return twin


def _connection_cause(exc: BaseException) -> type[BaseException] | None:
    """aiokafka's class for an error without a broker's code: what the network layer saw."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, kerr.KafkaConnectionError) or (
            isinstance(cause, OSError) and not isinstance(cause, kerr.KafkaError)
        ):
            return KafkaConnectionError
        if isinstance(cause, kerr.KafkaError):
            return type(cause)
        cause = cause.__cause__
    return None


def _aiokafka_class(exc: ours.AioAccumError, metadata_wait: bool) -> type[BaseException] | None:
    if metadata_wait and type(exc) is ours.ProducerTimeoutError:
        return UnknownTopicOrPartitionError
    for mine, theirs in _BY_CLASS:
        if isinstance(exc, mine):
            return theirs
    errno = getattr(exc, "errno", -1)
    if isinstance(exc, ours.BrokerError):
        if errno == -1:
            return _connection_cause(exc) or kerr.for_code(errno)
        return _BY_CODE.get(errno) or kerr.for_code(errno)
    if isinstance(exc, ours.TransactionError) and errno != -1:
        return _BY_CODE.get(errno) or kerr.for_code(errno)
    return None


def aiokafka_error(exc: _E, *, metadata_wait: bool = False) -> _E:
    """``exc`` as an error that is also aiokafka's, or ``exc`` itself when it has no twin
    (a ``ConfigError`` is already the ``ValueError`` aiokafka raises; a ``SerializationError``
    the ``TypeError``).

    Args:
        exc: An error raised by aioaccum (any other error comes back as it is).
        metadata_wait: ``exc`` was raised while waiting for a topic's metadata, where a plain
            ``ProducerTimeoutError`` means the topic did not show up.
    """
    if not isinstance(exc, ours.AioAccumError) or isinstance(
        exc, (kerr.KafkaError, kerr.IllegalOperation)
    ):
        return exc
    theirs = _aiokafka_class(exc, metadata_wait)
    if theirs is None:
        return exc
    twin: Any = copy.copy(exc)
    twin.__class__ = _twin(type(exc), theirs)
    twin.__dict__.update(exc.__dict__)  # a __reduce__ that rebuilds from arguments drops notes
    twin.__cause__ = exc.__cause__
    twin.__context__ = exc.__context__
    twin.__suppress_context__ = exc.__suppress_context__
    twin.__traceback__ = exc.__traceback__
    result: _E = twin
    return result
