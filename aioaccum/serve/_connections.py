"""Deadlines and bounds on every connection, in front of the application.

uvicorn's httptools protocol starts no timer before a connection's first answer, restarts its
keep-alive timer on any byte, buffers a request's head without a limit, and closes a connection
with ``transport.close()``, which waits as long as the client leaves the answer unread. The
protocol here is uvicorn's, with the connection's life in named phases, one deadline each:

=========  ==============================================  =====================================
phase      from                                            deadline, then
=========  ==============================================  =====================================
HEAD       the connection's start (after TLS), or the       ``header.timeout.ms`` (a total, not
           first byte of a request after an idle spell     per byte): 408 if it began, closed
BUSY       the request's head complete                     the application's own: the body's
                                                           ``read.timeout.ms``, the stream's ...
TAIL       the answer sent while the body still arrives    ``read.timeout.ms``: closed
IDLE       the answer sent and the request read whole      ``idle.timeout.ms``: closed
=========  ==============================================  =====================================

Beside them, at any phase: a client that takes no part of an answer within
``write.timeout.ms`` loses the connection (``abort()``: the queued answer is dropped), and any
close that has not completed ``write.timeout.ms`` later (an answer nobody reads) is an abort
too. The TLS handshake has ``header.timeout.ms`` as well (given to the listening server, see
``_run``).

The request's head is bounded before it is buffered: the bytes of a head are fed to the
parser only up to ``max.head.bytes``; beyond it, or beyond ``max.request.line.bytes`` for the
request line (414), ``max.header.bytes`` for one header or ``max.headers`` headers (431), the
answer is REST Proxy's error body and the connection closes. A transfer coding other than
``chunked`` is 501: the body would be read as if it were not encoded.

At ``max.connections`` a new connection first closes the one that has waited longest without a
request in flight (idle, or still sending its head), so silent sockets cannot hold every slot:
a request that arrives whole is served, one that trickles is the first to go.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["ConnectionLimits", "Phase", "guarded_protocol"]

log = logging.getLogger("aioaccum.serve")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What :func:`guarded_protocol` enforces, in seconds and bytes."""

    header_timeout_s: float
    idle_timeout_s: float
    body_timeout_s: float
    write_timeout_s: float
    max_request_line: int
    max_header: int
    max_headers: int
    max_head: int
    max_connections: int


class Phase(enum.Enum):
    HEAD = "receiving a request's head"
    BUSY = "serving a request"
    TAIL = "receiving the rest of a body already answered"
    IDLE = "idle between requests"


class _Refused(Exception):
    """A request refused before it reaches the application; answered, then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Transport:
    """The connection's transport, as uvicorn sees it: every close gets a bound.

    ``close()`` waits for the write buffer to drain, for ever if the client reads nothing;
    here it also starts the protocol's timer that aborts the connection if it is still there
    after ``write.timeout.ms``. Everything else goes straight to the real transport.
    """

    def __init__(self, transport: asyncio.Transport, on_close: Any) -> None:
        self._transport = transport
        self._on_close = on_close
        # Bound once, so that each call costs what it did without the wrapper.
        self.write = transport.write
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading
        self.get_extra_info = transport.get_extra_info
        self.get_write_buffer_size = transport.get_write_buffer_size
        self.abort = transport.abort

    def close(self) -> None:
        self._transport.close()
        self._on_close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and bounds of the module's docstring."""

    limits: ClassVar[ConnectionLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = Phase.HEAD
        self._since = self.loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._message_done = False
        self._lost = False

    # --- phases

    @property
    def phase(self) -> Phase:
        return self._phase

    def _enter(self, phase: Phase, timeout: float | None) -> None:
        self._phase = phase
        self._since = self.loop.time()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if timeout is not None and not self._lost:
            self._timer = self.loop.call_later(timeout, self._expired, phase)

    def _expired(self, phase: Phase) -> None:
        self._timer = None
        if self._lost or self._raw is None:
            return
        if phase is Phase.HEAD and self._head_bytes > 0:
            log.debug("%s: no complete request head within header.timeout.ms", self._peer())
            self._refuse(
                _Refused(
                    408,
                    f"the request's line and headers did not arrive within header.timeout.ms="
                    f"{self.limits.header_timeout_s * 1000:.0f} ms",
                )
            )
            return
        log.debug("%s: closed, %s for too long", self._peer(), phase.value)
        if phase is Phase.HEAD:
            self._raw.abort()  # nothing was asked, nothing to answer
        else:
            self.transport.close()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    # --- the transport's events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(cast(asyncio.Transport, _Transport(transport, self._closing)))
        self._enter(Phase.HEAD, self.limits.header_timeout_s)
        # uvicorn answers 503 to a request that finds max.connections taken, this one counted.
        if len(self.connections) >= self.limits.max_connections:
            self._evict()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        for timer in (self._timer, self._write_timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._write_timer = self._close_timer = None
        super().connection_lost(exc)

    def _closing(self) -> None:
        """A close was asked for: if the connection is still there after write.timeout.ms
        (an answer the client does not read), it is aborted."""
        if self._close_timer is None and not self._lost:
            self._close_timer = self.loop.call_later(self.limits.write_timeout_s, self._abort)

    def _abort(self) -> None:
        self._close_timer = None
        if not self._lost and self._raw is not None:
            log.info(
                "%s read none of the answer for write.timeout.ms=%.0f ms; the connection is "
                "aborted",
                self._peer(),
                self.limits.write_timeout_s * 1000,
            )
            self._raw.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None and not self._lost:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _stalled(self) -> None:
        self._write_timer = None
        self._abort()

    def data_received(self, data: bytes) -> None:
        if self._phase is Phase.IDLE:
            self._enter(Phase.HEAD, self.limits.header_timeout_s)
        try:
            while data and not self._lost:
                if not self._in_head:
                    self.parser.feed_data(data)
                    return
                room = self.limits.max_head - self._head_bytes
                if room <= 0:
                    raise _Refused(
                        431,
                        f"the request's line and headers are over max.head.bytes="
                        f"{self.limits.max_head} bytes",
                    )
                piece, data = data[:room], data[room:]
                self.parser.feed_data(piece)
                if self._in_head:
                    self._head_bytes += len(piece)
        except httptools.HttpParserUpgrade:
            # The request was served as a plain one (upgrades are never taken); what follows
            # its head on this connection is not read, as in uvicorn.
            log.debug("%s: an upgrade request, served without upgrading", self._peer())
        except httptools.HttpParserError as exc:
            refused = exc.__context__
            if isinstance(refused, _Refused):
                self._refuse(refused)
            else:
                log.debug("%s: malformed request: %s", self._peer(), exc)
                self._refuse(_Refused(400, "the request is not valid HTTP/1.1"))
        except _Refused as refused:
            self._refuse(refused)

    def _refuse(self, refused: _Refused) -> None:
        """Answer with REST Proxy's error body and close; the parser is not fed again."""
        if self._lost or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request is being served: its answer cannot be interleaved with this one.
            self.transport.close()
            return
        body = json.dumps({"error_code": refused.status, "message": str(refused)}).encode()
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[refused.status],
                    b"content-type: application/json\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()

    def _should_upgrade_to_ws(self) -> bool:
        return False  # no WebSocket routes: an upgrade would only skip these bounds

    # --- the parser's events

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        self._message_done = False

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_request_line:
            raise _Refused(
                414,
                f"the request's target is over max.request.line.bytes="
                f"{self.limits.max_request_line} bytes",
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(431, f"the request has more than max.headers={self.limits.max_headers}")
        if len(name) + len(value) > self.limits.max_header:
            raise _Refused(
                431,
                f"a header is over max.header.bytes={self.limits.max_header} bytes (name and "
                "value)",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        for name, value in self.headers:
            if name == b"transfer-encoding" and value.strip().lower() != b"chunked":
                raise _Refused(
                    501,
                    "Transfer-Encoding other than chunked is not served; send the body "
                    "uncompressed, chunked or with a Content-Length",
                )
        self._enter(Phase.BUSY, None)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._message_done = True
        self._in_head = True
        self._head_bytes = 0
        if self._phase is Phase.TAIL:
            self._enter(Phase.IDLE, self.limits.idle_timeout_s)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn's keep-alive timer restarts on any byte; the phases' deadlines replace it.
        self._unset_keepalive_if_required()
        if self.transport.is_closing() or self._phase is not Phase.BUSY:
            return
        if self.pipeline:
            return  # the next request is served at once
        if not self._message_done:
            # Answered before its body arrived (an early 401, 413 ...): the rest of the body
            # must still come, within the body's deadline, before the connection is reused.
            self._enter(Phase.TAIL, self.limits.body_timeout_s)
        elif self._head_bytes > 0:
            self._enter(Phase.HEAD, self.limits.header_timeout_s)
        else:
            self._enter(Phase.IDLE, self.limits.idle_timeout_s)

    # --- the connection limit

    def _evict(self) -> None:
        """Close the connection that has waited longest without a request in flight."""
        oldest: GuardedProtocol | None = None
        for connection in self.connections:
            if (
                connection is self
                or not isinstance(connection, GuardedProtocol)
                or connection._phase not in (Phase.HEAD, Phase.IDLE)
                or connection._lost
            ):
                continue
            if oldest is None or connection._since < oldest._since:
                oldest = connection
        if oldest is None or oldest._raw is None:
            return
        log.debug(
            "max.connections=%d reached: closing %s, %s since %.1f s",
            self.limits.max_connections,
            oldest._peer(),
            oldest._phase.value,
            self.loop.time() - oldest._since,
        )
        oldest._lost = True  # counted out now: the next connection must not pick it again
        oldest._raw.abort()
        # Out of the count at once: its connection_lost may come after the new connection's
        # request (uvloop calls it on the next turn's close phase), whose max.connections
        # check would still see it and answer 503. connection_lost discards it again, harmlessly.
        self.connections.discard(oldest)


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """The protocol class to give uvicorn (``http=``), with ``limits``."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})
