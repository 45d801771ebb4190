"""``aioaccum serve`` over real HTTP against the session's cluster: REST Proxy's v2 and v3
produce API, REST Proxy's own curl examples, errors, health and metrics.

Each test starts the server as a subprocess on a free 127.0.0.1 port, talks to it with aiohttp
or curl, and reads the records back with aiokafka: every accepted record must be in Kafka once,
at the partition and offset its answer gave.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ._serve import by_position, metric_samples, read_positions, read_topic, serving

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

BINARY = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
CURL_TIMEOUT_S = 60.0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def post_json(
    session: aiohttp.ClientSession, url: str, body: object, content_type: str
) -> tuple[int, Any, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url, data=data, headers={"Content-Type": content_type}) as response:
        text = (await response.text()).strip()
        # The first answer object (a v3 stream has one per record).
        answer = json.JSONDecoder().raw_decode(text)[0] if text else None
        return response.status, answer, response.headers


async def test_v2_binary_and_json_records_land_once_at_the_reported_offsets(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    binary: list[dict[str, Any]] = [
        {"key": b64(b"k%d" % i), "value": b64(b"binary-%d" % i)} for i in range(20)
    ] + [{"value": b64(b"to-p1"), "partition": 1}, {"value": None}]
    json_records = [{"key": {"id": i}, "value": {"n": i, "text": "é"}} for i in range(10)]
    async with (
        serving(tmp_path, kafka_bootstrap) as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.base_url}/topics/{topic}"
        status, answer, headers = await post_json(session, url, {"records": binary}, BINARY)
        assert status == 200, answer
        assert headers["Content-Type"] == "application/vnd.kafka.v2+json"
        assert (answer["key_schema_id"], answer["value_schema_id"]) == (None, None)
        binary_offsets = answer["offsets"]
        json_status, json_answer, _ = await post_json(
            session, url, {"records": json_records}, JSON_V2
        )
        assert json_status == 200, json_answer
        path_status, path_answer, _ = await post_json(
            session,
            f"{url}/partitions/2",
            {"records": [{"value": b64(b"to-p2-%d" % i)} for i in range(5)]},
            BINARY,
        )
        assert path_status == 200, path_answer
        await server.stop()
    expected: list[tuple[dict[str, Any], bytes | None, bytes | None]] = []
    for entry, record in zip(binary_offsets, binary, strict=True):
        key = base64.b64decode(record["key"]) if "key" in record else None
        value = None if record["value"] is None else base64.b64decode(record["value"])
        expected.append((entry, key, value))
    for entry, record in zip(json_answer["offsets"], json_records, strict=True):
        key = json.dumps(record["key"], separators=(",", ":")).encode()
        value = json.dumps(record["value"], separators=(",", ":"), ensure_ascii=False).encode()
        expected.append((entry, key, value))
    for i, entry in enumerate(path_answer["offsets"]):
        assert entry["partition"] == 2
        expected.append((entry, None, b"to-p2-%d" % i))
    records = by_position(await read_topic(kafka_bootstrap, topic, len(expected)))
    assert len(records) == len(expected)
    for entry, key, value in expected:
        assert (entry["error_code"], entry["error"]) == (None, None), entry
        record = records[(entry["partition"], entry["offset"])]
        assert (record.key, record.value) == (key, value)
    assert binary_offsets[20]["partition"] == 1


async def test_v3_records_with_types_headers_partition_and_timestamp(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # One record carries a 2021 timestamp: under the broker's default 7-day retention.ms, a
    # retention check between the write and the read deletes it, so this topic keeps everything.
    topic = await topic_factory(partitions=3, configs={"retention.ms": "-1"})
    requests: list[dict[str, Any]] = [
        {
            "key": {"type": "BINARY", "data": b64(b"\x00bin")},
            "value": {"type": "JSON", "data": {"a": [1, 2]}},
        },
        {"key": {"type": "STRING", "data": "skey"}, "value": {"type": "STRING", "data": "héllo"}},
        {
            "partition_id": 2,
            "headers": [{"name": "h1", "value": b64(b"v1")}, {"name": "h2", "value": None}],
            "value": {"type": "BINARY", "data": b64(b"\xff\x00")},
            "timestamp": "2021-02-05T19:14:42.123Z",
        },
        {"value": {"type": "JSON", "data": None}},
    ]  # fmt: skip
    expected = [
        (b"\x00bin", b'{"a":[1,2]}', []),
        (b"skey", "héllo".encode(), []),
        (None, b"\xff\x00", [("h1", b"v1"), ("h2", None)]),
        (None, None, []),
    ]
    async with (
        serving(tmp_path, kafka_bootstrap) as server,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"{server.base_url}/v3/clusters") as response:
            assert response.status == 200
            clusters = await response.json()
        [cluster] = clusters["data"]
        cluster_id = cluster["cluster_id"]
        async with session.get(f"{server.base_url}/v3/clusters/{cluster_id}") as response:
            assert (await response.json())["cluster_id"] == cluster_id
        async with session.get(f"{server.base_url}/v3/clusters/not-this-one") as response:
            assert response.status == 404
        url = f"{server.base_url}/v3/clusters/{cluster_id}/topics/{topic}/records"
        answers = [await post_json(session, url, body, "application/json") for body in requests]
        await server.stop()
    assert [status for status, _, _ in answers] == [200] * len(requests), answers
    records = by_position(await read_topic(kafka_bootstrap, topic, len(requests)))
    assert len(records) == len(requests)
    for (status, answer, _), (key, value, headers), request in zip(
        answers, expected, requests, strict=True
    ):
        assert status == 200, answer
        assert answer["error_code"] == 200
        assert (answer["cluster_id"], answer["topic_name"]) == (cluster_id, topic)
        record = records[(answer["partition_id"], answer["offset"])]
        assert (record.key, record.value, list(record.headers)) == (key, value, headers)
        for part in ("key", "value"):
            if part in request:
                size = len(key or b"") if part == "key" else len(value or b"")
                assert answer[part] == {"type": request[part]["type"], "size": size}
    assert answers[2][1]["partition_id"] == 2
    assert answers[2][1]["timestamp"] == "2021-02-05T19:14:42.123Z"
    assert records[(2, answers[2][1]["offset"])].timestamp == 1612552482123


async def test_v3_stream_answers_every_record_in_order_while_more_are_being_sent(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    total, wave = 2000, 200
    answers: list[dict[str, Any]] = []
    progress = asyncio.Condition()

    def record(i: int) -> bytes:
        document = {
            "key": {"type": "STRING", "data": f"k{i % 13}"},
            "value": {"type": "STRING", "data": f"rec-{i}"},
        }
        # Newline separated, and every fifth one glued to the next with no separator at all.
        return json.dumps(document).encode() + (b"" if i % 5 == 0 else b"\n")

    async def body() -> Any:
        for start in range(0, total, wave):
            # A wave goes only once every earlier record was answered: answers must come back
            # while the request is still open.
            async with progress:
                await asyncio.wait_for(
                    progress.wait_for(lambda start=start: len(answers) >= start),  # type: ignore[misc]
                    60,
                )
            yield b"".join(record(i) for i in range(start, start + wave))

    async with (
        serving(tmp_path, kafka_bootstrap) as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.base_url}/v3/clusters/any/topics/{topic}/records"
        async with session.post(
            url, data=body(), headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 200
            async for line in response.content:
                if line.strip():
                    async with progress:
                        answers.append(json.loads(line))
                        progress.notify_all()
        await server.stop()
    assert len(answers) == total
    assert all(answer["error_code"] == 200 for answer in answers), answers[:3]
    records = by_position(await read_topic(kafka_bootstrap, topic, total))
    assert len(records) == total
    for i, answer in enumerate(answers):
        found = records[(answer["partition_id"], answer["offset"])]
        assert found.value == b"rec-%d" % i


async def test_v3_stream_ends_after_its_maximum_duration(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    still_sending = asyncio.Event()

    async def body() -> Any:
        yield b'{"value":{"type":"STRING","data":"in-time"}}\n'
        # The client would go on: only the server's bound ends the stream.
        await asyncio.wait_for(still_sending.wait(), 60)

    async with (
        serving(tmp_path, kafka_bootstrap, "--stream-max-duration-ms", "1500") as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.base_url}/v3/clusters/any/topics/{topic}/records"
        async with session.post(
            url, data=body(), headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 200
            lines = await asyncio.wait_for(response.content.read(), 30)
        still_sending.set()
        await server.stop()
    answers = [json.loads(line) for line in lines.splitlines() if line.strip()]
    assert [a["error_code"] for a in answers] == [200, 408], answers
    assert "stream.max.duration.ms=1500" in answers[1]["message"]


# REST Proxy's documented examples, run as written but for host and port (localhost:8082).
# https://docs.confluent.io/platform/current/kafka-rest/quickstart.html
QUICKSTART_V2 = """curl -X POST -H "Content-Type: application/vnd.kafka.json.v2+json" \\
      --data '{"records":[{"value":{"foo":"bar"}}]}' "http://localhost:8082/topics/jsontest\""""
# https://docs.confluent.io/legacy/platform/5.1.4/kafka-rest/quickstart.html
QUICKSTART_V2_ACCEPT = """curl -X POST -H "Content-Type: application/vnd.kafka.json.v2+json" \\
      -H "Accept: application/vnd.kafka.v2+json" \\
      --data '{"records":[{"value":{"foo":"bar"}}]}' "http://localhost:8082/topics/jsontest\""""
# https://github.com/confluentinc/kafka-rest/blob/master/README.md ("Quickstart (v3 API)")
README_CLUSTERS = "curl http://localhost:8082/v3/clusters"
README_V3_JSON = """curl -X POST -H "Content-Type: application/json" \\
       -d '{"value":{"type":"JSON","data":{"name":"testUser"}}}' \\
       http://localhost:8082/v3/clusters/xFhUvurESIeeCI87SXWR-Q/topics/jsontest/records"""
README_V3_TWO = """curl -X POST -H "Content-Type: application/json" \\
       -d '{"value":{"type":"JSON","data":"ONE"}} {"value":{"type":"JSON","data":"TWO"}}' \\
       http://localhost:8082/v3/clusters/xFhUvurESIeeCI87SXWR-Q/topics/jsontest/records"""
README_V3_STRING = """curl -X POST -H "Content-Type: application/json" \\
       -d '{"value":{"type":"STRING","data":"REST"}}' \\
       http://localhost:8082/v3/clusters/xFhUvurESIeeCI87SXWR-Q/topics/jsontest/records"""


async def run_curl(example: str, base_url: str) -> list[dict[str, Any]]:
    """Run a documented example with its host and port replaced; its answers, one per object."""
    command = example.replace("http://localhost:8082", base_url)
    assert command != example or "localhost:8082" not in example
    completed = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", command + " --silent --show-error --fail-with-body"],
        capture_output=True,
        text=True,
        timeout=CURL_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, (shlex.quote(command), completed.stdout, completed.stderr)
    decoder = json.JSONDecoder()
    text, answers, position = completed.stdout, [], 0
    while position < len(text.rstrip()):
        while text[position].isspace():
            position += 1
        answer, position = decoder.raw_decode(text, position)
        answers.append(answer)
    return answers


async def test_rest_proxy_documented_curl_examples_run_unchanged(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        # The examples name "jsontest": created here (already there from an earlier run is fine).
        await admin.create_topics([NewTopic("jsontest", 1, 3)])
    finally:
        await admin.close()
    async with serving(tmp_path, kafka_bootstrap) as server:
        [clusters] = await run_curl(README_CLUSTERS, server.base_url)
        v2 = await run_curl(QUICKSTART_V2, server.base_url)
        v2_accept = await run_curl(QUICKSTART_V2_ACCEPT, server.base_url)
        v3_json = await run_curl(README_V3_JSON, server.base_url)
        v3_two = await run_curl(README_V3_TWO, server.base_url)
        v3_string = await run_curl(README_V3_STRING, server.base_url)
        await server.stop()
    assert clusters["kind"] == "KafkaClusterList"
    produced: list[tuple[int, int, bytes]] = []
    for [answer] in (v2, v2_accept):
        [entry] = answer["offsets"]
        assert entry["error_code"] is None
        produced.append((entry["partition"], entry["offset"], b'{"foo":"bar"}'))
    values = [b'{"name":"testUser"}', b'"ONE"', b'"TWO"', b"REST"]
    for answer, value in zip([*v3_json, *v3_two, *v3_string], values, strict=True):
        assert answer["error_code"] == 200, answer
        assert answer["cluster_id"] == "xFhUvurESIeeCI87SXWR-Q"
        assert answer["value"]["size"] == len(value)
        produced.append((answer["partition_id"], answer["offset"], value))
    # "jsontest" is shared by every run: read until each position answered is found.
    records = await read_positions(kafka_bootstrap, "jsontest", {(p, o) for p, o, _ in produced})
    for partition, offset, value in produced:
        assert records[(partition, offset)].value == value


async def raw_request(port: int, head: bytes) -> bytes:
    """Send only a request's head; return the first line of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()


async def test_bad_requests_get_rest_proxy_error_bodies(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    props = {"max.request.size": "20000"}
    async with (
        serving(tmp_path, kafka_bootstrap, "--max-body-bytes", "100000", producer_props=props)
        as server,
        aiohttp.ClientSession() as session,
    ):
        base = server.base_url
        v2, v3 = f"{base}/topics/{topic}", f"{base}/v3/clusters/c/topics/{topic}/records"
        checks: list[tuple[str, object, str, int, int]] = [
            (v2, b"{not json", BINARY, 400, 400),
            (v2, {"records": "nope"}, BINARY, 422, 42206),
            (v2, {"records": [{"value": "***"}]}, BINARY, 422, 42206),
            (v2, {"records": [{"value": 5}]}, BINARY, 422, 42206),
            (v2, {"records": [{"value": b64(b"x"), "partition": 9}]}, BINARY, 404, 40402),
            (v2, {"records": [{"value": {}}]}, "application/vnd.kafka.avro.v2+json", 415, 415),
            (v2, {"records": [{"value": "x"}]}, "text/plain", 415, 415),
            (v2, {"records": [{"value": b64(b"x" * 30000)}]}, BINARY, 413, 413),
            (f"{base}/topics/no-{topic}", {"records": [{"value": None}]}, BINARY, 404, 40401),
            (v3, {"value": {"type": "BINARY", "data": "!!"}}, "application/json", 400, 400),
            (v3, {"value": {"type": "AVRO", "data": 1}}, "application/json", 422, 422),
            (v3, {"value": {"data": 1}}, "application/json", 422, 422),
            (v3, {"value": {"type": "STRING", "data": "x" * 30000}}, "application/json", 413, 413),
            (v3, {"partition_id": 7, "value": None}, "application/json", 404, 40402),
            (v3, b"", "application/json", 422, 42206),
            (v3, {"value": None, "timestamp": 253402300800000}, "application/json", 400, 400),
            (v3, {"value": None, "timestamp": -5}, "application/json", 400, 400),
            (v3, {"value": None, "headers": 5}, "application/json", 400, 400),
            (v3, b'{"value":{"type":"STRING","data":"\\ud800"}}', "application/json", 400, 400),
            (v3, b'{"value":{"type":"JSON","data":' + b"[" * 5000 + b"]" * 5000 + b"}}",
             "application/json", 400, 400),
            (v3.replace(topic, f"no-{topic}"), {"value": None}, "application/json", 404, 404),
        ]  # fmt: skip
        for url, body, content_type, status, code in checks:
            got_status, answer, _ = await post_json(session, url, body, content_type)
            assert (got_status, answer["error_code"]) == (status, code), (url, body, answer)
            assert answer["message"], answer
        # A stream whose second record is bad: that record's answer says so, the others pass.
        async with session.post(
            v3,
            data=b'{"value":null} {"value":{"type":"BINARY","data":"!!"}} {}',
            headers={"Content-Type": "application/json"},
        ) as response:
            lines = [json.loads(line) for line in (await response.text()).splitlines() if line]
        assert [line["error_code"] for line in lines] == [200, 400, 200]
        async with session.get(f"{base}/no/such/route") as response:
            assert response.status == 404
            assert (await response.json())["error_code"] == 404
        async with session.delete(v2) as response:
            assert response.status == 405
            assert (await response.json())["error_code"] == 405
        # Refused on its declared length, before a byte of the body is sent.
        port = int(base.rsplit(":", 1)[1])
        head = (
            f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
            "Content-Length: 5000000\r\n\r\n"
        ).encode()
        assert (await raw_request(port, head)).startswith(b"HTTP/1.1 413")
        await server.stop()


async def test_health_readiness_and_prometheus_metrics(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    records = 37
    async with (
        serving(tmp_path, kafka_bootstrap, producer_props={"client.id": "serve-metrics"}) as server,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"{server.base_url}/healthz") as response:
            assert response.status == 200
            assert (await response.json())["status"] == "ok"
        async with session.get(f"{server.base_url}/readyz") as response:
            assert response.status == 200
            assert len((await response.json())["brokers"]) >= 1
        body = {"records": [{"value": b64(b"m%d" % i)} for i in range(records - 7)]}
        status, _, _ = await post_json(session, f"{server.base_url}/topics/{topic}", body, BINARY)
        assert status == 200
        stream = b"".join(b'{"value":{"type":"STRING","data":"s"}}' for _ in range(7))
        status, _, _ = await post_json(
            session,
            f"{server.base_url}/v3/clusters/c/topics/{topic}/records",
            stream,
            "application/json",
        )
        assert status == 200
        # The client has the last answer's bytes a moment before the server's handler ends and
        # counts its request out; the scrape waits for that (bounded), not for anything else.
        async with asyncio.timeout(10):
            while True:
                samples = await metric_samples(session, server.base_url)
                if samples["aioaccum_serve_requests_in_flight"] == 0:
                    break
                await asyncio.sleep(0.05)
        await server.stop()
    assert samples["kafka_producer_record_send_total"] == records
    assert samples["kafka_producer_topic_record_send_total"] == records
    assert samples["kafka_producer_record_error_total"] == 0
    assert samples["aioaccum_serve_records_accepted_total"] == records
    assert samples["aioaccum_serve_requests_in_flight"] == 0
