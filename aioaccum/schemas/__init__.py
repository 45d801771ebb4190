"""Schema Registry serializers for the producer: Avro, Protobuf and JSON Schema records in
Confluent's wire format (``pip install 'aioaccum[schemas]'``; see ``docs/schemas.md``).

::

    from aioaccum.schemas import SchemaRegistryClient
    from aioaccum.schemas.avro import AvroSerializer

    registry = SchemaRegistryClient("https://registry:8081", basic_auth=("key", "secret"))
    serializer = AvroSerializer(registry, schema_text, topic="users")
    await serializer.prepare()          # the only registry call; sends never make one
    async with Producer(bootstrap, value_serializer=serializer) as producer:
        await producer.send("users", {"name": "Ada"})

This package imports only the registry client, the errors and the shared serializer base;
each format's module imports its library (fastavro, protobuf, jsonschema) when imported.
"""

from __future__ import annotations

from aioaccum.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthenticationError,
    RegistryTimeoutError,
    RegistryUnavailableError,
    SchemaMismatchError,
    SchemaNotFoundError,
    SchemaNotReadyError,
    SchemaRegistryError,
)
from aioaccum.schemas.registry import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from aioaccum.schemas.serializer import Prepared, SchemaSerializer
from aioaccum.schemas.subjects import SubjectNameStrategy

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "Prepared",
    "RegisteredSchema",
    "RegistryAuthenticationError",
    "RegistryTimeoutError",
    "RegistryUnavailableError",
    "Schema",
    "SchemaMismatchError",
    "SchemaNotFoundError",
    "SchemaNotReadyError",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaSerializer",
    "SubjectNameStrategy",
]
