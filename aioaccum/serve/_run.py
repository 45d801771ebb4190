"""Running the gateway: uvicorn on uvloop and httptools, in one process or several.

With ``workers`` > 1 this process binds the listening socket and starts that many worker
processes, which all accept on it, each with its own producer; it only watches them and
passes SIGTERM and SIGINT on. A worker that dies is replaced after a pause that doubles with
each death in a row (0.5 s up to 30 s), so a worker that crashes at once does not spin. A worker
whose supervisor dies drains and exits by itself (it checks every second).

A signal starts a drain, in every worker: stop accepting connections, stop reading streams,
answer every request in flight (those still waiting for acknowledgements after
``shutdown.grace.ms`` are answered 503), flush the producer within ``close.timeout.ms``, and
exit 0. uvicorn itself would raise the signal again after its shutdown, making a clean drain
look like a kill; here the exit status says whether the drain went well: 1 when records that
were accepted were dropped (not acknowledged within ``close.timeout.ms``), or when a forced exit
(a second Ctrl+C) skipped the flush. The supervisor exits 1 when any worker did, or died.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import ssl
import sys
import threading
import time
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from aioaccum._runtime.loops import default_loop_factory
from aioaccum.errors import ConfigError

from ._app import create_app
from ._connections import ConnectionLimits, guarded_protocol
from ._gateway import Draining
from ._settings import ServeSettings
from ._writes import BoundedWrites

__all__ = ["serve"]

log = logging.getLogger("aioaccum.serve")

# The exit status of a worker whose server never started (the number uvicorn's own command uses
# for it); the supervisor then stops instead of starting another, which would fail the same way.
_STARTUP_FAILURE = 3
# A worker whose records were dropped, or whose flush a forced exit skipped.
_LOST_RECORDS = 1
# How often a worker checks that its supervisor is still there.
_PARENT_CHECK_S = 1.0
# The pause before replacing a dead worker: doubling per death in a row, up to the last.
_RESPAWN_FIRST_S = 0.5
_RESPAWN_MAX_S = 30.0
# A worker that ran this long before dying starts the doubling over.
_RESPAWN_RESET_S = 60.0
# Beyond the drain and the flush, for the interpreter and uvicorn's own steps.
_EXIT_MARGIN_S = 30.0


class _Server(uvicorn.Server):
    """uvicorn's server, which also starts the app's drain when a signal comes and does not
    raise the signal again once it has shut down."""

    def __init__(
        self,
        config: uvicorn.Config,
        draining: Draining,
        grace: float,
        parent: int | None,
        handshake_timeout: float,
    ) -> None:
        super().__init__(config)
        self._draining = draining
        self._grace = grace
        self._parent = parent
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handshake_timeout = handshake_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        if self.config.ssl is None:
            await super().startup(sockets)
            return
        # uvicorn creates the listening server itself and gives it no TLS handshake timeout
        # (60 s by default): for the span of its startup only, the loop's create_server gets
        # header.timeout.ms as that timeout.
        create_server = loop.create_server
        loop.create_server = functools.partial(  # type: ignore[method-assign]
            create_server, ssl_handshake_timeout=self._handshake_timeout
        )
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        watcher = asyncio.ensure_future(self._watch_parent()) if self._parent else None
        try:
            await super().serve(sockets)
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _watch_parent(self) -> None:
        """Drain when the supervisor is gone (killed, say): nobody would ever send SIGTERM."""
        while True:
            await asyncio.sleep(_PARENT_CHECK_S)
            if os.getppid() != self._parent:
                break
        log.warning("the supervisor (pid %s) is gone; draining", self._parent)
        self.handle_exit(signal.SIGTERM, None)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl+C: stop waiting
        else:
            self.should_exit = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._draining.begin, self._grace)


def _uvicorn_config(settings: ServeSettings) -> tuple[uvicorn.Config, Starlette]:
    app = create_app(settings)
    limits = ConnectionLimits(
        header_timeout_s=settings.header_timeout_ms / 1000,
        idle_timeout_s=settings.idle_timeout_ms / 1000,
        body_timeout_s=settings.read_timeout_ms / 1000,
        write_timeout_s=settings.write_timeout_ms / 1000,
        max_request_line=settings.max_request_line_bytes,
        max_header=settings.max_header_bytes,
        max_headers=settings.max_headers,
        max_head=settings.max_head_bytes,
        max_connections=settings.max_connections,
    )
    config = uvicorn.Config(
        BoundedWrites(app, settings.write_timeout_ms),
        host=settings.host,
        port=settings.port,
        loop="uvloop" if default_loop_factory() is not asyncio.new_event_loop else "asyncio",
        # uvicorn's httptools protocol with a deadline on every phase of a connection and
        # bounds on the request's head (see _connections).
        http=guarded_protocol(limits),
        lifespan="on",
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        access_log=settings.access_log,
        proxy_headers=False,
        server_header=False,
        # Requests in flight get the grace, then a few seconds to send their 503s.
        timeout_graceful_shutdown=int(settings.shutdown_grace_ms / 1000) + 5,
        # Unused: the protocol's idle.timeout.ms replaces uvicorn's keep-alive timer.
        timeout_keep_alive=max(int(settings.idle_timeout_ms / 1000), 1),
        backlog=4096,
        # Beyond it uvicorn answers 503 at once: each connection costs memory before its
        # request reaches any of the byte bounds.
        limit_concurrency=settings.max_connections,
    )
    return config, app


def _run_worker(
    settings: ServeSettings, sockets: list[socket.socket] | None, parent: int | None
) -> int:
    """Serve until drained; the exit status (see the module's docstring)."""
    config, app = _uvicorn_config(settings)
    try:
        config.load()
    except (ssl.SSLError, OSError) as exc:
        # Checked before any worker starts (see serve); a file changed since then lands here.
        log.error("cannot serve HTTPS with tls.cert and tls.key: %s", exc)
        return _STARTUP_FAILURE
    server = _Server(
        config,
        app.state.draining,
        settings.shutdown_grace_ms / 1000,
        parent,
        settings.header_timeout_ms / 1000,
    )
    server.run(sockets=sockets)
    if not server.started:
        return _STARTUP_FAILURE
    if not app.state.shutdown_ran:
        log.error("the server was forced to exit before the producer was flushed")
        return _LOST_RECORDS
    if app.state.dropped:
        log.error("%d accepted record(s) were dropped at shutdown", app.state.dropped)
        return _LOST_RECORDS
    return 0


def _worker_main(settings: ServeSettings, listener: socket.socket, parent: int) -> None:
    """A worker process's entry (pickled by the spawn start method: module level)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: [%(process)d] %(message)s")
    sys.exit(_run_worker(settings, [listener], parent))


def _warn_if_exposed(settings: ServeSettings) -> None:
    host = settings.host
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False  # a host name: it may resolve to anything
    missing = [
        what
        for what, given in (("auth (--auth-file)", settings.auth_file), ("TLS", settings.tls_cert))
        if given is None
    ]
    if not loopback and missing:
        log.warning(
            "listening on %s, beyond this machine, without %s: anyone who reaches the port "
            "can produce to the cluster or read what is sent; give --auth-file and "
            "--tls-cert/--tls-key",
            settings.listen,
            " or ".join(missing),
        )


def _check_tls(settings: ServeSettings) -> None:
    """The certificate and key load together, or a ConfigError says why: before anything
    listens, so that no worker is started to fail the same way."""
    if settings.tls_cert is None or settings.tls_key is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(
            f"tls.cert {settings.tls_cert} and tls.key {settings.tls_key} cannot serve HTTPS: "
            f"{reason} (the key must be the certificate's, both PEM, the key unencrypted)"
        ) from None


def serve(settings: ServeSettings) -> int:
    """Serve until a signal drains the server; return the process's exit status.

    A certificate and key that cannot serve HTTPS are one ``error:`` line on stderr and the
    start-failure status (3), before anything listens or any worker starts.

    Raises:
        ConfigError: A setting is invalid (before anything listens).
    """
    _warn_if_exposed(settings)
    try:
        _check_tls(settings)
    except ConfigError as exc:
        # The server cannot start: the same status as a worker whose server never started,
        # so that whatever restarts the service sees a start failure, not a bad flag.
        print(f"error: {exc}", file=sys.stderr)
        return _STARTUP_FAILURE
    if settings.workers == 1:
        return _run_worker(settings, None, None)
    return _Supervisor(settings).run()


class _Supervisor:
    def __init__(self, settings: ServeSettings) -> None:
        self._settings = settings
        self._context = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._workers: list[multiprocessing.process.BaseProcess] = []
        self._died = False
        self._streak = 0
        self._last_death = 0.0

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
        if failed:
            return 1
        status = self._stop()
        return 1 if self._died else status

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._stopping.set()

    def _start(self, listener: socket.socket) -> multiprocessing.process.BaseProcess:
        worker = self._context.Process(
            target=_worker_main,
            args=(self._settings, listener, os.getpid()),
            name="aioaccum-serve-worker",
        )
        worker.start()
        return worker

    def _watch(self, listener: socket.socket) -> bool:
        """Replace workers that die until a signal comes; True if one could not even start."""
        due: dict[int, float] = {}  # worker index -> when its replacement starts
        # A first worker that cannot start means a bad setting: stop. A replacement that
        # cannot start (a broker outage meanwhile) is tried again after the backoff.
        replaced: set[int] = set()
        while not self._stopping.is_set():
            live = [w.sentinel for i, w in enumerate(self._workers) if i not in due]
            multiprocessing.connection.wait(live, timeout=0.5)
            now = time.monotonic()
            for index, worker in enumerate(self._workers):
                if self._stopping.is_set():
                    break
                if index in due:
                    if now >= due[index]:
                        del due[index]
                        replaced.add(index)
                        self._workers[index] = self._start(listener)
                    continue
                if worker.exitcode is None:
                    continue
                if worker.exitcode == _STARTUP_FAILURE and index not in replaced:
                    log.error("worker %d could not start (see above); stopping", worker.pid)
                    self._stopping.set()
                    self._stop()
                    return True
                self._died = True
                delay = self._respawn_delay(now)
                log.warning(
                    "worker %d exited with status %s; starting another in %.1f s",
                    worker.pid,
                    worker.exitcode,
                    delay,
                )
                due[index] = now + delay
        return False

    def _respawn_delay(self, now: float) -> float:
        if now - self._last_death > _RESPAWN_RESET_S:
            self._streak = 0
        self._last_death = now
        self._streak += 1
        return float(min(_RESPAWN_FIRST_S * 2 ** (self._streak - 1), _RESPAWN_MAX_S))

    def _stop(self) -> int:
        """Drain every worker; 0 if each exited 0 within its bound."""
        settings = self._settings
        bound = (settings.shutdown_grace_ms + settings.close_timeout_ms) / 1000 + _EXIT_MARGIN_S
        for worker in self._workers:
            if worker.exitcode is None and worker.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGTERM)
        status = 0
        # One deadline for all: N workers draining at once take as long as one.
        deadline = time.monotonic() + bound
        for worker in self._workers:
            worker.join(max(deadline - time.monotonic(), 0.0))
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
