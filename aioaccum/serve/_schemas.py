"""The schema registry behind the Avro, Protobuf and JSON Schema formats of v2 and v3.

A request names its key's and its value's schema in one of REST Proxy's ways: the schema's text
(registered under the subject, or found there), a schema id, or a subject with a version (the
latest when none is given). :class:`SchemaResolver` turns that into a :class:`Resolved`: the id,
subject and version for the answer, and the encoder of the records.

Theory of operation
    Each way of naming a schema is a cache key (the text with its subject, the id, the subject
    with its version), kept for the life of the process (up to :data:`MAX_KEPT` of them, the
    oldest dropped first): the registry is asked the first time a schema is named, and never
    again for it, so a record costs its encoding only. Requests
    naming the same schema at once wait for one resolution. "Latest" is the exception: it is
    kept for :data:`LATEST_TTL_S` seconds, then asked again, so that a new version is picked up.
    A registry's failure is not kept; a schema text that does not parse is (up to
    :data:`MAX_REFUSED`), and refused at once when it comes again.

Registry failures become REST Proxy's answers (:func:`schema_error`): an unknown id, subject or
version 404 (40403), a schema the registry or the format refuses 422 (42205), one the subject's
compatibility rule refuses 409, no answer in time 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from aioaccum.errors import ConfigError
from aioaccum.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthenticationError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRegistryError,
)
from aioaccum.schemas.registry import Schema, SchemaRegistryClient

from ._errors import RETRY_AFTER_OUTAGE_S, ErrorCode, RestError
from ._records import STRATEGIES, Record, SchemaSpec
from ._schema_codecs import (
    FORMATS,
    Codec,
    ParsedSchema,
    encode_data,
    parse_schema,
    registry_type,
)

__all__ = [
    "LATEST_TTL_S",
    "MAX_KEPT",
    "STRATEGIES",
    "Resolved",
    "SchemaResolver",
    "SchemaSpec",
    "encode_record",
    "schema_error",
]

log = logging.getLogger("aioaccum.serve")

_T = TypeVar("_T")
LATEST_TTL_S: Final = 60.0
# Schema texts that did not parse, kept (the oldest dropped first) so that one sent again
# is refused at once.
MAX_REFUSED: Final = 1024
# Resolutions kept at most (every way of naming a schema is one).
MAX_KEPT: Final = 10_000


@dataclass(frozen=True, slots=True)
class Resolved:
    """A schema the records of a request are written with."""

    fmt: str
    schema_id: int
    subject: str | None
    version: int | None
    encode: Codec


def schema_error(exc: SchemaRegistryError | ConfigError, where: str) -> RestError:
    """The answer for a schema that could not be resolved (see the module docstring)."""
    if isinstance(exc, ConfigError):
        return RestError(422, ErrorCode.INVALID_SCHEMA, f"{where}: invalid schema: {exc}")
    if isinstance(exc, SchemaNotFoundError):
        return RestError(404, ErrorCode.SCHEMA_NOT_FOUND, f"{where}: schema not found: {exc}")
    if isinstance(exc, IncompatibleSchemaError):
        return RestError(409, ErrorCode.CONFLICT, f"{where}: {exc}")
    if isinstance(exc, InvalidSchemaError):
        return RestError(422, ErrorCode.INVALID_SCHEMA, f"{where}: invalid schema: {exc}")
    if isinstance(exc, RegistryAuthenticationError):
        return RestError(
            503,
            ErrorCode.SERVICE_UNAVAILABLE,
            f"{where}: the schema registry refused this server's credentials ({exc}); check "
            "schema.registry.basic.auth.user.info",
            retry_after=RETRY_AFTER_OUTAGE_S,
        )
    if isinstance(exc, RegistryUnavailableError):
        return RestError(
            503,
            ErrorCode.SERVICE_UNAVAILABLE,
            f"{where}: the schema registry is unavailable: {exc}",
            retry_after=RETRY_AFTER_OUTAGE_S,
        )
    # Any other refusal is about what the request sent (a subject name, a version ...).
    return RestError(422, ErrorCode.INVALID_SCHEMA, f"{where}: the schema registry said: {exc}")


class SchemaResolver:
    """Resolves schema specs against one registry, and keeps what it resolved."""

    def __init__(self, registry: SchemaRegistryClient) -> None:
        self.registry = registry
        self._kept: dict[tuple[Any, ...], tuple[float, Any]] = {}
        self._inflight: dict[tuple[Any, ...], asyncio.Future[Any]] = {}
        self._refused: dict[tuple[Any, ...], ConfigError] = {}

    async def resolve(self, spec: SchemaSpec, topic: str, field: str) -> Resolved:
        """The schema ``spec`` names for ``field`` (``"key"`` or ``"value"``) of ``topic``.

        Raises:
            RestError: 404, 409, 422 or 503 (see :func:`schema_error`), or 400 for a spec
                that names nothing usable.
        """
        where = f"the {field} schema"
        try:
            if spec.schema_id is not None:
                return await self._by_id(spec.schema_id, spec.fmt, where)
            if spec.schema is not None:
                assert spec.fmt is not None
                return await self._by_text(spec, topic, field, where)
            return await self._by_subject(spec, topic, field, where)
        except (SchemaRegistryError, ConfigError) as exc:
            raise schema_error(exc, where) from None

    async def _by_id(self, schema_id: int, fmt: str | None, where: str) -> Resolved:
        async def fetch() -> Resolved:
            schema = await self.registry.get_schema(schema_id)
            found = _format_of(schema.schema_type)
            parsed = await self._parsed(found, schema.schema)
            return Resolved(found, schema_id, None, None, parsed.make(schema_id))

        resolved: Resolved = await self._once(("id", schema_id), fetch)
        _check_format(resolved.fmt, fmt, where, f"schema {schema_id}")
        return resolved

    async def _by_text(self, spec: SchemaSpec, topic: str, field: str, where: str) -> Resolved:
        fmt, text = spec.fmt, spec.schema
        assert fmt is not None
        assert text is not None
        parsed = await self._parsed(fmt, text)
        subject = spec.subject or _subject(spec.strategy, topic, field, parsed.record_name)

        async def fetch() -> Resolved:
            schema = Schema(text, registry_type(fmt))
            registered = await self.registry.register(subject, schema)
            if registered.version < 1:
                # A registry that answers a registration with the id alone: the version (for
                # v3's answer) comes from a lookup, once.
                registered = await self.registry.lookup(subject, schema)
            return Resolved(
                fmt, registered.schema_id, subject, registered.version,
                parsed.make(registered.schema_id),
            )  # fmt: skip

        return await self._once(("text", fmt, subject, text), fetch)

    async def _by_subject(
        self, spec: SchemaSpec, topic: str, field: str, where: str
    ) -> Resolved:
        if spec.subject is None and spec.strategy != "TOPIC_NAME":
            raise RestError(
                400,
                ErrorCode.BAD_REQUEST,
                f"{where}: subject_name_strategy {spec.strategy} needs the schema (its record "
                "name), or give the subject",
            )
        subject = spec.subject or f"{topic}-{field}"
        version = spec.version

        async def fetch() -> Resolved:
            if version is None:
                registered = await self.registry.get_latest_version(subject)
            else:
                registered = await self.registry.get_version(subject, version)
            found = _format_of(registered.schema.schema_type)
            parsed = await self._parsed(found, registered.schema.schema)
            return Resolved(
                found, registered.schema_id, subject, registered.version,
                parsed.make(registered.schema_id),
            )  # fmt: skip

        ttl = LATEST_TTL_S if version is None else None
        resolved: Resolved = await self._once(("subject", subject, version), fetch, ttl)
        _check_format(resolved.fmt, spec.fmt, where, f"subject {subject!r}")
        return resolved

    async def _parsed(self, fmt: str, text: str) -> ParsedSchema:
        key = ("parsed", fmt, text)
        refused = self._refused.get(key)
        if refused is not None:
            raise refused

        async def parse() -> ParsedSchema:
            return await parse_schema(fmt, text)

        try:
            return await self._once(key, parse)
        except ConfigError as exc:
            # A text that does not parse never will: the same one sent again (a client
            # retrying, or a flood of them) costs no second parse, nor a second protoc.
            if len(self._refused) >= MAX_REFUSED:
                del self._refused[next(iter(self._refused))]
            self._refused[key] = exc
            raise

    async def _once(
        self,
        key: tuple[Any, ...],
        fetch: Callable[[], Awaitable[_T]],
        ttl: float | None = None,
    ) -> _T:
        """``fetch()``'s result, kept under ``key`` (for ``ttl`` seconds, or for ever);
        callers asking for one key at once share one fetch."""
        kept = self._kept.get(key)
        now = time.monotonic()
        if kept is not None and (ttl is None or now - kept[0] < ttl):
            result: _T = kept[1]
            return result
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(fetch())
            self._inflight[key] = pending

            def done(future: asyncio.Future[Any]) -> None:
                self._inflight.pop(key, None)
                if not future.cancelled() and future.exception() is None:
                    if len(self._kept) >= MAX_KEPT:
                        # Clients choose the schemas: what is kept has a bound, the oldest
                        # resolution going first (asked again if named again).
                        del self._kept[next(iter(self._kept))]
                    self._kept[key] = (time.monotonic(), future.result())

            pending.add_done_callback(done)
        # shield: a caller that goes away leaves the fetch running for the others.
        shared: _T = await asyncio.shield(pending)
        return shared


async def encode_record(
    resolver: SchemaResolver, topic: str, record: Record
) -> tuple[Record, Resolved | None, Resolved | None]:
    """A v3 record with its schema'd key and value encoded, and their schemas.

    Raises:
        RestError: As :meth:`SchemaResolver.resolve`, and 422 (42203) for data that does not
            fit its schema.
    """
    key, value = record.key, record.value
    key_schema = value_schema = None
    if record.key_schema is not None:
        key_schema = await resolver.resolve(record.key_schema, topic, "key")
        if key is not None:
            key = encode_data(key_schema.encode, key, key_schema.fmt, key_schema.schema_id, "key")
    if record.value_schema is not None:
        value_schema = await resolver.resolve(record.value_schema, topic, "value")
        if value is not None:
            value = encode_data(
                value_schema.encode, value, value_schema.fmt, value_schema.schema_id, "value"
            )
    encoded = dataclasses.replace(
        record,
        key=key,
        value=value,
        key_type=record.key_type if key_schema is None else key_schema.fmt,
        value_type=record.value_type if value_schema is None else value_schema.fmt,
    )
    return encoded, key_schema, value_schema


def _format_of(schema_type: str) -> str:
    for fmt, registry_name in FORMATS.items():
        if registry_name == schema_type.upper():
            return fmt
    raise ConfigError(f"the registry's schema type {schema_type!r} is not one this server writes")


def _check_format(found: str, wanted: str | None, where: str, what: str) -> None:
    if wanted is not None and found != wanted:
        raise RestError(
            422,
            ErrorCode.INVALID_SCHEMA,
            f"{where}: {what} is a {found} schema, but the request's format is {wanted}",
        )


def _subject(strategy: str, topic: str, field: str, record_name: str | None) -> str:
    if strategy == "TOPIC_NAME":
        return f"{topic}-{field}"
    if record_name is None:
        raise ConfigError(
            f"subject_name_strategy {strategy} needs a record name, and the schema has none "
            "(an Avro named type, a Protobuf message, a JSON Schema title)"
        )
    return record_name if strategy == "RECORD_NAME" else f"{topic}-{record_name}"
