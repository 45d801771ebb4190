"""``aioaccum serve`` fuzzed from its own OpenAPI document, with the real cluster and schema
registry behind it.

schemathesis generates requests for every operation of ``/openapi.json``, valid ones
(``positive``) and ones that break the document (``negative``), half of them aimed at a topic
that exists (and, for v3, at the real cluster id) so that produce requests get through. The
rules checked on every answer:

* no 5xx but 503 (documented: brokers or registry unavailable), and that one with its body;
* every error answer is REST Proxy's body, ``{"error_code": int, "message": str}``;
* a request that breaks the document (negative) is never 2xx;
* every record a 2xx answer gave an offset to is in Kafka at that partition and offset, once,
  and a binary or string one holds the bytes sent.

The run is bounded by a number of examples per operation and by :data:`FUZZ_BUDGET_S`; the
test prints what ran (``-s`` shows it) and fails listing every problem found.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import requests
import schemathesis
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import json_format
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Err

from ._serve import read_positions, serving
from .test_serve_schemas import AVRO_SCHEMA, JSON_SCHEMA, PROTO_SCHEMA, Ticket

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

# Wall-clock bound of the generated requests (the server's start and the read-back come on
# top); each operation also has its number of examples per mode.
FUZZ_BUDGET_S = 45.0
PRODUCE_EXAMPLES = 150
# Then values thrown at real schemas, in each schema format (v2), within their own budget.
SCHEMA_BUDGET_S = 15.0
SCHEMA_EXAMPLES = 60
OTHER_EXAMPLES = 25
REQUEST_TIMEOUT_S = 30.0
_PRODUCE = ("v2Produce", "v2ProduceToPartition", "v3Produce")


@dataclass
class Report:
    """What the generated requests found."""

    topic: str
    seed: int
    requests: int = 0
    skipped: int = 0  # generated after the budget ran out, not sent
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    # (partition, offset) -> the bytes expected there (None: only that a record is there).
    written: dict[tuple[int, int], bytes | None] = field(default_factory=dict)
    errors: collections.Counter[int] = field(default_factory=collections.Counter)
    seconds: collections.defaultdict[str, float] = field(
        default_factory=lambda: collections.defaultdict(float)
    )
    # (partition, offset) -> (format, the JSON value sent) of records written with a schema.
    encoded: dict[tuple[int, int], tuple[str, Any]] = field(default_factory=dict)

    def problem(self, case: Any, response: schemathesis.Response, why: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(
                f"{why}: {case.method} {case.formatted_path} {case.media_type} "
                f"body={json.dumps(case.body, default=repr)[:3000]} -> {response.status_code} "
                f"{response.text[:300]}"
            )


def _error_body(text: str) -> dict[str, Any] | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if (
        isinstance(body, dict)
        and type(body.get("error_code")) is int
        and isinstance(body.get("message"), str)
    ):
        return body
    return None


def _answers(text: str) -> list[dict[str, Any]]:
    """The JSON objects of an answer, one after the other (a v3 stream has one per record)."""
    decoder = json.JSONDecoder()
    found, position = [], 0
    text = text.strip()
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        found.append(value)
        while position < len(text) and text[position] in " \r\n":
            position += 1
    return found


def _v2_expected(case: Any, index: int) -> bytes | None:
    if case.media_type != "application/vnd.kafka.binary.v2+json":
        return None
    value = case.body["records"][index].get("value")
    return None if value is None else base64.b64decode(value)


def _v3_expected(case: Any) -> bytes | None:
    value = case.body.get("value") if isinstance(case.body, dict) else None
    if not isinstance(value, dict) or value.get("data") is None:
        return None
    kind = str(value.get("type", "")).upper()
    if kind == "BINARY":
        return base64.b64decode(value["data"])
    if kind == "STRING":
        return str(value["data"]).encode()
    return None


def _known_schema(case: Any) -> str | None:
    """The format of a request made with one of :data:`_SCHEMA_CASES`' schemas, else None."""
    if not isinstance(case.body, dict):
        return None
    for fmt, (media, text, _) in _SCHEMA_CASES.items():
        if case.media_type == media and case.body.get("value_schema") == text:
            return fmt
    return None


def _observe(
    report: Report, case: Any, mode: GenerationMode, response: schemathesis.Response
) -> None:
    status = response.status_code
    operation = case.operation.definition.raw.get("operationId", case.operation.label)
    report.requests += 1
    report.statuses[f"{operation} {mode.value} {status}"] += 1
    report.seconds[f"{operation} {case.media_type or ''}"] += response.elapsed
    if status >= 500 and status != 503:
        report.problem(case, response, "a 5xx other than 503")
    known = _known_schema(case)
    if status >= 400:
        body = _error_body(response.text)
        if body is None:
            report.problem(case, response, "an error answer without REST Proxy's body")
        else:
            report.errors[body["error_code"]] += 1
            if known is not None and body["error_code"] != 42203:
                report.problem(case, response, "a value for a good schema refused otherwise")
        return
    if mode is GenerationMode.NEGATIVE:
        report.problem(case, response, "input that breaks the document was accepted")
    if operation not in _PRODUCE:
        return
    ours = case.path_parameters.get("topic") == report.topic
    answers = _answers(response.text)
    if operation == "v3Produce":
        for answer in answers:
            if answer.get("error_code") == 200 and ours:
                position = (answer["partition_id"], answer["offset"])
                report.written[position] = _v3_expected(case)
        return
    for index, entry in enumerate(answers[0]["offsets"]):
        if entry["error_code"] is None and ours:
            position = (entry["partition"], entry["offset"])
            report.written[position] = _v2_expected(case, index)
            if known is not None:
                report.encoded[position] = (known, case.body["records"][index]["value"])


def _caller(
    report: Report,
    mode: GenerationMode,
    base_url: str,
    session: requests.Session,
    deadline: float,
) -> Callable[[Any], None]:
    def call(case: Any) -> None:
        if time.monotonic() > deadline:
            report.skipped += 1
            return
        response = case.call(base_url=base_url, session=session, timeout=REQUEST_TIMEOUT_S)
        _observe(report, case, mode, response)

    return call


def _generate(
    strategy: st.SearchStrategy[Any], examples: int, call: Callable[[Any], None], run_seed: int
) -> None:
    @seed(run_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        call(case)

    run()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
# Each format's schema, and values shaped like its records with any JSON in each field.
_SCHEMA_CASES: dict[str, tuple[str, str, st.SearchStrategy[Any]]] = {
    "AVRO": (
        "application/vnd.kafka.avro.v2+json", AVRO_SCHEMA,
        st.fixed_dictionaries({"page": _JSON, "ms": _JSON}, optional={"ref": _JSON}),
    ),
    "PROTOBUF": (
        "application/vnd.kafka.protobuf.v2+json", PROTO_SCHEMA,
        st.fixed_dictionaries({}, optional={"id": _JSON, "seats": _JSON, "tags": _JSON}),
    ),
    "JSONSCHEMA": (
        "application/vnd.kafka.jsonschema.v2+json", JSON_SCHEMA,
        st.fixed_dictionaries({"sensor": _JSON, "celsius": _JSON}) | _JSON,
    ),
}  # fmt: skip


def _fuzz_schemas(schema: Any, base_url: str, report: Report) -> None:
    """Values of every shape against a real schema of each format: each is written (200) or
    refused as not fitting it (422, 42203), and a written one decodes (checked later)."""
    operation = schema.find_operation_by_label("POST /topics/{topic}")
    deadline = time.monotonic() + SCHEMA_BUDGET_S
    with requests.Session() as session:
        for media, text, values in _SCHEMA_CASES.values():
            call = _caller(report, GenerationMode.POSITIVE, base_url, session, deadline)

            def send(records: list[Any], media: str = media, text: str = text,
                     call: Callable[[Any], None] = call) -> None:
                case = operation.Case(
                    path_parameters={"topic": report.topic}, media_type=media,
                    body={"value_schema": text, "records": [{"value": v} for v in records]},
                )
                call(case)

            _generate(st.lists(values, min_size=1, max_size=3), SCHEMA_EXAMPLES, send,
                      report.seed)


def _fuzz(
    document: dict[str, Any], base_url: str, topic: str, cluster_id: str, run_seed: int
) -> Report:
    schema = schemathesis.openapi.from_dict(document)
    report = Report(topic, run_seed)
    deadline = time.monotonic() + FUZZ_BUDGET_S
    known = {"topic": topic, "cluster_id": cluster_id}
    with requests.Session() as session:
        for result in schema.get_all_operations():
            if isinstance(result, Err):
                pytest.fail(f"the OpenAPI document has an operation schemathesis cannot read: "
                            f"{result.err()}")
            operation = result.ok()
            names = {p.name for p in operation.path_parameters}
            fixed = {name: known[name] for name in names if name in known}
            examples = (
                PRODUCE_EXAMPLES
                if operation.definition.raw.get("operationId") in _PRODUCE
                else OTHER_EXAMPLES
            )
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategies = [operation.as_strategy(mode)]
                if fixed:
                    strategies.append(operation.as_strategy(mode, path_parameters=fixed))
                call = _caller(report, mode, base_url, session, deadline)
                try:
                    _generate(st.one_of(*strategies), examples, call, report.seed)
                except Unsatisfiable:
                    # A negative case for an operation with nothing to break (no parameters,
                    # no body): nothing to send.
                    report.statuses[f"{operation.label} {mode.value} nothing to generate"] += 1
        _fuzz_schemas(schema, base_url, report)
    return report


def _check_decoded(
    report: Report, found: dict[tuple[int, int], Any], registry_url: str, topic: str
) -> None:
    """Records written with a schema decode, with confluent-kafka's deserializers, to the value
    sent (Avro's JSON encoding of a union aside)."""
    context = SerializationContext(topic, MessageField.VALUE)
    with ConfluentRegistry({"url": registry_url}) as registry:
        decoders = {
            "AVRO": AvroDeserializer(registry),
            "PROTOBUF": ProtobufDeserializer(Ticket, {"use.deprecated.format": False}),
            "JSONSCHEMA": JSONDeserializer(JSON_SCHEMA, schema_registry_client=registry),
        }
        for position, (fmt, sent) in report.encoded.items():
            decoded = decoders[fmt](found[position].value, context)
            if fmt == "JSONSCHEMA" and decoded != sent:
                report.problems.append(f"{position}: {decoded!r} decoded, {sent!r} sent")
            if fmt == "AVRO" and decoded["page"] != sent["page"]:
                report.problems.append(f"{position}: {decoded!r} decoded, {sent!r} sent")
            as_dict = json_format.MessageToDict
            if fmt == "PROTOBUF" and as_dict(decoded) != as_dict(
                json_format.ParseDict(sent, Ticket())
            ):
                report.problems.append(f"{position}: {decoded!r} decoded, {sent!r} sent")


async def test_generated_requests_get_documented_answers_and_land_in_kafka(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory, schema_registry_url: str
) -> None:
    topic = await topic_factory(partitions=3)
    # A new seed each run explores further; the failure message names it, and
    # AIOACCUM_FUZZ_SEED=N runs the same requests again.
    run_seed = int(os.environ.get("AIOACCUM_FUZZ_SEED") or random.randrange(2**32))
    started = time.monotonic()
    async with (
        serving(
            tmp_path, kafka_bootstrap, "--schema-registry-url", schema_registry_url,
            producer_props={"linger.ms": "1"},
        ) as server,
        aiohttp.ClientSession() as session,
    ):  # fmt: skip
        async with session.get(f"{server.base_url}/openapi.json") as response:
            assert response.status == 200
            document = await response.json()
        async with session.get(f"{server.base_url}/v3/clusters") as response:
            cluster_id = (await response.json())["data"][0]["cluster_id"]
        report = await asyncio.to_thread(
            _fuzz, document, server.base_url, topic, cluster_id, run_seed
        )
        await server.stop()
    fuzzed = time.monotonic() - started
    found = await read_positions(kafka_bootstrap, topic, set(report.written))
    for position, expected in report.written.items():
        if expected is not None and found[position].value != expected:
            report.problems.append(
                f"{position} holds {found[position].value!r}, not the {expected!r} sent"
            )
    _check_decoded(report, found, schema_registry_url, topic)
    summary = [
        f"seed {run_seed}: {report.requests} generated requests in {fuzzed:.0f} s "
        f"({report.skipped} generated "
        f"after the budget, not sent); {len(report.written)} records acknowledged and found "
        f"in Kafka ({len(report.encoded)} with a schema, decoded)",
        "error codes: " + ", ".join(f"{c}x{n}" for c, n in sorted(report.errors.items())),
        "seconds answering: "
        + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(report.seconds.items(), key=lambda kv: -kv[1])[:5]
        ),
        *(f"  {key}: {count}" for key, count in sorted(report.statuses.items())),
    ]
    print("\n".join(summary))
    assert not report.problems, "\n".join([summary[0], *report.problems])
    assert report.requests >= 300, summary[0]
    # Some of each produce operation got through, and some were refused.
    assert len(report.written) >= 20, summary[0]
