"""A schema's text turned into an encoder of the JSON values REST Proxy clients send.

REST Proxy's clients give keys and values as JSON: Avro in Avro's JSON encoding (a union as
``{"string": "x"}``), Protobuf in its JSON mapping, JSON Schema as the JSON itself. Each format
here parses a schema once (:func:`parse_schema`) into a :class:`ParsedSchema`, which knows the
record name (for the record subject strategies) and makes, for a schema id, the
:data:`Codec` that turns one such value into Confluent's wire format (magic byte, id, Protobuf's
message indexes, payload): the encoding of the merged producer serializers, with no I/O.

This module imports no format library (nor :mod:`aioaccum.schemas`, whose package needs
aiohttp) until a schema of that format is parsed: the serve extra alone must import it.

Protobuf schemas come as ``.proto`` text, which only ``protoc`` reads: it runs once per schema
as a child process (``python -m grpc_tools.protoc``, from the grpcio-tools package), so that
its error messages can be answered to the client and nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import os
import pathlib
import struct
import sys
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aioaccum.errors import ConfigError

from ._errors import ErrorCode, RestError

__all__ = [
    "FORMATS",
    "Codec",
    "Mismatch",
    "ParsedSchema",
    "encode_data",
    "parse_schema",
    "registry_type",
]

Codec = Callable[[Any], bytes]
# REST Proxy's format names (v2's content types, v3's "type") and the registry's schemaType.
FORMATS: Final = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF", "JSONSCHEMA": "JSON"}
_PROTOC_TIMEOUT_S: Final = 30.0
_PROTOC_AT_ONCE: Final = 2
# What the format libraries raise for a value that does not fit a schema.
_MISFITS: Final = (
    ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, StopIteration,
    struct.error,
)  # fmt: skip


class Mismatch(ValueError):
    """A value that does not fit its schema (answered 422, 42203)."""


def encode_data(encode: Codec, data: bytes, fmt: str, schema_id: int, where: str) -> bytes:
    """``data`` (compact JSON the request gave) in the wire format of schema ``schema_id``.

    Raises:
        RestError: 422 (42203, REST Proxy's failed conversion) when it does not fit.
    """
    try:
        return encode(json.loads(data))
    except Mismatch as exc:
        raise RestError(
            422,
            ErrorCode.CONVERSION_FAILED,
            f"{where}: conversion of JSON to {fmt} failed (schema {schema_id}): {exc}",
        ) from None


def registry_type(fmt: str) -> str:
    """The registry's ``schemaType`` for a REST Proxy format name."""
    return FORMATS[fmt]


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    """A schema read once: its record name, and how to make the encoder for an id."""

    fmt: str
    record_name: str | None
    make: Callable[[int], Codec]


async def parse_schema(fmt: str, text: str) -> ParsedSchema:
    """The schema ``text`` of format ``fmt`` (``AVRO``, ``PROTOBUF`` or ``JSONSCHEMA``).

    Raises:
        ConfigError: The text is not a schema of that format (the message says why).
    """
    if fmt == "AVRO":
        return _avro(text)
    if fmt == "JSONSCHEMA":
        return _json_schema(text)
    return await _protobuf(text)


def _misfit(exc: BaseException, fmt: str) -> Mismatch:
    return Mismatch(f"the value does not fit the {fmt} schema: {type(exc).__name__}: {exc}")


# --- Avro


def _avro(text: str) -> ParsedSchema:
    from fastavro import json_reader, schemaless_writer
    from fastavro import parse_schema as parse_avro
    from fastavro.schema import SchemaParseException, UnknownType

    stripped = text.strip()
    try:
        document = json.loads(stripped)
        parsed = parse_avro(document)
    except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as exc:
        raise ConfigError(f"not a valid Avro schema: {exc}") from None
    record_name: str | None = None
    if isinstance(parsed, dict):
        record_name = str(parsed.get("name", parsed.get("type")))
    elif isinstance(parsed, str):
        record_name = parsed

    def make(schema_id: int) -> Codec:
        from aioaccum.schemas.framing import frame_header

        header = frame_header(schema_id)

        def encode(value: Any) -> bytes:
            try:
                # Avro's JSON encoding (unions as {"type": value}, bytes as code points) read
                # by fastavro, then written in Avro's binary encoding.
                line = json.dumps(value, ensure_ascii=False)
                decoded = next(iter(json_reader(io.StringIO(line), parsed)))
                out = io.BytesIO()
                out.write(header)
                schemaless_writer(out, parsed, decoded)
            except _MISFITS as exc:
                raise _misfit(exc, "Avro") from None
            return out.getvalue()

        return encode

    return ParsedSchema("AVRO", record_name, make)


# --- JSON Schema


def _json_schema(text: str) -> ParsedSchema:
    from jsonschema import exceptions as jsonschema_errors
    from jsonschema.validators import validator_for

    try:
        document = json.loads(text)
        validator_for(document).check_schema(document)
        validator = validator_for(document)(document)
    except (ValueError, TypeError, jsonschema_errors.SchemaError) as exc:
        raise ConfigError(f"not a valid JSON Schema: {exc}") from None
    title = document.get("title") if isinstance(document, dict) else None
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def make(schema_id: int) -> Codec:
        from aioaccum.schemas.framing import frame_header

        header = frame_header(schema_id)

        def encode(value: Any) -> bytes:
            error = jsonschema_errors.best_match(validator.iter_errors(value))
            if error is not None:
                where = "/".join(map(str, error.absolute_path))
                raise Mismatch(
                    "the value does not fit the JSON schema"
                    f"{' at ' + where if where else ''}: {error.message}"
                )
            return header + dumps(value).encode()

        return encode

    return ParsedSchema("JSONSCHEMA", None if title is None else str(title), make)


# --- Protobuf


async def _protobuf(text: str) -> ParsedSchema:
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

    files = await _file_descriptors(text)
    pool = descriptor_pool.DescriptorPool()
    try:
        for proto in files:
            pool.Add(proto)
        main = files[-1]
        if not main.message_type:
            raise ConfigError("the .proto schema defines no message")
        # REST Proxy writes the file's first message, as confluent-kafka's serializers index.
        name = (f"{main.package}." if main.package else "") + main.message_type[0].name
        message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    except (TypeError, KeyError, ValueError) as exc:
        raise ConfigError(f"the .proto schema cannot be loaded: {exc}") from None
    assert isinstance(main, descriptor_pb2.FileDescriptorProto)

    def make(schema_id: int) -> Codec:
        from aioaccum.schemas.framing import frame_header, message_indexes

        header = frame_header(schema_id) + message_indexes([0])

        def encode(value: Any) -> bytes:
            if not isinstance(value, dict):
                raise Mismatch(
                    f"a Protobuf message is a JSON object, not {type(value).__name__}"
                )
            try:
                message = json_format.ParseDict(value, message_class())
                payload: bytes = message.SerializeToString()
            except (json_format.ParseError, *_MISFITS) as exc:
                raise _misfit(exc, "Protobuf") from None
            return header + payload

        return encode

    return ParsedSchema("PROTOBUF", name, make)


async def _file_descriptors(text: str) -> list[Any]:
    """The schema's file and the files it imports (dependencies first), as
    ``FileDescriptorProto``: decoded at once when the registry holds the base64 form,
    otherwise compiled by protoc from the ``.proto`` text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if stripped and not any(c.isspace() for c in stripped):
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(stripped, validate=True)
            )
        except (binascii.Error, ValueError, DecodeError):
            pass
        else:
            if proto.name or proto.message_type:
                if any(not d.startswith("google/protobuf/") for d in proto.dependency):
                    raise ConfigError(_IMPORTS)
                return [*_well_known(proto.dependency), proto]
    return await _protoc(text)


_IMPORTS = (
    "the .proto schema imports files other than Google's well-known types "
    "(google/protobuf/*.proto), which this server does not resolve"
)


def _well_known(names: Any) -> list[Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool

    found = []
    for name in names:
        proto = descriptor_pb2.FileDescriptorProto()
        try:
            descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
        except KeyError:
            raise ConfigError(f"unknown import {name!r}") from None
        found.append(proto)
    return found


async def _protoc(text: str) -> list[Any]:
    try:
        import grpc_tools
    except ImportError:
        raise ConfigError(
            "Protobuf schemas need the grpcio-tools package on the server (pip install "
            "'aioaccum[serve-schemas]')"
        ) from None
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="aioaccum-proto-") as folder:
        await asyncio.to_thread(pathlib.Path(folder, "schema.proto").write_text, text, "utf-8")
        async with _protoc_slots():
            return await _run_protoc(folder, include)


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _protoc_slots() -> asyncio.Semaphore:
    """At most :data:`_PROTOC_AT_ONCE` protoc processes at a time (per event loop), however
    many requests bring new .proto texts: the rest wait their turn."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(_PROTOC_AT_ONCE)
    return slots


async def _run_protoc(folder: str, include: str) -> list[Any]:
    """protoc on ``folder``/schema.proto: its file descriptors, or its complaint."""
    from google.protobuf import descriptor_pb2

    target = os.path.join(folder, "schema.pb")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "grpc_tools.protoc", f"-I{folder}", f"-I{include}",
        "--include_imports", f"--descriptor_set_out={target}", "schema.proto",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(_PROTOC_TIMEOUT_S):
            _, errors = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ConfigError("protoc took too long to read the .proto schema") from None
    if process.returncode != 0:
        why = errors.decode(errors="replace").strip().replace(folder + os.sep, "")
        if "File not found" in why or "Import " in why:
            raise ConfigError(f"{_IMPORTS}: {why}")
        raise ConfigError(f"not a valid .proto schema: {why}")
    found = await asyncio.to_thread(pathlib.Path(target).read_bytes)
    return list(descriptor_pb2.FileDescriptorSet.FromString(found).file)
