#!/usr/bin/env python3
"""Records per second through SyncProducer from 1 and N threads, next to the async Producer.

    .venv/bin/python scripts/bench_sync.py --bootstrap 127.0.0.1:19092 --records 200000

Creates a fresh topic (6 partitions, replication 1), sends --records records of --record-size
bytes from each thread count in turn, waits for every acknowledgement, and prints one line each.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from collections.abc import Callable

import uvloop
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from aioaccum import Producer
from aioaccum.sync import SyncProducer


async def create_topic(bootstrap: str) -> str:
    name = f"bench-sync-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 6, 1)])
    finally:
        await admin.close()
    return name


async def run_async(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    async with Producer(bootstrap, linger_ms=5, acks=1) as producer:
        await producer.send_and_wait(topic, value)
        started = time.perf_counter()
        for _ in range(records):
            future = await producer.send(topic, value)
        await future
        await producer.flush()
        return time.perf_counter() - started


def run_sync(
    bootstrap: str,
    topic: str,
    records: int,
    value: bytes,
    threads: int,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None,
) -> float:
    with SyncProducer(bootstrap, linger_ms=5, acks=1, loop_factory=loop_factory) as producer:
        producer.send_and_wait(topic, value)
        share = records // threads

        def work() -> None:
            for _ in range(share):
                producer.send(topic, value)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        producer.flush()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    value = b"x" * args.record_size
    topic = asyncio.run(create_topic(args.bootstrap))
    elapsed = asyncio.run(run_async(args.bootstrap, topic, args.records, value))
    print(f"async Producer, 1 task:      {args.records / elapsed:>10,.0f} records/s")
    for name, factory in (("asyncio", None), ("uvloop", uvloop.new_event_loop)):
        for threads in args.threads:
            elapsed = run_sync(args.bootstrap, topic, args.records, value, threads, factory)
            total = args.records // threads * threads
            print(
                f"SyncProducer, {threads} thread(s), {name}: {total / elapsed:>10,.0f} records/s"
            )


if __name__ == "__main__":
    main()
