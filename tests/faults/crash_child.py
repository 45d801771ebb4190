"""A producer process for the crash tests: it sends until it is killed, and says what it sent.

Run as ``python -m faults.crash_child {async,sync} BOOTSTRAP TOPIC OFFERED_LOG ACKED_LOG``
with ``tests/`` on ``PYTHONPATH``. It sends records whose values carry an increasing id
(:func:`faults.workload.record_value`), as fast as the buffer takes them, with ``Producer``
(``async``) or ``SyncProducer`` (``sync``), acks=all and idempotence on. Two append-only logs
tell a parent what happened before a ``kill -9``:

``OFFERED_LOG``  one line ``<id>`` written *before* the record is handed to ``send()``, so
                 every id that can be in the topic is in this log.
``ACKED_LOG``    one line ``<id> <partition> <offset>`` written only once the record's future
                 resolved successfully: what the process reported acknowledged.

Each line is a single ``os.write`` on an ``O_APPEND`` descriptor, so a line is in the file (the
kernel's page cache, which a killed process cannot lose) before the next record goes on, and
the loop thread's acknowledgements never tear the main thread's lines.

The process is meant to die by signal. If nobody kills it within ``--max-seconds`` it stops
sending and exits with status 3, so a parent that died first leaves no producer running.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time

from aioaccum import FutureRecordMetadata, Producer, ProducerConfig, ThreadRecordFuture
from aioaccum.sync import SyncProducer

from .workload import record_value

__all__ = ["AckLog", "main"]

NOT_KILLED_EXIT = 3
# A send that finds room in the buffer seldom yields to the loop; yielding this often as well
# keeps the acknowledgement callbacks (our log) close behind the broker's answers.
YIELD_EVERY = 200


class AckLog:
    """The two append-only logs; each method writes one whole line with one system call."""

    def __init__(self, offered_path: str, acked_path: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._offered = os.open(offered_path, flags, 0o644)
        self._acked = os.open(acked_path, flags, 0o644)

    def offered(self, record_id: int) -> None:
        os.write(self._offered, b"%d\n" % record_id)

    def done(self, record_id: int, future: FutureRecordMetadata | ThreadRecordFuture) -> None:
        """A done-callback: log the record only if its future succeeded."""
        if future.cancelled() or future.exception() is not None:
            # Not acknowledged: the parent counts it as offered and unacknowledged.
            return
        metadata = future.result()
        os.write(self._acked, b"%d %d %d\n" % (record_id, metadata.partition, metadata.offset))


def _config(args: argparse.Namespace) -> ProducerConfig:
    return ProducerConfig.from_kwargs(
        bootstrap_servers=args.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        buffer_memory=args.buffer_memory,
    )


async def produce_async(args: argparse.Namespace, log: AckLog) -> None:
    deadline = time.monotonic() + args.max_seconds
    async with Producer(config=_config(args)) as producer:
        record_id = 0
        while time.monotonic() < deadline:
            log.offered(record_id)
            future = await producer.send(args.topic, record_value(record_id, args.value_size))
            future.add_done_callback(functools.partial(log.done, record_id))
            record_id += 1
            if record_id % YIELD_EVERY == 0:
                await asyncio.sleep(0)


def produce_sync(args: argparse.Namespace, log: AckLog) -> None:
    deadline = time.monotonic() + args.max_seconds
    with SyncProducer(config=_config(args)) as producer:
        record_id = 0
        while time.monotonic() < deadline:
            log.offered(record_id)
            future = producer.send(args.topic, record_value(record_id, args.value_size))
            # Runs on the producer's loop thread; O_APPEND keeps its lines whole beside ours.
            future.add_done_callback(functools.partial(log.done, record_id))
            record_id += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("api", choices=["async", "sync"])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("offered_log")
    parser.add_argument("acked_log")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--linger-ms", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--buffer-memory", type=int, default=1024 * 1024)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    log = AckLog(args.offered_log, args.acked_log)
    if args.api == "async":
        asyncio.run(produce_async(args, log))
    else:
        produce_sync(args, log)
    print(f"crash_child: not killed within {args.max_seconds} s", file=sys.stderr)
    return NOT_KILLED_EXIT


if __name__ == "__main__":
    sys.exit(main())
