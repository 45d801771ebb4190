"""``aioaccum serve`` under load and faults: a full buffer (429), bounded memory, brokers out of
reach (503, /readyz), a broker killed with ``kill -9``, SIGTERM with requests in flight, and
several worker processes.

Brokers are taken out of the server's reach with the loopback fault proxy (tests/faults/proxy.py):
the server bootstraps at the proxy's ports, so every connection it opens goes through it, while
the test reads back directly from the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import aiohttp
import pytest
from faults import cluster
from faults.proxy import Fault, FaultProxy

from ._serve import by_position, metric_samples, read_topic, serving
from .test_web import RssSampler

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

BINARY = "application/vnd.kafka.binary.v2+json"
WAIT_S = 60.0


@pytest.fixture
async def proxy(kafka_bootstrap: str) -> AsyncIterator[FaultProxy]:
    await cluster.check_managed(kafka_bootstrap)
    async with FaultProxy.for_cluster(await cluster.cluster_ports()) as running:
        yield running


def v2_body(*values: bytes) -> bytes:
    records = [{"value": base64.b64encode(v).decode()} for v in values]
    return json.dumps({"records": records}).encode()


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, content_type: str = BINARY
) -> tuple[int, dict[str, Any], dict[str, str], float]:
    """POST; (status, first JSON answer, headers, seconds taken)."""
    started = time.monotonic()
    async with session.post(url, data=body, headers={"Content-Type": content_type}) as response:
        text = (await response.text()).strip()
        answer = json.JSONDecoder().raw_decode(text)[0] if text else {}
        return response.status, answer, dict(response.headers), time.monotonic() - started


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)


async def test_full_buffer_answers_429_with_retry_after_and_memory_stays_bounded(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory, proxy: FaultProxy
) -> None:
    topic = await topic_factory(partitions=3)
    buffer_memory, value_size, concurrent = 256 * 1024, 16 * 1024, 400
    # The burst (400 bodies of 22 KB, 8.8 MB) is far over the bodies' budget. The budget also
    # holds what a body's parse makes (its text and records, about three times the body), and
    # it must let through many more records than the buffer holds, or the buffer never fills.
    budget = 4 * 1024 * 1024
    props = {
        "buffer.memory": str(buffer_memory),
        "linger.ms": "5",
        "request.timeout.ms": "30000",
        "delivery.timeout.ms": "120000",
    }
    async with (
        serving(
            tmp_path, proxy.bootstrap, "--buffer-wait-ms", "300",
            "--body-budget-bytes", str(budget), "--max-body-bytes", str(budget // 2),
            producer_props=props,
        ) as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
        as session,
    ):
        url = f"{server.base_url}/topics/{topic}"
        assert (await post(session, url, v2_body(b"warm-up")))[0] == 200
        sampler = RssSampler(server.process.pid)
        baseline = sampler.rss()
        # The brokers stop answering: the buffer fills, and the requests past it are refused.
        proxy.set_fault(Fault.stall())
        bodies = [v2_body(b"%06d" % i + os.urandom(value_size)) for i in range(concurrent)]
        async with sampler.sampling():
            sending = [asyncio.ensure_future(post(session, url, body)) for body in bodies]
            refused = 0
            deadline = time.monotonic() + WAIT_S
            while refused < concurrent // 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                refused = sum(1 for s in sending if s.done() and s.result()[0] == 429)
            proxy.clear()
            answers = await asyncio.gather(*sending)
        await server.stop()
    statuses = [status for status, *_ in answers]
    accepted = [
        (answer, body)
        for (status, answer, *_), body in zip(answers, bodies, strict=True)
        if status == 200
    ]
    rejected = [(answer, headers, took) for code, answer, headers, took in answers if code == 429]
    print(
        f"\n{concurrent} requests of {value_size} B, buffer.memory={buffer_memory}: "
        f"{len(accepted)} accepted, {len(rejected)} answered 429; RSS baseline "
        f"{baseline / 2**20:.1f} MiB, peak {sampler.peak / 2**20:.1f} MiB"
    )
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert len(rejected) >= concurrent // 2
    assert accepted, "the buffer held no record at all"
    reasons: set[str] = set()
    for answer, headers, took in rejected:
        assert answer["error_code"] == 42901
        full = f"buffer.memory={buffer_memory}"
        found = [r for r in (full, "body.budget.bytes") if r in answer["message"]]
        assert found, answer
        reasons.update(found)
        assert headers["Retry-After"] == "1"
        assert took < 30, "a refusal must come after buffer.wait.ms, not after the stall"
    assert f"buffer.memory={buffer_memory}" in reasons, "the producer's buffer never filled"
    # Bodies and parsed records stay within the budget until they are in the producer's
    # buffer, which has its own bound; each connection adds what the HTTP server reads ahead
    # of the application (at most 64 KiB) and its own objects.
    bound = 3 * (budget + buffer_memory) + concurrent * 64 * 1024
    assert sampler.peak - baseline < bound, (sampler.peak - baseline, bound)
    records = by_position(await read_topic(kafka_bootstrap, topic, len(accepted) + 1))
    assert len(records) == len(accepted) + 1
    for answer, body in accepted:
        [entry] = answer["offsets"]
        value = base64.b64decode(json.loads(body)["records"][0]["value"])
        assert records[(entry["partition"], entry["offset"])].value == value


async def test_bodies_held_over_the_budget_are_refused_429(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    async with serving(
        tmp_path, kafka_bootstrap, "--body-budget-bytes", "100000", "--max-body-bytes", "50000"
    ) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        # The server looks the topic up before it reads a body: one request first, so that the
        # slow ones below are not answered 404 (a new topic not yet in every broker's
        # metadata) with their bodies never read, and so never held.
        async with aiohttp.ClientSession() as session:
            url = f"{server.base_url}/topics/{topic}"
            await until(lambda: _ok(post(session, url, v2_body(b"w"))), "the topic known")
        head = (
            f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
            "Content-Length: 45000\r\n\r\n"
        ).encode()
        # The budget counts bytes that arrived, not bytes declared: two clients that sent
        # 40,000 bytes of a 45,000-byte body, and then nothing, hold 80,000 of 100,000.
        slow = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        try:
            for _, writer in slow:
                writer.write(head + b'{"records":[' + b" " * (40_000 - 12))
                await writer.drain()
            async with aiohttp.ClientSession() as session:

                async def third_refused() -> bool:
                    status, answer, headers, _ = await post(
                        session, f"{server.base_url}/topics/{topic}", v2_body(b"x" * 25000)
                    )
                    if status == 200:
                        return False
                    assert (status, answer["error_code"]) == (429, 42901), answer
                    assert "body.budget.bytes" in answer["message"]
                    assert headers["Retry-After"] == "1"
                    return True

                await until(third_refused, "a third body over the budget refused")
                for _, writer in slow:
                    writer.close()
                # Freed: the same request goes through.
                url = f"{server.base_url}/topics/{topic}"
                await until(lambda: _ok(post(session, url, v2_body(b"y" * 25000))), "budget freed")
        finally:
            for _, writer in slow:  # closed twice on success: a no-op the second time
                writer.close()
        await server.stop()


async def _ok(answer: Awaitable[tuple[int, dict[str, Any], dict[str, str], float]]) -> bool:
    return (await answer)[0] == 200


async def test_brokers_out_of_reach_answer_503_and_readyz_says_so(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory, proxy: FaultProxy
) -> None:
    known, unseen = await topic_factory(partitions=3), await topic_factory(partitions=3)
    primed = await topic_factory(partitions=3)
    props = {
        "max.block.ms": "2000",
        "delivery.timeout.ms": "3000",
        "request.timeout.ms": "1500",
        "linger.ms": "0",
    }
    async with (
        serving(
            tmp_path, proxy.bootstrap, "--readiness-timeout-ms", "1000", producer_props=props
        ) as server,
        aiohttp.ClientSession() as session,
    ):
        base = server.base_url
        assert (await post(session, f"{base}/topics/{known}", v2_body(b"before")))[0] == 200
        # The gateway has checked this topic (a malformed body after the check), the producer
        # has no metadata for it yet.
        assert (await post(session, f"{base}/topics/{primed}", b"{}"))[0] == 422
        proxy.set_fault(Fault.stall())
        # The producer's wait for metadata is an outage (503 after max.block.ms), not a full
        # buffer (429 after buffer.wait.ms).
        status, answer, _, took = await post(session, f"{base}/topics/{primed}", v2_body(b"p"))
        assert (status, answer["error_code"]) == (503, 50302), answer
        assert "max.block.ms=2000" in answer["message"], answer
        assert took >= 2.0
        status, answer, headers, _ = await post(session, f"{base}/topics/{known}", v2_body(b"l"))
        assert (status, answer["error_code"]) == (503, 50302), answer
        assert "3000" in answer["message"] or "delivery" in answer["message"], answer
        assert headers["Retry-After"] == "5"
        status, answer, _, took = await post(session, f"{base}/topics/{unseen}", v2_body(b"x"))
        assert (status, answer["error_code"]) == (503, 50302), answer
        assert "2000 ms" in answer["message"], answer
        assert took >= 2.0
        status, answer, _, _ = await post(
            session,
            f"{base}/v3/clusters/c/topics/{known}/records",
            b'{"value":{"type":"STRING","data":"v3"}}',
            "application/json",
        )
        assert status == 503, answer
        async with session.get(f"{base}/readyz") as response:
            assert response.status == 503
            assert (await response.json())["error_code"] == 50302
        async with session.get(f"{base}/healthz") as response:
            assert response.status == 200
        proxy.clear()

        async def ready() -> bool:
            async with session.get(f"{base}/readyz") as response:
                return response.status == 200

        await until(ready, "/readyz back to 200")
        status, answer, _, _ = await post(session, f"{base}/topics/{known}", v2_body(b"after"))
        assert status == 200, answer
        await server.stop()
    values = [r.value for r in await read_topic(kafka_bootstrap, known, 2)]
    assert b"before" in values
    assert b"after" in values


# Short enough that an outage is answered in seconds; delivery.timeout.ms must cover
# linger.ms + request.timeout.ms, or the producer refuses the settings.
SHORT_TIMEOUTS = {
    "max.block.ms": "3000",
    "delivery.timeout.ms": "6000",
    "request.timeout.ms": "2000",
    "linger.ms": "5",
    "retry.backoff.ms": "100",
}
# An answer about a dead broker must come within this, whatever the producer retries.
OUTAGE_ANSWER_S = 30.0
Answer = tuple[int, dict[str, Any], dict[str, str], float]


async def within(seconds: float, what: str, answer: Awaitable[Answer]) -> Answer:
    """``answer``, or the test fails (rather than hangs) once ``seconds`` have passed."""
    try:
        async with asyncio.timeout(seconds):
            return await answer
    except TimeoutError:
        pytest.fail(f"{what}: no answer within {seconds}s")


# A broker start can take a minute or more on a busy machine; the bound covers that, so the
# finally block can bring the node back before the test is stopped.
@pytest.mark.timeout(600)
async def test_killed_leader_of_an_unreplicated_topic_answers_503_in_bounded_time_and_recovers(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    # Replication factor 1: the topic's only replica dies with its broker.
    lonely = await topic_factory(partitions=1, replication_factor=1)
    replicated = await topic_factory(partitions=3, replication_factor=3)
    [victim] = (await cluster.leader_counts(kafka_bootstrap, lonely)).keys()
    # A partition whose leader lives: its writes must not wait on the dead node at all (one the
    # victim leads would wait for the controller to elect another leader).
    partitions = await cluster._partition_metadata(kafka_bootstrap, replicated)
    spared = next(p["partition"] for p in partitions if p["leader"] != victim)
    accepted: dict[str, list[tuple[bytes, dict[str, Any]]]] = {lonely: [], replicated: []}
    statuses: list[int] = []
    serial = count()
    async with (
        serving(tmp_path, kafka_bootstrap, producer_props=SHORT_TIMEOUTS) as server,
        aiohttp.ClientSession() as session,
    ):

        async def send(topic: str, path: str = "") -> Answer:
            value = b"%s-%d" % (topic.encode(), next(serial))
            answer = await post(session, f"{server.base_url}/topics/{topic}{path}", v2_body(value))
            if answer[0] == 200:
                accepted[topic].append((value, answer[1]))
            return answer

        status, answer, _, _ = await send(lonely)
        assert status == 200, answer
        async def fenced() -> bool:
            try:
                partitions = await cluster._partition_metadata(kafka_bootstrap, replicated)
            except Exception:  # the node asked may be the dead one
                return False
            [isr] = [p["isr"] for p in partitions if p["partition"] == spared]
            return victim not in cast(list[int], isr)

        try:
            await cluster.stop_broker(victim)
            down = f"node {victim} dead"
            status, answer, headers, took = await within(OUTAGE_ANSWER_S, down, send(lonely))
            # With acks=all the leader waits for every in-sync replica, and the dead node stays
            # in sync until the controller fences it (broker.session.timeout.ms): only then can
            # any write that it followed succeed.
            await until(fenced, f"{down}: out of the ISR of {replicated}", OUTAGE_ANSWER_S)
            spared_status, spared_answer, _, _ = await within(
                OUTAGE_ANSWER_S, down, send(replicated, f"/partitions/{spared}")
            )
        finally:
            # The cluster is shared with the tests that follow, whatever happened here.
            if cluster.broker_pid(victim) is None:
                await cluster.start_broker(victim)
            for topic in (lonely, replicated):
                await cluster.wait_fully_replicated(kafka_bootstrap, topic, timeout=120)
        print(
            f"\nnode {victim} killed: {lonely} answered {status} {answer} in {took:.1f}s; "
            f"{replicated} partition {spared} answered {spared_status} {spared_answer}"
        )
        assert (status, answer["error_code"]) == (503, 50302), answer
        # The partition (or topic) and the bound that ran out, whichever of the two it was.
        assert lonely in answer["message"], answer
        bounds = ("delivery.timeout.ms", "delivery_timeout_ms", "max.block.ms")
        assert any(bound in answer["message"] for bound in bounds), answer
        assert headers["Retry-After"] == "5"
        assert took < OUTAGE_ANSWER_S
        assert spared_status == 200, spared_answer

        async def lonely_back() -> bool:
            status, answer, _, _ = await send(lonely)
            statuses.append(status)
            assert status in (200, 503), answer
            return status == 200

        await until(lonely_back, f"{lonely} written again after node {victim} came back")
        await server.stop()
    print(f"after the restart: {statuses}")
    for topic, records in accepted.items():
        found = by_position(await read_topic(kafka_bootstrap, topic, len(records)))
        copies = Counter(record.value for record in found.values())
        for value, answer in records:
            [entry] = answer["offsets"]
            assert found[(entry["partition"], entry["offset"])].value == value, entry
            assert copies[value] == 1, (value, copies[value])


# Nothing leaves the producer until the shutdown flushes it.
HELD = {"linger.ms": "600000", "delivery.timeout.ms": "900000", "batch.size": "1048576"}


async def test_sigterm_answers_every_request_in_flight_flushes_and_exits_0(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    requests, streamed = 100, 30
    never = asyncio.Event()

    async def stream() -> AsyncIterator[bytes]:
        for i in range(streamed):
            yield b'{"value":{"type":"STRING","data":"stream-%d"}}\n' % i
        await asyncio.wait_for(never.wait(), WAIT_S)  # the client still has more to send

    async with (
        serving(tmp_path, kafka_bootstrap, producer_props=HELD) as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        base = server.base_url
        posts = [
            asyncio.ensure_future(post(session, f"{base}/topics/{topic}", v2_body(b"v2-%d" % i)))
            for i in range(requests)
        ]

        async def read_stream() -> list[dict[str, Any]]:
            async with session.post(
                f"{base}/v3/clusters/c/topics/{topic}/records",
                data=stream(),
                headers={"Content-Type": "application/json"},
            ) as response:
                assert response.status == 200
                return [json.loads(line) async for line in response.content if line.strip()]

        streaming = asyncio.ensure_future(read_stream())

        async def all_in_flight() -> bool:
            samples = await metric_samples(session, base)
            assert samples["kafka_producer_record_send_total"] == 0
            return samples["aioaccum_serve_records_accepted_total"] == requests + streamed

        await until(all_in_flight, "every record buffered")
        assert not any(p.done() for p in posts)
        stopping = asyncio.ensure_future(server.stop())
        answers = await asyncio.gather(*posts)
        stream_answers = await streaming
        await stopping  # exit status 0 and a complete shutdown in the log
    assert [status for status, *_ in answers] == [200] * requests, answers[:2]
    assert [a["error_code"] for a in stream_answers] == [200] * streamed + [503]
    records = by_position(await read_topic(kafka_bootstrap, topic, requests + streamed))
    assert len(records) == requests + streamed
    for i, (_, answer, _, _) in enumerate(answers):
        [entry] = answer["offsets"]
        assert records[(entry["partition"], entry["offset"])].value == b"v2-%d" % i
    for i, answer in enumerate(stream_answers[:streamed]):
        record = records[(answer["partition_id"], answer["offset"])]
        assert record.value == b"stream-%d" % i


async def test_two_workers_share_the_port_each_with_its_producer(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    async with (
        serving(tmp_path, kafka_bootstrap, "--workers", "2") as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
    ):
        pids: set[int] = set()
        deadline = time.monotonic() + WAIT_S
        sent = 0
        while len(pids) < 2 and time.monotonic() < deadline:
            async with session.get(f"{server.base_url}/healthz") as response:
                pids.add((await response.json())["pid"])
            status, answer, _, _ = await post(
                session, f"{server.base_url}/topics/{topic}", v2_body(b"w-%d" % sent)
            )
            assert status == 200, answer
            sent += 1
        assert len(pids) == 2, f"one worker answered all {sent} requests"
        assert server.process.pid not in pids
        await server.stop()
    assert len(await read_topic(kafka_bootstrap, topic, sent)) == sent
    # Each worker drained its own producer, losing nothing.
    drained = [line for line in server.log().splitlines() if "drained: 0 record(s) dropped" in line]
    assert sorted(int(line.split("worker ")[1].split()[0]) for line in drained) == sorted(pids)


async def test_records_dropped_at_shutdown_make_the_exit_status_1(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory, proxy: FaultProxy
) -> None:
    topic = await topic_factory(partitions=1)
    props = {"linger.ms": "0", "request.timeout.ms": "60000", "delivery.timeout.ms": "120000"}
    args = ("--shutdown-grace-ms", "500", "--close-timeout-ms", "1000")
    async with (
        serving(tmp_path, proxy.bootstrap, *args, producer_props=props) as server,
        aiohttp.ClientSession() as session,
    ):
        url = f"{server.base_url}/topics/{topic}"
        assert (await post(session, url, v2_body(b"before")))[0] == 200
        proxy.set_fault(Fault.stall())
        pending = asyncio.ensure_future(post(session, url, v2_body(b"lost")))

        async def accepted() -> bool:
            samples = await metric_samples(session, server.base_url)
            return samples["aioaccum_serve_records_accepted_total"] == 2

        await until(accepted, "the second record buffered")
        server.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(server.process.wait, WAIT_S)
        status, answer, _, _ = await pending
        proxy.clear()
    assert (status, answer["error_code"]) == (503, 503), answer
    assert code == 1, server.log()
    assert "1 accepted record(s) were dropped at shutdown" in server.log()
