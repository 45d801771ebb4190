"""The pure parts of ``aioaccum serve``'s schema formats: v3's schema fields, v2's media types,
the encoders of JSON values, the registry settings, and the resolver's keeping of what it
resolved (tests/integration/test_serve_schemas.py drives them against a real registry)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from aioaccum.config.serve_settings import ServeSettings
from aioaccum.errors import ConfigError
from aioaccum.schemas.framing import read_header
from aioaccum.schemas.registry import SchemaRegistryClient
from aioaccum.serve._app import _schema_resolver
from aioaccum.serve._errors import ErrorCode, RestError
from aioaccum.serve._records import SchemaSpec, parse_record
from aioaccum.serve._schema_codecs import Mismatch, encode_data, parse_schema
from aioaccum.serve._schemas import SchemaResolver
from aioaccum.serve._v2_schemas import schema_format

AVRO = json.dumps(
    {"type": "record", "name": "V", "namespace": "n",
     "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": ["null", "string"]}]}
)  # fmt: skip
BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def test_v3_schema_fields_become_a_spec_when_the_server_has_a_registry() -> None:
    record = parse_record(
        {"key": {"schema_id": 7, "data": "k"},
         "value": {"type": "avro", "schema": AVRO, "subject_name_strategy": "record_name",
                   "data": {"a": 1, "b": None}}},
        schemas=True,
    )  # fmt: skip
    assert record.key_schema == SchemaSpec(None, schema_id=7)
    assert record.value_schema == SchemaSpec("AVRO", AVRO, strategy="RECORD_NAME")
    assert record.key == b'"k"'
    assert json.loads(record.value or b"") == {"a": 1, "b": None}
    latest = parse_record({"value": {"data": {"a": 1}}}, schemas=True)
    assert latest.value_schema == SchemaSpec(None)


@pytest.mark.parametrize(
    "spec",
    [
        {"schema": AVRO},  # no type
        {"type": "AVRO", "schema": 1},
        {"schema_id": -1},
        {"schema_id": "3"},
        {"schema_version": 0},
        {"subject": ""},
        {"subject_name_strategy": "NAME"},
        {"schema_id": 1, "schema_version": 1},
        {"type": "AVRO", "schema": AVRO, "schema_version": 1},
    ],
)
def test_v3_schema_fields_that_contradict_or_mistype_are_400(spec: dict[str, object]) -> None:
    with pytest.raises(RestError) as caught:
        parse_record({"value": {**spec, "data": 1}}, schemas=True)
    assert (caught.value.status, caught.value.code) == (400, ErrorCode.BAD_REQUEST)


def test_v2_schema_media_types() -> None:
    assert schema_format("application/vnd.kafka.avro.v2+json") == "AVRO"
    assert schema_format("application/vnd.kafka.protobuf.v2+json") == "PROTOBUF"
    assert schema_format("application/vnd.kafka.jsonschema.v2+json") == "JSONSCHEMA"
    assert schema_format("application/vnd.kafka.avro.v1+json") is None


async def test_encoders_frame_with_the_id_and_refuse_values_that_do_not_fit() -> None:
    avro = await parse_schema("AVRO", AVRO)
    assert avro.record_name == "n.V"
    encode = avro.make(41)
    framed = encode({"a": 3, "b": {"string": "x"}})
    assert read_header(framed) == (41, b"\x06\x02\x02x")
    with pytest.raises(Mismatch):
        encode({"a": "three"})
    with pytest.raises(RestError) as caught:
        encode_data(encode, b'{"a": "three"}', "AVRO", 41, "value")
    assert (caught.value.status, caught.value.code) == (422, ErrorCode.CONVERSION_FAILED)
    schema = await parse_schema("JSONSCHEMA", '{"title": "T", "type": "integer"}')
    assert schema.record_name == "T"
    assert read_header(schema.make(5)(12)) == (5, b"12")
    with pytest.raises(Mismatch):
        schema.make(5)("twelve")
    with pytest.raises(ConfigError):
        await parse_schema("AVRO", '{"type": "nope"}')


async def test_a_base64_descriptor_from_the_registry_needs_no_protoc() -> None:
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto(name="p.proto", package="p", syntax="proto3")
    message = proto.message_type.add(name="M")
    message.field.add(name="n", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    parsed = await parse_schema("PROTOBUF", base64.b64encode(proto.SerializeToString()).decode())
    assert parsed.record_name == "p.M"
    # The prefix, message index [0] as one 0 byte, then field 1 = 150.
    assert parsed.make(9)({"n": 150}) == b"\x00\x00\x00\x00\x09\x00\x08\x96\x01"
    with pytest.raises(Mismatch):
        parsed.make(9)({"n": "many"})


def test_registry_credentials_come_from_user_info_or_the_url() -> None:
    settings = ServeSettings.create(
        BOOTSTRAP, schema_registry_url="http://127.0.0.1:1",
        schema_registry_basic_auth_credentials_source="user_info",
        schema_registry_basic_auth_user_info="svc:pa:ss",
    )  # fmt: skip
    assert "pa:ss" not in repr(settings)
    resolver = _schema_resolver(settings)
    assert resolver is not None
    expected = "Basic " + base64.b64encode(b"svc:pa:ss").decode()
    assert resolver.registry._auth == expected
    by_url = _schema_resolver(
        ServeSettings.create(
            BOOTSTRAP,
            schema_registry_url="http://u:p@127.0.0.1:1",
            schema_registry_basic_auth_credentials_source="URL",
        )
    )
    assert by_url is not None
    assert by_url.registry._auth == "Basic " + base64.b64encode(b"u:p").decode()
    assert _schema_resolver(ServeSettings.create(BOOTSTRAP)) is None
    with pytest.raises(ConfigError, match=r"user\.info"):
        ServeSettings.create(
            BOOTSTRAP, schema_registry_url="http://h:1",
            schema_registry_basic_auth_credentials_source="USER_INFO",
        )  # fmt: skip
    with pytest.raises(ConfigError, match="http"):
        ServeSettings.create(BOOTSTRAP, schema_registry_url="ftp://h")


async def test_the_resolver_asks_once_for_concurrent_callers_and_keeps_no_failure() -> None:
    resolver = SchemaResolver(SchemaRegistryClient("http://127.0.0.1:1"))
    calls = 0
    release = asyncio.Event()

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 7

    waiting = [asyncio.ensure_future(resolver._once(("k",), fetch)) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiting) == [7] * 5
    assert await resolver._once(("k",), fetch) == 7
    assert calls == 1

    async def fail() -> int:
        nonlocal calls
        calls += 1
        raise ConfigError("no")

    for _ in range(2):
        with pytest.raises(ConfigError):
            await resolver._once(("bad",), fail)
    assert calls == 3


def test_schema_fields_beside_a_plain_type_are_400() -> None:
    with pytest.raises(RestError) as caught:
        parse_record({"value": {"type": "JSON", "schema_version": [1], "data": 1}}, schemas=True)
    assert (caught.value.status, caught.value.code) == (400, ErrorCode.BAD_REQUEST)
    assert "schema_version" in str(caught.value)


async def test_a_schema_text_that_does_not_parse_is_refused_again_without_a_parse() -> None:
    resolver = SchemaResolver(SchemaRegistryClient("http://127.0.0.1:1"))
    with pytest.raises(ConfigError) as first:
        await resolver._parsed("AVRO", '{"type": "nope"}')
    with pytest.raises(ConfigError) as second:
        await resolver._parsed("AVRO", '{"type": "nope"}')
    assert second.value is first.value  # the kept refusal, not a new parse's


@pytest.mark.parametrize(
    "fields",
    [
        {"value_schema": 0, "value_schema_id": 1},
        {"value_schema": "x", "value_schema_id": "1"},
        {"key_schema": False},
        {"key_schema_id": -1},
    ],
)
def test_v2_schema_fields_are_checked_whichever_is_used(fields: dict[str, object]) -> None:
    from aioaccum.serve._v2_schemas import _spec

    refused = []
    for field in ("key", "value"):
        try:
            _spec(fields, field, "AVRO")
        except RestError as error:
            refused.append((error.status, error.code))
    assert refused == [(422, ErrorCode.INVALID_PAYLOAD)]


def test_a_record_the_broker_refuses_for_its_content_is_422_not_500() -> None:
    from aioaccum.errors import BrokerError
    from aioaccum.serve._errors import rest_error_for

    refused = rest_error_for(BrokerError("INVALID_TIMESTAMP", errno=32))
    assert (refused.status, refused.code) == (422, ErrorCode.INVALID_RECORD)
    other = rest_error_for(BrokerError("UNKNOWN_SERVER_ERROR", errno=-1))
    assert (other.status, other.code) == (500, ErrorCode.KAFKA_ERROR)


async def test_what_the_resolver_keeps_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import aioaccum.serve._schemas as schemas

    monkeypatch.setattr(schemas, "MAX_KEPT", 3)
    resolver = SchemaResolver(SchemaRegistryClient("http://127.0.0.1:1"))

    async def fetch() -> int:
        return 1

    for n in range(5):
        await resolver._once(("k", n), fetch)
    assert list(resolver._kept) == [("k", 2), ("k", 3), ("k", 4)]
