"""The produce connections' write thread (``_kafka/_cwrite_thread.pyx``) on socket pairs: the
bytes arrive whole and in order through partial writes, a detach ends a write blocked on a
full socket and drops what is queued, a failed write stops the slot and wakes the loop, and
``notify`` reports a written request. The compiled module is imported directly, so these run
on the pure-Python path's test run as well (where connections do not use it)."""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from aioaccum._kafka._cwrite_thread import WriteSlot, WriteThread


@pytest.fixture
def writer() -> Iterator[WriteThread]:
    thread = WriteThread()
    yield thread
    thread.close()
    assert not thread.alive


def _pair(sndbuf: int = 4096) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return a, b


def _attached(writer: WriteThread) -> tuple[socket.socket, socket.socket, WriteSlot]:
    """A socket pair whose first end has a slot on ``writer``."""
    a, b = _pair()
    slot = writer.attach(a.fileno())
    assert slot is not None
    return a, b, slot


def _until_idle(slot: WriteSlot, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while slot.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not slot.busy, f"the thread still writes after {timeout} s"


def _assert_arrives(writer: WriteThread, slot: WriteSlot, peer: socket.socket, data: bytes) -> None:
    slot.submit([data], notify=True)
    assert _wait_woken(writer) == [slot]
    peer.settimeout(2)
    assert peer.recv(len(data) + 1) == data


def _wait_woken(writer: WriteThread, timeout: float = 5.0) -> list[WriteSlot]:
    readable, _, _ = select.select([writer.read_fd], [], [], timeout)
    assert readable, f"no wake-up from the write thread within {timeout} s"
    return writer.take_wakeups()


def _read_exactly(sock: socket.socket, size: int, into: bytearray) -> threading.Thread:
    def run() -> None:
        sock.settimeout(10)
        while len(into) < size:
            chunk = sock.recv(65536)
            if not chunk:
                return
            into.extend(chunk)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_requests_arrive_whole_and_in_order_through_partial_writes(writer: WriteThread) -> None:
    a, b, slot = _attached(writer)
    pieces = [os.urandom(997) for _ in range(3000)]
    got = bytearray()
    reader = _read_exactly(b, sum(map(len, pieces)), got)
    for i in range(0, len(pieces), 3):
        # bytes, and views of bytes and of a bytearray (a pooled chunk): what requests hold
        seq = slot.submit(
            [pieces[i], memoryview(pieces[i + 1]), memoryview(bytearray(pieces[i + 2]))],
            notify=i + 3 == len(pieces),
        )
        assert seq == i // 3 + 1
    assert _wait_woken(writer) == [slot]
    reader.join(10)
    assert bytes(got) == b"".join(pieces)  # 4096-byte send buffer: thousands of partial writes
    assert slot.written == slot.submitted == 1000
    assert not slot.busy
    assert slot.error == 0
    slot.detach()
    a.close()
    b.close()


def test_detach_ends_a_write_blocked_on_a_full_socket_and_drops_the_queue(
    writer: WriteThread,
) -> None:
    a, b, slot = _attached(writer)
    first = bytearray(b"A" * (4 * 1024 * 1024))  # far more than the socket pair holds
    queued = bytearray(b"B" * 65536)
    slot.submit([memoryview(first)])
    slot.submit([memoryview(queued)])
    assert slot.busy  # nobody reads: the thread waits for room
    slot.detach()
    assert not slot.busy
    # The buffers may be reused now; none of the queued request's bytes were ever written.
    queued[:] = b"C" * len(queued)
    b.settimeout(2)
    seen = bytearray()
    while True:
        chunk = b.recv(65536)
        if not chunk:
            break
        seen.extend(chunk)
    # Whatever got through (the detach may come before the first write) is the first request's.
    assert len(seen) < len(first)
    assert set(seen) <= {ord("A")}
    with pytest.raises(RuntimeError, match="detached"):
        slot.submit([b"late"])
    slot.detach()  # idempotent
    a.close()
    b.close()


def test_a_failed_write_stops_the_slot_and_wakes_the_loop(writer: WriteThread) -> None:
    a, b, slot = _attached(writer)
    b.close()  # the peer is gone: the write fails with EPIPE or ECONNRESET
    slot.submit([b"x" * 100])
    assert _wait_woken(writer) == [slot]
    assert slot.error in (32, 104), os.strerror(slot.error)
    slot.submit([b"y" * 100])  # dropped, not written: the slot stopped
    _until_idle(slot)
    assert slot.error in (32, 104)
    slot.detach()
    a.close()


def test_the_slot_writes_to_its_own_descriptor(writer: WriteThread) -> None:
    a, b, slot = _attached(writer)
    a.close()  # the connection's descriptor goes; the slot's copy keeps the socket
    _assert_arrives(writer, slot, b, b"still here")
    slot.detach()
    b.close()


def test_a_stopped_thread_gives_no_slot() -> None:
    thread = WriteThread()
    thread.close()
    a, b = _pair()
    assert thread.attach(a.fileno()) is None
    a.close()
    b.close()


def test_sent_counts_only_requests_written_in_full(writer: WriteThread) -> None:
    a, b, slot = _attached(writer)
    slot.submit([b"first"], notify=True)
    assert _wait_woken(writer) == [slot]
    assert slot.sent == slot.written == 1
    b.close()
    slot.submit([b"x" * 100], notify=True)  # fails: the peer is gone
    slot.submit([b"y" * 100], notify=True)  # dropped after the failure
    _until_idle(slot)
    assert slot.written == 3  # the thread is done with all three
    assert slot.sent == 1  # but wrote only the first: the others must not count as written
    assert slot.error in (32, 104)
    slot.detach()
    a.close()


def test_a_forked_child_lets_go_of_its_copy_without_ending_the_parents_connection(
    writer: WriteThread,
) -> None:
    a, b, slot = _attached(writer)
    pid = os.fork()
    if pid == 0:  # the child: no thread runs here; detaching must not wait or shut the socket
        try:
            slot.detach()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _assert_arrives(writer, slot, b, b"after the fork")
    slot.detach()
    a.close()
    b.close()
