#!/usr/bin/env python3
"""Cost per record of aioaccum.schemas' serializers against confluent-kafka's, in one run.

Both sides serialize the same values with the same schema on the same registry, after each
has resolved its schema id (so no HTTP is timed: only what a send pays per record). Prints one
line per format with nanoseconds per record, best of --repeat runs.

    .venv/bin/python scripts/bench_schemas.py [--records 20000] [--repeat 5] [--registry URL]

Without --registry it runs `scripts/registry up` (and `down` afterwards if it started it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry import topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvro
from confluent_kafka.schema_registry.json_schema import JSONSerializer as ConfluentJson
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as ConfluentProtobuf
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from aioaccum.schemas import SchemaRegistryClient, SchemaSerializer
from aioaccum.schemas.avro import AvroSerializer
from aioaccum.schemas.json_schema import JsonSchemaSerializer
from aioaccum.schemas.protobuf import ProtobufSerializer

REGISTRY_SCRIPT = Path(__file__).resolve().parent / "registry"

# A typical event: a dozen fields, strings, numbers, a list and a nested part.
AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "namespace": "bench",
        "fields": [
            {"name": "user_id", "type": "long"},
            {"name": "session", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "referrer", "type": ["null", "string"], "default": None},
            {"name": "at_ms", "type": "long"},
            {"name": "duration", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)
JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Click",
        "type": "object",
        "properties": {
            "user_id": {"type": "integer"},
            "session": {"type": "string"},
            "page": {"type": "string"},
            "referrer": {"type": ["string", "null"]},
            "at_ms": {"type": "integer"},
            "duration": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["user_id", "session", "page", "at_ms"],
    }
)


def _click_class() -> type[Message]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="bench/click.proto", package="bench", syntax="proto3"
    )
    field = descriptor_pb2.FieldDescriptorProto
    click = proto.message_type.add(name="Click")
    for number, (name, kind) in enumerate(
        [("user_id", field.TYPE_INT64), ("session", field.TYPE_STRING),
         ("page", field.TYPE_STRING), ("referrer", field.TYPE_STRING),
         ("at_ms", field.TYPE_INT64), ("duration", field.TYPE_DOUBLE)],
        start=1,
    ):
        click.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    click.field.add(name="tags", number=7, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    made: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("bench.Click")
    )
    return made


Click = _click_class()


def click(i: int) -> dict[str, Any]:
    return {
        "user_id": 1_000_000 + i,
        "session": f"s-{i % 97:04d}-{i % 13}",
        "page": f"/products/{i % 500}",
        "referrer": None if i % 3 else "https://search.example/?q=shoes",
        "at_ms": 1_760_000_000_000 + i,
        "duration": (i % 1000) / 7,
        "tags": ["web", f"ab-{i % 2}"],
    }


def as_message(value: dict[str, Any]) -> Message:
    return Click(**{k: v for k, v in value.items() if v is not None})


def best_ns(serialize: Callable[[Any], Any], values: list[Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter_ns()
        for value in values:
            serialize(value)
        best = min(best, (time.perf_counter_ns() - started) / len(values))
    return best


async def prepared(serializer: SchemaSerializer) -> SchemaSerializer:
    await serializer.prepare()
    return serializer


def run(url: str, records: int, repeat: int) -> None:
    registry = SchemaRegistryClient(url)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    conf = {"subject.name.strategy": topic_subject_name_strategy}
    dicts = [click(i) for i in range(records)]
    messages = [as_message(value) for value in dicts]
    with ConfluentRegistry({"url": url}) as confluent:
        cases: list[tuple[str, SchemaSerializer, Any, list[Any]]] = [
            ("Avro (fastavro)", AvroSerializer(registry, AVRO_SCHEMA, topic=topic),
             ConfluentAvro(confluent, AVRO_SCHEMA, conf=conf), dicts),
            ("Protobuf", ProtobufSerializer(registry, Click, topic=topic + "-pb"),
             ConfluentProtobuf(Click, confluent, conf=conf), messages),
            ("JSON Schema (validated)", JsonSchemaSerializer(registry, JSON_SCHEMA,
                                                             topic=topic + "-json"),
             ConfluentJson(JSON_SCHEMA, confluent, conf=conf), dicts),
        ]
        print(f"{records} records per run, best of {repeat}; ns per record")
        print(f"{'format':<26}{'aioaccum':>12}{'confluent-kafka':>18}{'ratio':>8}")
        for name, ours, theirs, values in cases:
            asyncio.run(prepared(ours))
            topic_of = ours.topic or topic
            theirs_context = SerializationContext(topic_of, MessageField.VALUE)
            theirs(values[0], theirs_context)  # its first call registers: not timed
            if ours(values[0]) != theirs(values[0], theirs_context):
                raise SystemExit(f"{name}: the two serializers disagree on the bytes")
            ours_ns = best_ns(ours, values, repeat)
            def confluent_call(value: Any, call: Any = theirs, ctx: Any = theirs_context) -> Any:
                return call(value, ctx)

            theirs_ns = best_ns(confluent_call, values, repeat)
            print(f"{name:<26}{ours_ns:>12,.0f}{theirs_ns:>18,.0f}{theirs_ns / ours_ns:>7.1f}x")
    print(f"registry requests made by aioaccum's serializers: {registry.requests_sent}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--registry", help="base URL of a running registry")
    args = parser.parse_args(argv)
    if args.registry:
        run(args.registry, args.records, args.repeat)
        return 0
    lease = str(os.getpid())
    up = subprocess.run(
        [sys.executable, str(REGISTRY_SCRIPT), "up", "--lease", lease],
        capture_output=True, text=True, check=False,
    )
    if up.returncode != 0:
        print(up.stderr, file=sys.stderr)
        return 1
    try:
        run(up.stdout.strip().splitlines()[-1], args.records, args.repeat)
    finally:
        subprocess.run(
            [sys.executable, str(REGISTRY_SCRIPT), "release", lease],
            capture_output=True, check=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
