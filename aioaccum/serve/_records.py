"""The pure parts of a v3 produce body: cutting a byte stream into JSON objects, and one
object into a record. No I/O and no event loop, so every malformed input is tested directly.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

from ._errors import ErrorCode, RestError, bad_request

__all__ = [
    "MAX_TIMESTAMP_MS",
    "STRICT_JSON",
    "ObjectSplitter",
    "Record",
    "SchemaSpec",
    "decode_json",
    "json_problem",
    "parse_record",
]

# The last millisecond of the year 9999: later instants have no ISO 8601 form to answer with.
MAX_TIMESTAMP_MS = 253_402_300_799_999
_TYPES = ("BINARY", "JSON", "STRING")
_SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSONSCHEMA")
_SCHEMA_FIELDS = ("schema", "schema_id", "schema_version", "subject", "subject_name_strategy")
# v3's subject_name_strategy values (REST Proxy's).
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")


class NonFiniteNumber(ValueError):
    """``NaN``, ``Infinity`` or a number beyond a double's range: not JSON (RFC 8259), and
    written to Kafka it would be text that strict JSON consumers cannot read."""


def _constant(name: str) -> object:
    raise NonFiniteNumber(name)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise NonFiniteNumber(text[:40])
    return value


# JSON as RFC 8259 has it: no NaN or Infinity, no number that reads as infinite. Integers over
# Python's digit limit (sys.get_int_max_str_digits) raise ValueError, answered as such.
STRICT_JSON = json.JSONDecoder(parse_constant=_constant, parse_float=_finite)


def json_problem(exc: Exception, what: str) -> RestError | None:
    """The 400 for an error the strict decoder raised, or None for any other error."""
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return bad_request(f"{what} is not valid JSON: {exc}")
    if isinstance(exc, RecursionError):
        return bad_request(f"{what} nests JSON too deeply; flatten it")
    if isinstance(exc, NonFiniteNumber):
        return bad_request(
            f"{what} holds the number {exc}, which is not finite: JSON has no NaN or "
            "Infinity, and numbers must fit a double; send such values as strings"
        )
    if isinstance(exc, ValueError):
        return bad_request(
            f"{what} holds an integer of more than {sys.get_int_max_str_digits()} digits; "
            "send it as a string"
        )
    return None


def decode_json(raw: bytes, what: str) -> object:
    """``raw`` parsed as strict JSON (see :data:`STRICT_JSON`).

    Raises:
        RestError: 400 when it is not JSON, holds a non-finite number or an integer too long
            to read, or nests deeper than the parser goes.
    """
    try:
        return STRICT_JSON.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeError included
        problem = json_problem(exc, what)
        assert problem is not None
        raise problem from None


def encode_json(data: object, where: str) -> bytes:
    """``data`` as compact UTF-8 JSON.

    Raises:
        RestError: 400 for a string with a lone surrogate (no UTF-8 form) or nesting too deep.
    """
    try:
        return json.dumps(
            data, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except UnicodeError:
        raise bad_request(
            f"{where} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which UTF-8 cannot "
            "encode; send the character's pair"
        ) from None
    except (RecursionError, ValueError) as exc:
        raise bad_request(f"{where} cannot be written as JSON: {type(exc).__name__}") from None


@dataclass(frozen=True, slots=True)
class SchemaSpec:
    """How a request names the schema of a key or a value (v2's fields, v3's data object):
    by its text, by id, or by subject and version (the latest when none is given)."""

    fmt: str | None  # AVRO, PROTOBUF, JSONSCHEMA; None: whatever the registry holds
    schema: str | None = None
    schema_id: int | None = None
    subject: str | None = None
    version: int | None = None
    strategy: str = "TOPIC_NAME"


@dataclass(frozen=True, slots=True)
class Record:
    """A v3 record. A key or value with a schema is its JSON data (compact UTF-8), encoded
    once its schema is resolved (``key_schema`` / ``value_schema``)."""

    key: bytes | None
    value: bytes | None
    key_type: str | None
    value_type: str | None
    partition: int | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes | None]]
    key_schema: SchemaSpec | None = None
    value_schema: SchemaSpec | None = None


def parse_record(document: object, *, schemas: bool = False) -> Record:
    """One record object of a v3 body; ``schemas``: whether the server has a registry.

    Raises:
        RestError: 400 for a malformed record, 422 for a schema-registry format on a server
            without a registry.
    """
    if not isinstance(document, dict):
        raise bad_request(f"a record must be a JSON object, not {type(document).__name__}")
    partition = document.get("partition_id")
    if partition is not None and (type(partition) is not int or partition < 0):
        raise bad_request(f"partition_id must be an integer >= 0, not {partition!r}")
    headers: list[tuple[str, bytes | None]] = []
    given = document.get("headers")
    if given is not None and not isinstance(given, list):
        raise bad_request(
            f'headers must be a list of {{"name": str, "value": base64}}, not '
            f"{type(given).__name__}"
        )
    for index, header in enumerate(given or []):
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise bad_request(f'headers[{index}] must be {{"name": str, "value": base64}}')
        name = header["name"]
        try:
            name.encode()
        except UnicodeError:
            raise bad_request(
                f"headers[{index}].name holds a lone UTF-16 surrogate, which UTF-8 cannot encode"
            ) from None
        raw = header.get("value")
        headers.append((name, None if raw is None else _base64(raw, f"headers[{index}]")))
    key, key_type, key_schema = _data(document.get("key"), "key", schemas)
    value, value_type, value_schema = _data(document.get("value"), "value", schemas)
    return Record(
        key, value, key_type, value_type, partition, _timestamp(document.get("timestamp")),
        headers, key_schema, value_schema,
    )  # fmt: skip


def _data(
    spec: object, where: str, schemas: bool
) -> tuple[bytes | None, str | None, SchemaSpec | None]:
    if spec is None:
        return None, None, None
    if not isinstance(spec, dict):
        raise bad_request(f'{where} must be an object like {{"type": "BINARY", "data": ...}}')
    kind = spec.get("type")
    if kind is None or str(kind).upper() in _SCHEMA_TYPES:
        if not schemas:
            named = kind or "a schema (" + ", ".join(f for f in _SCHEMA_FIELDS if f in spec) + ")"
            raise RestError(
                422,
                ErrorCode.UNPROCESSABLE,
                f"{where}: {named} needs a schema registry, and this server has none configured "
                f"(--schema-registry-url); give \"type\" as one of {', '.join(_TYPES)}",
            )
        schema = _schema_spec(spec, where)
        data = spec.get("data")
        encoded = None if data is None else encode_json(data, f"{where}.data")
        return encoded, schema.fmt, schema
    kind = str(kind).upper()
    data = spec.get("data")
    if kind not in _TYPES:
        raise bad_request(f"{where}.type {spec['type']!r} is not one of {', '.join(_TYPES)}")
    given = [name for name in _SCHEMA_FIELDS if spec.get(name) is not None]
    if given:
        raise bad_request(
            f"{where}: {', '.join(given)} name a schema, which type {kind} does not use; give "
            f"type {', '.join(_SCHEMA_TYPES)} (or no type) to write with a schema"
        )
    if data is None:
        return None, kind, None
    if kind == "BINARY":
        return _base64(data, f"{where}.data"), kind, None
    if kind == "STRING":
        if not isinstance(data, str):
            raise bad_request(f"{where}.data must be a string for type STRING")
        try:
            return data.encode(), kind, None
        except UnicodeError:
            raise bad_request(
                f"{where}.data holds a lone UTF-16 surrogate, which UTF-8 cannot encode"
            ) from None
    return encode_json(data, f"{where}.data"), kind, None


def _schema_spec(spec: dict[str, Any], where: str) -> SchemaSpec:
    """The schema a v3 key or value names (REST Proxy's fields).

    Raises:
        RestError: 400 for a field of the wrong type, or fields that contradict each other.
    """
    kind = spec.get("type")
    fmt = None if kind is None else str(kind).upper()
    schema, schema_id = spec.get("schema"), spec.get("schema_id")
    subject, version = spec.get("subject"), spec.get("schema_version")
    strategy = spec.get("subject_name_strategy", "TOPIC_NAME")
    if schema is not None and not isinstance(schema, str):
        raise bad_request(f"{where}.schema must be the schema's text, a string")
    if schema_id is not None and (type(schema_id) is not int or not 0 <= schema_id <= 0xFFFFFFFF):
        raise bad_request(f"{where}.schema_id must be a schema id (an integer >= 0)")
    if version is not None and (type(version) is not int or version < 1):
        raise bad_request(f"{where}.schema_version must be a version number (an integer >= 1)")
    if subject is not None and (not isinstance(subject, str) or not subject):
        raise bad_request(f"{where}.subject must be a non-empty string")
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise bad_request(
            f"{where}.subject_name_strategy must be one of {', '.join(STRATEGIES)}"
        )
    if schema_id is not None and (schema is not None or version is not None):
        raise bad_request(f"{where}: give schema_id alone, or schema, or schema_version")
    if schema is not None and version is not None:
        raise bad_request(f"{where}: give schema or schema_version, not both")
    if schema is not None and fmt is None:
        raise bad_request(f"{where}: a schema needs its type (AVRO, PROTOBUF or JSONSCHEMA)")
    return SchemaSpec(fmt, schema, schema_id, subject, version, strategy.upper())


def _base64(data: object, where: str) -> bytes:
    if not isinstance(data, str):
        raise bad_request(f"{where} must be a base64 string, not {type(data).__name__}")
    try:
        return base64.b64decode(data, validate=True)
    except ValueError as exc:  # binascii.Error, or characters beyond ASCII
        raise bad_request(f"{where}={data[:40]!r} is not base64: {exc}") from None


def _timestamp(value: object) -> int | None:
    if value is None:
        return None
    ms: int | None = None
    if type(value) is int:
        ms = value
    elif isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            # Exact integer arithmetic: no float rounding, no overflow near the year 9999.
            since = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
            ms = since // datetime.timedelta(milliseconds=1)
    if ms is None:
        raise bad_request(
            f"timestamp {value!r} is neither ISO 8601 (2021-02-05T19:14:42Z) nor milliseconds"
        )
    if not 0 <= ms <= MAX_TIMESTAMP_MS:
        raise bad_request(
            f"timestamp {value!r} is {ms} ms since 1970, outside 0 to {MAX_TIMESTAMP_MS} "
            "(1970-01-01 to 9999-12-31): Kafka takes no earlier time, and later has no "
            "ISO 8601 form"
        )
    return ms


class ObjectSplitter:
    """Cuts a byte stream of concatenated JSON objects into one bytes slice per object.

    Only the nesting of braces outside strings is followed; each slice is parsed afterwards.
    """

    _OUTSIDE = re.compile(rb'[{}"]')
    _INSIDE = re.compile(rb'["\\]')
    _SPACE = b" \t\r\n"

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scan = 0  # where scanning resumes
        self._depth = 0
        self._in_string = False

    @property
    def pending(self) -> int:
        """Bytes held of an object not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The objects completed by ``data``.

        Raises:
            RestError: 400 when something other than an object starts at the top level.
        """
        buffer = self._buffer
        buffer += data
        found: list[bytes] = []
        position = self._scan
        while position < len(buffer):
            if self._depth == 0:
                while position < len(buffer) and buffer[position] in self._SPACE:
                    position += 1
                if position == len(buffer):
                    break
                if buffer[position] != ord("{"):
                    raise bad_request(
                        "the body must be JSON objects one after the other; found "
                        f"{bytes(buffer[position : position + 20])!r}"
                    )
                del buffer[:position]
                position = 0
            pattern = self._INSIDE if self._in_string else self._OUTSIDE
            match = pattern.search(buffer, position)
            if match is None:
                position = len(buffer)
                break
            char = buffer[match.start()]
            position = match.end()
            if self._in_string:
                if char == ord("\\"):
                    position += 1  # the escaped character, whatever it is
                else:
                    self._in_string = False
            elif char == ord('"'):
                self._in_string = True
            elif char == ord("{"):
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    found.append(bytes(buffer[:position]))
                    del buffer[:position]
                    position = 0
        self._scan = position
        return found

    def leftover(self) -> bool:
        """Whether bytes other than whitespace remain (an object cut off by the body's end)."""
        return bool(bytes(self._buffer).strip())
