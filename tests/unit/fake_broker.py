"""A broker on a loopback socket that speaks enough of Kafka's protocol for the produce
connection: ApiVersions v0, SaslHandshake v1, SaslAuthenticate v0/v1 (PLAIN), Produce v3-v7 and
v12. Tests steer it (hold answers, stop reading, drop the connection) and read what it got."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from aioaccum._core.varint import encode_unsigned_varint as uvarint
from aioaccum._kafka.wire import Reader

__all__ = ["FakeBroker", "Received"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    records: list[tuple[str, int, bytes]] = field(default_factory=list)
    acks: int = 0


class FakeBroker:
    def __init__(
        self,
        *,
        username: str = "app",
        password: str = "secret",
        session_lifetime_ms: int = 0,
        produce_versions: tuple[int, int] = (3, 12),
    ) -> None:
        self.username = username
        self.password = password
        self.session_lifetime_ms = session_lifetime_ms
        self.produce_versions = produce_versions
        self.received: list[Received] = []
        self.raw = bytearray()  # every byte received, in order, on every connection
        self.hold = False  # produce answers wait for release()
        self.drop_on_produce = False  # close the connection when a produce request arrives
        self._held: list[tuple[asyncio.Transport, bytes]] = []
        self._server: asyncio.Server | None = None
        self.transports: list[asyncio.Transport] = []
        self.port = 0
        self.offset = 0
        self._arrived: asyncio.Event | None = None

    async def until(self, predicate: Callable[[FakeBroker], bool]) -> None:
        """Return once ``predicate(self)`` holds, checked as each request arrives."""
        if self._arrived is None:
            self._arrived = asyncio.Event()
        while not predicate(self):
            self._arrived.clear()
            await self._arrived.wait()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _BrokerSide(self), "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        for transport in self.transports:
            transport.abort()
        await asyncio.sleep(0)  # the transports close on the next loop turn
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def stop_reading(self) -> None:
        for transport in self.transports:
            transport.pause_reading()

    def resume_reading(self) -> None:
        for transport in self.transports:
            if not transport.is_closing():
                transport.resume_reading()

    def release(self) -> None:
        self.hold = False
        held, self._held = self._held, []
        for transport, frame in held:
            if not transport.is_closing():
                transport.write(frame)

    def kinds(self) -> list[int]:
        return [r.api_key for r in self.received]

    # --- requests

    def handle(self, transport: asyncio.Transport, frame: bytes) -> None:
        api_key, version, cid = struct.unpack_from(">hhi", frame, 0)
        size = _I16.unpack_from(frame, 8)[0]
        pos = 10 + max(size, 0)
        flexible = api_key == 0 and version >= 9
        if flexible:
            pos += 1  # header tags
        request = Received(api_key, version, cid)
        self.received.append(request)
        if self._arrived is not None:
            self._arrived.set()
        body = frame[pos:]
        if api_key == 18:
            keys = [(0, *self.produce_versions), (17, 0, 1), (18, 0, 3), (36, 0, 1)]
            answer = _I16.pack(0) + _I32.pack(len(keys))
            answer += b"".join(struct.pack(">hhh", *k) for k in keys)
            self._answer(transport, cid, answer, flexible=False)
        elif api_key == 17:
            answer = _I16.pack(0) + _I32.pack(1) + _I16.pack(5) + b"PLAIN"
            self._answer(transport, cid, answer, flexible=False)
        elif api_key == 36:
            length = _I32.unpack_from(body, 0)[0]
            _, user, password = body[4 : 4 + length].split(b"\0")
            ok = (user.decode(), password.decode()) == (self.username, self.password)
            message = b"" if ok else b"Authentication failed: Invalid username or password"
            answer = _I16.pack(0 if ok else 58)
            answer += _I16.pack(len(message)) + message if message else _I16.pack(-1)
            answer += _I32.pack(0)
            if version >= 1:
                answer += struct.pack(">q", self.session_lifetime_ms)
            self._answer(transport, cid, answer, flexible=False)
        elif api_key == 0:
            if self.drop_on_produce:
                transport.abort()
                return
            self._produce(transport, request, version, body)

    def _produce(self, transport: asyncio.Transport, request: Received, version: int,
                 body: bytes) -> None:
        if version >= 9:
            r = Reader(body)
            r.compact_str()
            request.acks = r.int16()
            r.int32()
            topics = []
            for _ in range(r.compact_count()):
                topic = r.compact_str() or ""
                partitions = []
                for _ in range(r.compact_count()):
                    partition = r.int32()
                    size = r.uvarint() - 1
                    records = r.data[r.pos : r.pos + size]
                    r.pos += size
                    r.tags()
                    partitions.append((partition, records))
                r.tags()
                topics.append((topic, partitions))
        else:
            size = _I16.unpack_from(body, 0)[0]
            pos = 2 + max(size, 0)
            request.acks = _I16.unpack_from(body, pos)[0]
            pos += 6
            count = _I32.unpack_from(body, pos)[0]
            pos += 4
            topics = []
            for _ in range(count):
                size = _I16.unpack_from(body, pos)[0]
                topic = body[pos + 2 : pos + 2 + size].decode()
                pos += 2 + size
                partitions = []
                count = _I32.unpack_from(body, pos)[0]
                pos += 4
                for _ in range(count):
                    partition, length = struct.unpack_from(">ii", body, pos)
                    partitions.append((partition, body[pos + 8 : pos + 8 + length]))
                    pos += 8 + length
                topics.append((topic, partitions))
        for topic, partitions in topics:
            for partition, records in partitions:
                request.records.append((topic, partition, bytes(records)))
        if request.acks == 0:
            return
        if version >= 9:
            answer = uvarint(len(topics) + 1)
            for topic, partitions in topics:
                answer += uvarint(len(topic) + 1) + topic.encode() + uvarint(len(partitions) + 1)
                for partition, _ in partitions:
                    answer += struct.pack(">ihqqq", partition, 0, self.offset, -1, 0)
                    answer += b"\x01\x00\x00"  # no record errors, null message, no tags
                    self.offset += 1
                answer += b"\x00"
            answer += _I32.pack(0) + b"\x00"
        else:
            answer = _I32.pack(len(topics))
            for topic, partitions in topics:
                answer += _I16.pack(len(topic)) + topic.encode() + _I32.pack(len(partitions))
                for partition, _ in partitions:
                    answer += struct.pack(">ihqq", partition, 0, self.offset, -1)
                    if version >= 5:
                        answer += struct.pack(">q", 0)
                    self.offset += 1
            answer += _I32.pack(0)
        self._answer(transport, request.correlation_id, answer, flexible=version >= 9)

    def _answer(self, transport: asyncio.Transport, cid: int, body: bytes, *,
                flexible: bool) -> None:
        header = _I32.pack(cid) + (b"\x00" if flexible else b"")
        frame = _I32.pack(len(header) + len(body)) + header + body
        produce = self.received[-1].api_key == 0
        if (self.hold and produce) or self._held:  # nothing overtakes a held answer
            self._held.append((transport, frame))
        else:
            transport.write(frame)


class _BrokerSide(asyncio.Protocol):
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's too
        self.broker.transports.append(transport)


    def data_received(self, data: bytes) -> None:
        self.broker.raw += data
        self.buffer += data
        while len(self.buffer) >= 4:
            size = _I32.unpack_from(self.buffer, 0)[0]
            if len(self.buffer) < 4 + size:
                return
            frame = bytes(self.buffer[4 : 4 + size])
            del self.buffer[: 4 + size]
            assert self.transport is not None
            self.broker.handle(self.transport, frame)
