"""The errors of the schema registry client and the serializers, in aioaccum's one tree.

::

    AioAccumError
    ├── SchemaRegistryError                 the registry answered with an error, or not at all
    │   ├── SchemaNotFoundError             404: no such subject, version or schema id
    │   ├── IncompatibleSchemaError         409: the subject's compatibility rule refused it
    │   ├── InvalidSchemaError              422: the registry could not parse the schema
    │   ├── RegistryAuthenticationError     401 / 403 (also an AuthenticationError)
    │   └── RegistryUnavailableError        no answer (connection refused, reset), or 5xx
    │       └── RegistryTimeoutError        no answer within the client's timeout (TimeoutError)
    └── SerializationError                  (aioaccum.errors)
        ├── SchemaNotReadyError             the serializer was called before its schema id
        │                                   was resolved: ``await serializer.prepare(topic)``
        └── SchemaMismatchError             the value does not fit the schema

Every message names the subject (when there is one) and quotes the registry's own answer
(its ``error_code`` and ``message``); none holds a password.
"""

from __future__ import annotations

from aioaccum.errors import AioAccumError, AuthenticationError, SerializationError

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "RegistryAuthenticationError",
    "RegistryTimeoutError",
    "RegistryUnavailableError",
    "SchemaMismatchError",
    "SchemaNotFoundError",
    "SchemaNotReadyError",
    "SchemaRegistryError",
]


class SchemaRegistryError(AioAccumError):
    """A request to the schema registry failed.

    Attributes:
        subject: The subject the request was about (None for a lookup by id).
        status: The HTTP status of the answer (None when no answer came).
        error_code: The registry's own code, e.g. 40401 (subject not found), or None.
        registry_message: The registry's ``message``, as it sent it (or the transport's error).
    """

    def __init__(
        self,
        message: str,
        *,
        subject: str | None = None,
        status: int | None = None,
        error_code: int | None = None,
        registry_message: str = "",
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.status = status
        self.error_code = error_code
        self.registry_message = registry_message

    def __reduce__(self) -> tuple[object, ...]:
        # Kept through pickling (Spark tasks hand errors between processes).
        return (
            _rebuild,
            (type(self), str(self), self.subject, self.status, self.error_code,
             self.registry_message),
        )


def _rebuild(
    cls: type[SchemaRegistryError],
    message: str,
    subject: str | None,
    status: int | None,
    error_code: int | None,
    registry_message: str,
) -> SchemaRegistryError:
    return cls(
        message, subject=subject, status=status, error_code=error_code,
        registry_message=registry_message,
    )


class SchemaNotFoundError(SchemaRegistryError):
    """The subject, the version or the schema id is not in the registry (404; Confluent's
    codes 40401, 40402, 40403). With ``auto_register_schemas=False`` it means the schema was
    never registered under the subject."""


class IncompatibleSchemaError(SchemaRegistryError):
    """The subject's compatibility rule refused the schema (409)."""


class InvalidSchemaError(SchemaRegistryError):
    """The registry could not parse the schema, or refused its references (422, 42201)."""


class RegistryAuthenticationError(SchemaRegistryError, AuthenticationError):
    """The registry refused the credentials (401) or their access to the subject (403)."""


class RegistryUnavailableError(SchemaRegistryError):
    """No usable answer: the connection failed, or the registry kept answering 5xx or 429
    until the client's timeout."""


class RegistryTimeoutError(RegistryUnavailableError, TimeoutError):
    """The registry did not answer within the client's ``timeout``."""


class SchemaNotReadyError(SerializationError):
    """A serializer was called before its schema id was known for the subject.

    The producer calls serializers synchronously, and a send never waits on the registry:
    resolve the id first with ``await serializer.prepare(topic)`` (or
    ``serializer.prepare_blocking(topic)`` in a thread).

    Attributes:
        subject: The subject whose id is missing (None when the topic was not given).
    """

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.subject = subject


class SchemaMismatchError(SerializationError):
    """The value does not fit the serializer's schema (a missing field, a wrong type, a
    message of another class); nothing was sent.

    Attributes:
        subject: The subject of the schema the value was checked against.
    """

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.subject = subject
