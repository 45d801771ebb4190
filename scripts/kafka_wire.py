"""Just enough of the Kafka wire protocol to list a cluster's live brokers (stdlib only).

scripts/kafka uses it to wait for a cluster without depending on a Python Kafka client.
"""

from __future__ import annotations

import socket
import struct

API_VERSIONS_KEY = 18
METADATA_KEY = 3
# Metadata v9+ uses the flexible encoding; v4-v8 share the plain layout parsed below and
# Kafka 4 dropped v0-v3.
METADATA_PLAIN_VERSIONS = range(4, 9)


def _request(sock: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    client_id = b"aioaccum-scripts"
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    response = _read_exact(sock, size)
    return response[4:]  # drop the correlation id


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)


def _metadata_version(sock: socket.socket) -> int:
    data = _request(sock, API_VERSIONS_KEY, 0, b"")
    (error,) = struct.unpack_from(">h", data, 0)
    if error != 0:
        raise ConnectionError(f"ApiVersions error {error}")
    (count,) = struct.unpack_from(">i", data, 2)
    for i in range(count):
        key, low, high = struct.unpack_from(">hhh", data, 6 + 6 * i)
        if key == METADATA_KEY:
            usable = set(range(low, high + 1)) & set(METADATA_PLAIN_VERSIONS)
            if not usable:
                raise ConnectionError(f"broker supports Metadata v{low}-v{high} only")
            return max(usable)
    raise ConnectionError("broker does not offer Metadata")


def metadata_brokers(address: str, timeout_s: float = 5.0) -> dict[int, str]:
    """node id -> host:port of the live brokers, as one broker sees the cluster."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        version = _metadata_version(sock)
        # No topics wanted (empty array), no auto-creation; v8 adds two booleans.
        body = struct.pack(">ib", 0, 0) + (b"\0\0" if version >= 8 else b"")
        data = _request(sock, METADATA_KEY, version, body)
    offset = 4  # throttle_time_ms
    (count,) = struct.unpack_from(">i", data, offset)
    offset += 4
    brokers = {}
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", data, offset)
        offset += 6
        broker_host = data[offset : offset + host_len].decode()
        offset += host_len
        (broker_port, rack_len) = struct.unpack_from(">ih", data, offset)
        offset += 6 + max(rack_len, 0)
        brokers[node_id] = f"{broker_host}:{broker_port}"
    return brokers
