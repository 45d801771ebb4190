"""The parts of aioaccum.schemas that need no registry: framing, subject names, settings,
the send path before ``prepare()``, the client's URL handling and its bounded waits."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
import time

import pytest
from confluent_kafka.schema_registry.common.protobuf import _create_index_array
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from aioaccum.errors import AioAccumError, ConfigError, SerializationError
from aioaccum.schemas import (
    RegistryUnavailableError,
    SchemaMismatchError,
    SchemaNotFoundError,
    SchemaNotReadyError,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from aioaccum.schemas.avro import AvroSerializer
from aioaccum.schemas.framing import frame_header, message_indexes, read_header
from aioaccum.schemas.json_schema import JsonSchemaSerializer
from aioaccum.schemas.protobuf import ProtobufSerializer, index_path
from aioaccum.schemas.subjects import resolve_strategy, subject_name

AVRO = '{"type":"record","name":"User","namespace":"acme","fields":[{"name":"n","type":"string"}]}'
NOWHERE = "http://127.0.0.1:9"  # discard port: nothing listens there


def _messages() -> dict[str, type[Message]]:
    proto = descriptor_pb2.FileDescriptorProto(name="unit/m.proto", package="unit")
    proto.message_type.add(name="A")
    b = proto.message_type.add(name="B")
    b.nested_type.add(name="X")
    y = b.nested_type.add(name="Y")
    y.nested_type.add(name="Z")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    names = ("unit.A", "unit.B", "unit.B.X", "unit.B.Y", "unit.B.Y.Z")
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in names}


MESSAGES = _messages()


# --- framing -------------------------------------------------------------------------------


@pytest.mark.parametrize("schema_id", [0, 1, 255, 65_536, 2**31 - 1, 2**32 - 1])
@pytest.mark.parametrize("indexes", [None, [0], [1], [0, 0], [2, 5, 1], [300, 70_000]])
def test_prefix_is_confluents(schema_id: int, indexes: list[int] | None) -> None:
    expected = SchemaId("PROTOBUF" if indexes else "AVRO", schema_id, None, indexes).id_to_bytes()
    assert frame_header(schema_id, indexes) == expected


def test_first_message_index_is_one_zero_byte() -> None:
    assert message_indexes([0]) == b"\x00"
    assert message_indexes([1]) == b"\x02\x02"  # count 1, index 1, both zigzag


def test_read_header_takes_the_prefix_apart() -> None:
    assert read_header(frame_header(513) + b"payload") == (513, b"payload")
    with pytest.raises(ValueError, match="not Confluent's wire format"):
        read_header(b"\x01\x00\x00\x00\x01x")
    with pytest.raises(ValueError, match="4 unsigned bytes"):
        frame_header(2**32)


@pytest.mark.parametrize("name", list(MESSAGES))
def test_message_index_path_is_confluents(name: str) -> None:
    descriptor = MESSAGES[name].DESCRIPTOR
    assert index_path(descriptor) == _create_index_array(descriptor)


# --- subjects ------------------------------------------------------------------------------


def test_subject_name_strategies() -> None:
    assert subject_name("topic", "t", "value", "acme.User") == "t-value"
    assert subject_name("topic", "t", "key", None) == "t-key"
    assert subject_name("record", None, "value", "acme.User") == "acme.User"
    assert subject_name("topic_record", "t", "value", "acme.User") == "t-acme.User"
    custom = subject_name(lambda topic, field, record: f"{field}.{topic}", "t", "key", None)
    assert custom == "key.t"


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("TopicNameStrategy", "topic"),
        ("io.confluent.kafka.serializers.subject.RecordNameStrategy", "record"),
        ("topic-record", "topic_record"),
        ("TOPIC_RECORD", "topic_record"),
    ],
)
def test_strategy_names_of_other_clients_are_understood(given: str, canonical: str) -> None:
    assert resolve_strategy(given) == canonical  # type: ignore[arg-type]


def test_strategy_errors_say_what_is_missing() -> None:
    with pytest.raises(ConfigError, match="unknown subject name strategy 'topics'"):
        resolve_strategy("topics")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs the topic"):
        subject_name("topic", None, "value", "acme.User")
    with pytest.raises(ConfigError, match="needs a record name"):
        subject_name("record", "t", "value", None)


# --- serializer settings and the send path before prepare() --------------------------------


def test_conflicting_or_invalid_settings_are_config_errors() -> None:
    registry = SchemaRegistryClient(NOWHERE)
    with pytest.raises(ConfigError, match="use_latest_version=True needs auto_register"):
        AvroSerializer(registry, AVRO, use_latest_version=True)
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        AvroSerializer(registry, '{"type":"record","name":"R","fields":[{"name":"x"}]}')
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        JsonSchemaSerializer(registry, '{"type": 12}')
    with pytest.raises(ConfigError, match="not a Protobuf message class"):
        ProtobufSerializer(registry, dict)


def test_records_names_come_from_the_schema() -> None:
    registry = SchemaRegistryClient(NOWHERE)
    assert AvroSerializer(registry, AVRO).record_name == "acme.User"
    assert AvroSerializer(registry, '"string"').record_name == "string"
    assert AvroSerializer(registry, '["null","string"]').record_name is None
    assert JsonSchemaSerializer(registry, '{"title":"T"}').record_name == "T"
    assert ProtobufSerializer(registry, MESSAGES["unit.B.Y"]).record_name == "unit.B.Y"
    # Confluent's wrapping of a bare primitive, so that both register the same text.
    assert AvroSerializer(registry, ' "string" ').schema.schema == '{"type":"string"}'


def test_a_serializer_used_before_prepare_names_the_subject_and_the_fix() -> None:
    serializer = AvroSerializer(SchemaRegistryClient(NOWHERE), AVRO, topic="users")
    assert serializer(None) is None  # a tombstone needs no schema
    with pytest.raises(SchemaNotReadyError) as not_ready:
        serializer({"n": "x"})
    assert not_ready.value.subject == "users-value"
    assert "users-value" in str(not_ready.value)
    assert "prepare" in str(not_ready.value)
    assert isinstance(not_ready.value, SerializationError)
    with pytest.raises(SchemaNotReadyError, match="'other-value'"):
        serializer.serialize({"n": "x"}, "other")


async def test_prepare_blocking_refuses_a_thread_with_a_running_loop() -> None:
    serializer = AvroSerializer(SchemaRegistryClient(NOWHERE), AVRO, topic="t")
    with pytest.raises(RuntimeError, match=r"await serializer\.prepare"):
        serializer.prepare_blocking()


def test_error_types_sit_in_the_tree_and_survive_pickling() -> None:
    error = SchemaNotFoundError(
        "gone", subject="s-value", status=404, error_code=40401, registry_message="Subject 's'"
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is SchemaNotFoundError
    assert (copy.subject, copy.status, copy.error_code, copy.registry_message) == (
        "s-value", 404, 40401, "Subject 's'",
    )
    assert isinstance(copy, SchemaRegistryError)
    assert isinstance(copy, AioAccumError)
    assert issubclass(SchemaMismatchError, SerializationError)


# --- the client ----------------------------------------------------------------------------


def test_credentials_in_the_url_become_basic_auth_and_leave_the_url() -> None:
    client = SchemaRegistryClient("https://user:s%40cret@registry.example:8081/base/")
    assert client.url == "https://registry.example:8081/base"
    assert "cret" not in repr(client)
    assert "basic-auth" in repr(client)


@pytest.mark.parametrize("url", ["ftp://registry", "registry:8081", "http://"])
def test_a_url_that_is_not_http_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="http:// or https://"):
        SchemaRegistryClient(url)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_registry_fails_within_the_timeout() -> None:
    client = SchemaRegistryClient(f"http://127.0.0.1:{_closed_port()}", timeout=0.5)
    serializer = AvroSerializer(client, AVRO, topic="orders")
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError) as unavailable:
        await serializer.prepare()
    assert time.monotonic() - started < 3.0
    assert unavailable.value.subject == "orders-value"
    assert "'orders-value'" in str(unavailable.value)
    assert client.requests_sent > 1  # connection refusals are retried within the deadline


async def test_a_registry_that_never_answers_times_out() -> None:
    # A listening socket that accepts and never answers: the client's deadline ends it.
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = SchemaRegistryClient(f"http://127.0.0.1:{port}", timeout=0.3)
        with pytest.raises(TimeoutError, match=r"did not answer GET /subjects within 0\.3s"):
            await client.get_subjects()
        assert accepted  # it did connect: the wait was for an answer
    finally:
        server.close()
        for writer in accepted:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()
