"""One tree of errors for everything aioaccum raises.

Every error the producer hands to user code derives from :class:`AioAccumError`, so one
``except AioAccumError`` catches them all, while the standard bases (``ValueError``,
``TimeoutError``) let generic code keep working. Errors raised by aiokafka are translated into
this tree in exactly one place, ``aioaccum._kafka.adapter``.
"""

from __future__ import annotations

__all__ = [
    "AioAccumError",
    "ArrowColumnError",
    "AuthenticationError",
    "BrokerError",
    "BufferExhaustedError",
    "ConfigError",
    "DeliveryTimeoutError",
    "InvalidTxnStateError",
    "JournalCorruptError",
    "JournalError",
    "JournalFullError",
    "JournalLockedError",
    "ProducerClosedError",
    "ProducerFailedError",
    "ProducerFencedError",
    "ProducerTimeoutError",
    "RecordTooLargeError",
    "SerializationError",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionFatalError",
]


class AioAccumError(Exception):
    """Base class of every error aioaccum raises.

    Attributes:
        possibly_written: For a record's error: it was sent and no definite answer came back
            (a request timed out, a connection was lost, the producer closed while waiting),
            so the broker may have written it. False means it is not in the log.
    """

    possibly_written: bool = False


class ConfigError(AioAccumError, ValueError):
    """A setting is unknown, or its value is out of range or of the wrong type."""


class ArrowColumnError(ConfigError):
    """Arrow rows cannot become records: a missing or mistyped column, or a null topic."""


class SerializationError(AioAccumError, TypeError):
    """A key, value or header could not be turned into bytes."""


class ProducerClosedError(AioAccumError):
    """The producer (or its buffer pool) was closed before the operation could finish."""


class ProducerFailedError(ProducerClosedError):
    """The producer stopped on an error it cannot go on from; ``__cause__`` is that error.

    Records it held and every later call fail with this error. Create a new producer; a
    ``ProducerFailedError`` is also a :class:`ProducerClosedError`, so code that handles a
    closed producer handles this one too.
    """


class RecordTooLargeError(AioAccumError):
    """A record can never be sent: it is larger than a limit that no amount of waiting lifts."""


class ProducerTimeoutError(AioAccumError, TimeoutError):
    """A deadline passed (Kafka's ``TimeoutException``)."""


class BufferExhaustedError(ProducerTimeoutError):
    """No buffer memory became free within ``max_block_ms``."""


class DeliveryTimeoutError(ProducerTimeoutError):
    """A record was not acknowledged within ``delivery_timeout_ms``, or can no longer be.

    ``possibly_written`` (see :class:`AioAccumError`) tells a record that never reached a
    broker from one that may be in the log: re-send the latter only if a duplicate is
    acceptable.
    """

    def __init__(self, message: str, *, possibly_written: bool = False) -> None:
        super().__init__(message)
        self.possibly_written = possibly_written

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_delivery_timeout, (type(self), str(self), self.possibly_written))


def _rebuild_delivery_timeout(
    cls: type[DeliveryTimeoutError], message: str, possibly_written: bool
) -> DeliveryTimeoutError:
    return cls(message, possibly_written=possibly_written)


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
            (
                type(self), str(self), self.errno, self.retriable, self.invalid_metadata,
                self.possibly_written,
            ),
        )


def _rebuild_broker_error(
    cls: type[BrokerError],
    message: str,
    errno: int,
    retriable: bool,
    invalid_metadata: bool,
    possibly_written: bool = False,
) -> BrokerError:
    error = cls(message, errno=errno, retriable=retriable, invalid_metadata=invalid_metadata)
    error.possibly_written = possibly_written
    return error


class TopicAuthorizationError(BrokerError):
    """The broker refused this producer's principal access to a topic (Kafka's
    TOPIC_AUTHORIZATION_FAILED, error code 29; Java's ``TopicAuthorizationException``).

    ``send()`` raises it when the topic's metadata is refused (DESCRIBE is denied); a record's
    future ends with it when the write is (WRITE is denied). The message names the topic.
    Retrying cannot help until an ACL allows the principal WRITE and DESCRIBE on the topic.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int = 29,  # TOPIC_AUTHORIZATION_FAILED: a literal, as kafka_errors imports us
        retriable: bool = False,
        invalid_metadata: bool = False,
    ) -> None:
        super().__init__(
            message, errno=errno, retriable=retriable, invalid_metadata=invalid_metadata
        )


class TransactionError(AioAccumError):
    """Base class of the errors of a transactional producer (``transactional_id`` set).

    Java splits them as this tree does: :class:`TransactionAbortableError` ends only the current
    transaction, :class:`TransactionFatalError` ends the producer, and
    :class:`InvalidTxnStateError` is a call made in the wrong state.

    Attributes:
        errno: Kafka's error code when a broker answered with one, else ``-1``.
    """

    def __init__(self, message: str, *, errno: int = -1) -> None:
        super().__init__(message)
        self.errno = errno

    def __reduce__(self) -> tuple[object, ...]:
        # Spark hands errors between processes; keep the code through pickling.
        return (type(self), (str(self),), {"errno": self.errno})


class InvalidTxnStateError(TransactionError):
    """A transaction method (or ``send()``) was called in a state that does not allow it, such
    as ``send()`` before :meth:`~aioaccum.Producer.begin_transaction` (Java's
    ``IllegalStateException``). Nothing changed; fix the order of the calls."""


class TransactionAbortableError(TransactionError):
    """The current transaction cannot commit (a record failed, or the coordinator refused a
    step): call :meth:`~aioaccum.Producer.abort_transaction`, then begin a new one. The
    producer itself goes on. ``__cause__`` is the first error seen."""


class TransactionFatalError(TransactionError):
    """The transactional producer cannot go on: close it, and start a new one to continue."""


class ProducerFencedError(TransactionFatalError):
    """Another producer took this ``transactional_id`` (it called InitProducerId with it, or
    the broker aborted this producer's transaction after ``transaction_timeout_ms`` and moved
    the epoch on): this one is fenced off, and nothing of its open transaction is committed.
    Close it."""


class TransactionAbortedError(TransactionError):
    """A record's outcome when its transaction was aborted before the record was sent (Java's
    ``TransactionAbortedException``): it was never written."""


class JournalError(AioAccumError):
    """The write-ahead journal (``journal_dir``) cannot be used: the folder, a segment or the
    disk refused an operation. The message names the path and the fix."""


class JournalLockedError(JournalError):
    """Another producer writes to the same ``journal_dir``; the message names its pid."""


class JournalFullError(JournalError, ProducerTimeoutError):
    """The journal holds ``journal_max_bytes`` of records without outcome, or the disk is full,
    and no room came free within ``max_block_ms``."""


class JournalCorruptError(JournalError):
    """A journal entry failed its CRC check in the middle of a segment; it was not sent."""
