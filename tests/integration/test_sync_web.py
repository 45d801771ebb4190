"""The sync example service, served by waitress as a real server process and driven over HTTP.

Each test starts ``examples/sync_service.py`` on a free 127.0.0.1 port against the session's
cluster, sends it concurrent requests with aiohttp (so that waitress's threads share its one
SyncProducer), and reads the records back with aiokafka.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from ._servers import REPO_ROOT, ServerProcess, Service, running
from .test_web import HELD_UNTIL_SHUTDOWN, accept_then_stop, consume_all, post

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

SERVICE = REPO_ROOT / "examples" / "sync_service.py"
# waitress gives its threads 5 s, then the flush has EVENTS_CLOSE_TIMEOUT_S (set below).
CLOSE_TIMEOUT_S = 30
SERVER_STOP_TIMEOUT_S = CLOSE_TIMEOUT_S + 30.0
REQUEST_THREADS = 8
# More connections than request threads, so that requests queue up in waitress.
CONNECTIONS = 48


def sync_command(port: int) -> list[str]:
    return [
        sys.executable, str(SERVICE), "--host", "127.0.0.1", "--port", str(port),
        "--threads", str(REQUEST_THREADS),
    ]  # fmt: skip


SYNC_SERVICE = Service(
    command=sync_command,
    # The service creates its producer before it listens.
    ready_path="/health",
    ready_body={"status": "ok"},
    # It must flush, close the producer and exit with 0 in time.
    stop_timeout=SERVER_STOP_TIMEOUT_S,
    shutdown_log=lambda sig: [f"{sig.name}: stopping the server", "producer closed:"],
    env={"EVENTS_CLOSE_TIMEOUT_S": str(CLOSE_TIMEOUT_S)},
)


def sync_server(
    tmp_path: Path, bootstrap: str, topic: str, props: Mapping[str, str], **env: str
) -> contextlib.AbstractAsyncContextManager[ServerProcess]:
    """One ``python examples/sync_service.py`` process."""
    return running(SYNC_SERVICE, tmp_path, bootstrap, topic, props, **env)


def client_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS))


async def test_concurrent_requests_land_once_with_the_offsets_the_service_reported(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str
) -> None:
    count = 200
    async with (
        sync_server(tmp_path, kafka_bootstrap, new_topic, {"linger.ms": "5"}) as server,
        client_session() as session,
    ):
        url = f"{server.base_url}/events"
        # Acknowledged and fire-and-forget requests interleaved, all in flight at once.
        answers = await asyncio.gather(
            *(
                request
                for i in range(count)
                for request in (
                    post(session, f"{url}?wait=true&key=k{i % 7}", b"acked-%d" % i),
                    post(session, f"{url}?key=f{i % 5}", b"fire-%d" % i),
                )
            )
        )
        await server.stop()
    acked, accepted = answers[0::2], answers[1::2]
    assert [status for status, *_ in acked] == [200] * count, acked[:3]
    assert [status for status, *_ in accepted] == [202] * count, accepted[:3]
    assert all(payload == {"status": "accepted", "topic": new_topic} for _, payload, *_ in accepted)

    records = await consume_all(kafka_bootstrap, new_topic, 2 * count)
    expected = collections.Counter(
        pair
        for i in range(count)
        for pair in ((b"k%d" % (i % 7), b"acked-%d" % i), (b"f%d" % (i % 5), b"fire-%d" % i))
    )
    assert collections.Counter((r.key, r.value) for r in records) == expected
    by_position = {(r.partition, r.offset): r for r in records}
    assert len(by_position) == 2 * count
    for i, (_, payload, _, _) in enumerate(acked):
        assert payload["topic"] == new_topic
        record = by_position[(payload["partition"], payload["offset"])]
        assert (record.key, record.value) == (b"k%d" % (i % 7), b"acked-%d" % i)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stopping_the_server_flushes_every_accepted_event(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str, sig: int
) -> None:
    events = 300
    server = await accept_then_stop(
        sync_server(tmp_path, kafka_bootstrap, new_topic, HELD_UNTIL_SHUTDOWN),
        client_session,
        [(f"/events?key=e{i % 11}", b"event-%d" % i) for i in range(events)],
        sig,
    )
    assert f"producer closed: {events} record(s) sent, 0 failed" in server.log()
    records = await consume_all(kafka_bootstrap, new_topic, events)
    assert collections.Counter((r.key, r.value) for r in records) == collections.Counter(
        (b"e%d" % (i % 11), b"event-%d" % i) for i in range(events)
    )


async def test_an_ack_slower_than_the_timeout_is_a_504_and_the_record_still_arrives(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str
) -> None:
    props = {"linger.ms": "600000", "delivery.timeout.ms": "900000"}
    async with (
        sync_server(
            tmp_path, kafka_bootstrap, new_topic, props, EVENTS_ACK_TIMEOUT_S="0.5"
        ) as server,
        client_session() as session,
    ):
        status, payload, headers, latency = await post(
            session, f"{server.base_url}/events?wait=true&key=slow", b"late"
        )
        await server.stop()
    assert status == 504, payload
    assert payload["error"] == "AckTimeout"
    assert "may still be delivered" in payload["message"]
    # Retrying could write the record twice.
    assert "Retry-After" not in headers
    assert latency >= 0.5
    records = await consume_all(kafka_bootstrap, new_topic, 1)
    assert [(r.key, r.value) for r in records] == [(b"slow", b"late")]


async def test_bad_input_is_a_json_error_and_writes_nothing(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    props = {"linger.ms": "5", "max.request.size": "4096"}
    async with (
        sync_server(tmp_path, kafka_bootstrap, topic, props) as server,
        client_session() as session,
    ):
        url = f"{server.base_url}/events?key=k"
        empty = await post(session, url, b"")
        bad_flag = await post(session, f"{url}&wait=maybe", b"body")
        too_large = await post(session, url, b"x" * 8192)
        async with session.get(url) as response:
            wrong_method: tuple[int, dict[str, Any]] = (response.status, await response.json())
        # Same key, one partition: had any request above been sent, this one would not be
        # the partition's first record.
        good = await post(session, f"{url}&wait=true", b"good")
        await server.stop()

    assert empty[:2] == (
        400,
        {
            "error": "BadRequest",
            "message": "the request body is empty: POST the event's bytes as the body",
        },
    )
    assert bad_flag[0] == 400
    assert bad_flag[1]["error"] == "BadRequest"
    assert "?wait='maybe' is not a yes/no value" in bad_flag[1]["message"]
    assert too_large[0] == 413
    assert too_large[1]["error"] == "RecordTooLargeError"
    assert "8192 bytes" in too_large[1]["message"]
    assert wrong_method[0] == 405
    assert wrong_method[1]["error"] == "MethodNotAllowed"
    assert good[:2] == (200, {"topic": topic, "partition": 0, "offset": 0})
    records = await consume_all(kafka_bootstrap, topic, 1)
    assert [(r.key, r.value) for r in records] == [(b"k", b"good")]
