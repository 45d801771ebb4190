"""What the three serializers share: subjects, the registry step, framing and the send path.

Theory of operation
    The producer calls ``key_serializer`` / ``value_serializer`` synchronously, once per record
    (``send``, each item of ``send_many``, ``SyncProducer.send`` in the calling thread), with
    the value alone. A registry call cannot happen there: it is I/O, and a send must never
    wait on HTTP. So a serializer has two steps:

    1. ``await prepare(topic)`` (or ``prepare_blocking(topic)`` in a thread): works out the
       subject, registers the schema (``auto_register_schemas``), finds it
       (``auto_register_schemas=False``) or reads the subject's latest version
       (``use_latest_version``), and builds, once, everything a record needs: the 5-byte
       prefix (and Protobuf's message indexes) and the format's encoder. Concurrent prepares
       of one subject make one registry request (:class:`SchemaRegistryClient`).
    2. ``serializer(value)`` (what the producer calls) and ``serialize(value, topic)``: one
       dictionary look-up, the format library's encoding, one concatenation. No I/O, no
       await, no lock. Before step 1 it raises :class:`SchemaNotReadyError`, naming the subject
       and the call that resolves it.

    A producer's serializer is called without the topic, so ``serializer(value)`` uses the
    ``topic`` given to the constructor. The ``"record"`` strategy does not need one. To send
    to several topics under the ``"topic"`` strategy, prepare each and pass
    ``serializer.for_topic(topic)`` as the callable, or serialize before sending:
    ``await producer.send(topic, serializer.serialize(value, topic))``.
"""

from __future__ import annotations

import abc
import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from aioaccum.errors import ConfigError
from aioaccum.schemas.errors import SchemaMismatchError, SchemaNotReadyError
from aioaccum.schemas.framing import frame_header
from aioaccum.schemas.registry import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from aioaccum.schemas.subjects import SubjectNameStrategy, resolve_strategy, subject_name

__all__ = ["Encoder", "Prepared", "SchemaSerializer"]

Encoder = Callable[[Any], bytes]
# What the format libraries raise for a value that does not fit a schema (fastavro: ValueError,
# TypeError, KeyError, AttributeError; struct.error for an int out of range).
_MISFITS: Final = (ValueError, TypeError, KeyError, AttributeError, OverflowError, struct.error)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A subject's schema, resolved: what every record of it is framed and encoded with."""

    subject: str
    schema_id: int
    version: int
    encode: Encoder  # value -> framed bytes (prefix included)


class SchemaSerializer(abc.ABC):
    """Base of :class:`AvroSerializer`, :class:`ProtobufSerializer` and
    :class:`JsonSchemaSerializer` (see the module docstring).

    Args:
        registry: The registry client.
        topic: The topic ``serializer(value)`` serializes for (the ``"topic"`` and
            ``"topic_record"`` strategies need it; ``serialize(value, topic)`` takes any).
        is_key: Serialize keys (subject ``{topic}-key``) rather than values.
        subject_name_strategy: ``"topic"`` (default), ``"record"``, ``"topic_record"``, or a
            callable ``(topic, field, record_name) -> subject``.
        auto_register_schemas: Register the schema under the subject when preparing (Confluent's
            ``auto.register.schemas``, default True); False only looks it up, and preparing
            fails with :class:`SchemaNotFoundError` if it is not there.
        use_latest_version: Frame records with the subject's latest version instead of this
            serializer's schema (``use.latest.version``); needs
            ``auto_register_schemas=False``. Avro writes with that version's schema, JSON
            Schema validates against it.
        normalize_schemas: Ask the registry to normalize the schema before registering or
            looking it up (``normalize.schemas``).

    Raises:
        ConfigError: Both ``auto_register_schemas`` and ``use_latest_version``, or an unknown
            strategy.
    """

    schema_type: ClassVar[str]

    def __init__(
        self,
        registry: SchemaRegistryClient,
        *,
        topic: str | None = None,
        is_key: bool = False,
        subject_name_strategy: SubjectNameStrategy = "topic",
        auto_register_schemas: bool = True,
        use_latest_version: bool = False,
        normalize_schemas: bool = False,
    ) -> None:
        if auto_register_schemas and use_latest_version:
            raise ConfigError(
                "use_latest_version=True needs auto_register_schemas=False (as Confluent's "
                "serializers: registering this schema and writing with the latest one conflict)"
            )
        self.registry = registry
        self.topic = topic
        self.field = "key" if is_key else "value"
        self.strategy = resolve_strategy(subject_name_strategy)
        self.auto_register_schemas = auto_register_schemas
        self.use_latest_version = use_latest_version
        self.normalize_schemas = normalize_schemas
        # By topic; the "record" strategy's subject is the same for every topic, so it is kept
        # under None too and serves any topic.
        self._prepared: dict[str | None, Prepared] = {}

    # --- what each format gives

    @property
    @abc.abstractmethod
    def schema(self) -> Schema:
        """The schema this serializer registers (its references are added when preparing)."""

    @property
    @abc.abstractmethod
    def record_name(self) -> str | None:
        """The record's full name, for the ``"record"`` and ``"topic_record"`` strategies."""

    @abc.abstractmethod
    def _encoder(self, registered: RegisteredSchema, header: bytes) -> Encoder:
        """value -> ``header`` + payload, for records written under ``registered``."""

    async def _references(self) -> tuple[SchemaReference, ...]:
        """The schemas this one imports, registered (or found) first; none by default."""
        return ()

    # --- subjects and the registry step

    def subject(self, topic: str | None = None) -> str:
        """The subject records of ``topic`` (default: the constructor's) are registered under.

        Raises:
            ConfigError: The strategy needs a topic and none was given.
        """
        return subject_name(self.strategy, topic or self.topic, self.field, self.record_name)

    async def prepare(self, topic: str | None = None, *, refresh: bool = False) -> int:
        """Resolve the schema id for ``topic``'s subject (registering the schema if so
        configured); afterwards records of that topic are serialized without any I/O.

        Prepared ids are kept; ``refresh=True`` asks again (``use_latest_version``: picks up
        a newer latest version).

        Returns:
            The schema id records are framed with.

        Raises:
            SchemaRegistryError: The registry refused (:class:`IncompatibleSchemaError`,
                :class:`SchemaNotFoundError`, ...) or did not answer in time; the message
                names the subject and quotes the registry.
            ConfigError: The strategy needs a topic and none was given.
        """
        topic = topic or self.topic
        known = self._prepared.get(topic)
        if known is not None and not refresh:
            return known.schema_id
        subject = self.subject(topic)
        if self.use_latest_version:
            registered = await self.registry.get_latest_version(subject)
        else:
            references = await self._references()
            schema = Schema(self.schema.schema, self.schema.schema_type, references)
            if self.auto_register_schemas:
                registered = await self.registry.register(
                    subject, schema, normalize=self.normalize_schemas
                )
            else:
                registered = await self.registry.lookup(
                    subject, schema, normalize=self.normalize_schemas
                )
        prepared = Prepared(
            subject, registered.schema_id, registered.version,
            self._encoder(registered, frame_header(registered.schema_id)),
        )
        self._prepared[topic] = prepared
        if self.strategy == "record":
            self._prepared[None] = prepared
        return prepared.schema_id

    def prepare_blocking(self, topic: str | None = None, *, refresh: bool = False) -> int:
        """:meth:`prepare` for a thread without an event loop (``SyncProducer``'s callers).

        Raises:
            RuntimeError: Called on a thread that runs an event loop: ``await prepare()``.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.prepare(topic, refresh=refresh))
        raise RuntimeError(
            "prepare_blocking() was called on a thread running an event loop, which it would "
            "block: use `await serializer.prepare(...)` there"
        )

    def prepared(self, topic: str | None = None) -> Prepared | None:
        """What :meth:`prepare` resolved for ``topic`` (None if not prepared yet)."""
        topic = topic or self.topic
        return self._prepared.get(topic) or (
            self._prepared.get(None) if self.strategy == "record" else None
        )

    # --- the send path

    def __call__(self, value: Any) -> bytes | None:
        """Serialize ``value`` for the constructor's topic (the producer's serializer call)."""
        return self.serialize(value, self.topic)

    def serialize(self, value: Any, topic: str | None = None) -> bytes | None:
        """``value`` in Confluent's wire format for ``topic``'s subject; None stays None
        (a tombstone).

        Raises:
            SchemaNotReadyError: The subject's schema id is not resolved yet: ``prepare()``.
            SchemaMismatchError: The value does not fit the schema.
        """
        if value is None:
            return None
        if topic is None:
            topic = self.topic
        prepared = self._prepared.get(topic)
        if prepared is None:
            prepared = self._not_prepared(topic)
        try:
            return prepared.encode(value)
        except SchemaMismatchError:
            raise
        except _MISFITS as exc:
            raise SchemaMismatchError(
                f"{type(value).__name__} value does not fit the {self.schema_type} schema of "
                f"subject {prepared.subject!r} (id {prepared.schema_id}): {exc}",
                subject=prepared.subject,
            ) from exc

    def _not_prepared(self, topic: str | None) -> Prepared:
        if self.strategy == "record" and None in self._prepared:
            return self._prepared[None]
        try:
            subject: str | None = self.subject(topic)
        except ConfigError:
            subject = None
        where = f"subject {subject!r}" if subject else f"topic {topic!r}"
        raise SchemaNotReadyError(
            f"the {self.schema_type} serializer's schema id for {where} is not resolved yet: "
            f"`await serializer.prepare({topic!r})` (or prepare_blocking) before sending; a "
            "send never waits on the registry",
            subject=subject,
        )

    def for_topic(self, topic: str) -> Callable[[Any], bytes | None]:
        """A serializer callable for ``topic`` (prepare it first), for a producer's
        ``value_serializer`` when this serializer's constructor had another topic."""

        def serialize(value: Any) -> bytes | None:
            return self.serialize(value, topic)

        return serialize

    def __repr__(self) -> str:
        ready = ", ".join(
            f"{p.subject}={p.schema_id}" for t, p in self._prepared.items() if t is not None
        )
        return (
            f"<{type(self).__name__} {self.field} strategy={self.strategy!r} "
            f"topic={self.topic!r} prepared=[{ready}]>"
        )
