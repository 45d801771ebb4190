"""REST Proxy v2's schema formats: Avro, Protobuf and JSON Schema records.

``application/vnd.kafka.avro.v2+json`` (and ``protobuf``, ``jsonschema``) bodies carry, beside
``records``, the schema of the keys and of the values: ``key_schema`` / ``value_schema`` (the
schema's text, registered under ``{topic}-key`` / ``{topic}-value``) or ``key_schema_id`` /
``value_schema_id`` (a registered schema's id). Keys and values are JSON (Avro's JSON encoding,
Protobuf's JSON mapping, or JSON for JSON Schema), encoded into Confluent's wire format before
any record of the request is sent: a request with one record that does not fit is refused whole
(422, 42203). A key without a key schema is 42201, a value without a value schema 42202, as in
REST Proxy. The answer gives the ids in ``key_schema_id`` and ``value_schema_id``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from ._errors import ErrorCode, RestError, invalid_payload
from ._gateway import Gateway
from ._records import SchemaSpec
from ._schema_codecs import encode_data
from ._v2_body import RECORD_OVERHEAD, Record, recharge

if TYPE_CHECKING:  # _schemas needs the schemas extra, imported only when a registry is set
    from ._schemas import Resolved

__all__ = ["SCHEMA_MEDIA", "encode_records", "schema_format"]

# The media types' format part and REST Proxy's name of the format.
SCHEMA_MEDIA: Final = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSONSCHEMA"}
# Records encoded between two turns of the event loop.
_BATCH: Final = 256


def schema_format(media: str) -> str | None:
    """``AVRO``, ``PROTOBUF`` or ``JSONSCHEMA`` for v2's schema media types, else None."""
    for name, fmt in SCHEMA_MEDIA.items():
        if media in (f"application/vnd.kafka.{name}.v2+json", f"application/vnd.kafka.{name}.v2"):
            return fmt
    return None


def _spec(fields: dict[str, object], field: str, fmt: str) -> SchemaSpec | None:
    schema = fields.get(f"{field}_schema")
    schema_id = fields.get(f"{field}_schema_id")
    # Both checked, whichever is used: a malformed field is refused, not ignored.
    if schema_id is not None and (
        type(schema_id) is not int or not 0 <= schema_id <= 0xFFFFFFFF
    ):
        raise invalid_payload(f"{field}_schema_id must be a schema id (an integer >= 0)")
    if schema is not None and not isinstance(schema, str):
        raise invalid_payload(f"{field}_schema must be the schema's text, a string")
    if schema_id is not None:
        return SchemaSpec(fmt, schema_id=schema_id)
    if schema is not None:
        return SchemaSpec(fmt, schema=schema)
    return None


async def encode_records(
    gateway: Gateway,
    topic: str,
    fmt: str,
    fields: dict[str, object],
    records: list[Record],
    held: int,
) -> tuple[list[Record], int, int | None, int | None]:
    """The records with their JSON keys and values encoded, the budget bytes held now, and
    the key's and the value's schema ids (None for a side no record uses).

    Raises:
        RestError: 42201 / 42202 when keys or values come without their schema, 42203 when
            one does not fit it, the resolver's errors (404 40403, 409, 422 42205, 503), 429
            when the budget cannot hold the encoded records.
    """
    resolver = gateway.schemas
    assert resolver is not None
    key_spec = _spec(fields, "key", fmt)
    value_spec = _spec(fields, "value", fmt)
    has_keys = any(r.key is not None for r in records)
    has_values = any(r.value is not None for r in records)
    if has_keys and key_spec is None:
        raise RestError(
            422,
            ErrorCode.KEY_SCHEMA_MISSING,
            "the request has keys and a schema format, but no key_schema or key_schema_id",
        )
    if has_values and value_spec is None:
        raise RestError(
            422,
            ErrorCode.VALUE_SCHEMA_MISSING,
            "the request has values and a schema format, but no value_schema or "
            "value_schema_id",
        )
    key = None if key_spec is None or not has_keys else await resolver.resolve(
        key_spec, topic, "key"
    )
    value = None if value_spec is None or not has_values else await resolver.resolve(
        value_spec, topic, "value"
    )
    encoded: list[Record] = []
    cost = 0
    start = held
    try:
        for index, record in enumerate(records):
            if index and index % _BATCH == 0:
                held = recharge(gateway.budget, held, held + cost)
                cost = 0
                await asyncio.sleep(0)
            new = Record(
                _encode(key, record.key, index, "key"),
                _encode(value, record.value, index, "value"),
                record.partition,
            )
            encoded.append(new)
            cost += len(new.key or b"") + len(new.value or b"") + RECORD_OVERHEAD
        held = recharge(gateway.budget, held, held + cost)
    except BaseException:
        # The caller gives back what it held before; what this took, this gives back.
        gateway.budget.give(held - start)
        raise
    return (
        encoded,
        held,
        None if key is None else key.schema_id,
        None if value is None else value.schema_id,
    )


def _encode(resolved: Resolved | None, data: bytes | None, index: int, field: str) -> bytes | None:
    if data is None:
        return None
    assert resolved is not None
    return encode_data(
        resolved.encode, data, resolved.fmt, resolved.schema_id, f"records[{index}].{field}"
    )
