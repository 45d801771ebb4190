"""The example events service, run by uvicorn as a real server process and driven over HTTP.

Each test starts ``examples/events_service.py`` on a free 127.0.0.1 port against the session's
cluster, talks to it with aiohttp's client, and reads the records back with aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import psutil
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from ._servers import REPO_ROOT, ServerProcess, Service, running

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
SERVER_STOP_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 60.0
CONFIG_COMMAND_TIMEOUT_S = 120.0


def events_command(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "--factory", "examples.events_service:create_app",
        "--app-dir", str(REPO_ROOT), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "info", "--no-access-log", "--backlog", "4096",
        "--timeout-keep-alive", "60", "--timeout-graceful-shutdown", "30",
    ]  # fmt: skip


EVENTS_SERVICE = Service(
    command=events_command,
    # uvicorn binds its socket only after the lifespan's startup (the producer) completed.
    ready_path="/metrics",
    metrics_path="/metrics.json",
    stop_timeout=SERVER_STOP_TIMEOUT_S,
    shutdown_log=lambda sig: ["Application shutdown complete."],
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    exits_by_signal=True,
)


def events_server(
    tmp_path: Path, bootstrap: str, topic: str, props: Mapping[str, str], **env: str
) -> contextlib.AbstractAsyncContextManager[ServerProcess]:
    """One uvicorn process serving the example app."""
    return running(EVENTS_SERVICE, tmp_path, bootstrap, topic, props, **env)


async def consume_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Every record of ``topic`` (waiting until ``expected`` arrived, plus one short poll)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(records) < expected and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            records.extend(batch)
        return records
    finally:
        await consumer.stop()


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes
) -> tuple[int, dict[str, Any], Mapping[str, str], float]:
    """POST; returns (status, JSON body, headers, seconds from sending to the answer)."""
    started = time.monotonic()
    async with session.post(url, data=body) as response:
        payload: dict[str, Any] = await response.json()
        return response.status, payload, response.headers, time.monotonic() - started


# A linger far beyond the test and batches far larger than its data: nothing is sent until
# the shutdown flushes it.
HELD_UNTIL_SHUTDOWN = {
    "linger.ms": "600000",
    "delivery.timeout.ms": "900000",
    "batch.size": "1048576",
    "compression.type": "lz4",
}


async def accept_then_stop(
    server_context: contextlib.AbstractAsyncContextManager[ServerProcess],
    new_session: Callable[[], aiohttp.ClientSession],
    requests: Sequence[tuple[str, bytes]],
    sig: int,
) -> ServerProcess:
    """Start the server, POST every ``(path, body)`` at once, see each answered 202 with
    nothing sent yet, then stop the server with ``sig``.

    Returns:
        The stopped server, for its log.
    """
    async with server_context as server, new_session() as session:
        answers = await asyncio.gather(
            *(post(session, f"{server.base_url}{path}", body) for path, body in requests)
        )
        assert [status for status, *_ in answers] == [202] * len(requests)
        before = await server.metrics(session)
        assert before["record-send-total"] == 0, "records were sent before the shutdown"
        await server.stop(sig)
    return server


async def test_events_land_in_kafka_with_the_offsets_the_service_reported(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str
) -> None:
    async with (
        events_server(tmp_path, kafka_bootstrap, new_topic, {"linger.ms": "5"}) as server,
        aiohttp.ClientSession() as session,
    ):
        acked = await asyncio.gather(
            *(
                post(session, f"{server.base_url}/events?wait=true&key=k{i % 7}", b"acked-%d" % i)
                for i in range(60)
            )
        )
        accepted = await asyncio.gather(
            *(post(session, f"{server.base_url}/events", b"fire-%d" % i) for i in range(60))
        )
        await server.stop()
    assert [status for status, *_ in acked] == [200] * 60, acked[:3]
    assert [status for status, *_ in accepted] == [202] * 60, accepted[:3]
    records = await consume_all(kafka_bootstrap, new_topic, 120)
    by_position = {(r.partition, r.offset): r for r in records}
    assert len(records) == len(by_position) == 120
    for i, (_, payload, _, _) in enumerate(acked):
        assert payload["topic"] == new_topic
        record = by_position[(payload["partition"], payload["offset"])]
        assert (record.key, record.value) == (b"k%d" % (i % 7), b"acked-%d" % i)
    assert sorted(r.value for r in records if r.value.startswith(b"fire-")) == sorted(
        b"fire-%d" % i for i in range(60)
    )


async def test_metrics_endpoint_counts_the_records_sent_for_prometheus(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str
) -> None:
    client_id = f"aioaccum-web-{uuid.uuid4().hex[:8]}"
    props = {"linger.ms": "5", "client.id": client_id}
    async with (
        events_server(tmp_path, kafka_bootstrap, new_topic, props) as server,
        aiohttp.ClientSession() as session,
    ):
        answers = await asyncio.gather(
            *(post(session, f"{server.base_url}/events?wait=true", b"m-%d" % i) for i in range(25))
        )
        async with session.get(f"{server.base_url}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
        await server.stop()
    assert [status for status, *_ in answers] == [200] * 25
    families = {family.name: family for family in text_string_to_metric_families(text)}
    sent = families["kafka_producer_record_send"]
    assert sent.type == "counter"
    assert [(s.name, s.labels, s.value) for s in sent.samples] == [
        ("kafka_producer_record_send_total", {"client_id": client_id}, 25.0)
    ]
    per_topic = families["kafka_producer_topic_record_send"]
    assert [(s.labels, s.value) for s in per_topic.samples] == [
        ({"client_id": client_id, "topic": new_topic}, 25.0)
    ]
    [errors] = families["kafka_producer_record_error"].samples
    assert errors.value == 0
    [latency] = families["kafka_producer_request_latency_avg"].samples
    assert latency.value > 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stopping_the_server_flushes_every_accepted_event(
    tmp_path: Path, kafka_bootstrap: str, new_topic: str, sig: int
) -> None:
    events = 400
    await accept_then_stop(
        events_server(tmp_path, kafka_bootstrap, new_topic, HELD_UNTIL_SHUTDOWN),
        aiohttp.ClientSession,
        [("/events", b"event-%d" % i) for i in range(events)],
        sig,
    )
    values = sorted(r.value for r in await consume_all(kafka_bootstrap, new_topic, events))
    assert values == sorted(b"event-%d" % i for i in range(events))


# --- overload: a throttled broker, a small buffer, 2,000 concurrent requests -----------------


def config_command(bootstrap: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(KAFKA_SCRIPT), "configs",
         "--bootstrap-server", bootstrap.split(",")[0], "--entity-type", "clients", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(command: subprocess.Popen[str]) -> None:
    out, _ = command.communicate(timeout=CONFIG_COMMAND_TIMEOUT_S)
    assert command.returncode == 0, out


class RssSampler:
    """Peak resident memory of a process, sampled every few milliseconds in a thread."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.peak = 0
        self._running = False

    def rss(self) -> int:
        value: int = self._process.memory_info().rss
        return value

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[None]:
        self.peak = self.rss()
        self._running = True

        def sample() -> None:
            while self._running:
                self.peak = max(self.peak, self.rss())
                time.sleep(0.005)

        thread = asyncio.create_task(asyncio.to_thread(sample))
        try:
            yield
        finally:
            self._running = False
            await thread
            self.peak = max(self.peak, self.rss())


async def test_overload_waits_max_block_then_answers_503_with_bounded_memory(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    concurrent = 2000
    body = os.urandom(32 * 1024)
    max_block_ms = 2000
    buffer_memory = 256 * 1024
    client_id = f"aioaccum-web-{uuid.uuid4().hex[:8]}"
    props = {
        "client.id": client_id,
        "buffer.memory": str(buffer_memory),
        "max.block.ms": str(max_block_ms),
        "linger.ms": "5",
        "acks": "1",
    }
    env = {"EVENTS_CLOSE_TIMEOUT_S": "5"}
    # A Kafka client quota slows the brokers down for this server's client id only. The JVM
    # tool takes seconds to start, so it runs while the server starts.
    alter = ["--alter", "--entity-name", client_id]
    add_quota = config_command(kafka_bootstrap, *alter, "--add-config", "producer_byte_rate=32768")
    remove_quota: subprocess.Popen[str] | None = None
    try:
        async with (
            events_server(tmp_path, kafka_bootstrap, topic, props, **env) as server,
            # One connection per request, as from 2,000 separate clients.
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True)
            ) as session,
        ):
            url = f"{server.base_url}/events"
            # Warm up: the topic's metadata, the connections, the allocator's arenas.
            for _ in range(3):
                assert (await post(session, url, body))[0] == 202
            await asyncio.to_thread(finish, add_quota)
            sampler = RssSampler(server.process.pid)
            baseline = sampler.rss()
            peaks: list[int] = []
            waves: list[list[tuple[int, dict[str, Any], Mapping[str, str], float]]] = []
            durations: list[float] = []
            for _ in range(2):
                started = time.monotonic()
                async with sampler.sampling():
                    waves.append(
                        await asyncio.gather(*(post(session, url, body) for _ in range(concurrent)))
                    )
                durations.append(time.monotonic() - started)
                peaks.append(sampler.peak)
            remove_quota = config_command(
                kafka_bootstrap, *alter, "--delete-config", "producer_byte_rate"
            )
            after = await server.metrics(session)
            await server.stop()
    finally:
        if add_quota.returncode is None:
            await asyncio.to_thread(add_quota.communicate)
        if remove_quota is not None:
            await asyncio.to_thread(finish, remove_quota)

    answers = [answer for wave in waves for answer in wave]
    statuses = [status for status, *_ in answers]
    rejected = [a for a in answers if a[0] == 503]
    print(
        f"\n{concurrent} concurrent requests x 2 waves, {len(body)} B bodies, "
        f"buffer_memory={buffer_memory}, max_block_ms={max_block_ms}: "
        f"{statuses.count(202)} accepted, {len(rejected)} answered 503; "
        f"waves took {', '.join(f'{d:.1f}s' for d in durations)}; server RSS baseline "
        f"{baseline / 2**20:.1f} MiB, peaks {', '.join(f'{p / 2**20:.1f}' for p in peaks)} MiB"
    )
    assert set(statuses) <= {202, 503}, sorted(set(statuses))
    assert statuses.count(202) > 0
    assert len(rejected) > concurrent, "the throttled broker should have left most waiting"
    for _, payload, headers, latency in rejected:
        assert payload["error"] == "BufferExhaustedError"
        assert f"{max_block_ms} ms" in payload["message"]
        assert headers["Retry-After"] == "1"
        # The server received the request after we sent it, then waited max_block_ms.
        assert latency >= max_block_ms / 1000
    # Nobody still waits once the answers are in, and every 503 was one pool timeout.
    assert after["waiting-threads"] == 0
    assert after["buffer-exhausted-total"] >= len(rejected)
    # At its peak a wave holds its request bodies (read in chunks, then joined: up to twice),
    # a connection's worth of objects each, and the buffer. Nothing carries over from one wave
    # to the next: an unbounded buffer would still hold the first wave's 64 MiB, where the
    # allocator's fragmentation adds 15 to 30 MiB.
    wave_bytes = concurrent * len(body)
    assert peaks[0] - baseline < concurrent * (2 * len(body) + 64 * 1024) + buffer_memory
    assert peaks[1] - peaks[0] < wave_bytes * 3 // 4
