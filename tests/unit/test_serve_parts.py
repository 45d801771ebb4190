"""The gateway's pure parts, without Kafka or HTTP: cutting a v3 stream into objects, parsing
one record (every malformed input answered 400/422, never a crash), the body budget's FIFO and
cancellation, the auth file, the settings' repr and the v2 error codes."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from aioaccum._kafka.cluster_view import PartitionInfo, TopicInfo
from aioaccum.errors import (
    AuthenticationError,
    BrokerError,
    ConfigError,
    ProducerTimeoutError,
    TopicAuthorizationError,
)
from aioaccum.serve import AuthFile, ServeSettings
from aioaccum.serve._errors import (
    ErrorCode,
    RestError,
    error_response,
    record_error_code,
    rest_error_for,
)
from aioaccum.serve._gateway import ByteBudget, Gateway
from aioaccum.serve._records import MAX_TIMESTAMP_MS, ObjectSplitter, decode_json, parse_record
from aioaccum.serve._v2 import parse_records
from aioaccum.serve._v3 import iso_timestamp

# --- the object splitter


def test_splitter_cuts_objects_split_anywhere_across_chunks() -> None:
    body = b'{"a": "}{\\"x"} \r\n{"b": {"c": 1}}{"d": 2}'
    for cut in range(len(body) + 1):
        splitter = ObjectSplitter()
        found = splitter.feed(body[:cut]) + splitter.feed(body[cut:])
        assert [json.loads(o) for o in found] == [{"a": '}{"x'}, {"b": {"c": 1}}, {"d": 2}]
        assert splitter.pending == 0
        assert not splitter.leftover()


def test_splitter_holds_only_the_incomplete_object() -> None:
    splitter = ObjectSplitter()
    assert splitter.feed(b'{"a": 1} {"b": "12345') == [b'{"a": 1}']
    assert splitter.pending == len(b'{"b": "12345')
    assert splitter.leftover()


def test_splitter_refuses_what_is_not_an_object() -> None:
    with pytest.raises(RestError) as caught:
        ObjectSplitter().feed(b"[1, 2]")
    assert (caught.value.status, caught.value.code) == (400, ErrorCode.BAD_REQUEST)


# --- parse_record


def test_parse_record_reads_types_headers_partition_and_timestamp() -> None:
    record = parse_record(
        {
            "partition_id": 2,
            "timestamp": "2021-02-05T19:14:42.5Z",
            "headers": [{"name": "h", "value": "aGk="}, {"name": "n", "value": None}],
            "key": {"type": "STRING", "data": "k"},
            "value": {"type": "JSON", "data": {"x": [1, "é"]}},
        }
    )
    assert record.key == b"k"
    assert record.value == '{"x":[1,"é"]}'.encode()
    assert (record.key_type, record.value_type, record.partition) == ("STRING", "JSON", 2)
    assert record.timestamp_ms == 1612552482500
    assert record.headers == [("h", b"hi"), ("n", None)]


@pytest.mark.parametrize("stamp", [0, MAX_TIMESTAMP_MS, "9999-12-31T23:59:59.999Z"])
def test_parse_record_takes_timestamps_at_the_ends_of_the_range(stamp: object) -> None:
    ms = parse_record({"timestamp": stamp}).timestamp_ms
    assert ms is not None
    assert 0 <= ms <= MAX_TIMESTAMP_MS
    assert iso_timestamp(ms).endswith("Z")


DEEP = "[" * 100_000 + "]" * 100_000

MALFORMED: list[tuple[str, object]] = [
    ("not an object", [1]),
    ("timestamp after 9999 (ms)", {"timestamp": MAX_TIMESTAMP_MS + 1}),
    ("timestamp after 9999 (ISO)", {"timestamp": "+10000-01-01T00:00:00Z"}),
    ("timestamp before 1970 (ms)", {"timestamp": -1}),
    ("timestamp before 1970 (ISO)", {"timestamp": "1969-12-31T23:59:59Z"}),
    ("timestamp not a time", {"timestamp": "yesterday"}),
    ("timestamp a float", {"timestamp": 1.5}),
    ("headers a number", {"headers": 5}),
    ("headers an object", {"headers": {"name": "h"}}),
    ("header not an object", {"headers": [5]}),
    ("header name a surrogate", {"headers": [{"name": "\ud800", "value": None}]}),
    ("header value not base64", {"headers": [{"name": "h", "value": "!!"}]}),
    ("header value not ASCII", {"headers": [{"name": "h", "value": "é"}]}),
    ("STRING data a surrogate", {"value": {"type": "STRING", "data": "a\udc00"}}),
    ("JSON data a surrogate", {"value": {"type": "JSON", "data": {"k": "\ud83d"}}}),
    ("STRING data not a string", {"value": {"type": "STRING", "data": 5}}),
    ("BINARY data not base64", {"key": {"type": "BINARY", "data": "a"}}),
    ("unknown type", {"key": {"type": "XML", "data": "a"}}),
    ("partition negative", {"partition_id": -1}),
    ("partition a string", {"partition_id": "1"}),
    ("key not an object", {"key": "k"}),
]


@pytest.mark.parametrize(("what", "document"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_parse_record_answers_400_for_malformed_input(what: str, document: object) -> None:
    with pytest.raises(RestError) as caught:
        parse_record(document)
    assert (caught.value.status, caught.value.code) == (400, ErrorCode.BAD_REQUEST), what


def test_parse_record_answers_422_for_a_schema_format() -> None:
    with pytest.raises(RestError) as caught:
        parse_record({"value": {"type": "AVRO", "data": 1}})
    assert caught.value.status == 422


def test_deeply_nested_json_is_400_not_a_recursion_error() -> None:
    with pytest.raises(RestError) as caught:
        decode_json(DEEP.encode(), "a record")
    assert caught.value.status == 400
    with pytest.raises(RestError) as caught_v2:
        parse_records(b'{"records": [{"value": ' + DEEP.encode() + b"}]}", "json", 10)
    assert caught_v2.value.status == 400


def test_v2_surrogates_and_too_many_records() -> None:
    with pytest.raises(RestError) as caught:
        parse_records(b'{"records": [{"value": "\\ud800"}]}', "json", 10)
    assert caught.value.status == 400
    with pytest.raises(RestError) as binary:
        parse_records('{"records": [{"value": "é"}]}'.encode(), "binary", 10)
    assert binary.value.status == 422
    with pytest.raises(RestError) as many:
        parse_records(b'{"records": [{}, {}, {}]}', "binary", 2)
    assert many.value.status == 413
    assert "max.records.per.request=2" in str(many.value)


# --- errors


def test_v2_record_codes_are_rest_proxys() -> None:
    retriable = rest_error_for(BrokerError("busy", retriable=True, errno=7))
    assert int(record_error_code(retriable)) == 50003
    timeout = rest_error_for(ProducerTimeoutError("no metadata"))
    assert record_error_code(timeout) == 50003
    fatal = rest_error_for(BrokerError("corrupt", retriable=False, errno=2))
    assert int(record_error_code(fatal)) == 50002
    denied = rest_error_for(TopicAuthorizationError("no", retriable=False, errno=29))
    assert record_error_code(denied) == 40301
    unknown = rest_error_for(AuthenticationError("bad password"))
    assert record_error_code(unknown) == 40101


def test_config_error_is_422_not_500() -> None:
    error = rest_error_for(ConfigError("timestamp_ms must be >= 0"))
    assert (error.status, error.code) == (422, 42201)


def test_an_error_answer_has_its_status_retry_after_and_rest_proxys_body() -> None:
    error = RestError(429, ErrorCode.TOO_MANY_REQUESTS, "full", retry_after=1)
    response = error_response(error, "application/vnd.kafka.v2+json")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == "application/vnd.kafka.v2+json"
    assert json.loads(bytes(response.body)) == {"error_code": 42901, "message": "full"}
    assert int(response.headers["content-length"]) == len(response.body)


def test_an_error_body_encodes_any_message() -> None:
    # A lone surrogate (from a JSON escape in a request) has no UTF-8 form: escaped, not a crash.
    error = RestError(400, ErrorCode.BAD_REQUEST, "topic caf\u00e9 \ud800")
    assert json.loads(error.json_body()) == error.body()


def test_the_partition_check_names_the_range() -> None:
    info = TopicInfo("t", False, (PartitionInfo(0, 1, (1,), (1,)), PartitionInfo(1, 1, (1,), (1,))))
    Gateway.check_partition(info, None)
    Gateway.check_partition(info, 1)
    for wrong in (2, -1):
        with pytest.raises(RestError) as caught:
            Gateway.check_partition(info, wrong)
        assert (caught.value.status, caught.value.code) == (404, ErrorCode.PARTITION_NOT_FOUND)
        assert "has 2 partition(s), 0 to 1" in str(caught.value)


# --- the byte budget


async def test_budget_grants_in_fifo_order_and_never_cuts_in_line() -> None:
    budget = ByteBudget(100)
    assert budget.take_nowait(90)
    first = asyncio.ensure_future(budget.take(50, 10))
    second = asyncio.ensure_future(budget.take(10, 10))
    await asyncio.sleep(0)
    assert not budget.take_nowait(5)  # a waiter is queued: no cutting in
    budget.give(40)  # 50 free: the head (50) goes; the second (10) waits behind it
    await asyncio.sleep(0)
    assert first.done()
    assert first.result() is True
    assert not second.done()
    budget.give(50)
    assert await second is True
    assert budget.held == 60  # 50 of the first, 10 of the second


async def test_budget_cancelled_waiter_leaves_and_unblocks_the_next() -> None:
    budget = ByteBudget(100)
    assert budget.take_nowait(100)
    head = asyncio.ensure_future(budget.take(80, 10))
    behind = asyncio.ensure_future(budget.take(20, 10))
    await asyncio.sleep(0)
    budget.give(30)  # 30 free: not enough for the head, which blocks the line
    await asyncio.sleep(0)
    assert not behind.done()
    head.cancel()
    assert await behind is True
    with pytest.raises(asyncio.CancelledError):
        await head
    assert budget.held == 90


async def test_budget_granted_then_cancelled_hands_the_bytes_on() -> None:
    budget = ByteBudget(10)
    assert budget.take_nowait(10)
    waiter = asyncio.ensure_future(budget.take(10, 10))
    await asyncio.sleep(0)
    budget.give(10)  # granted now; cancelled before it resumes
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.held == 0


async def test_budget_refuses_more_than_it_has() -> None:
    assert await ByteBudget(10).take(11, 10) is False


# --- the auth file


def test_auth_file_names_topics_prefixes_and_hashed_secrets(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"hidden").hexdigest()
    path = tmp_path / "auth"
    path.write_text(
        "# comment\n\nweb:plain-secret:clicks, pageviews\n"
        f"etl:sha256:{digest}:orders.*\nadmin:all-secret:*\n"
    )
    auth = AuthFile.load(str(path))
    web = auth.authenticate({"x-api-key": "plain-secret"})
    assert web.name == "web"
    assert web.may_write("clicks")
    assert not web.may_write("orders.eu")
    etl = auth.authenticate({"authorization": "Bearer hidden"})
    assert etl.may_write("orders.eu")
    assert not etl.may_write("clicks")
    admin = auth.authenticate({"authorization": "Basic YWRtaW46YWxsLXNlY3JldA=="})
    assert admin.may_write("anything")
    for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Basic !!"}):
        with pytest.raises(RestError) as caught:
            auth.authenticate(headers)
        assert caught.value.status == 401


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("just-a-name\n", "NAME:SECRET:TOPICS"),
        ("a:s1:t\na:s2:t\n", "given twice"),
        ("a:same:t\nb:same:t\n", "another name's"),
        ("a:sha256:abc:t\n", "64 hex digits"),
        ("a:s:or*ders\n", "may only end"),
        ("a:s:\n", "no topics"),
        ("# nothing\n", "no credentials"),
    ],
)
def test_auth_file_errors_name_the_line_never_the_secret(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "auth"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says) as caught:
        AuthFile.load(str(path))
    assert "s1" not in str(caught.value)
    assert "same" not in str(caught.value)


# --- settings


def test_settings_repr_never_shows_producer_properties() -> None:
    settings = ServeSettings.create(
        {
            "bootstrap.servers": "b:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl_plain_username": "u",
            "sasl_plain_password": "hunter2",
        }
    )
    assert "hunter2" not in repr(settings)
    assert settings.max_connections == 1000
    assert settings.max_records_per_request == 10_000


# --- bounded writes and the stream's unanswered bound


async def test_a_client_that_takes_no_answer_ends_the_request_and_its_other_tasks() -> None:
    from aioaccum.serve._writes import BoundedWrites

    never = asyncio.Event()
    side_task_cancelled = asyncio.Event()

    async def stalled_send(message: object) -> None:
        await never.wait()

    async def side() -> None:
        try:
            await never.wait()
        finally:
            side_task_cancelled.set()

    async def app(scope: object, receive: object, send: Any) -> None:
        reader = asyncio.ensure_future(side())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        finally:
            reader.cancel()

    bounded = BoundedWrites(app, timeout_ms=20)
    await asyncio.wait_for(bounded({"type": "http"}, None, stalled_send), 10)  # type: ignore[arg-type]
    await asyncio.wait_for(side_task_cancelled.wait(), 10)


async def test_unanswered_bounds_records_and_bytes_but_lets_one_through() -> None:
    from aioaccum.serve._v3 import _Unanswered

    unanswered = _Unanswered(records=3, size=100)
    await unanswered.add(500)  # one record always goes in, however large
    waiting = asyncio.ensure_future(unanswered.add(10))
    await asyncio.sleep(0)
    assert not waiting.done()  # 500 + 10 bytes is over 100
    unanswered.remove(500)
    await asyncio.wait_for(waiting, 10)
    await unanswered.add(10)
    await unanswered.add(10)
    full = asyncio.ensure_future(unanswered.add(1))
    await asyncio.sleep(0)
    assert not full.done()  # 3 records: the count bound
    unanswered.remove(10)
    await asyncio.wait_for(full, 10)
    assert (unanswered.records, unanswered.bytes) == (3, 21)


def test_listening_beyond_loopback_without_auth_or_tls_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from aioaccum.serve._run import _warn_if_exposed

    props = {"bootstrap.servers": "b:9092"}
    with caplog.at_level("WARNING", logger="aioaccum.serve"):
        _warn_if_exposed(ServeSettings.create(props, listen="127.0.0.1:8082"))
        _warn_if_exposed(ServeSettings.create(props, listen="localhost:8082"))
        assert not caplog.records
        _warn_if_exposed(ServeSettings.create(props, listen="0.0.0.0:8082"))
    [record] = caplog.records
    assert "auth (--auth-file) or TLS" in record.getMessage()


def test_a_budget_smaller_than_the_largest_body_is_refused() -> None:
    # Such a body could never be held: it would be answered 429, "retry", for ever.
    props = {"bootstrap.servers": "b:9092"}
    with pytest.raises(ConfigError, match=r"budget.bytes=1000 is less than max.body.bytes=2000"):
        ServeSettings.create(props, body_budget_bytes=1000, max_body_bytes=2000)
    assert ServeSettings.create(props, body_budget_bytes=2000, max_body_bytes=2000)
