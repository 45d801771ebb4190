"""One tree of errors for everything aioaccum raises.

Every error the producer hands to user code derives from :class:`AioAccumError`, so one
``except AioAccumError`` catches them all, while the standard bases (``ValueError``,
``TimeoutError``) let generic code keep working. Errors raised by aiokafka are translated into
this tree in exactly one place, ``aioaccum._kafka``.
"""

from __future__ import annotations

__all__ = [
    "AioAccumError",
    "AuthenticationError",
    "BrokerError",
    "BufferExhaustedError",
    "ConfigError",
    "DeliveryTimeoutError",
    "ProducerClosedError",
    "ProducerTimeoutError",
    "RecordTooLargeError",
    "SerializationError",
]


class AioAccumError(Exception):
    """Base class of every error aioaccum raises."""


class ConfigError(AioAccumError, ValueError):
    """A setting is unknown, or its value is out of range or of the wrong type."""


class SerializationError(AioAccumError, TypeError):
    """A key, value or header could not be turned into bytes."""


class ProducerClosedError(AioAccumError):
    """The producer (or its buffer pool) was closed before the operation could finish."""


class RecordTooLargeError(AioAccumError):
    """A record can never be sent: it is larger than a limit that no amount of waiting lifts."""


class ProducerTimeoutError(AioAccumError, TimeoutError):
    """A deadline passed (Kafka's ``TimeoutException``)."""


class BufferExhaustedError(ProducerTimeoutError):
    """No buffer memory became free within ``max_block_ms``."""


class DeliveryTimeoutError(ProducerTimeoutError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""


class AuthenticationError(AioAccumError):
    """The connection could not be secured or authenticated (Java's ``AuthenticationException``).

    SASL credentials were refused, the mechanism is not enabled on the listener, or the TLS
    handshake failed: the server's certificate did not verify against the trusted CAs or does
    not name the host connected to, or one side does not speak TLS. Retrying cannot help until
    the configuration changes. Messages never contain the password.
    """


class BrokerError(AioAccumError):
    """The broker answered with an error code.

    Attributes:
        errno: Kafka's numeric error code (``-1`` when the error is not the broker's).
        retriable: Whether sending again may succeed.
        invalid_metadata: Whether the error means cached metadata (leaders) is stale.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int = -1,
        retriable: bool = False,
        invalid_metadata: bool = False,
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.retriable = retriable
        self.invalid_metadata = invalid_metadata

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_broker_error,
            (type(self), str(self), self.errno, self.retriable, self.invalid_metadata),
        )


def _rebuild_broker_error(
    cls: type[BrokerError], message: str, errno: int, retriable: bool, invalid_metadata: bool
) -> BrokerError:
    return cls(message, errno=errno, retriable=retriable, invalid_metadata=invalid_metadata)
