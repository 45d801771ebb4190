"""A producer process with a journal and a small ``buffer_memory``, for the outage test.

    python journal_outage_child.py BOOTSTRAP TOPIC JOURNAL_DIR RATE BUFFER_MEMORY DELIVERY_MS \
        SEGMENT_BYTES

Offers keyless records of 1000 bytes (ids 0, 1, ...) at RATE per second; prints ``ready`` once
a second of them is acknowledged, then goes on until a line arrives on stdin (while the test
stops and starts the brokers). Then it flushes, checks every record's future and prints one
JSON line: records offered, acknowledged and failed, the most records spilled at once, the
pool's peak use, and RSS at ``ready`` and at its peak (sampled every 20 ms).

Futures are checked as they complete and dropped, as a service answering its callers would: the
process keeps no per-record state of its own, so its RSS is the producer's.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
from typing import Any

from aioaccum import Producer
from aioaccum._runtime.journaled import spilled_records
from faults.workload import record_value

PAGE = os.sysconf("SC_PAGE_SIZE")
VALUE_SIZE = 1000
SAMPLE_S = 0.02


def rss() -> tuple[int, int]:
    """Resident bytes in all, and those that are the process's own (anonymous): RSS counts the
    page-cache pages of the journal's mapped segment too, which the kernel may drop at will."""
    with open("/proc/self/statm") as statm:
        _size, resident, shared = statm.read().split()[:3]
    return int(resident) * PAGE, (int(resident) - int(shared)) * PAGE


class Figures:
    def __init__(self) -> None:
        self.offered = 0
        self.acked = 0
        self.failed: collections.Counter[str] = collections.Counter()
        self.peak_spilled = 0
        self.peak_pool = 0
        self.rss_ready = (0, 0)
        self.peak_rss = (0, 0)
        self.out_of_order_acks = 0


def check(figures: Figures, futures: collections.deque[Any], last: dict[int, int]) -> None:
    """Take the futures that are done off the front (they end in order per partition)."""
    while futures and futures[0].done():
        future = futures.popleft()
        error = future.exception()
        if error is not None:
            figures.failed[type(error).__name__] += 1
            continue
        metadata = future.result()
        figures.acked += 1
        if metadata.offset <= last.get(metadata.partition, -1):
            figures.out_of_order_acks += 1
        last[metadata.partition] = metadata.offset


async def main(bootstrap: str, topic: str, folder: str, rate: float, memory: int,
               delivery_ms: int, segment_bytes: int) -> None:
    producer = Producer(
        bootstrap, journal_dir=folder, journal_segment_bytes=segment_bytes,
        buffer_memory=memory, batch_size=64 << 10,
        linger_ms=5, delivery_timeout_ms=delivery_ms, request_timeout_ms=delivery_ms - 500,
        max_block_ms=60_000,
    )
    figures = Figures()
    futures: collections.deque[Any] = collections.deque()
    last: dict[int, int] = {}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), stop.set)

    async def sample() -> None:
        pool, acc = producer.pool, producer._acc
        assert pool is not None
        assert acc is not None
        while True:
            figures.peak_pool = max(figures.peak_pool,
                                    pool.total_memory - pool.available_memory())
            figures.peak_spilled = max(figures.peak_spilled, spilled_records(acc))
            now = rss()
            figures.peak_rss = (max(figures.peak_rss[0], now[0]),
                                max(figures.peak_rss[1], now[1]))
            await asyncio.sleep(SAMPLE_S)

    await producer.start()
    sampler = asyncio.create_task(sample())
    began = loop.time()
    try:
        while not stop.is_set():
            due = int((loop.time() - began) * rate)
            while figures.offered < due:
                futures.append(await producer.send(topic,
                                                   record_value(figures.offered, VALUE_SIZE)))
                figures.offered += 1
            check(figures, futures, last)
            if not figures.rss_ready[0] and figures.acked >= rate:
                figures.rss_ready = rss()
                figures.peak_rss = figures.rss_ready
                print("ready", flush=True)
            await asyncio.sleep(0.005)
        await producer.flush()
        check(figures, futures, last)
        assert not futures, f"{len(futures)} futures still pending after flush()"
    finally:
        sampler.cancel()
        await producer.close()
    print(json.dumps({
        "offered": figures.offered, "acked": figures.acked, "failed": dict(figures.failed),
        "peak_spilled": figures.peak_spilled, "peak_pool": figures.peak_pool,
        "buffer_memory": memory, "rss_ready": figures.rss_ready[0],
        "peak_rss": figures.peak_rss[0], "anon_ready": figures.rss_ready[1],
        "peak_anon": figures.peak_rss[1],
        "out_of_order_acks": figures.out_of_order_acks,
    }), flush=True)


if __name__ == "__main__":
    bootstrap, topic, folder, rate, memory, delivery, segment = sys.argv[1:8]
    asyncio.run(main(bootstrap, topic, folder, float(rate), int(memory), int(delivery),
                     int(segment)))
