"""The produce connection: aioaccum's own, an asyncio protocol on one broker socket.

Theory of operation
-------------------
* **Pipelined, no task per request.** A request is written at once and gets an entry (its
  correlation id, deadline and completion) at the tail of a FIFO; a broker answers a
  connection's requests in order, so each response belongs to the head, which is checked by
  correlation id. ``data_received`` cuts frames and calls each produce request's completion,
  ``done(request, answers, error)``, with the answers read in one pass; nothing is scheduled or
  awaited per request. A :class:`ProduceRequest` is its own entry: one object per request, which
  the sender also keeps as its handle (:meth:`ProduceRequest.cancel`).
* **One deadline structure.** One timer per connection, armed for the earliest deadline when
  none is armed; completions never cancel it. When it fires it looks at the FIFO (at most
  ``max_in_flight`` entries): a request past its deadline closes the connection (as Java's
  NetworkClient does on a request timeout), failing everything in flight; otherwise it is
  re-armed for the earliest deadline, or for the idle limit (``connections_max_idle_ms``).
* **Scatter/gather.** A produce request is a list of buffers: the header and the small pieces
  between batches as ``bytes``, each batch as the memoryview of its pooled buffer, handed to
  ``transport.writelines`` (uvloop writes them with ``writev``; asyncio's selector loop joins
  them on Python 3.11 and uses ``sendmsg`` from 3.12).
* **Buffer lifetime (Java's KAFKA-19012).** A transport may keep references to the buffers it
  could not send at once. The write-buffer limits are (0, 0): ``pause_writing`` is called as
  soon as anything stays queued, ``resume_writing`` once the queue is empty (every byte given
  to the kernel, or encrypted into TLS's own buffers). A request's future completes only when
  (a) its response arrived (the broker had all its bytes, so the transport has none left), or
  (b) for ``acks=0``, the transport is not paused after the write, else at ``resume_writing``,
  or (c) the connection is lost: ``transport.abort()`` drops the queued buffers at once, and the
  requests fail in ``connection_lost``, which comes after. A caller that gives up on a request
  (:meth:`ProduceRequest.cancel`) while the transport is paused aborts the connection before it
  returns, so its buffers are never read again once the caller hands them back to the pool.
* **A write thread.** On a plaintext connection of the compiled path, every request (produce
  or not) goes to the connection's own write thread (:mod:`aioaccum._kafka.write_thread`)
  instead of the transport, in the same order; "the transport holds bytes" above then reads
  "the transport or the thread holds bytes": :meth:`ProduceConnection.close` detaches the
  connection from the thread (which drops its queued requests and waits out the one being
  written) before it aborts the transport, and an ``acks=0`` request completes when the thread
  reports it written in full.
* **Several buffers per batch.** A batch is a list of buffers (its pooled chunks, the header
  first); its size in the request is the sum of theirs, and each goes to ``writelines`` as it
  is.
* **Authentication.** ApiVersions first (the produce version: 3..7, or 12 for KIP-890
  transactions); then SASL (:mod:`aioaccum._kafka.sasl`). Before writing a produce request
  past the session's re-authentication time, the connection re-authenticates (KIP-368): the
  exchange's requests queue behind those in flight, and produce requests arriving meanwhile
  are held and written when it ends (or fail, never written, if it fails).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import random
import socket
import ssl
import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

import aiokafka.errors as kerr

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka import sasl
from aioaccum._kafka.errors import translate
from aioaccum._kafka.oauth import MECHANISM as OAUTHBEARER
from aioaccum._kafka.oauth import OAuthBearerFailed
from aioaccum._kafka.produce import (
    PartitionResponse,
    ProduceAnswers,
    read_answers,
    request_parts,
)
from aioaccum._kafka.write_thread import (
    WriteSlot,
    WriteThread,
    deliver_wakeups,
    start_write_thread,
)
from aioaccum.errors import AioAccumError

__all__ = [
    "Batch",
    "Batches",
    "ConnectionSettings",
    "Done",
    "ProduceConnection",
    "ProduceRequest",
    "open_connection",
]

API_VERSIONS = 18
PRODUCE = 0
_CLASSIC_VERSIONS = (7, 6, 5, 4, 3)
_TXN_VERSION = 12
# Java's SaslClientAuthenticator: re-authenticate at 85% to 95% of the session lifetime.
REAUTH_FACTOR = 0.85
REAUTH_JITTER = 0.10

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">ihhi")  # size, api key, version, correlation id
_INF = float("inf")
_CLOSE_WAIT_S = 1.0

log = logging.getLogger(__name__)

Batch = tuple[TopicPartition, Sequence[memoryview]]
"""A batch's partition and its buffers (the header first), as they go to the socket."""
Batches = Sequence[Batch]


class ConnectionSettings:
    """What every produce connection of one producer shares."""

    __slots__ = (
        "client_id",
        "credentials",
        "idle_timeout",
        "request_timeout",
        "socket_buffers",
        "ssl_context",
    )

    def __init__(
        self,
        *,
        client_id: str,
        request_timeout: float,
        idle_timeout: float = _INF,
        ssl_context: ssl.SSLContext | None = None,
        credentials: sasl.Credentials | None = None,
        socket_buffers: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.ssl_context = ssl_context
        self.credentials = credentials
        self.socket_buffers = socket_buffers


class _Pending:
    """One request written and not answered yet: an entry of a connection's FIFO."""

    __slots__ = ("correlation_id", "deadline", "flexible")

    correlation_id: int
    deadline: float
    flexible: bool

    def read_answer(self, body: bytes) -> Any:
        raise NotImplementedError

    def finish(self, result: Any, error: BaseException | None) -> None:
        raise NotImplementedError


class _Call(_Pending):
    """A request other than produce (ApiVersions, SASL): its answer settles a future."""

    __slots__ = ("future", "read")

    def __init__(self, read: Callable[[bytes], Any], future: asyncio.Future[Any]) -> None:
        self.read = read
        self.future = future

    def read_answer(self, body: bytes) -> Any:
        return self.read(body)

    def finish(self, result: Any, error: BaseException | None) -> None:
        fut = self.future
        if fut.done():
            return
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)


Done = Callable[["ProduceRequest", Any, "BaseException | None"], None]
"""A produce request's completion: ``done(request, answers, None)`` with the partitions' answers
(:class:`~aioaccum._kafka.produce.ProduceAnswers`), or ``done(request, None, error)``. Called
once, from the loop (never from inside the call that sent the request), unless cancelled."""


class ProduceRequest(_Pending):
    """One produce request from its sending to its end: written and in the FIFO, held behind a
    re-authentication, or waiting for its connection to open
    (:class:`~aioaccum._kafka.connections.ProduceConnections`). The sender keeps it as the
    request's handle."""

    __slots__ = ("acks", "batches", "conn", "done", "timeout_ms", "transactional_id", "v12",
                 "version", "write_seq")

    def __init__(
        self,
        acks: int,
        timeout_ms: int,
        batches: Batches,
        transactional_id: str | None,
        v12: bool,
        done: Done,
    ) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.batches = batches
        self.transactional_id = transactional_id
        self.v12 = v12
        self.done: Done | None = done
        self.conn: ProduceConnection | None = None
        self.version = 0
        self.write_seq = 0  # its write on the connection's thread, 0 with none

    def read_answer(self, body: bytes) -> ProduceAnswers:
        return read_answers(self.version, body, self.batches)

    def finish(self, result: Any, error: BaseException | None) -> None:
        done = self.done
        if done is None:
            return  # cancelled, or finished already
        self.done = None
        try:
            done(self, result, error)
        except Exception:
            # A completion ends its own failures (the sender's fails the records); one that
            # escapes must not stop this connection from reading the next answers.
            log.exception("the completion of a produce request raised")

    def cancel(self) -> None:
        """Give up on the request: ``done`` is never called. If the transport may still hold
        its buffers, the connection is aborted, which drops them; :meth:`released` says when
        the buffers may go back to the pool."""
        self.done = None
        conn = self.conn
        if conn is not None and conn.holds_buffers_of(self) and conn.usable:
            conn.close()

    async def released(self) -> None:
        """Return once no transport holds the request's buffers (after :meth:`cancel`): at
        once unless its connection is closing, else once that transport has closed (bounded)."""
        conn = self.conn
        if conn is not None and conn._closing is not None and not conn._lost:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.wait_closed(), _CLOSE_WAIT_S)


def _lost_error(where: str, possibly_written: bool, cause: BaseException | None) -> AioAccumError:
    error = translate(kerr.KafkaConnectionError(f"connection to {where} lost: {cause!r}"))
    error.possibly_written = possibly_written
    return error


class ProduceConnection:
    """One connection to one broker for produce requests (see the module).

    It has the methods of ``asyncio.Protocol`` without deriving from it: compiled, it is an
    extension type, which can only derive from another. Event loops call a protocol's methods
    by name (uvloop's and asyncio's alike), so it is a protocol all the same.
    """

    def __init__(
        self, where: str, settings: ConnectionSettings, write_thread: bool = False
    ) -> None:
        self.where = where
        self._settings = settings
        self._write_thread = write_thread
        self._writer: WriteThread | None = None
        self._slot: WriteSlot | None = None
        self._loop = asyncio.get_running_loop()
        self._client_id = settings.client_id.encode()
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._pending: collections.deque[_Pending] = collections.deque()
        # acks=0 requests and their answers, until the transport has let go of their buffers.
        # With the write thread, each with the sequence number of its write.
        self._unflushed: list[tuple[ProduceRequest, Any, int]] = []
        self._held: list[ProduceRequest] = []
        self._correlation = 0
        self._paused = False
        self._closing: AioAccumError | None = None
        self._lost = False
        self._gone: asyncio.Future[None] = self._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _INF
        self._last_used = self._loop.time()
        self._reauth_at = _INF
        self._auth_task: asyncio.Task[None] | None = None
        self._auth_version = 1
        self.produce_versions: tuple[int, int] = (0, -1)
        self.authentications = 0
        self.reauthentications = 0

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self._transport = transport = cast(asyncio.Transport, transport)
        # (0, 0): paused whenever a byte is queued, resumed once the queue is empty.
        transport.set_write_buffer_limits(0, 0)
        if self._write_thread and transport.get_extra_info("sslcontext") is None:
            sock = transport.get_extra_info("socket")
            writer = start_write_thread() if sock is not None else None
            if writer is not None:
                slot = writer.attach(sock.fileno())
                if slot is None:
                    writer.close()
                else:
                    slot.owner_conn = self
                    self._writer, self._slot = writer, slot
                    self._loop.add_reader(writer.read_fd, deliver_wakeups, writer)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._finish_unflushed()

    def _finish_unflushed(self) -> None:
        unflushed = self._unflushed
        if not unflushed:
            return
        slot = self._slot
        if slot is None:
            if self._paused:
                return
            done, self._unflushed = unflushed, []
        else:
            # Those the thread has written in full, whatever it was given after them.
            sent = slot.sent
            done = [entry for entry in unflushed if entry[2] <= sent]
            self._unflushed = [entry for entry in unflushed if entry[2] > sent]
        for request, answers, _ in done:
            request.finish(answers, None)

    def on_writes(self) -> None:
        """The write thread wrote a request it was asked to report, or stopped on an error."""
        slot = self._slot
        if slot is None:
            return
        code = slot.error
        if code and self._usable():
            cause = OSError(code, os.strerror(code))
            self.close(_lost_error(self.where, True, cause))
            return
        self._finish_unflushed()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos = 0
        end = len(buffer)
        while end - pos >= 4:
            size = _INT32.unpack_from(buffer, pos)[0]
            if end - pos - 4 < size:
                break
            frame = bytes(buffer[pos + 4 : pos + 4 + size])
            pos += 4 + size
            self._answer(frame)
            if self._lost or self._closing is not None:
                return
        if pos:
            del buffer[:pos]

    def eof_received(self) -> bool | None:
        return False  # close: a broker that stops writing is gone

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._detach()
        if not self._gone.done():
            self._gone.set_result(None)
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        written = self._closing
        if written is None:
            written = _lost_error(self.where, True, exc)
        pending, self._pending = self._pending, collections.deque()
        for entry in pending:
            entry.finish(None, written)
        unflushed, self._unflushed = self._unflushed, []
        for request, _, _ in unflushed:
            request.finish(None, written)
        held, self._held = self._held, []
        for request in held:
            request.finish(None, _lost_error(self.where, False, exc))
        if self._auth_task is not None:
            self._auth_task.cancel()

    # --- state

    @property
    def usable(self) -> bool:
        return self._usable()

    def _usable(self) -> bool:
        # A method as well as the property: from inside the class, compiled, a C call.
        return not self._lost and self._closing is None and self._transport is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def flushed(self) -> bool:
        """Whether the transport holds no bytes of ours (nothing queued)."""
        return not self.holding_buffers

    @property
    def holding_buffers(self) -> bool:
        """Whether the transport or the write thread may still read buffers of ours."""
        slot = self._slot
        return self._paused or (slot is not None and slot.busy)

    def holds_buffers_of(self, request: ProduceRequest) -> bool:
        """Whether the transport or the write thread may still read ``request``'s buffers."""
        slot = self._slot
        if slot is not None:
            return request.write_seq > slot.written
        return self._paused

    def _detach(self) -> None:
        """Take the connection off its write thread and stop the thread: afterwards nothing
        but the transport reads its buffers (see WriteSlot.detach)."""
        slot, writer = self._slot, self._writer
        self._slot = self._writer = None
        if slot is not None:
            slot.detach()
        if writer is not None:
            if not self._loop.is_closed():
                self._loop.remove_reader(writer.read_fd)
            writer.close()

    def close(self, error: AioAccumError | None = None) -> None:
        """Abort the connection: its queued bytes are dropped now, and what is in flight fails
        (with ``error``, else a lost connection) in ``connection_lost``."""
        if self._closing is None:
            self._closing = error or _lost_error(self.where, True, None)
        # Before the abort: once detached, the thread reads none of the buffers of the requests
        # that connection_lost is about to fail (and their batches to hand back to the pool).
        self._detach()
        transport = self._transport
        if transport is not None:
            transport.abort()

    async def wait_closed(self) -> None:
        """Return once the transport has closed (after :meth:`close`: the next loop turns)."""
        if self._transport is None and not self._lost:
            return  # never connected
        await asyncio.shield(self._gone)

    # --- requests

    def _next_id(self) -> int:
        self._correlation = cid = (self._correlation + 1) & 0x7FFFFFFF
        return cid

    def _write(self, parts: list[bytes | memoryview], notify: bool = False) -> int:
        """Write a request; returns the write thread's sequence number for it (0 without)."""
        slot = self._slot
        if slot is not None:
            seq = slot.submit(parts, notify)
        else:
            transport = self._transport
            assert transport is not None
            transport.writelines(parts)
            seq = 0
        self._last_used = self._loop.time()
        return seq

    def _expect(self, cid: int, entry: _Pending, flexible: bool) -> None:
        entry.correlation_id = cid
        entry.flexible = flexible
        entry.deadline = deadline = self._last_used + self._settings.request_timeout
        self._pending.append(entry)
        if deadline < self._timer_at:
            self._arm(deadline)

    def call(self, api_key: int, version: int, body: bytes, read: Callable[[bytes], Any]
             ) -> asyncio.Future[Any]:
        """A request in the classic (non-flexible) format, header v1; its answer is
        ``read(body of the response)``."""
        if not self._usable():
            fut = self._loop.create_future()
            fut.set_exception(_lost_error(self.where, False, None))
            return fut
        cid = self._next_id()
        header = _HEADER.pack(10 + len(self._client_id) + len(body), api_key, version, cid)
        self._write([header + _INT16.pack(len(self._client_id)) + self._client_id + body])
        fut = self._loop.create_future()
        self._expect(cid, _Call(read, fut), False)
        return fut

    def produce(
        self,
        *,
        acks: int,
        timeout_ms: int,
        batches: Batches,
        transactional_id: str | None,
        v12: bool,
    ) -> asyncio.Future[Any]:
        """:meth:`send_produce` with a future for its result: the partitions' answers (for
        ``acks=0``, once the transport has let go of the buffers)."""
        fut = self._loop.create_future()
        self.send_produce(ProduceRequest(
            acks, timeout_ms, batches, transactional_id, v12, functools.partial(_settle, fut)
        ))
        return fut

    def send_produce(self, request: ProduceRequest) -> None:
        """Write one produce request now (or once a re-authentication ends); its completion
        comes later from the loop, whatever happens."""
        if not self._usable():
            self._fail_soon(request, _lost_error(self.where, False, None))
            return
        try:
            request.version = self._version(request.v12)
        except AioAccumError as exc:
            exc.possibly_written = False
            self._fail_soon(request, exc)
            return
        request.conn = self
        if self._auth_task is not None or self._loop.time() >= self._reauth_at:
            self._held.append(request)
            if self._auth_task is None:
                self._start_reauthentication()
            return
        self._write_produce(request)

    def _fail_soon(self, request: ProduceRequest, error: AioAccumError) -> None:
        # Never from inside the caller's call: it may not have taken the request in yet.
        self._loop.call_soon(request.finish, None, error)

    def _version(self, v12: bool) -> int:
        low, high = self.produce_versions
        if v12:
            if low <= _TXN_VERSION <= high:
                return _TXN_VERSION
        else:
            for version in _CLASSIC_VERSIONS:
                if low <= version <= high:
                    return version
        raise translate(
            kerr.IncompatibleBrokerVersion(
                f"{self.where} offers produce versions {low}..{high}; aioaccum needs "
                f"{_TXN_VERSION if v12 else '3..7'}"
            )
        )

    def _write_produce(self, request: ProduceRequest) -> None:
        by_topic: dict[str, list[tuple[int, Sequence[memoryview]]]] = {}
        for tp, parts in request.batches:
            # By name: compiled, an index into a named tuple goes the generic way, 4x the cost.
            topic = tp.topic
            found = by_topic.get(topic)
            if found is None:
                by_topic[topic] = [(tp.partition, parts)]
            else:
                found.append((tp.partition, parts))
        cid = self._next_id()
        version = request.version
        acks0 = request.acks == 0
        seq = request.write_seq = self._write(request_parts(
            version, cid, self._client_id, request.transactional_id, request.acks,
            request.timeout_ms, by_topic,
        ), acks0)
        if acks0:
            # No answer comes: done once neither the transport nor the thread holds a buffer.
            answers = _unanswered(request.batches)
            if self._slot is not None or self.holding_buffers:
                # With the write thread, always its report: a request it dropped after a failed
                # write must fail with the connection, not count as written.
                self._unflushed.append((request, answers, seq))
            else:
                self._loop.call_soon(request.finish, answers, None)
            return
        self._expect(cid, request, version >= 9)

    # --- answers

    def _answer(self, frame: bytes) -> None:
        pending = self._pending
        if not pending:
            self.close(self._protocol_error("an answer to no request"))
            return
        entry = pending.popleft()
        cid = _INT32.unpack_from(frame, 0)[0]
        if cid != entry.correlation_id:
            pending.appendleft(entry)
            self.close(self._protocol_error(
                f"correlation id {cid} where {entry.correlation_id} was next"
            ))
            return
        start = 4
        if entry.flexible:
            tags = frame[4]
            start = 5
            if tags:  # no response-header tag is defined; skip any (uvarint sizes, small)
                for _ in range(tags):
                    start += 1
                    size = frame[start]
                    start += 1 + size
        try:
            result = entry.read_answer(frame[start:])
        except Exception as exc:
            pending.appendleft(entry)
            self.close(self._protocol_error(f"an answer that cannot be read ({exc!r})"))
            return
        entry.finish(result, None)
        if not pending and self._timer is None:
            self._arm(self._last_used + self._settings.idle_timeout)

    def _protocol_error(self, what: str) -> AioAccumError:
        return translate(kerr.CorrelationIdError(f"{self.where} sent {what}"))

    # --- the deadline structure

    def _arm(self, when: float) -> None:
        if when == _INF:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = _INF
        if not self._usable():
            return
        now = self._loop.time()
        pending = self._pending
        if pending:
            earliest = min(entry.deadline for entry in pending)
            if earliest <= now:
                timeout_ms = self._settings.request_timeout * 1000
                log.debug("a request to %s timed out after %.0f ms: closing the connection",
                          self.where, timeout_ms)
                error = translate(kerr.RequestTimedOutError(
                    f"no answer from {self.where} within {timeout_ms:.0f} ms "
                    "(request_timeout_ms)"
                ))
                error.possibly_written = True
                self.close(error)
                return
            self._arm(earliest)
        elif now - self._last_used >= self._settings.idle_timeout:
            log.debug("closing the idle produce connection to %s", self.where)
            self.close()
        else:
            self._arm(self._last_used + self._settings.idle_timeout)

    # --- set-up and authentication

    async def negotiate(self) -> None:
        """ApiVersions, then SASL when configured (bounded by the request timeout each)."""
        versions = await self.call(API_VERSIONS, 0, b"", _read_api_versions)
        self.produce_versions = versions.get(PRODUCE, (0, -1))
        self._auth_version = 1 if versions.get(sasl.AUTHENTICATE, (0, 0))[1] >= 1 else 0
        if self._settings.credentials is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        credentials = self._settings.credentials
        assert credentials is not None
        started = self._loop.time()
        again = self.authentications > 0
        code, enabled = await self.call(
            sasl.HANDSHAKE, 1, sasl.encode_handshake(credentials.mechanism), sasl.read_handshake
        )
        if code:
            raise _mechanism_refused(credentials.mechanism, self.where, code, enabled)
        version = self._auth_version

        def exchange(token: bytes) -> asyncio.Future[sasl.AuthAnswer]:
            return self.call(
                sasl.AUTHENTICATE, version, sasl.encode_auth(token),
                lambda body: sasl.read_auth(version, body),
            )

        lifetime_ms = await sasl.run_mechanism(credentials, exchange, self.where)
        self.authentications += 1
        self.reauthentications += again
        if lifetime_ms > 0:
            factor = REAUTH_FACTOR + REAUTH_JITTER * random.random()
            self._reauth_at = started + lifetime_ms / 1000 * factor
        else:
            self._reauth_at = _INF
        log.debug("%s %s with SASL %s; session lifetime %d ms",
                  "re-authenticated with" if again else "authenticated to", self.where,
                  credentials.mechanism, lifetime_ms)

    def _start_reauthentication(self) -> None:
        task = self._auth_task = self._loop.create_task(self._reauthenticate())
        task.add_done_callback(_retrieve)

    async def _reauthenticate(self) -> None:
        try:
            await self._authenticate()
        except BaseException as exc:
            error = exc if isinstance(exc, AioAccumError) else None
            if error is None and isinstance(exc, (kerr.KafkaError, OSError, TimeoutError)):
                error = translate(exc)
            held, self._held = self._held, []
            for request in held:
                failure = error or _lost_error(self.where, False, exc)
                failure.possibly_written = False
                request.finish(None, failure)
            self._auth_task = None
            self.close(error)
            if not isinstance(exc, Exception):
                raise
            return
        self._auth_task = None
        held, self._held = self._held, []
        for request in held:
            if request.done is None:
                continue  # cancelled meanwhile
            try:
                request.version = self._version(request.v12)
            except AioAccumError as exc:
                exc.possibly_written = False
                request.finish(None, exc)
                continue
            self._write_produce(request)


def _mechanism_refused(mechanism: str, where: str, code: int, enabled: list[str]) -> Exception:
    names = ", ".join(enabled) or "none"
    text = (f"the listener at {where} does not accept SASL {mechanism} (error code {code}; it "
            f"accepts: {names}); use a listener that has {mechanism} in "
            "sasl.enabled.mechanisms, or change sasl_mechanism")
    if mechanism == OAUTHBEARER:
        return OAuthBearerFailed(text)
    error: Exception = kerr.UnsupportedSaslMechanismError(text)
    return error


def _read_api_versions(body: bytes) -> dict[int, tuple[int, int]]:
    code = _INT16.unpack_from(body, 0)[0]
    if code:
        raise kerr.UnsupportedVersionError(f"ApiVersions v0 refused (error code {code})")
    count = _INT32.unpack_from(body, 2)[0]
    found = {}
    pos = 6
    for _ in range(count):
        key, low, high = struct.unpack_from(">hhh", body, pos)
        found[key] = (low, high)
        pos += 6
    return found


def _settle(
    fut: asyncio.Future[Any], _request: ProduceRequest, result: Any, error: BaseException | None
) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


def _unanswered(batches: Batches) -> ProduceAnswers:
    """The answers of an ``acks=0`` request: no error, no offsets."""
    return ProduceAnswers((tp, PartitionResponse(None, -1, -1)) for tp, _ in batches)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def open_connection(
    host: str, port: int, settings: ConnectionSettings, write_thread: bool = False
) -> ProduceConnection:
    """A negotiated (and authenticated) produce connection, within the request timeout.

    Raises:
        AioAccumError: as :func:`aioaccum._kafka.errors.translate` makes them; never written.
    """
    loop = asyncio.get_running_loop()
    where = f"{host}:{port}"
    conn: ProduceConnection | None = None
    try:
        async with asyncio.timeout(settings.request_timeout):
            ctx = settings.ssl_context
            # A protocol by its methods, not its base class (see ProduceConnection).
            _, protocol = await loop.create_connection(
                lambda: cast(asyncio.Protocol, ProduceConnection(where, settings, write_thread)),
                host, port, ssl=ctx, server_hostname=host if ctx is not None else None,
            )
            conn = cast(ProduceConnection, protocol)
            _size_socket(conn, settings.socket_buffers)
            await conn.negotiate()
    except AioAccumError as exc:
        await _discard(conn)
        exc.possibly_written = False
        raise
    except (kerr.KafkaError, OSError, TimeoutError) as exc:
        await _discard(conn)
        if isinstance(exc, TimeoutError):
            # A broker that does not answer in time is not ready, as a refused connection:
            # retriable, and the metadata may be stale.
            timeout_ms = settings.request_timeout * 1000
            exc = kerr.KafkaConnectionError(f"no connection to {where} within {timeout_ms:.0f} ms")
        error = translate(exc)
        error.possibly_written = False
        raise error from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn


async def _discard(conn: ProduceConnection | None) -> None:
    """Close a connection that failed its set-up, and let its transport finish closing (an
    event loop closed before that finds the handle open); bounded, as every wait."""
    if conn is None:
        return
    conn.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(conn.wait_closed(), _CLOSE_WAIT_S)


def _size_socket(conn: ProduceConnection, buffers: Sequence[tuple[int, int]]) -> None:
    transport = conn._transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option, size in buffers:
            sock.setsockopt(socket.SOL_SOCKET, option, size)
    except OSError as exc:
        log.warning("could not set the socket options of %s: %s", conn.where, exc)
