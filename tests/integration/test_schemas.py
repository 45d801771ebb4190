"""aioaccum.schemas against a real schema registry (scripts/registry) and the real cluster.

Byte-for-byte agreement with confluent-kafka's serializers on the same registry, records sent
by the producer read back with confluent-kafka's deserializers, the registry's refusals as
typed errors, one request for concurrent first uses and none per record, and TLS with basic
auth through a gate in front of the registry.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import (
    SchemaRegistryClient as ConfluentRegistry,
)
from confluent_kafka.schema_registry import (
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvro
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as ConfluentJson
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as ConfluentProtobuf
from confluent_kafka.serialization import MessageField, SerializationContext

from aioaccum import Producer
from aioaccum.schemas import (
    IncompatibleSchemaError,
    RegistryAuthenticationError,
    Schema,
    SchemaNotFoundError,
    SchemaRegistryClient,
    SchemaSerializer,
)
from aioaccum.schemas.avro import AvroSerializer
from aioaccum.schemas.json_schema import JsonSchemaSerializer
from aioaccum.schemas.protobuf import ProtobufSerializer
from aioaccum.sync import SyncProducer

from ._schemas import (
    AVRO_KEY_SCHEMA,
    AVRO_SCHEMA,
    JSON_SCHEMA,
    Order,
    avro_value,
    json_value,
    protobuf_value,
)

if TYPE_CHECKING:
    from conftest import TopicFactory

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import kafka_security  # the test CA, from the scripts' own certificate maker

FORMATS = ("avro", "protobuf", "json")
STRATEGIES = {
    "topic": topic_subject_name_strategy,
    "record": record_subject_name_strategy,
    "topic_record": topic_record_subject_name_strategy,
}
READ_TIMEOUT_S = 30.0


def ours(fmt: str, registry: SchemaRegistryClient, **options: Any) -> SchemaSerializer:
    if fmt == "avro":
        return AvroSerializer(registry, AVRO_SCHEMA, **options)
    if fmt == "protobuf":
        return ProtobufSerializer(registry, Order, **options)
    return JsonSchemaSerializer(registry, JSON_SCHEMA, **options)


def theirs(fmt: str, registry: ConfluentRegistry, conf: dict[str, Any]) -> Any:
    if fmt == "avro":
        return ConfluentAvro(registry, AVRO_SCHEMA, conf=conf)
    if fmt == "protobuf":
        return ConfluentProtobuf(Order, registry, conf=conf)
    return ConfluentJson(JSON_SCHEMA, registry, conf=conf)


def deserializer(fmt: str, registry: ConfluentRegistry) -> Any:
    if fmt == "avro":
        return AvroDeserializer(registry)
    if fmt == "protobuf":
        return ProtobufDeserializer(Order, {"use.deprecated.format": False})
    return JSONDeserializer(JSON_SCHEMA, schema_registry_client=registry)


def value_of(fmt: str, i: int) -> Any:
    return {"avro": avro_value, "protobuf": protobuf_value, "json": json_value}[fmt](i)


def comparable(fmt: str, value: Any) -> Any:
    return value.SerializeToString() if fmt == "protobuf" else value


def unique_topic() -> str:
    return f"schemas-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def registry(schema_registry_url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient(schema_registry_url, timeout=20.0)


@pytest.fixture
def confluent_registry(schema_registry_url: str) -> Iterator[ConfluentRegistry]:
    # A bound on each request (the client waits for ever by default; a registry request once
    # went unanswered until the test's 300 s timeout), and one more try: the client tries each
    # of its URLs in turn after an error, and has no other retry for a request that timed out.
    conf = {"url": f"{schema_registry_url},{schema_registry_url}", "timeout": 20}
    with ConfluentRegistry(conf) as registry:
        yield registry


def read_back(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of the first `count` records of partition 0 of `topic`."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
         "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            assert value is not None, "every record the tests send has a value"
            records.append((message.key(), value))
        return records
    finally:
        consumer.close()


# --- the bytes -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("fmt", FORMATS)
async def test_bytes_agree_with_confluent_kafka(
    fmt: str,
    strategy: str,
    registry: SchemaRegistryClient,
    confluent_registry: ConfluentRegistry,
) -> None:
    topic = unique_topic()
    serializer = ours(fmt, registry, topic=topic, subject_name_strategy=strategy)
    schema_id = await serializer.prepare()
    reference = theirs(fmt, confluent_registry, {"subject.name.strategy": STRATEGIES[strategy]})
    context = SerializationContext(topic, MessageField.VALUE)
    for i in range(12):
        value = value_of(fmt, i)
        expected = reference(value, context)
        assert serializer(value) == expected, f"{fmt} value #{i}"
        assert expected[1:5] == schema_id.to_bytes(4, "big")
    prepared = serializer.prepared()
    assert prepared is not None
    record = "Order" if fmt == "json" else "aioaccum.test.Order"  # a JSON Schema's title
    assert prepared.subject == {
        "topic": f"{topic}-value",
        "record": record,
        "topic_record": f"{topic}-{record}",
    }[strategy]


async def test_key_bytes_agree_for_a_primitive_avro_key(
    registry: SchemaRegistryClient, confluent_registry: ConfluentRegistry
) -> None:
    topic = unique_topic()
    serializer = AvroSerializer(registry, AVRO_KEY_SCHEMA, topic=topic, is_key=True)
    schema_id = await serializer.prepare()
    reference = ConfluentAvro(
        confluent_registry, AVRO_KEY_SCHEMA,
        conf={"subject.name.strategy": topic_subject_name_strategy},
    )
    context = SerializationContext(topic, MessageField.KEY)
    assert serializer("user-ñ-1") == reference("user-ñ-1", context)
    latest = await registry.get_latest_version(f"{topic}-key")
    assert (latest.schema_id, latest.version) == (schema_id, 1)  # one schema, not two


# --- the producer --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
async def test_send_and_send_many_read_back_with_confluent_deserializers(
    fmt: str,
    registry: SchemaRegistryClient,
    confluent_registry: ConfluentRegistry,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
) -> None:
    topic = await topic_factory(partitions=1)
    key_serializer = AvroSerializer(registry, AVRO_KEY_SCHEMA, topic=topic, is_key=True)
    value_serializer = ours(fmt, registry, topic=topic)
    await asyncio.gather(key_serializer.prepare(), value_serializer.prepare())
    values = [value_of(fmt, i) for i in range(20)]
    async with Producer(
        kafka_bootstrap, key_serializer=key_serializer, value_serializer=value_serializer
    ) as producer:
        first = await producer.send(topic, values[0], key="k-0")
        many = await producer.send_many(topic, values[1:], keys=[f"k-{i}" for i in range(1, 20)])
        await first
        await many
    records = await asyncio.to_thread(read_back, kafka_bootstrap, topic, len(values))
    decode_key = AvroDeserializer(confluent_registry)
    decode_value = deserializer(fmt, confluent_registry)
    key_context = SerializationContext(topic, MessageField.KEY)
    value_context = SerializationContext(topic, MessageField.VALUE)
    assert [decode_key(key, key_context) for key, _ in records] == [f"k-{i}" for i in range(20)]
    read = [comparable(fmt, decode_value(value, value_context)) for _, value in records]
    assert read == [comparable(fmt, value) for value in values]


async def test_sync_producer_sends_with_a_serializer_prepared_in_its_thread(
    schema_registry_url: str,
    confluent_registry: ConfluentRegistry,
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
) -> None:
    topic = await topic_factory(partitions=1)
    values = [protobuf_value(i) for i in range(10)]

    def in_a_thread() -> int:
        # A plain thread, as a Flask handler's: no event loop, so prepare_blocking.
        registry = SchemaRegistryClient(schema_registry_url, timeout=20.0)
        serializer = ProtobufSerializer(registry, Order, topic=topic)
        schema_id = serializer.prepare_blocking()
        with SyncProducer(kafka_bootstrap, value_serializer=serializer) as producer:
            producer.send(topic, values[0]).result(READ_TIMEOUT_S)
            producer.send_many(topic, values[1:]).result(READ_TIMEOUT_S)
        return schema_id

    schema_id = await asyncio.to_thread(in_a_thread)
    records = await asyncio.to_thread(read_back, kafka_bootstrap, topic, len(values))
    assert all(value[1:5] == schema_id.to_bytes(4, "big") for _, value in records)
    decode = deserializer("protobuf", confluent_registry)
    context = SerializationContext(topic, MessageField.VALUE)
    assert [decode(value, context) for _, value in records] == values


# --- registry options and refusals ---------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
async def test_auto_register_off_looks_the_schema_up(
    fmt: str, registry: SchemaRegistryClient, confluent_registry: ConfluentRegistry
) -> None:
    topic = unique_topic()
    serializer = ours(fmt, registry, topic=topic, auto_register_schemas=False)
    with pytest.raises(SchemaNotFoundError) as missing:
        await serializer.prepare()
    assert missing.value.subject == f"{topic}-value"
    assert f"'{topic}-value'" in str(missing.value)
    assert missing.value.error_code == 40401
    assert missing.value.registry_message in str(missing.value)
    # Registered by confluent-kafka's serializer, found by ours, framed alike.
    context = SerializationContext(topic, MessageField.VALUE)
    reference = theirs(fmt, confluent_registry, {"subject.name.strategy": STRATEGIES["topic"]})
    expected = reference(value_of(fmt, 3), context)
    await serializer.prepare()
    assert serializer(value_of(fmt, 3)) == expected


async def test_use_latest_version_writes_with_the_subjects_newest_schema(
    registry: SchemaRegistryClient, confluent_registry: ConfluentRegistry
) -> None:
    topic = unique_topic()
    subject = f"{topic}-value"
    old = '{"type":"record","name":"V","fields":[{"name":"a","type":"string"}]}'
    new = (
        '{"type":"record","name":"V","fields":[{"name":"a","type":"string"},'
        '{"name":"b","type":"int","default":7}]}'
    )
    await registry.register(subject, Schema(old))
    newest = await registry.register(subject, Schema(new))
    serializer = AvroSerializer(
        registry, old, topic=topic, auto_register_schemas=False, use_latest_version=True
    )
    assert await serializer.prepare() == newest.schema_id
    reference = ConfluentAvro(
        confluent_registry, old,
        conf={"auto.register.schemas": False, "use.latest.version": True,
              "subject.name.strategy": topic_subject_name_strategy},
    )
    value = {"a": "x", "b": 9}
    assert serializer(value) == reference(value, SerializationContext(topic, MessageField.VALUE))


async def test_incompatible_schema_is_refused_with_the_registrys_answer(
    registry: SchemaRegistryClient,
) -> None:
    topic = unique_topic()
    subject = f"{topic}-value"
    first = '{"type":"record","name":"C","fields":[{"name":"a","type":"string"}]}'
    added = (
        '{"type":"record","name":"C","fields":[{"name":"a","type":"string"},'
        '{"name":"b","type":"int","default":0}]}'
    )
    breaking = '{"type":"record","name":"C","fields":[{"name":"b","type":"int"}]}'
    await registry.register(subject, Schema(first))
    await registry.set_compatibility(subject, "BACKWARD")
    assert await registry.test_compatibility(subject, Schema(added)) is True
    assert await registry.test_compatibility(subject, Schema(breaking)) is False
    serializer = AvroSerializer(registry, breaking, topic=topic)
    with pytest.raises(IncompatibleSchemaError) as refused:
        await serializer.prepare()
    assert refused.value.status == 409
    assert refused.value.subject == subject
    assert "Incompatible" in refused.value.registry_message
    assert refused.value.registry_message in str(refused.value)


async def test_lookups_by_id_and_version_are_cached(registry: SchemaRegistryClient) -> None:
    topic = unique_topic()
    subject = f"{topic}-value"
    registered = await registry.register(subject, Schema(AVRO_SCHEMA))
    by_version = await registry.get_version(subject, 1)
    assert by_version.schema_id == registered.schema_id
    # The registry may hand the text back reformatted (Apicurio compacts it).
    by_id = await registry.get_schema(registered.schema_id)
    assert json.loads(by_id.schema) == json.loads(AVRO_SCHEMA)
    sent = registry.requests_sent
    assert await registry.get_version(subject, 1) == by_version
    assert await registry.get_schema(registered.schema_id) == by_id
    assert registry.requests_sent == sent
    with pytest.raises(SchemaNotFoundError) as missing:
        await registry.get_schema(2**31 - 1)
    assert missing.value.error_code == 40403


async def test_concurrent_first_uses_make_one_request_and_sends_make_none(
    registry: SchemaRegistryClient,
) -> None:
    topic = unique_topic()
    serializers = [JsonSchemaSerializer(registry, JSON_SCHEMA, topic=topic) for _ in range(20)]
    before = registry.requests_sent
    ids = await asyncio.gather(*(serializer.prepare() for serializer in serializers))
    assert len(set(ids)) == 1
    assert registry.requests_sent == before + 1
    for i in range(2000):
        serializers[i % 20](json_value(i))
    await serializers[0].prepare()
    assert registry.requests_sent == before + 1


# --- TLS and basic auth --------------------------------------------------------------------

GATE_USER = ("schemas-user", "gate-pw-8Hq2")


@pytest.fixture
async def tls_gate(
    schema_registry_url: str, tmp_path: Path
) -> AsyncIterator[tuple[str, Path]]:
    """HTTPS with basic auth in front of the real registry: (its base URL, the CA file)."""
    kafka_security.make_certificates(tmp_path)
    expected = "Basic " + base64.b64encode(":".join(GATE_USER).encode()).decode()
    upstream = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != expected:
            return web.json_response(
                {"error_code": 40101, "message": "Unauthorized"}, status=401
            )
        async with upstream.request(
            request.method,
            schema_registry_url + "/" + request.match_info["path"],
            params=request.query,
            data=await request.read(),
            headers={k: v for k, v in request.headers.items() if k in ("Content-Type", "Accept")},
        ) as answer:
            return web.Response(
                status=answer.status, body=await answer.read(),
                content_type=answer.content_type,
            )

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", forward)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(kafka_security.keystore_file(tmp_path))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}", kafka_security.ca_file(tmp_path)
    finally:
        await runner.cleanup()
        await upstream.close()


async def test_tls_and_basic_auth(tls_gate: tuple[str, Path]) -> None:
    url, ca_file = tls_gate
    trusted = ssl.create_default_context(cafile=str(ca_file))
    topic = unique_topic()

    good = SchemaRegistryClient(url, basic_auth=GATE_USER, ssl_context=trusted, timeout=10.0)
    serializer = AvroSerializer(good, AVRO_SCHEMA, topic=topic)
    schema_id = await serializer.prepare()
    framed = serializer(avro_value(1))
    assert framed is not None
    assert framed[1:5] == schema_id.to_bytes(4, "big")

    # Credentials in the URL work as well, and leave no trace in the client's URL or repr.
    user, password = GATE_USER
    in_url = SchemaRegistryClient(
        url.replace("https://", f"https://{user}:{password}@"), ssl_context=trusted
    )
    assert await in_url.lookup(f"{topic}-value", Schema(AVRO_SCHEMA)) is not None
    assert password not in in_url.url
    assert password not in repr(in_url)

    wrong = SchemaRegistryClient(url, basic_auth=(user, "nope"), ssl_context=trusted)
    with pytest.raises(RegistryAuthenticationError) as refused:
        await AvroSerializer(wrong, AVRO_SCHEMA, topic=topic).prepare()
    assert refused.value.status == 401
    assert refused.value.subject == f"{topic}-value"
    assert "nope" not in str(refused.value)

    # The system's CAs do not know the test CA: refused at once, not retried until timeout.
    untrusted = SchemaRegistryClient(url, basic_auth=GATE_USER, timeout=10.0)
    started = time.monotonic()
    with pytest.raises(RegistryAuthenticationError, match="TLS"):
        await untrusted.get_subjects()
    assert time.monotonic() - started < 5.0

