"""Schemas and values the schema tests share (and scripts/bench_schemas.py measures with).

The Protobuf classes are built from a FileDescriptorProto at import, so no protoc is needed.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "aioaccum.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "paid", "type": "boolean"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "int"}},
            {"name": "status", "type": {"type": "enum", "name": "Status",
                                        "symbols": ["NEW", "SHIPPED"]}},
            {"name": "blob", "type": "bytes"},
        ],
    }
)
AVRO_KEY_SCHEMA = '"string"'

JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "customer": {"type": "string"},
            "amount": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id", "customer"],
    }
)


def avro_value(i: int) -> dict[str, Any]:
    return {
        "id": 10_000_000_000 + i,
        "customer": f"cliente-ñ-{i}",
        "amount": i * 1.25,
        "paid": i % 2 == 0,
        "note": None if i % 3 else f"note {i}",
        "tags": [f"t{j}" for j in range(i % 4)],
        "attrs": {f"k{j}": j for j in range(i % 3)},
        "status": "SHIPPED" if i % 2 else "NEW",
        "blob": bytes(range(i % 7)),
    }


def json_value(i: int) -> dict[str, Any]:
    return {"id": i, "customer": f"clïent-{i} ✓", "amount": i / 8, "tags": ["a", f"b{i}"]}


def _order_file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="aioaccum/test/order.proto", package="aioaccum.test", syntax="proto3"
    )
    F = descriptor_pb2.FieldDescriptorProto
    first = proto.message_type.add(name="Ping")  # so that Order is message 1, not 0
    first.field.add(name="at", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order = proto.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="customer", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order.field.add(name="amount", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    order.field.add(name="tags", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="quantity", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    order.field.add(
        name="lines", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
        type_name=".aioaccum.test.Order.Line",
    )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_order_file())
Ping: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("aioaccum.test.Ping")
)
Order: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("aioaccum.test.Order")
)
OrderLine: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("aioaccum.test.Order.Line")
)


def protobuf_value(i: int) -> Message:
    order = Order(id=i, customer=f"cliente-{i}", amount=i * 0.5, tags=["x", f"y{i}"])
    for j in range(i % 3):
        order.lines.add(sku=f"sku-{j}", quantity=j + 1)
    return order
