"""Avro records in Confluent's wire format, encoded by fastavro (``aioaccum[schemas]``).

::

    registry = SchemaRegistryClient("http://127.0.0.1:18081/apis/ccompat/v7")
    serializer = AvroSerializer(registry, USER_SCHEMA, topic="users")
    await serializer.prepare()                       # registers users-value once
    async with Producer(bootstrap, value_serializer=serializer) as producer:
        await producer.send("users", {"name": "Ada", "age": 36})

The bytes are those of confluent-kafka's ``AvroSerializer`` for the same schema and value
(``tests/integration/test_schemas.py`` compares them): fastavro's schemaless encoding after
the 5-byte prefix, and, as Confluent's serializers do, a top-level ``"bytes"`` schema writes
the value's bytes as they are.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from fastavro import parse_schema, schemaless_writer
from fastavro.schema import SchemaParseException, UnknownType

from aioaccum.errors import ConfigError
from aioaccum.schemas.registry import RegisteredSchema, Schema, SchemaRegistryClient
from aioaccum.schemas.serializer import Encoder, SchemaSerializer

__all__ = ["AvroSerializer"]


def _schema_text(schema: str) -> str:
    """The text registered for ``schema``: a bare primitive (``"string"``) is wrapped as
    ``{"type":"string"}``, as Confluent's serializers do, so both register the same text (and
    so get the same id)."""
    text = schema.strip()
    if not text.startswith(("{", "[")):
        text = '{"type":' + text + "}"
    return text


def _parse(text: str, where: str) -> Any:
    try:
        return parse_schema(json.loads(text))
    except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as exc:
        raise ConfigError(f"{where} is not a valid Avro schema: {exc}") from exc


class AvroSerializer(SchemaSerializer):
    """Serializes dicts (or what ``to_dict`` makes of a value) as Avro.

    Args:
        registry: The registry client.
        schema: The Avro schema, as JSON text.
        to_dict: Turns each value into what fastavro writes (a dict for a record), e.g. a
            dataclass's ``dataclasses.asdict``.
        **options: The subject and registry options of :class:`SchemaSerializer` (``topic``,
            ``is_key``, ``subject_name_strategy``, ``auto_register_schemas``,
            ``use_latest_version``, ``normalize_schemas``).

    Raises:
        ConfigError: The schema does not parse, or the options conflict.
    """

    schema_type = "AVRO"

    def __init__(
        self,
        registry: SchemaRegistryClient,
        schema: str,
        *,
        to_dict: Callable[[Any], Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(registry, **options)
        text = _schema_text(schema)
        self._schema = Schema(text, "AVRO")
        self._parsed = _parse(text, "the schema")
        self._to_dict = to_dict
        if isinstance(self._parsed, dict):
            # fastavro keeps a named type's full name in "name"; a primitive is named by its
            # type (Confluent's rule for the record strategies).
            self._record_name: str | None = str(
                self._parsed.get("name", json.loads(text).get("type"))
            )
        else:
            self._record_name = None  # a union has no name: use the "topic" strategy

    @property
    def schema(self) -> Schema:
        return self._schema

    @property
    def record_name(self) -> str | None:
        return self._record_name

    def _encoder(self, registered: RegisteredSchema, header: bytes) -> Encoder:
        parsed = self._parsed
        if self.use_latest_version:
            parsed = _parse(
                registered.schema.schema,
                f"version {registered.version} of subject {registered.subject!r}",
            )
        to_dict = self._to_dict
        if parsed == "bytes" or (isinstance(parsed, dict) and parsed.get("type") == "bytes"):

            def encode_bytes(value: Any) -> bytes:
                value = value if to_dict is None else to_dict(value)
                return header + (value if isinstance(value, bytes) else value.encode())

            return encode_bytes

        def encode(value: Any) -> bytes:
            out = io.BytesIO()
            out.write(header)
            schemaless_writer(out, parsed, value if to_dict is None else to_dict(value))
            return out.getvalue()

        return encode
