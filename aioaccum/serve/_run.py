"""Running the gateway: uvicorn on uvloop and httptools, in one process or several.

With ``workers`` > 1 this process binds the listening socket and starts that many worker
processes, which all accept on it, each with its own producer; it only watches them (a worker
that dies is replaced) and passes SIGTERM and SIGINT on.

A signal starts a drain, in every worker: stop accepting connections, stop reading streams,
answer every request in flight (those still waiting for acknowledgements after
``shutdown.grace.ms`` are answered 503), flush the producer within ``close.timeout.ms``, and
exit 0. uvicorn itself would raise the signal again after its shutdown, making a clean drain
look like a kill; here the exit status says whether the drain went well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
from types import FrameType

import uvicorn

from aioaccum._loops import default_loop_factory

from ._app import create_app
from ._gateway import Draining
from ._settings import ServeSettings

__all__ = ["serve"]

log = logging.getLogger("aioaccum.serve")

# uvicorn's exit status for a worker whose startup failed: restarting it would fail again.
_STARTUP_FAILURE = 3
# Beyond the drain and the flush, for the interpreter and uvicorn's own steps.
_EXIT_MARGIN_S = 30.0


class _Server(uvicorn.Server):
    """uvicorn's server, which also starts the app's drain when a signal comes and does not
    raise the signal again once it has shut down."""

    def __init__(self, config: uvicorn.Config, draining: Draining, grace: float) -> None:
        super().__init__(config)
        self._draining = draining
        self._grace = grace
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl+C: stop waiting
        else:
            self.should_exit = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._draining.begin, self._grace)


def _uvicorn_config(settings: ServeSettings) -> tuple[uvicorn.Config, Draining]:
    app = create_app(settings)
    draining: Draining = app.state.draining
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop" if default_loop_factory() is not asyncio.new_event_loop else "asyncio",
        http="httptools",
        lifespan="on",
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        access_log=settings.access_log,
        proxy_headers=False,
        server_header=False,
        # Requests in flight get the grace, then a few seconds to send their 503s.
        timeout_graceful_shutdown=int(settings.shutdown_grace_ms / 1000) + 5,
        timeout_keep_alive=30,
        backlog=4096,
    )
    return config, draining


def _run_worker(settings: ServeSettings, sockets: list[socket.socket] | None) -> None:
    config, draining = _uvicorn_config(settings)
    server = _Server(config, draining, settings.shutdown_grace_ms / 1000)
    server.run(sockets=sockets)
    if not server.started:
        sys.exit(_STARTUP_FAILURE)


def _worker_main(settings: ServeSettings, listener: socket.socket) -> None:
    """A worker process's entry (pickled by the spawn start method: module level)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: [%(process)d] %(message)s")
    _run_worker(settings, [listener])


def serve(settings: ServeSettings) -> int:
    """Serve until a signal drains the server; return the process's exit status.

    Raises:
        ConfigError: A setting is invalid (before anything listens).
    """
    if settings.workers == 1:
        _run_worker(settings, None)
        return 0
    return _Supervisor(settings).run()


class _Supervisor:
    def __init__(self, settings: ServeSettings) -> None:
        self._settings = settings
        self._context = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._workers: list[multiprocessing.process.BaseProcess] = []

    def run(self) -> int:
        settings = self._settings
        # Building the app here fails now, in the parent, on a bad auth file, not N times over.
        config, _ = _uvicorn_config(settings)
        listener = config.bind_socket()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            self._workers = [self._start(listener) for _ in range(settings.workers)]
            failed = self._watch(listener)
        finally:
            listener.close()
        return 1 if failed else self._stop()

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._stopping.set()

    def _start(self, listener: socket.socket) -> multiprocessing.process.BaseProcess:
        worker = self._context.Process(
            target=_worker_main, args=(self._settings, listener), name="aioaccum-serve-worker"
        )
        worker.start()
        return worker

    def _watch(self, listener: socket.socket) -> bool:
        """Replace workers that die until a signal comes; True if one could not even start."""
        while not self._stopping.is_set():
            multiprocessing.connection.wait([w.sentinel for w in self._workers], timeout=0.5)
            for index, worker in enumerate(self._workers):
                if worker.exitcode is None or self._stopping.is_set():
                    continue
                if worker.exitcode == _STARTUP_FAILURE:
                    log.error("worker %d could not start (see above); stopping", worker.pid)
                    self._stopping.set()
                    self._stop()
                    return True
                log.warning(
                    "worker %d exited with status %s; starting another", worker.pid, worker.exitcode
                )
                self._workers[index] = self._start(listener)
        return False

    def _stop(self) -> int:
        """Drain every worker; 0 if each exited 0 within its bound."""
        settings = self._settings
        bound = (settings.shutdown_grace_ms + settings.close_timeout_ms) / 1000 + _EXIT_MARGIN_S
        for worker in self._workers:
            if worker.exitcode is None and worker.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGTERM)
        status = 0
        for worker in self._workers:
            worker.join(bound)
            if worker.exitcode is None:
                log.error(
                    "worker %d did not exit within %.0f s of SIGTERM; killing it", worker.pid, bound
                )
                worker.kill()
                worker.join()
                status = 1
            elif worker.exitcode != 0:
                status = 1
        return status
