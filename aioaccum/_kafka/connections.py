"""The produce connections of one producer: one per broker, opened on first need, reopened
after a loss on the next request, with Java's reconnect back-off.

A node whose last attempt failed is not tried again before its back-off ends
(``reconnect.backoff.ms`` = 50 ms doubling to ``reconnect.backoff.max.ms`` = 1 s, with 20%
jitter: Java's defaults; aioaccum has no such settings): a request meanwhile fails as never
written, and the sender retries it after its own ``retry_backoff_ms``. One connection attempt
per node runs at a time (the one task of this module, per node and attempt, never per request);
the requests for that node queue behind it and are written, in order, once it succeeds, or fail
as never written with its error. It is bounded by the request timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import aiokafka.errors as kerr

from aioaccum._kafka.connection import (
    Batches,
    ConnectionSettings,
    Done,
    ProduceConnection,
    ProduceRequest,
    open_connection,
)
from aioaccum._kafka.errors import translate
from aioaccum.errors import AioAccumError, BrokerError

__all__ = ["ProduceConnections"]

RECONNECT_BACKOFF_S = 0.05
RECONNECT_BACKOFF_MAX_S = 1.0
_JITTER = 0.2

log = logging.getLogger(__name__)

Address = Callable[[int], "tuple[str, int] | None"]


class ProduceConnections:
    """Produce connections by node id.

    Args:
        settings: What every connection shares (TLS, SASL, timeouts, socket sizes).
        address: A node id's host and port from the cluster's metadata, or None.
    """

    def __init__(
        self, settings: ConnectionSettings, address: Address, *, write_thread: bool = True
    ) -> None:
        self._settings = settings
        self._address = address
        # A write thread per plaintext connection (aioaccum._kafka.write_thread).
        self._write_thread = write_thread
        self._conns: dict[int, ProduceConnection] = {}
        self._connecting: dict[int, asyncio.Task[ProduceConnection]] = {}
        # Requests for a node whose connection is being opened, in the order they came.
        self._waiting: dict[int, list[ProduceRequest]] = {}
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._closed = False
        # SASL exchanges of connections replaced since (for the totals below).
        self._past_authentications = 0
        self._past_reauthentications = 0

    @property
    def authentications(self) -> int:
        """SASL exchanges that succeeded on these connections, first ones and again."""
        live = sum(c.authentications for c in self._conns.values())
        return self._past_authentications + live

    @property
    def reauthentications(self) -> int:
        """SASL exchanges that succeeded on a connection authenticated before (KIP-368)."""
        live = sum(c.reauthentications for c in self._conns.values())
        return self._past_reauthentications + live

    def connection(self, node: int) -> ProduceConnection | None:
        """The usable connection to ``node``, if there is one now."""
        conn = self._conns.get(node)
        return conn if conn is not None and conn.usable else None

    def send_produce(
        self,
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Batches,
        transactional_id: str | None,
        v12: bool,
        done: Done,
    ) -> ProduceRequest:
        """Send one produce request to ``node``: written now on its connection, or queued
        behind the node's connection attempt. ``done`` comes later from the loop, always:
        with the answers, or with an error whose ``possibly_written`` says if it was sent.
        Not keyword-only: the adapter passes every argument by position, once per request."""
        request = ProduceRequest(acks, timeout_ms, batches, transactional_id, v12, done)
        conn = self._conns.get(node)
        if conn is not None and conn.usable:
            conn.send_produce(request)
            return request
        waiting = self._waiting.get(node)
        if waiting is not None:
            waiting.append(request)  # behind the attempt under way
            return request
        failure = self._start_connecting(node)
        if failure is not None:
            asyncio.get_running_loop().call_soon(request.finish, None, failure)
        else:
            self._waiting[node] = [request]
        return request

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Batches,
        transactional_id: str | None,
        v12: bool,
    ) -> Any:
        """:meth:`send_produce`, awaited: the partitions' answers."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(_request: ProduceRequest, result: Any, error: BaseException | None) -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)

        request = self.send_produce(
            node, acks=acks, timeout_ms=timeout_ms, batches=batches,
            transactional_id=transactional_id, v12=v12, done=done,
        )
        try:
            return await fut
        except asyncio.CancelledError:
            # The caller returns the buffers to the pool next: the transport must not hold them.
            request.cancel()
            raise

    def _start_connecting(self, node: int) -> AioAccumError | None:
        """Start the node's connection attempt; or why it cannot start now."""
        if self._closed:
            return _not_ready(node, "the producer is closing")
        loop = asyncio.get_running_loop()
        wait = self._retry_at.get(node, 0.0) - loop.time()
        if wait > 0:
            return _not_ready(node, f"reconnecting in {wait * 1000:.0f} ms")
        address = self._address(node)
        if address is None:
            # Stale metadata, most often a broker that was down when it was fetched: the
            # sender must refresh it, or it would wait for metadata_max_age_ms to see the
            # broker back.
            return _not_ready(node, "not in the cluster's metadata", stale=True)
        task = loop.create_task(self._open(node, *address))
        self._connecting[node] = task
        task.add_done_callback(lambda done: self._opened(node, done))
        return None

    async def _open(self, node: int, host: str, port: int) -> ProduceConnection:
        return await open_connection(host, port, self._settings, self._write_thread)

    def _opened(self, node: int, task: asyncio.Task[ProduceConnection]) -> None:
        if self._connecting.get(node) is task:
            del self._connecting[node]
        waiting = self._waiting.pop(node, [])
        if task.cancelled():
            failure = _not_ready(node, "the producer is closing")
            for request in waiting:
                request.finish(None, failure)
            return
        exc = task.exception()
        if exc is None:
            conn = task.result()
            if self._closed:
                conn.close()
                failure = _not_ready(node, "the producer is closing")
                for request in waiting:
                    request.finish(None, failure)
                return
            replaced = self._conns.get(node)
            if replaced is not None:
                self._past_authentications += replaced.authentications
                self._past_reauthentications += replaced.reauthentications
            self._conns[node] = conn
            self._failures.pop(node, None)
            self._retry_at.pop(node, None)
            for request in waiting:
                if request.done is not None:  # not cancelled meanwhile
                    conn.send_produce(request)
            return
        failures = self._failures[node] = self._failures.get(node, 0) + 1
        backoff = min(RECONNECT_BACKOFF_S * 2 ** (failures - 1), RECONNECT_BACKOFF_MAX_S)
        backoff *= 1 + _JITTER * (2 * random.random() - 1)
        self._retry_at[node] = asyncio.get_running_loop().time() + backoff
        log.debug("no produce connection to node %d (%r); next attempt in %.0f ms",
                  node, exc, backoff * 1000)
        if isinstance(exc, AioAccumError):
            failure = exc  # open_connection's errors say never written
        else:
            failure = translate(kerr.KafkaConnectionError(f"node {node}: {exc!r}"))
            failure.possibly_written = False
        for request in waiting:
            request.finish(None, failure)

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._connecting.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            conn.close()
        if conns:
            # The transports close on the next loop turns; an event loop closed before that
            # would find their handles open. Bounded, as every wait.
            await asyncio.wait(
                [asyncio.ensure_future(c.wait_closed()) for c in conns.values()],
                timeout=self._settings.request_timeout,
            )


def _not_ready(node: int, why: str, *, stale: bool = False) -> AioAccumError:
    error = translate(kerr.NodeNotReadyError(f"node {node}: {why}"))
    error.possibly_written = False
    if stale and isinstance(error, BrokerError):
        error.invalid_metadata = True
    return error
