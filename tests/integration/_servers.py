"""An example service run as a real server process, for the tests that drive it over HTTP.

A :class:`Service` says how one example is started, how it shows that it is ready and what a
clean shutdown leaves in its log; :func:`running` starts it on a free 127.0.0.1 port against a
cluster and yields a :class:`ServerProcess` once it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Service:
    """How to start one example service and how to tell that it is up, then that it stopped well."""

    command: Callable[[int], list[str]]
    """The command line that serves on the given port."""
    ready_path: str
    """Polled until it answers 200: the service is ready to take requests."""
    stop_timeout: float
    """How long a signalled server may take to exit."""
    shutdown_log: Callable[[signal.Signals], Sequence[str]]
    """Lines a graceful shutdown on this signal writes to the log."""
    ready_body: object = None
    """When set, the JSON the ready path must answer."""
    exits_by_signal: bool = False
    """Whether a graceful exit may re-raise the signal instead of exiting with 0."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for every run; a test's own variables override it."""
    metrics_path: str = "/metrics"
    """Where the producer's metrics are, as JSON by Java name."""


@dataclass
class ServerProcess:
    """One running process of a :class:`Service`."""

    service: Service
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(f"{self.base_url}{self.service.ready_path}") as response:
                    if response.status == 200:
                        if self.service.ready_body is not None:
                            assert await response.json() == self.service.ready_body
                        return
            if time.monotonic() > deadline:
                pytest.fail(f"no answer in {SERVER_START_TIMEOUT_S}s:\n{self.log()}")
            await asyncio.sleep(0.1)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the server, wait for it to exit, and check that it shut down gracefully."""
        self.process.send_signal(sig)
        try:
            code = await asyncio.to_thread(self.process.wait, self.service.stop_timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the server did not exit on signal {sig}:\n{self.log()}")
        assert code in ((0, -sig) if self.service.exits_by_signal else (0,)), self.log()
        log = self.log()
        for line in self.service.shutdown_log(signal.Signals(sig)):
            assert line in log, log

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get(f"{self.base_url}{self.service.metrics_path}") as response:
            assert response.status == 200
            found: dict[str, float] = await response.json()
            return found


@contextlib.asynccontextmanager
async def running(
    service: Service,
    tmp_path: Path,
    bootstrap: str,
    topic: str,
    props: Mapping[str, str],
    **env: str,
) -> AsyncIterator[ServerProcess]:
    """``service`` serving ``topic`` of the cluster at ``bootstrap``, with producer ``props``."""
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    server_env = {
        **os.environ,
        "AIOACCUM_BOOTSTRAP": bootstrap,
        "EVENTS_TOPIC": topic,
        "EVENTS_PRODUCER_PROPS": ",".join(f"{k}={v}" for k, v in props.items()),
        **service.env,
        **env,
    }
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
            service.command(port),
            env=server_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    server = ServerProcess(service, process, f"http://127.0.0.1:{port}", log_path)
    try:
        async with aiohttp.ClientSession() as session:
            await server.wait_ready(session)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
