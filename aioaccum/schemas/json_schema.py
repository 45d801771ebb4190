"""JSON values checked against a JSON Schema, in Confluent's wire format (``aioaccum[schemas]``).

Each value is validated with the ``jsonschema`` package (by default; ``validate=False`` skips
it) and written as compact UTF-8 JSON (``,`` and ``:`` separators, non-ASCII kept as is): the
bytes of confluent-kafka's ``JSONSerializer`` for the same schema and value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import exceptions as jsonschema_errors
from jsonschema.validators import validator_for

from aioaccum.errors import ConfigError
from aioaccum.schemas.errors import SchemaMismatchError
from aioaccum.schemas.registry import RegisteredSchema, Schema, SchemaRegistryClient
from aioaccum.schemas.serializer import Encoder, SchemaSerializer

__all__ = ["JsonSchemaSerializer"]


def _document(text: str, where: str) -> Any:
    try:
        document = json.loads(text)
        validator_for(document).check_schema(document)
    except (ValueError, jsonschema_errors.SchemaError) as exc:
        raise ConfigError(f"{where} is not a valid JSON Schema: {exc}") from exc
    return document


class JsonSchemaSerializer(SchemaSerializer):
    """Serializes JSON values (dicts, lists, strings, numbers, ...) under a JSON Schema.

    Args:
        registry: The registry client.
        schema: The JSON Schema, as JSON text (its ``title`` is the record name).
        to_dict: Turns each value into a JSON value first.
        validate: Check every value against the schema before writing it (default True).
        **options: The options of :class:`SchemaSerializer`.

    Raises:
        ConfigError: The schema is not valid JSON Schema, or the options conflict.
    """

    schema_type = "JSON"

    def __init__(
        self,
        registry: SchemaRegistryClient,
        schema: str,
        *,
        to_dict: Callable[[Any], Any] | None = None,
        validate: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(registry, **options)
        self._schema = Schema(schema, "JSON")
        self._document = _document(schema, "the schema")
        self._to_dict = to_dict
        self._validate = validate
        title = self._document.get("title") if isinstance(self._document, dict) else None
        self._record_name = None if title is None else str(title)

    @property
    def schema(self) -> Schema:
        return self._schema

    @property
    def record_name(self) -> str | None:
        return self._record_name

    def _encoder(self, registered: RegisteredSchema, header: bytes) -> Encoder:
        document = self._document
        if self.use_latest_version:
            document = _document(
                registered.schema.schema,
                f"version {registered.version} of subject {registered.subject!r}",
            )
        validator = validator_for(document)(document) if self._validate else None
        dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
        to_dict = self._to_dict
        subject, schema_id = registered.subject, registered.schema_id

        def encode(value: Any) -> bytes:
            if to_dict is not None:
                value = to_dict(value)
            if validator is not None and not validator.is_valid(value):
                error = jsonschema_errors.best_match(validator.iter_errors(value))
                where = "/".join(map(str, error.absolute_path)) if error else ""
                raise SchemaMismatchError(
                    f"value does not fit the JSON schema of subject {subject!r} (id "
                    f"{schema_id}){' at ' + where if where else ''}: "
                    f"{error.message if error else 'invalid'}",
                    subject=subject,
                )
            return header + dumps(value).encode()

        return encode
