"""Every write of an answer has a bound: a client that stops reading cannot hold a request,
its records' bytes and a connection forever.

:class:`BoundedWrites` wraps the whole application, so each ASGI ``send`` (the start of a
response, each body chunk, the final empty one, error answers included) waits at most
``write.timeout.ms``. When it does not complete in time the request's task ends with
:class:`ClientStalled`, which cancels what the request still runs (a v3 stream's reader); the
connection itself is aborted by its protocol (``_connections``), its queued answer dropped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aioaccum import AioAccumError

__all__ = ["BoundedWrites", "ClientStalled"]

log = logging.getLogger("aioaccum.serve")


class ClientStalled(AioAccumError):
    """The client took no part of an answer within ``write.timeout.ms``."""


class BoundedWrites:
    """ASGI middleware: each ``send`` of an HTTP request within ``timeout_ms``."""

    def __init__(self, app: ASGIApp, timeout_ms: int) -> None:
        self.app = app
        self._timeout_ms = timeout_ms

    def __getattr__(self, name: str) -> Any:
        # The wrapped application's attributes (its state) stay reachable.
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout_ms = self._timeout_ms

        async def bounded(message: Message) -> None:
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    await send(message)
            except TimeoutError:
                raise ClientStalled(
                    f"the client read none of the answer for write.timeout.ms={timeout_ms} ms; "
                    "the request is ended"
                ) from None

        try:
            await self.app(scope, receive, bounded)
        except ClientStalled as exc:
            log.warning("%s %s: %s", scope.get("method"), scope.get("path"), exc)
