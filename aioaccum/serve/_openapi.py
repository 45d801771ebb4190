"""The OpenAPI document of the API ``aioaccum serve`` implements, served at ``/openapi.json``.

Written by hand, as data: the routes are few, and what a route accepts (REST Proxy's bodies,
its error codes) is not something the route functions could say. ``tests/unit`` checks that
every route of the application is here with its methods, and ``tests/integration/
test_serve_fuzz.py`` generates requests from it (schemathesis) against a real server.

The schemas say what a well-formed request is, no looser and no stricter than the server reads
it: a request that breaks them is answered 4xx with REST Proxy's error body. Unknown fields are
ignored, as REST Proxy ignores them, so objects allow them.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["OPENAPI_PATH", "document"]

OPENAPI_PATH: Final = "/openapi.json"

_BASE64: Final = {
    "type": "string",
    "format": "byte",
    "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
}
_ERROR: Final = {"$ref": "#/components/schemas/Error"}
_SCHEMA_TYPES: Final = ["AVRO", "PROTOBUF", "JSONSCHEMA"]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    # OpenAPI 3.0 ignores a $ref's siblings: a nullable reference is wrapped in allOf.
    return {**schema, "nullable": True}


def _errors(*statuses: int) -> dict[str, Any]:
    """Error answers: REST Proxy's body, for the statuses listed and any other."""
    found: dict[str, Any] = {
        str(status): {
            "description": _WHY.get(status, "an error"),
            "content": {"application/json": {"schema": _ERROR}},
        }
        for status in statuses
    }
    found["default"] = {
        "description": "an error (see docs/serve.md's table of status codes)",
        "content": {"application/json": {"schema": _ERROR}},
    }
    return found


_WHY: Final = {
    400: "the body is not strict JSON, or a field is malformed (v3)",
    401: "credentials missing or wrong (auth file in use)",
    403: "this credential may not write the topic",
    404: "no such topic, partition, schema or cluster",
    408: "the body did not arrive in time",
    409: "the schema registry's compatibility rule refused the schema",
    413: "a body or record too large",
    415: "not a produce Content-Type (the schema formats without a registry)",
    422: "JSON of the wrong shape, a value that does not fit its schema, an invalid schema",
    429: "the producer's buffer or the server's body budget is full: retry after Retry-After",
    503: "brokers or schema registry unavailable, or the server is shutting down",
}
_PRODUCE_ERRORS: Final = (400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 503)


def _v2_record(key: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "key": key,
            "value": value,
            "partition": _nullable({"type": "integer", "minimum": 0, "maximum": 2**31 - 1}),
        },
    }


def _v2_body(record: str, schemas: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "records": {
            "type": "array",
            "minItems": 1,
            "items": {"$ref": f"#/components/schemas/{record}"},
        }
    }
    if schemas:
        for field in ("key", "value"):
            properties[f"{field}_schema"] = _nullable({"type": "string"})
            properties[f"{field}_schema_id"] = _nullable(
                {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
            )
    return {"type": "object", "required": ["records"], "properties": properties}


_V2_MEDIA: Final = {
    "application/vnd.kafka.binary.v2+json": "V2BinaryRequest",
    "application/vnd.kafka.json.v2+json": "V2JsonRequest",
    "application/vnd.kafka.avro.v2+json": "V2SchemaRequest",
    "application/vnd.kafka.protobuf.v2+json": "V2SchemaRequest",
    "application/vnd.kafka.jsonschema.v2+json": "V2SchemaRequest",
}


def _v2_produce(summary: str, with_partition: bool) -> dict[str, Any]:
    parameters = [_TOPIC]
    if with_partition:
        parameters.append(
            {
                "name": "partition",
                "in": "path",
                "required": True,
                "schema": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            }
        )
    return {
        "summary": summary,
        "operationId": "v2ProduceToPartition" if with_partition else "v2Produce",
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"$ref": f"#/components/schemas/{name}"}}
                for media, name in _V2_MEDIA.items()
            },
        },
        "responses": {
            "200": {
                "description": "every record has an outcome (some may have failed: see each)",
                "content": {
                    "application/vnd.kafka.v2+json": {
                        "schema": {"$ref": "#/components/schemas/V2ProduceResponse"}
                    }
                },
            },
            **_errors(*_PRODUCE_ERRORS),
        },
    }


_TOPIC: Final = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}}
_CLUSTER: Final = {
    "name": "cluster_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _get(operation_id: str, summary: str, answer: dict[str, Any], *errors: int) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "responses": {"200": answer, **_errors(*errors)},
    }


_COMPONENTS: Final[dict[str, Any]] = {
    "Error": {
        "type": "object",
        "required": ["error_code", "message"],
        "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
    },
    "V2BinaryRecord": _v2_record(_nullable(_BASE64), _nullable(_BASE64)),
    "V2JsonRecord": _v2_record({}, {}),
    "V2BinaryRequest": _v2_body("V2BinaryRecord", schemas=False),
    "V2JsonRequest": _v2_body("V2JsonRecord", schemas=False),
    "V2SchemaRequest": _v2_body("V2JsonRecord", schemas=True),
    "V2ProduceResponse": {
        "type": "object",
        "required": ["offsets", "key_schema_id", "value_schema_id"],
        "properties": {
            "key_schema_id": _nullable({"type": "integer"}),
            "value_schema_id": _nullable({"type": "integer"}),
            "offsets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "partition": _nullable({"type": "integer"}),
                        "offset": _nullable({"type": "integer"}),
                        "error_code": _nullable({"type": "integer"}),
                        "error": _nullable({"type": "string"}),
                    },
                },
            },
        },
    },
    "V3Data": {
        "type": "object",
        "description": "BINARY (base64), JSON or STRING data; or, with a registry, data "
        "written with a schema: given as text (schema, with type), by schema_id, or by "
        "subject and schema_version (the latest when none is given); the schema fields "
        "go with no type or a schema type only",
        "properties": {
            "type": {"type": "string", "enum": ["BINARY", "JSON", "STRING", *_SCHEMA_TYPES]},
            "data": {},
            "schema": {"type": "string"},
            "schema_id": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
            "schema_version": {"type": "integer", "minimum": 1},
            "subject": {"type": "string", "minLength": 1},
            "subject_name_strategy": {
                "type": "string",
                "enum": ["TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME"],
            },
        },
    },
    "V3Record": {
        "type": "object",
        "properties": {
            "partition_id": _nullable({"type": "integer", "minimum": 0, "maximum": 2**31 - 1}),
            "timestamp": {
                "description": "ISO 8601 (2021-02-05T19:14:42Z), or milliseconds since 1970",
                "oneOf": [
                    {"type": "string"},
                    {"type": "integer", "minimum": 0, "maximum": 253_402_300_799_999},
                ],
                "nullable": True,
            },
            "headers": _nullable(
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "value": _nullable(_BASE64),
                        },
                    },
                }
            ),
            "key": _nullable({"allOf": [{"$ref": "#/components/schemas/V3Data"}]}),
            "value": _nullable({"allOf": [{"$ref": "#/components/schemas/V3Data"}]}),
        },
    },
    "V3ProduceResponse": {
        "type": "object",
        "required": ["error_code"],
        "properties": {
            "error_code": {"type": "integer"},
            "cluster_id": {"type": "string"},
            "topic_name": {"type": "string"},
            "partition_id": {"type": "integer"},
            "offset": {"type": "integer"},
            "timestamp": {"type": "string"},
            "key": {"type": "object"},
            "value": {"type": "object"},
            "message": {"type": "string"},
        },
    },
    "Cluster": {
        "type": "object",
        "required": ["kind", "cluster_id"],
        "properties": {"kind": {"type": "string"}, "cluster_id": {"type": "string"}},
    },
}

_PATHS: Final[dict[str, Any]] = {
    "/healthz": {
        "get": _get(
            "healthz",
            "liveness: the process runs (no broker is asked)",
            _json({"type": "object", "required": ["status"]}, "alive"),
        )
    },
    "/readyz": {
        "get": _get(
            "readyz",
            "readiness: a broker answered within readiness.timeout.ms",
            _json({"type": "object", "required": ["status"]}, "ready"),
            503,
        )
    },
    "/metrics": {
        "get": _get(
            "metrics",
            "the producer's and the server's metrics, Prometheus' text format",
            {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
            401,
        )
    },
    OPENAPI_PATH: {
        "get": _get(
            "openapi",
            "this document",
            _json({"type": "object", "required": ["openapi", "paths"]}, "the document"),
        )
    },
    "/topics": {
        "get": _get(
            "v2ListTopics",
            "the topics (without Kafka's internal ones)",
            {
                "description": "topic names",
                "content": {
                    "application/vnd.kafka.v2+json": {
                        "schema": {"type": "array", "items": {"type": "string"}}
                    }
                },
            },
            401,
            503,
        )
    },
    "/topics/{topic}": {
        "parameters": [_TOPIC],
        "get": _get(
            "v2DescribeTopic",
            "a topic's partitions, leaders and replicas",
            {
                "description": "the topic",
                "content": {
                    "application/vnd.kafka.v2+json": {
                        "schema": {"type": "object", "required": ["name", "partitions"]}
                    }
                },
            },
            400,
            401,
            403,
            404,
            503,
        ),
        "post": _v2_produce("produce records (REST Proxy v2)", with_partition=False),
    },
    "/topics/{topic}/partitions/{partition}": {
        "post": _v2_produce("produce records to one partition (REST Proxy v2)", True),
    },
    "/v3/clusters": {
        "get": _get(
            "v3ListClusters",
            "the cluster this server produces to",
            _json(
                {
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "data": {"type": "array", "items": {"$ref": "#/components/schemas/Cluster"}}
                    },
                },
                "one cluster",
            ),
            401,
            503,
        )
    },
    "/v3/clusters/{cluster_id}": {
        "parameters": [_CLUSTER],
        "get": _get(
            "v3GetCluster",
            "the cluster, or 404 for any other id",
            _json({"$ref": "#/components/schemas/Cluster"}, "the cluster"),
            401,
            404,
            503,
        ),
    },
    "/v3/clusters/{cluster_id}/topics/{topic}/records": {
        "parameters": [_CLUSTER, _TOPIC],
        "post": {
            "operationId": "v3Produce",
            "summary": "produce records (REST Proxy v3): one JSON object per record, one "
            "after the other; chunked, the connection is a stream answered record by record",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/V3Record"}}
                },
            },
            "responses": {
                "200": _json(
                    {"$ref": "#/components/schemas/V3ProduceResponse"},
                    "one answer per record, in order (a failed record's answer is an error "
                    "body with its status as error_code)",
                ),
                **_errors(*_PRODUCE_ERRORS),
            },
        },
    },
}


def document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document, naming the server's ``version``."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "aioaccum serve",
            "version": version,
            "description": "The produce part of Confluent REST Proxy's API (v2 and v3), with "
            "health, readiness and metrics. Errors are REST Proxy's body: "
            '{"error_code": N, "message": "..."}.',
        },
        "paths": _PATHS,
        "components": {"schemas": _COMPONENTS},
    }
