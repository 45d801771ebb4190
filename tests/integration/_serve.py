"""``aioaccum serve`` as a real server process, for the tests that drive it over HTTP.

:func:`serving` starts ``python -m aioaccum.cli serve`` on a free 127.0.0.1 port against a
cluster and yields a :class:`~_servers.ServerProcess` once ``/readyz`` answers 200; the records
the tests read back come from :func:`read_topic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from ._servers import ServerProcess, Service, free_port
from .test_web import consume_all

SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 90.0
CONSUME_TIMEOUT_S = 60.0

SERVE_SERVICE = Service(
    command=lambda port: [],  # serving() builds the command itself
    ready_path="/readyz",
    stop_timeout=SERVER_STOP_TIMEOUT_S,
    shutdown_log=lambda sig: ["Application shutdown complete."],
)


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    bootstrap: str,
    *args: str,
    producer_props: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    ready_headers: Mapping[str, str] | None = None,
) -> AsyncIterator[ServerProcess]:
    """``aioaccum serve`` with extra ``args``; producer settings go in a --producer.config file."""
    port = free_port()
    props_file = tmp_path / f"producer-{port}.properties"
    props_file.write_text("".join(f"{k}={v}\n" for k, v in (producer_props or {}).items()))
    command = [
        sys.executable, "-m", "aioaccum.cli", "serve", "--bootstrap-server", bootstrap,
        "--listen", f"127.0.0.1:{port}", "--producer.config", str(props_file), *args,
    ]  # fmt: skip
    log_path = tmp_path / f"serve-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
            command, stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    scheme = "https" if ssl_context is not None else "http"
    server = ServerProcess(SERVE_SERVICE, process, f"{scheme}://127.0.0.1:{port}", log_path)
    try:
        await wait_ready(server, ssl_context, ready_headers or {})
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def wait_ready(
    server: ServerProcess, ssl_context: ssl.SSLContext | None, headers: Mapping[str, str]
) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    connector = aiohttp.TCPConnector(ssl=ssl_context or True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            if server.process.poll() is not None:
                pytest.fail(f"the server exited with {server.process.returncode}:\n{server.log()}")
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(f"{server.base_url}/readyz", headers=headers) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                pytest.fail(f"not ready in {SERVER_START_TIMEOUT_S}s:\n{server.log()}")
            await asyncio.sleep(0.1)


async def read_topic(bootstrap: str, topic: str, expected: int) -> list[ConsumerRecord[Any, Any]]:
    """Every record of ``topic``, waiting until ``expected`` arrived, plus one short poll."""
    return await consume_all(bootstrap, topic, expected)


async def read_positions(
    bootstrap: str, topic: str, positions: set[tuple[int, int]]
) -> dict[tuple[int, int], ConsumerRecord[Any, Any]]:
    """The records at ``positions`` (partition, offset) of ``topic``, reading from the start
    until every one is found or ``CONSUME_TIMEOUT_S`` passed; fails on a position read twice."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        found: dict[tuple[int, int], ConsumerRecord[Any, Any]] = {}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while not positions <= found.keys():
            if time.monotonic() > deadline:
                missing = sorted(positions - found.keys())
                pytest.fail(f"{topic}: no record at {missing} within {CONSUME_TIMEOUT_S}s")
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for record in batch:
                    position = (record.partition, record.offset)
                    assert position not in found, f"{position} read twice"
                    found[position] = record
        return found
    finally:
        await consumer.stop()


def by_position(records: Sequence[ConsumerRecord[Any, Any]]) -> dict[tuple[int, int], Any]:
    """Records by (partition, offset); fails if any position holds two (a duplicate read)."""
    found = {(r.partition, r.offset): r for r in records}
    assert len(found) == len(records)
    return found


async def metric_samples(
    session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str] | None = None
) -> dict[str, float]:
    """``/metrics`` parsed with prometheus_client's parser: sample name -> value (summed over
    labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(f"{base_url}/metrics", headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples
