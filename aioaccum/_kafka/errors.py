"""aiokafka's and the socket's errors, and Kafka's error codes, as aioaccum's error tree.

The one place where aiokafka's exceptions become aioaccum's (STYLE.md section 5): the adapter,
the transaction requests and the cluster view raise what :func:`map_errors` and
:func:`broker_error_for_code` make, each chained from the error it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator

import aiokafka.errors as kerr

from aioaccum._core import kafka_errors
from aioaccum._kafka.oauth import OAuthBearerFailed
from aioaccum.errors import (
    AioAccumError,
    AuthenticationError,
    BrokerError,
    ProducerTimeoutError,
    TopicAuthorizationError,
)

__all__ = ["authentication_error", "broker_error_for_code", "map_errors", "translate"]


def broker_error_for_code(
    code: int,
    message: str | None = None,
    *,
    topic: str | None = None,
    batch_bytes: int | None = None,
) -> BrokerError:
    """A typed error for a Kafka error code.

    A code named in :class:`~aioaccum._core.kafka_errors.Errors` is called by Kafka's name and
    takes its flags from the sender's table (:data:`~aioaccum._core.kafka_errors.RULES`), so the
    error a user reads and what the sender did about it agree; any other code takes aiokafka's
    name and flags. TOPIC_AUTHORIZATION_FAILED is a :class:`TopicAuthorizationError`. The
    message ends with what to change when a retry cannot help (``topic`` and ``batch_bytes``
    make that advice concrete).
    """
    retriable = kafka_errors.retriable(code)
    cls = kerr.for_code(code)
    # aiokafka has no class for some codes a Kafka 4 broker sends (INVALID_RECORD is its
    # "UnknownError"), and older names for others: Kafka's names are what its docs use.
    name = cls.__name__ if retriable is None else kafka_errors.Errors(code).name
    text = f"{name} (error code {code})"
    if message:
        text = f"{text}: {message}"
    advice = kafka_errors.advice(code, topic=topic, batch_bytes=batch_bytes)
    if advice:
        text = f"{text}; {advice}" if message else f"{text}: {advice}"
    if retriable is None:
        return BrokerError(
            text,
            errno=code,
            retriable=bool(cls.retriable),
            invalid_metadata=bool(getattr(cls, "invalid_metadata", False)),
        )
    rule = kafka_errors.RULES[kafka_errors.Errors(code)]
    error_class = (
        TopicAuthorizationError
        if code == kafka_errors.Errors.TOPIC_AUTHORIZATION_FAILED
        else BrokerError
    )
    return error_class(
        text, errno=code, retriable=retriable, invalid_metadata=rule.refresh_metadata
    )


_AUTH_ERRORS = (
    kerr.SaslAuthenticationFailed,
    kerr.UnsupportedSaslMechanismError,
    kerr.IllegalSaslStateError,
    kerr.AuthenticationFailedError,
    kerr.AuthenticationMethodNotSupported,
)
# The connection went away mid-handshake: a broker restarting looks the same, so these say
# nothing about certificates or protocols.
_SSL_TRANSPORT_ERRORS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
# A TLS record starts with its content type (21 is an alert) and the major version 3; a
# plaintext client reads those bytes as the length of a Kafka response.
_TLS_ALERT_PREFIX = (21, 3)


def _tls_alert_answer(exc: BaseException) -> bool:
    """Whether a plaintext connection was answered with a TLS alert (the port speaks TLS)."""
    cause = exc.__cause__
    if not isinstance(cause, asyncio.IncompleteReadError) or cause.expected is None:
        return False
    size = cause.expected
    return (size >> 24, (size >> 16) & 0xFF) == _TLS_ALERT_PREFIX


def authentication_error(
    exc: BaseException, where: str, login: str = "SASL authentication"
) -> AuthenticationError | None:
    """The typed error for a failure to secure or authenticate a connection, else None.

    ``login`` says who tried to log in how, e.g. "SASL PLAIN authentication as 'app'".
    """
    if isinstance(exc, OAuthBearerFailed):
        return AuthenticationError(str(exc))  # says what failed where; never holds the token
    if isinstance(exc, _AUTH_ERRORS):
        # aiokafka's text is the broker's, which never repeats the password.
        return AuthenticationError(
            f"{login} with {where} failed: {exc}; check sasl_mechanism, "
            "sasl_plain_username and sasl_plain_password"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return AuthenticationError(
            f"TLS certificate of {where} not accepted: {exc.verify_message} (verify code "
            f"{exc.verify_code}); trust the cluster's CA with "
            "ssl_context=ssl.create_default_context(cafile=...), and connect by a host name "
            "or IP address that the certificate lists"
        )
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, _SSL_TRANSPORT_ERRORS):
        return AuthenticationError(
            f"TLS handshake with {where} failed: {exc.reason or exc}; is that port a TLS "
            "listener, and does security_protocol match it?"
        )
    if isinstance(exc, kerr.KafkaConnectionError) and _tls_alert_answer(exc):
        return AuthenticationError(
            f"{where} answered with a TLS alert: it is a TLS listener, so set "
            "security_protocol='SSL' or 'SASL_SSL' (with an ssl_context trusting its CA)"
        )
    return None


def translate(exc: kerr.KafkaError | asyncio.TimeoutError | OSError) -> AioAccumError:
    auth = authentication_error(exc, "the broker")
    if auth is not None:
        return auth
    if isinstance(exc, kerr.KafkaError):
        errno = int(getattr(exc, "errno", -1))
        return BrokerError(
            str(exc),
            errno=errno,
            retriable=bool(exc.retriable),
            invalid_metadata=bool(getattr(exc, "invalid_metadata", False)),
        )
    if isinstance(exc, TimeoutError):
        return ProducerTimeoutError(f"request timed out: {exc}")
    return BrokerError(f"connection error: {exc}", retriable=True, invalid_metadata=True)


@contextlib.contextmanager
def map_errors() -> Iterator[None]:
    """Turn aiokafka and socket errors into aioaccum's tree, keeping the cause."""
    try:
        yield
    except (kerr.KafkaError, OSError) as exc:
        raise translate(exc) from exc
