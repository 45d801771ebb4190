"""``aioaccum serve`` against hostile clients, none with a credential: silent sockets at the
connection limit, slow headers, header bombs, a reader that stalls, numbers JSON does not have,
budget squatting and aborts mid-body.

Each test runs the server with deadlines of about a second (set through its settings) and, while
the hostile traffic goes on, asserts that a normal client is answered within ``ANSWER_BOUND_S``
and that the server's RSS stays within ``RSS_BOUND`` of what it was before. All traffic goes to
127.0.0.1, is bounded in count and time, and every wait has a bound.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import psutil
import pytest

from ._serve import metric_samples, serving
from ._servers import ServerProcess
from .test_web import RssSampler

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

BINARY = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
# A normal client, during the attack, is answered within this.
ANSWER_BOUND_S = 2.0
# The server's resident memory grows by less than this during an attack.
RSS_BOUND = 48 * 1024 * 1024
# The deadlines the tests give the server, and the margin beyond one before it must have acted.
DEADLINE_MS = 1000
MARGIN_S = 3.0
FAST = (
    "--header-timeout-ms", str(DEADLINE_MS), "--idle-timeout-ms", str(DEADLINE_MS),
    "--read-timeout-ms", str(DEADLINE_MS), "--write-timeout-ms", str(DEADLINE_MS),
)  # fmt: skip
IO_TIMEOUT_S = 10.0


def port_of(server: ServerProcess) -> int:
    return int(server.base_url.rpartition(":")[2])


def server_connections(server: ServerProcess) -> int:
    """Established TCP connections the server holds on its port (psutil: the socket is open)."""
    port = port_of(server)
    return sum(
        1
        for c in psutil.Process(server.process.pid).net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


async def answered(session: aiohttp.ClientSession, server: ServerProcess, topic: str) -> float:
    """A normal client's /healthz and one produce, both answered well; seconds taken."""
    started = time.monotonic()
    async with asyncio.timeout(ANSWER_BOUND_S):
        async with session.get(f"{server.base_url}/healthz") as response:
            assert response.status == 200
        body = {"records": [{"value": base64.b64encode(b"normal").decode()}]}
        async with session.post(
            f"{server.base_url}/topics/{topic}",
            data=json.dumps(body),
            headers={"Content-Type": BINARY},
        ) as response:
            assert response.status == 200, await response.text()
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def raw(
    server: ServerProcess,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    async with asyncio.timeout(IO_TIMEOUT_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
    try:
        yield reader, writer
    finally:
        writer.transport.abort()


async def read_until_closed(reader: asyncio.StreamReader, bound: float) -> bytes:
    """Everything the server sends until it closes the connection, which must be within bound."""
    data = b""
    async with asyncio.timeout(bound):
        # A reset, or our own write failing on the closed socket (EPIPE), ends it as well.
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                data += chunk
    return data


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def test_silent_sockets_at_the_connection_limit_are_closed_and_never_block_others(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    limit = 20
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST, "--max-connections", str(limit)) as server,
        aiohttp.ClientSession() as session,
    ):
        sampler = RssSampler(server.process.pid)
        async with sampler.sampling(), contextlib.AsyncExitStack() as stack:
            before = sampler.rss()
            silent = [await stack.enter_async_context(raw(server)) for _ in range(2 * limit)]
            # Twice the limit sends nothing; a normal client is still served at once.
            took = await answered(session, server, topic)
            assert server_connections(server) <= limit
            # The silent ones lose their connections within the header deadline.
            for reader, _ in silent:
                assert await read_until_closed(reader, DEADLINE_MS / 1000 + MARGIN_S) == b""
            assert server_connections(server) <= 1
            took = max(took, await answered(session, server, topic))
        assert took < ANSWER_BOUND_S
        assert sampler.peak - before < RSS_BOUND
        await server.stop()


async def test_slow_headers_get_408_within_the_header_deadline(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST) as server,
        aiohttp.ClientSession() as session,
        raw(server) as (reader, writer),
    ):
        started = time.monotonic()

        async def trickle() -> None:
            # A byte every 50 ms: each byte would have restarted uvicorn's own timer.
            with contextlib.suppress(ConnectionError):
                for byte in head:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.05)

        trickling = asyncio.ensure_future(trickle())
        try:
            answer = await read_until_closed(reader, DEADLINE_MS / 1000 + MARGIN_S)
        finally:
            trickling.cancel()
        assert status_of(answer) == 408
        assert b"header.timeout.ms" in answer
        assert time.monotonic() - started < DEADLINE_MS / 1000 + MARGIN_S
        await answered(session, server, topic)
        # An idle kept-alive connection is closed after idle.timeout.ms.
        async with raw(server) as (idle_reader, idle_writer):
            idle_writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            first = await read_until_closed(idle_reader, DEADLINE_MS / 1000 + MARGIN_S)
            assert status_of(first) == 200
        await server.stop()


async def test_header_bombs_are_refused_before_they_are_held(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST) as server,
        aiohttp.ClientSession() as session,
    ):

        async def refused(request: bytes) -> bytes:
            async with raw(server) as (reader, writer):
                with contextlib.suppress(ConnectionError):
                    writer.write(request)
                    async with asyncio.timeout(IO_TIMEOUT_S):
                        await writer.drain()
                return await read_until_closed(reader, IO_TIMEOUT_S)

        huge_line = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
        assert status_of(await refused(huge_line)) == 431
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(1000))
        assert status_of(await refused(b"GET /healthz HTTP/1.1\r\n" + many + b"\r\n")) == 431
        long_path = b"GET /" + b"p" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        assert status_of(await refused(long_path)) == 414
        gzip = (
            f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
            "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
        ).encode()
        assert status_of(await refused(gzip)) == 501

        # Eight connections each sending an unfinished 32 MiB header, at the same time.
        sampler = RssSampler(server.process.pid)
        async with sampler.sampling():
            before = sampler.rss()

            async def bomb() -> tuple[int, bytes]:
                sent = 0
                async with raw(server) as (reader, writer):
                    writer.write(b"GET /healthz HTTP/1.1\r\nX-Bomb: ")
                    piece = b"b" * (1 << 20)
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        async with asyncio.timeout(IO_TIMEOUT_S):
                            for _ in range(32):
                                writer.write(piece)
                                await writer.drain()
                                sent += len(piece)
                    return sent, await read_until_closed(reader, IO_TIMEOUT_S)

            bombing = asyncio.gather(*(bomb() for _ in range(8)))
            took = await answered(session, server, topic)
            results = await bombing
        for sent, answer in results:
            assert sent < 32 << 20  # the server closed before the whole header went
            if answer:  # the answer is lost when the reset overtakes it
                assert status_of(answer) == 431
        assert took < ANSWER_BOUND_S
        assert sampler.peak - before < RSS_BOUND
        await server.stop()


async def test_a_stalled_reader_loses_its_connection(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    # Pipelined requests whose answers (about 600 KB each) exceed what the kernel's buffers
    # take (4 MiB at most here): the rest stays queued in the server, unread.
    requests, records = 8, 10_000
    body = json.dumps({"records": [{"value": "AA=="}] * records}).encode()
    request = (
        f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST) as server,
        aiohttp.ClientSession() as session,
    ):
        sampler = RssSampler(server.process.pid)
        loop = asyncio.get_running_loop()
        async with sampler.sampling():
            before = sampler.rss()
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            sending: asyncio.Future[None] | None = None
            try:
                async with asyncio.timeout(IO_TIMEOUT_S):
                    await loop.sock_connect(sock, ("127.0.0.1", port_of(server)))
                local = sock.getsockname()[1]
                # Not awaited: the server stops reading once its answers stall.
                sending = asyncio.ensure_future(loop.sock_sendall(sock, request * requests))

                def held() -> bool:
                    return any(
                        c.raddr and c.raddr.port == local
                        for c in psutil.Process(server.process.pid).net_connections(kind="tcp")
                    )

                # Within the write deadline of the stall the socket is gone from the server.
                deadline = time.monotonic() + 3 * IO_TIMEOUT_S
                while held():
                    assert time.monotonic() < deadline, "the stalled connection is still open"
                    await asyncio.sleep(0.1)
                took = await answered(session, server, topic)
            finally:
                if sending is not None:
                    sending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await sending
                sock.close()
        assert took < ANSWER_BOUND_S
        assert sampler.peak - before < RSS_BOUND
        await server.stop()
    assert "the connection is aborted" in server.log()


NOT_JSON_NUMBERS = ("1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" * 5000)


async def test_numbers_json_does_not_have_are_400_in_v2_and_v3(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST) as server,
        aiohttp.ClientSession() as session,
    ):
        for number in NOT_JSON_NUMBERS:
            v2 = f'{{"records": [{{"value": {{"n": {number}}}}}]}}'
            async with session.post(
                f"{server.base_url}/topics/{topic}", data=v2, headers={"Content-Type": JSON_V2}
            ) as response:
                assert response.status == 400, number[:10]
                assert (await response.json(content_type=None))["error_code"] == 400
            v3 = f'{{"value": {{"type": "JSON", "data": [{number}]}}}}'
            async with session.post(
                f"{server.base_url}/v3/clusters/c/topics/{topic}/records",
                data=v3,
                headers={"Content-Type": "application/json"},
            ) as response:
                # A request of one record has that record's own status, not 200 with a 500
                # inside.
                assert response.status == 400, number[:10]
                answer = await response.json(content_type=None)
                assert answer["error_code"] == 400
                assert len(answer["message"]) < 2000
        v2 = '{"records": [{"value": "AA=="}]}'
        # An error message does not grow with what the client sent.
        v3_type = json.dumps({"value": {"type": "X" * 100_000, "data": 1}})
        async with session.post(
            f"{server.base_url}/v3/clusters/c/topics/{topic}/records",
            data=v3_type,
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 400
            assert len((await response.json(content_type=None))["message"]) < 1200
        async with session.post(
            f"{server.base_url}/topics/bad%20name", data=v2, headers={"Content-Type": BINARY}
        ) as response:
            assert response.status == 400
        async with session.post(
            f"{server.base_url}/topics/{topic}/", data=v2, headers={"Host": "evil.example"}
        ) as response:
            assert response.status == 404  # no redirect built from Host
        assert await answered(session, server, topic) < ANSWER_BOUND_S
        await server.stop()
    assert "Traceback" not in server.log()


async def test_declared_lengths_do_not_squat_the_budget(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    budget = 1 << 20
    args = ("--body-budget-bytes", str(budget), "--max-body-bytes", str(budget))
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST, *args) as server,
        aiohttp.ClientSession() as session,
        contextlib.AsyncExitStack() as stack,
    ):
        squatters = [await stack.enter_async_context(raw(server)) for _ in range(4)]
        for _, writer in squatters:
            writer.write(
                f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
                f"Content-Length: {budget}\r\n\r\n".encode()
            )
        # Once the server reads them (four produce requests in flight), they hold nothing.
        deadline = time.monotonic() + IO_TIMEOUT_S
        while True:
            samples = await metric_samples(session, server.base_url)
            if samples["aioaccum_serve_requests_in_flight"] >= len(squatters):
                break
            assert time.monotonic() < deadline, samples
            await asyncio.sleep(0.05)
        assert samples["aioaccum_serve_body_bytes_held"] == 0
        assert await answered(session, server, topic) < ANSWER_BOUND_S
        # Their bodies never come: each is answered 408 at read.timeout.ms, and closed.
        for reader, _ in squatters:
            answer = await read_until_closed(reader, DEADLINE_MS / 1000 + MARGIN_S + 2.0)
            assert status_of(answer) == 408
        await server.stop()


async def test_aborts_mid_body_are_one_quiet_line_each(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    aborts = 20
    async with (
        serving(tmp_path, kafka_bootstrap, *FAST) as server,
        aiohttp.ClientSession() as session,
    ):
        sampler = RssSampler(server.process.pid)
        async with sampler.sampling():
            before = sampler.rss()
            for _ in range(aborts):
                async with raw(server) as (_, writer):
                    writer.write(
                        f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
                        "Content-Length: 100000\r\n\r\n".encode()
                        + b"x" * 1000
                    )
                    async with asyncio.timeout(IO_TIMEOUT_S):
                        await writer.drain()
            took = await answered(session, server, topic)

            def quiet_lines() -> int:
                return server.log().count("the client went away")

            deadline = time.monotonic() + IO_TIMEOUT_S
            while quiet_lines() < aborts:
                assert time.monotonic() < deadline, server.log()
                await asyncio.sleep(0.1)
        assert took < ANSWER_BOUND_S
        assert sampler.peak - before < RSS_BOUND
        await server.stop()
    log = server.log()
    assert "Traceback" not in log
    assert "ClientDisconnect" not in log
