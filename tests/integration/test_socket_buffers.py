"""send_buffer_bytes and receive_buffer_bytes reach the socket of every broker connection."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum._kafka.metadata import MetadataClient
from aioaccum.producer import Producer

pytestmark = pytest.mark.kafka

SEND_BUFFER = 65536
RECEIVE_BUFFER = 98304  # unlike the send size, so that a swapped option shows


def socket_buffer_sizes(producer: Producer) -> list[tuple[int, int]]:
    """(SO_SNDBUF, SO_RCVBUF) of each open broker connection, as the kernel reports them."""
    adapter = producer._kafka
    assert isinstance(adapter, AioKafkaAdapter)
    sockets = [conn._writer.get_extra_info("socket") for conn in adapter.client._conns.values()]
    # Produce requests go on aioaccum's own connections, one per leader.
    produce = adapter.produce_connections
    assert produce is not None
    for conn in produce._conns.values():
        transport = conn._transport
        if transport is not None:
            sockets.append(transport.get_extra_info("socket"))
    return [
        (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
        )
        for sock in sockets
    ]


@pytest.mark.any_loop
async def test_buffer_sizes_are_set_on_every_broker_socket(
    kafka_bootstrap: str, new_topic: str, any_loop: str
) -> None:
    async with Producer(
        kafka_bootstrap,
        send_buffer_bytes=SEND_BUFFER,
        receive_buffer_bytes=RECEIVE_BUFFER,
        linger_ms=0,
    ) as producer:
        # One record per partition, so that every leader gets a connection.
        futures = [await producer.send(new_topic, b"v", partition=p) for p in range(6)]
        await asyncio.gather(*futures)
        sizes = socket_buffer_sizes(producer)
    assert len(sizes) >= 2, sizes  # the leaders, on the 3-node test cluster
    for sent, received in sizes:
        assert sent >= SEND_BUFFER
        assert received >= RECEIVE_BUFFER
        if sys.platform == "linux":
            # Linux doubles the size (for its bookkeeping) and stops tuning it itself, so an
            # unset option would show its own, smaller or growing, value.
            assert (sent, received) == (2 * SEND_BUFFER, 2 * RECEIVE_BUFFER)


async def test_unset_buffer_sizes_leave_aiokafka_as_it_is(kafka_bootstrap: str) -> None:
    async with Producer(kafka_bootstrap, send_buffer_bytes=-1) as producer:
        adapter = producer._kafka
        assert isinstance(adapter, AioKafkaAdapter)
        # The metadata client only: no step added to every request's connection lookup.
        assert type(adapter.client) is MetadataClient
