"""A loopback TCP proxy that injects network faults between Kafka clients and brokers.

The cluster started by ``scripts/kafka`` has a PROXIED listener: each node accepts plaintext on
its "proxied" port but advertises its "proxy" port, where nothing listens until this proxy does.
A client bootstrapped at the proxy ports therefore keeps every connection (metadata included) on
the proxy, and the proxy decides what happens to the bytes.

Faults, switchable at any time, globally, per node or per connection (the most specific wins):

``pass``       forward both ways.
``stall``      stop reading from both sides; sockets stay open, data already read is held.
``slow``       forward at most ``bytes_per_s`` per connection and direction.
``reset``      abort with an RST (``SO_LINGER`` 0) every connection it covers, and every new one
               while it lasts.
``half_open``  cut one direction: either read and drop its bytes (the peer "vanished" one way)
               or stop reading it, while the other direction keeps flowing.

Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

__all__ = ["Direction", "Fault", "FaultKind", "FaultProxy", "ProxyConnection", "ProxyStats"]

HOST = "127.0.0.1"
CHUNK = 65536
# Slow mode writes in slices of this many seconds' worth of bytes, so that a change of fault
# takes effect within about one slice.
SLOW_SLICE_S = 0.05


class Direction(enum.Enum):
    TO_SERVER = "to_server"
    TO_CLIENT = "to_client"


class FaultKind(enum.Enum):
    PASS = "pass"
    STALL = "stall"
    SLOW = "slow"
    RESET = "reset"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Fault:
    """What the proxy does to the bytes of the connections a fault covers.

    Build one with the class methods: ``Fault.passing()``, ``Fault.stall()``,
    ``Fault.slow(bytes_per_s)``, ``Fault.reset()``, ``Fault.half_open(direction, drop=True)``.
    """

    kind: FaultKind
    bytes_per_s: int = 0
    direction: Direction | None = None
    drop: bool = True

    @classmethod
    def passing(cls) -> Fault:
        return cls(FaultKind.PASS)

    @classmethod
    def stall(cls) -> Fault:
        return cls(FaultKind.STALL)

    @classmethod
    def slow(cls, bytes_per_s: int) -> Fault:
        if bytes_per_s <= 0:
            raise ValueError(f"bytes_per_s must be positive, got {bytes_per_s}")
        return cls(FaultKind.SLOW, bytes_per_s=bytes_per_s)

    @classmethod
    def reset(cls) -> Fault:
        return cls(FaultKind.RESET)

    @classmethod
    def half_open(cls, direction: Direction, *, drop: bool = True) -> Fault:
        return cls(FaultKind.HALF_OPEN, direction=direction, drop=drop)

    def blocks(self, direction: Direction) -> bool:
        """Whether bytes in ``direction`` must wait (neither read nor forwarded)."""
        if self.kind is FaultKind.STALL:
            return True
        return self.kind is FaultKind.HALF_OPEN and not self.drop and direction is self.direction

    def drops(self, direction: Direction) -> bool:
        """Whether bytes in ``direction`` are read and thrown away."""
        return self.kind is FaultKind.HALF_OPEN and self.drop and direction is self.direction

    def __str__(self) -> str:
        if self.kind is FaultKind.SLOW:
            return f"slow({self.bytes_per_s} B/s)"
        if self.kind is FaultKind.HALF_OPEN:
            assert self.direction is not None
            how = "drop" if self.drop else "stop"
            return f"half_open({self.direction.value}, {how})"
        return str(self.kind.value)


_PASS = Fault.passing()


@dataclass(frozen=True, slots=True)
class ProxyStats:
    """Counters of a :class:`FaultProxy` since it started."""

    accepted: int
    open: int
    resets: int
    upstream_failures: int
    bytes_to_server: int
    bytes_to_client: int
    bytes_dropped: int


@dataclass(frozen=True, slots=True)
class _Route:
    node: int
    listen_port: int
    target: tuple[str, int]


class ProxyConnection:
    """One client connection and its upstream connection to the broker."""

    def __init__(
        self,
        proxy: FaultProxy,
        node: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self._proxy = proxy
        self.node = node
        self._client = client
        self._server = server
        self._override: Fault | None = None
        self.closed = False

    @property
    def fault(self) -> Fault:
        """The fault in force for this connection."""
        if self._override is not None:
            return self._override
        return self._proxy.fault_for_node(self.node)

    def set_fault(self, fault: Fault | None) -> None:
        """Override the node's and the global fault for this connection (``None`` clears)."""
        self._override = fault
        self._proxy._changed()

    def reset(self) -> None:
        """Abort both sockets with an RST."""
        if self.closed:
            return
        self.closed = True
        self._proxy._resets += 1
        for _, writer in (self._client, self._server):
            _abort_with_rst(writer)
        self._proxy._wake()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for _, writer in (self._client, self._server):
            writer.close()
        self._proxy._wake()

    async def run(self) -> None:
        """Forward until either side closes or a reset; then close both sides."""
        try:
            async with asyncio.TaskGroup() as group:
                for task in (
                    group.create_task(
                        self._pump(Direction.TO_SERVER, self._client[0], self._server[1])
                    ),
                    group.create_task(
                        self._pump(Direction.TO_CLIENT, self._server[0], self._client[1])
                    ),
                ):
                    self._proxy._track(task)
        except* (OSError, EOFError):
            pass
        finally:
            self.close()

    async def _gate(self, direction: Direction) -> Fault:
        """Wait while the fault blocks ``direction``; return the fault that lets it through."""
        while True:
            changed = self._proxy._change_event
            fault = self.fault
            if self.closed:
                raise EOFError
            if not fault.blocks(direction):
                return fault
            await changed.wait()

    async def _pump(
        self, direction: Direction, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            await self._gate(direction)
            data = await reader.read(CHUNK)
            if not data:
                # One side closed: Kafka never half-closes, so the connection is over.
                raise EOFError
            while data:
                # Data read just before a stall waits with the rest.
                fault = await self._gate(direction)
                if fault.drops(direction):
                    self._proxy._dropped += len(data)
                    break
                if fault.kind is FaultKind.SLOW:
                    size = max(1, min(len(data), int(fault.bytes_per_s * SLOW_SLICE_S)))
                    piece, data = data[:size], data[size:]
                    await self._forward(direction, writer, piece)
                    await asyncio.sleep(size / fault.bytes_per_s)
                else:
                    await self._forward(direction, writer, data)
                    data = b""

    async def _forward(
        self, direction: Direction, writer: asyncio.StreamWriter, data: bytes
    ) -> None:
        writer.write(data)
        await writer.drain()
        if direction is Direction.TO_SERVER:
            self._proxy._to_server += len(data)
        else:
            self._proxy._to_client += len(data)


class FaultProxy:
    """Listens on 127.0.0.1 ports and forwards each to a broker's port, injecting faults.

    Args:
        routes: ``{node: (listen_port, target_port)}``; the targets are on 127.0.0.1.

    Use ``async with FaultProxy.for_cluster(ports) as proxy:``; ``proxy.bootstrap`` is what
    clients connect to.
    """

    def __init__(self, routes: Mapping[int, tuple[int, int]]) -> None:
        self._routes = [
            _Route(node, listen, (HOST, target)) for node, (listen, target) in routes.items()
        ]
        self._servers: list[asyncio.Server] = []
        self._connections: set[ProxyConnection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._global = _PASS
        self._node_faults: dict[int, Fault] = {}
        self._change_event = asyncio.Event()
        self._accepted = 0
        self._resets = 0
        self._upstream_failures = 0
        self._to_server = 0
        self._to_client = 0
        self._dropped = 0

    @classmethod
    def for_cluster(cls, ports: Mapping[int, Mapping[str, int]]) -> FaultProxy:
        """A proxy for every node of ``scripts/kafka ports``: "proxy" forwards to "proxied"."""
        return cls({node: (p["proxy"], p["proxied"]) for node, p in ports.items()})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{route.listen_port}" for route in self._routes)

    # --- lifecycle

    async def start(self) -> None:
        try:
            for route in self._routes:
                server = await asyncio.start_server(
                    functools.partial(self._accept, route),
                    HOST,
                    route.listen_port,
                    reuse_address=True,
                )
                self._servers.append(server)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop listening, abort every connection and wait for the proxy's tasks to end."""
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.reset()
        self._changed()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- faults

    def set_fault(self, fault: Fault, *, node: int | None = None) -> None:
        """Apply ``fault`` to every connection (``node=None``) or to one node's connections.

        A node's fault wins over the global one; ``Fault.passing()`` for a node clears it back
        to the global fault. Per-connection overrides stay in force.
        """
        if node is None:
            self._global = fault
        elif fault.kind is FaultKind.PASS:
            self._node_faults.pop(node, None)
        else:
            self._node_faults[node] = fault
        self._changed()

    def clear(self) -> None:
        """Back to ``pass`` everywhere, per-connection overrides included."""
        self._global = _PASS
        self._node_faults.clear()
        for conn in self._connections:
            conn._override = None
        self._changed()

    def fault_for_node(self, node: int) -> Fault:
        return self._node_faults.get(node, self._global)

    @property
    def connections(self) -> Sequence[ProxyConnection]:
        """The open connections, oldest first."""
        return sorted((c for c in self._connections if not c.closed), key=id)

    def tasks(self) -> set[asyncio.Task[None]]:
        """The proxy's own tasks (for tests that check nothing else is left running)."""
        return {task for task in self._tasks if not task.done()}

    def statistics(self) -> ProxyStats:
        return ProxyStats(
            accepted=self._accepted,
            open=len(self.connections),
            resets=self._resets,
            upstream_failures=self._upstream_failures,
            bytes_to_server=self._to_server,
            bytes_to_client=self._to_client,
            bytes_dropped=self._dropped,
        )

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wake(self) -> None:
        # Pumps waiting in a gate re-read the faults (and notice a closed connection).
        old, self._change_event = self._change_event, asyncio.Event()
        old.set()

    def _changed(self) -> None:
        self._wake()
        for conn in list(self._connections):
            if conn.fault.kind is FaultKind.RESET:
                conn.reset()

    # --- connections

    async def _accept(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._track(task)
        # Only close() cancels this task; asyncio's stream server would log the cancellation
        # of its callback task as an error, so it ends quietly instead.
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve(route, reader, writer)

    async def _serve(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._accepted += 1
        if self.fault_for_node(route.node).kind is FaultKind.RESET:
            self._resets += 1
            _abort_with_rst(writer)
            return
        try:
            server = await asyncio.open_connection(*route.target)
        except OSError:
            # The broker is down: the client sees its connection refused-like close.
            self._upstream_failures += 1
            _abort_with_rst(writer)
            return
        conn = ProxyConnection(self, route.node, (reader, writer), server)
        if conn.fault.kind is FaultKind.RESET:  # switched while connecting
            self._connections.add(conn)
            conn.reset()
        self._connections.add(conn)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
