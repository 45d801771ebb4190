"""Produce requests written by a thread of their own, with the GIL released.

Theory of operation
-------------------
Why a thread. The event loop's thread fills batches without pause whenever the application
offers records faster than they go out. A write to a broker's socket wakes the broker's
network thread, and Linux places the woken thread on the core of the thread that woke it (a
TCP wake-up is a "sync" one: the waker is expected to sleep next). The loop's thread does not
sleep: the broker's thread preempts it there while another core may idle. When the broker runs
on the same machine (development, CI, a sidecar), that cost shows up directly. Measured with
3 brokers on 2 cores, 16 KiB batches, ``await send()`` per record: the loop's thread made 1 to 3
voluntary context switches and about one involuntary one per produce request, with 0.45 of
the 2 cores idle. librdkafka and Java's producer both write from an I/O thread that sleeps
between writes, and so does this module.

How. Each plaintext produce connection starts a :class:`WriteThread` of its own, as
librdkafka has a thread per broker: a broker that stops reading fills its socket and holds
only its own connection's writes, never another broker's. The connection's
:class:`WriteSlot` writes to its own ``dup()`` of the socket. ``submit`` takes the
addresses of a request's buffers on the loop's thread and queues them; the thread writes every
queued request in order with ``sendmsg`` (scatter/gather, nothing copied), waiting for room
when the socket is full, and sleeps on a condition variable when the queue is empty. It never
takes the GIL. A request's bytes reach the socket in the order ``submit`` was called, so
correlation ids and the broker's in-order answers are unchanged.

Buffer lifetime (Java's KAFKA-19012). The slot keeps each request's buffers referenced until
the thread has written them. A batch's pooled buffers go back to the pool only after its
answer (the broker read every byte, so the thread is done with them), after
:meth:`WriteSlot.detach` (which drops the slot's queued requests and waits out the one being
written; it first shuts the socket, so that write ends at once), or, for ``acks=0``, once the
thread reports it wrote the request (``submit(..., notify=True)``: a byte on
:attr:`WriteThread.read_fd`, which the loop watches, then :meth:`WriteThread.take_wakeups`).
A write that fails (the broker closed the connection) stops the slot and wakes the loop, which
closes the connection with the error; an ``acks=0`` request completes only once the thread has
written it in full (:attr:`WriteSlot.sent`), so one it dropped fails with the connection.

What keeps the transport. TLS connections (the SSL object must write), the pure-Python path
(``AIOACCUM_NO_EXTENSIONS=1``; a Python thread would need the GIL for each write), Windows,
and a connection whose thread could not start write with ``transport.writelines`` as before.
After a fork, a child's :meth:`WriteSlot.detach` only closes its copy of the descriptor.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aioaccum import _speedups

__all__ = ["SUPPORTED", "WriteSlot", "WriteThread", "deliver_wakeups", "start_write_thread"]

if TYPE_CHECKING or _speedups.EXTENSIONS:
    from aioaccum._kafka._cwrite_thread import SUPPORTED, WriteSlot, WriteThread
else:  # the pure-Python path writes with the transport: there is no thread
    SUPPORTED = False
    WriteSlot = WriteThread = None

log = logging.getLogger(__name__)


def start_write_thread() -> WriteThread | None:
    """A running write thread, or None where the transport writes (the pure-Python path,
    Windows, or a thread that cannot start: the connection works as before)."""
    if not SUPPORTED:
        return None
    try:
        return WriteThread()
    except (OSError, RuntimeError) as exc:
        log.warning("no write thread for a produce connection (%s); its transport writes", exc)
        return None


def deliver_wakeups(writer: WriteThread) -> None:
    """Hand the thread's reports to their connections (the loop calls this when
    :attr:`WriteThread.read_fd` is readable)."""
    for slot in writer.take_wakeups():
        conn = slot.owner_conn
        if conn is not None:
            try:
                conn.on_writes()
            except Exception:
                # Each report is taken once: one that raises must not cost the others theirs.
                log.exception("handling the write thread's report raised")
