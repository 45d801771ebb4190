"""``aioaccum serve`` with a schema registry: REST Proxy's Avro, Protobuf and JSON Schema
formats (v2 content types, v3 ``type`` / ``schema_id`` / ``schema_version`` / ``subject``)
against the session's real registry and cluster.

Every accepted record is read back at the partition and offset its answer gave and decoded
with confluent-kafka's deserializers, which check the wire format (magic byte, the schema id
the answer named, Protobuf's message indexes) and fetch the schema from the registry by that
id.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from ._serve import read_positions, serving
from .test_serve import post_json

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Visit",
        "namespace": "aioaccum.servetest",
        "fields": [
            {"name": "page", "type": "string"},
            {"name": "ms", "type": "long"},
            {"name": "ref", "type": ["null", "string"], "default": None},
        ],
    }
)
PROTO_SCHEMA = """syntax = "proto3";
package aioaccum.servetest;
message Ticket {
  string id = 1;
  int64 seats = 2;
  repeated string tags = 3;
}
"""
JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Reading",
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["sensor", "celsius"],
    }
)


def _ticket_class() -> type[Message]:
    # The same message as PROTO_SCHEMA, built without protoc, for the deserializer.
    proto = descriptor_pb2.FileDescriptorProto(
        name="ticket.proto", package="aioaccum.servetest", syntax="proto3"
    )
    F = descriptor_pb2.FieldDescriptorProto
    ticket = proto.message_type.add(name="Ticket")
    ticket.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    ticket.field.add(name="seats", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    ticket.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    found: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("aioaccum.servetest.Ticket")
    )
    return found


Ticket = _ticket_class()


def _context(topic: str, field: MessageField) -> SerializationContext:
    return SerializationContext(topic, field)


@pytest.fixture
def confluent_registry(schema_registry_url: str) -> Iterator[ConfluentRegistry]:
    # Its HTTP client waits forever by default: a request the registry left unanswered once
    # (seen under a loaded CI run) held the test to pytest's timeout. With a bound, the
    # client's own retries (3 by default, on transport errors) ask again.
    with ConfluentRegistry({"url": schema_registry_url, "timeout": 20}) as registry:
        yield registry


async def _cluster_id(session: aiohttp.ClientSession, base_url: str) -> str:
    async with session.get(f"{base_url}/v3/clusters") as response:
        assert response.status == 200
        return str((await response.json())["data"][0]["cluster_id"])


async def _read(bootstrap: str, topic: str, offsets: list[dict[str, Any]]) -> list[Any]:
    """The records at the answer's offsets, in the answer's order."""
    for entry in offsets:
        assert (entry["error_code"], entry["error"]) == (None, None), entry
    positions = [(entry["partition"], entry["offset"]) for entry in offsets]
    found = await read_positions(bootstrap, topic, set(positions))
    return [found[position] for position in positions]


async def test_v2_avro_protobuf_and_json_schema_records_decode_with_confluent_kafka(
    tmp_path: Path,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    schema_registry_url: str,
    confluent_registry: ConfluentRegistry,
) -> None:
    avro_topic, proto_topic, json_topic = [await topic_factory(partitions=2) for _ in range(3)]
    visits = [
        {"page": f"/p/{i}", "ms": 10_000_000_000 + i, "ref": None if i % 2 else {"string": "x"}}
        for i in range(6)
    ]
    tickets = [{"id": f"t-{i}", "seats": i, "tags": ["a", f"b{i}"]} for i in range(4)]
    readings = [{"sensor": f"s{i}", "celsius": i / 4} for i in range(5)]
    async with (
        serving(tmp_path, kafka_bootstrap, "--schema-registry-url", schema_registry_url) as server,
        aiohttp.ClientSession() as session,
    ):
        base = server.base_url
        status, avro, _ = await post_json(
            session,
            f"{base}/topics/{avro_topic}",
            {
                "key_schema": '"string"',
                "value_schema": AVRO_SCHEMA,
                "records": [{"key": f"k{i}", "value": v} for i, v in enumerate(visits[:3])],
            },
            AVRO_V2,
        )
        assert status == 200, avro
        assert isinstance(avro["key_schema_id"], int)
        assert isinstance(avro["value_schema_id"], int)
        # The ids alone, as REST Proxy's clients send once they know them.
        status, by_id, _ = await post_json(
            session,
            f"{base}/topics/{avro_topic}/partitions/1",
            {
                "key_schema_id": avro["key_schema_id"],
                "value_schema_id": avro["value_schema_id"],
                "records": [{"key": f"k{i}", "value": v} for i, v in enumerate(visits[3:], 3)],
            },
            AVRO_V2,
        )
        assert status == 200, by_id
        assert (by_id["key_schema_id"], by_id["value_schema_id"]) == (
            avro["key_schema_id"],
            avro["value_schema_id"],
        )
        assert {entry["partition"] for entry in by_id["offsets"]} == {1}
        status, proto, _ = await post_json(
            session,
            f"{base}/topics/{proto_topic}",
            {"value_schema": PROTO_SCHEMA, "records": [{"value": t} for t in tickets]},
            PROTOBUF_V2,
        )
        assert status == 200, proto
        assert proto["key_schema_id"] is None
        status, readings_answer, _ = await post_json(
            session,
            f"{base}/topics/{json_topic}",
            {"value_schema": JSON_SCHEMA, "records": [{"value": r} for r in readings]},
            JSONSCHEMA_V2,
        )
        assert status == 200, readings_answer
        await server.stop()

    registry = confluent_registry
    decode_avro = AvroDeserializer(registry)
    records = await _read(kafka_bootstrap, avro_topic, avro["offsets"] + by_id["offsets"])
    for i, record in enumerate(records):
        assert record.value[1:5] == avro["value_schema_id"].to_bytes(4, "big")
        assert decode_avro(record.key, _context(avro_topic, MessageField.KEY)) == f"k{i}"
        expected = dict(visits[i], ref=None if i % 2 else "x")
        assert decode_avro(record.value, _context(avro_topic, MessageField.VALUE)) == expected

    decode_ticket = ProtobufDeserializer(Ticket, {"use.deprecated.format": False})
    for ticket, record in zip(
        tickets, await _read(kafka_bootstrap, proto_topic, proto["offsets"]), strict=True
    ):
        assert record.value[1:5] == proto["value_schema_id"].to_bytes(4, "big")
        message = decode_ticket(record.value, _context(proto_topic, MessageField.VALUE))
        assert json_format.MessageToDict(message) == {
            "id": ticket["id"], **({"seats": str(ticket["seats"])} if ticket["seats"] else {}),
            "tags": ticket["tags"],
        }  # fmt: skip

    decode_json = JSONDeserializer(JSON_SCHEMA, schema_registry_client=registry)
    for reading, record in zip(
        readings, await _read(kafka_bootstrap, json_topic, readings_answer["offsets"]), strict=True
    ):
        assert record.value[1:5] == readings_answer["value_schema_id"].to_bytes(4, "big")
        assert decode_json(record.value, _context(json_topic, MessageField.VALUE)) == reading


async def test_v3_schema_forms_answer_their_schema_and_decode(
    tmp_path: Path,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    schema_registry_url: str,
    confluent_registry: ConfluentRegistry,
) -> None:
    topic = await topic_factory(partitions=1)
    async with (
        serving(tmp_path, kafka_bootstrap, "--schema-registry-url", schema_registry_url) as server,
        aiohttp.ClientSession() as session,
    ):
        cluster = await _cluster_id(session, server.base_url)
        url = f"{server.base_url}/v3/clusters/{cluster}/topics/{topic}/records"

        async def produce(record: dict[str, Any]) -> dict[str, Any]:
            status, answer, _ = await post_json(session, url, record, "application/json")
            assert status == 200, answer
            assert answer["error_code"] == 200, answer
            return dict(answer)

        first = await produce(
            {
                "key": {"type": "AVRO", "schema": '"string"', "data": "user-1"},
                "value": {"type": "AVRO", "schema": AVRO_SCHEMA,
                          "data": {"page": "/", "ms": 1, "ref": {"string": "home"}}},
            }
        )  # fmt: skip
        value_id = first["value"]["schema_id"]
        assert first["value"]["type"] == "AVRO"
        assert first["value"]["subject"] == f"{topic}-value"
        assert isinstance(first["value"]["schema_version"], int)
        assert first["key"]["subject"] == f"{topic}-key"
        by_id = await produce(
            {"value": {"schema_id": value_id, "data": {"page": "/a", "ms": 2, "ref": None}}}
        )
        assert by_id["value"]["schema_id"] == value_id
        by_version = await produce(
            {"value": {"subject": f"{topic}-value",
                       "schema_version": first["value"]["schema_version"],
                       "data": {"page": "/b", "ms": 3, "ref": None}}}
        )  # fmt: skip
        assert by_version["value"]["schema_id"] == value_id
        latest = await produce({"value": {"type": "AVRO", "data": {"page": "/c", "ms": 4}}})
        assert latest["value"]["schema_id"] == value_id
        by_record_name = await produce(
            {
                "value": {
                    "type": "JSONSCHEMA",
                    "schema": JSON_SCHEMA,
                    "subject_name_strategy": "RECORD_NAME",
                    "data": {"sensor": "a", "celsius": 1.5},
                }
            }
        )
        assert by_record_name["value"]["subject"] == "Reading"
        proto = await produce(
            {"value": {"type": "PROTOBUF", "schema": PROTO_SCHEMA,
                       "subject_name_strategy": "TOPIC_RECORD_NAME",
                       "data": {"id": "t", "seats": 2}}}
        )  # fmt: skip
        assert proto["value"]["subject"] == f"{topic}-aioaccum.servetest.Ticket"
        await server.stop()

    answers = [first, by_id, by_version, latest, by_record_name, proto]
    offsets = [
        {"partition": a["partition_id"], "offset": a["offset"], "error_code": None, "error": None}
        for a in answers
    ]
    records = await _read(kafka_bootstrap, topic, offsets)
    registry = confluent_registry
    decode_avro = AvroDeserializer(registry)
    context = _context(topic, MessageField.VALUE)
    assert decode_avro(records[0].key, _context(topic, MessageField.KEY)) == "user-1"
    assert [decode_avro(r.value, context)["page"] for r in records[:4]] == ["/", "/a", "/b", "/c"]
    decode_json = JSONDeserializer(JSON_SCHEMA, schema_registry_client=registry)
    assert decode_json(records[4].value, context) == {"sensor": "a", "celsius": 1.5}
    decode_ticket = ProtobufDeserializer(Ticket, {"use.deprecated.format": False})
    ticket = decode_ticket(records[5].value, context)
    assert (ticket.id, ticket.seats) == ("t", 2)
    for answer, record in zip(answers, records, strict=True):
        assert record.value[1:5] == answer["value"]["schema_id"].to_bytes(4, "big")


async def test_unknown_schemas_and_values_that_do_not_fit_get_rest_proxy_codes(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory, schema_registry_url: str
) -> None:
    topic = await topic_factory(partitions=1)
    async with (
        serving(tmp_path, kafka_bootstrap, "--schema-registry-url", schema_registry_url) as server,
        aiohttp.ClientSession() as session,
    ):
        v2 = f"{server.base_url}/topics/{topic}"
        cluster = await _cluster_id(session, server.base_url)
        v3 = f"{server.base_url}/v3/clusters/{cluster}/topics/{topic}/records"
        cases: list[tuple[str, object, str, int, int]] = [
            (v2, {"value_schema_id": 987_654_321, "records": [{"value": {}}]}, AVRO_V2, 404,
             40403),
            (v2, {"value_schema": AVRO_SCHEMA, "records": [{"value": {"page": 1}}]}, AVRO_V2,
             422, 42203),
            (v2, {"records": [{"value": {"page": "/"}}]}, AVRO_V2, 422, 42202),
            (v2, {"value_schema": AVRO_SCHEMA, "records": [{"key": "k", "value": None}]},
             AVRO_V2, 422, 42201),
            (v2, {"value_schema": '{"type": "nope"}', "records": [{"value": 1}]}, AVRO_V2, 422,
             42205),
            (v2, {"value_schema": "message {", "records": [{"value": {}}]}, PROTOBUF_V2, 422,
             42205),
            (v2, {"value_schema": PROTO_SCHEMA, "records": [{"value": {"seats": "many"}}]},
             PROTOBUF_V2, 422, 42203),
            (v2, {"value_schema": JSON_SCHEMA, "records": [{"value": {"sensor": "s"}}]},
             JSONSCHEMA_V2, 422, 42203),
            (v2, {"value_schema_id": "1", "records": [{"value": {}}]}, AVRO_V2, 422, 42206),
            (v3, {"value": {"schema_id": 987_654_321, "data": {}}}, "application/json", 404,
             40403),
            (v3, {"value": {"subject": "no-such-subject-value", "data": {}}},
             "application/json", 404, 40403),
            (v3, {"value": {"type": "AVRO", "schema": AVRO_SCHEMA, "data": {"ms": "x"}}},
             "application/json", 422, 42203),
            (v3, {"value": {"schema": AVRO_SCHEMA, "data": {}}}, "application/json", 400, 400),
            (v3, {"value": {"type": "AVRO", "schema_version": 0, "data": {}}},
             "application/json", 400, 400),
        ]  # fmt: skip
        for url, body, content_type, status, code in cases:
            got, answer, _ = await post_json(session, url, body, content_type)
            assert (got, answer["error_code"]) == (status, code), (body, answer)
            assert isinstance(answer["message"], str)
        # A schema id of the wrong format: 422, naming both.
        status, avro, _ = await post_json(
            session, v2, {"value_schema": AVRO_SCHEMA,
                          "records": [{"value": {"page": "/", "ms": 1, "ref": None}}]}, AVRO_V2
        )  # fmt: skip
        assert status == 200, avro
        got, answer, _ = await post_json(
            session, v2, {"value_schema_id": avro["value_schema_id"], "records": [{"value": {}}]},
            JSONSCHEMA_V2,
        )  # fmt: skip
        assert (got, answer["error_code"]) == (422, 42205), answer
        assert "AVRO" in answer["message"]


async def test_a_registry_that_does_not_answer_is_503_and_without_one_the_formats_are_refused(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    config = tmp_path / "serve.properties"
    config.write_text(
        f"schema.registry.url=http://127.0.0.1:{dead_port}\nschema.registry.timeout.ms=300\n"
    )
    body = {"value_schema": AVRO_SCHEMA, "records": [{"value": {"page": "/", "ms": 1}}]}
    async with aiohttp.ClientSession() as session:
        async with serving(tmp_path, kafka_bootstrap, "--config", str(config)) as server:
            status, answer, headers = await post_json(
                session, f"{server.base_url}/topics/{topic}", body, AVRO_V2
            )
            assert status == 503, answer
            assert "schema registry is unavailable" in answer["message"]
            assert headers["Retry-After"]
        async with serving(tmp_path, kafka_bootstrap) as server:
            status, answer, _ = await post_json(
                session, f"{server.base_url}/topics/{topic}", body, AVRO_V2
            )
            assert (status, answer["error_code"]) == (415, 415)
            assert "schema.registry.url" in answer["message"]
            cluster = await _cluster_id(session, server.base_url)
            status, answer, _ = await post_json(
                session,
                f"{server.base_url}/v3/clusters/{cluster}/topics/{topic}/records",
                {"value": {"type": "AVRO", "schema": AVRO_SCHEMA, "data": {}}},
                "application/json",
            )
            assert status == 422
            assert "--schema-registry-url" in answer["message"]
