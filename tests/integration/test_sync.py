"""SyncProducer against the real cluster: several threads at once, read back with aiokafka."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

from aioaccum import Producer, ThreadRecordFuture
from aioaccum._core.partitioner import default_partition
from aioaccum.sync import SyncProducer

from .test_web import consume_all

pytestmark = [pytest.mark.kafka]


async def test_threads_sending_at_once_land_in_order_per_thread(
    kafka_bootstrap: str, new_topic: str
) -> None:
    threads, per_thread = 4, 2500
    sent: dict[int, list[ThreadRecordFuture]] = {}
    start = threading.Barrier(threads)

    def work(producer: SyncProducer, n: int) -> None:
        start.wait()
        # Each thread's key sends it to one partition, whose order must be the thread's.
        sent[n] = [
            producer.send(new_topic, b"%d:%d" % (n, i), key=b"thread-%d" % n)
            for i in range(per_thread)
        ]

    def run() -> dict[str, float]:
        with SyncProducer(kafka_bootstrap, linger_ms=5, batch_size=4096) as producer:
            workers = [threading.Thread(target=work, args=(producer, n)) for n in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            producer.flush(60)
        return producer.metrics()

    # The producer's own thread does the I/O; this test's loop only waits for it.
    metrics = await asyncio.to_thread(run)
    assert metrics["record-send-total"] == threads * per_thread
    records = await consume_all(kafka_bootstrap, new_topic, threads * per_thread)
    assert len(records) == threads * per_thread
    for n in range(threads):
        key = b"thread-%d" % n
        mine = sorted((r for r in records if r.key == key), key=lambda r: r.offset)
        assert {r.partition for r in mine} == {default_partition(key, 6)}
        assert [r.value for r in mine] == [b"%d:%d" % (n, i) for i in range(per_thread)]
        assert [f.result(0).offset for f in sent[n]] == [r.offset for r in mine]


async def test_threads_and_coroutines_share_one_producer_with_the_pool_nearly_full(
    kafka_bootstrap: str, new_topic: str
) -> None:
    """Threads (``send_from_thread``) and coroutines (``await send``) on one producer at once,
    with 16 buffers between them: appends interleave under the lock, callers of both kinds
    wait in the pool's one queue, and nothing is lost, doubled, stuck or reordered."""
    threads, coroutines, each = 4, 8, 1500
    value = bytes(300)  # about 50 records per 16 KiB batch: the pool turns over constantly
    sent_by_thread: dict[int, list[ThreadRecordFuture]] = {}
    async with Producer(
        kafka_bootstrap, linger_ms=5, buffer_memory=16 * 16384, max_block_ms=60_000
    ) as producer:
        loop = asyncio.get_running_loop()
        start = threading.Barrier(threads)

        def thread_work(n: int) -> None:
            start.wait()
            key = b"thread-%d" % n
            sent_by_thread[n] = [
                producer.send_from_thread(new_topic, value + b"%d" % i, key=key)
                for i in range(each)
            ]
            for future in sent_by_thread[n]:
                future.result(120)

        async def coroutine_work(n: int) -> list[int]:
            key = b"task-%d" % n
            futures = [
                await producer.send(new_topic, value + b"%d" % i, key=key) for i in range(each)
            ]
            return [(await f).offset for f in futures]

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            thread_runs = [loop.run_in_executor(pool, thread_work, n) for n in range(threads)]
            task_offsets = await asyncio.gather(*(coroutine_work(n) for n in range(coroutines)))
            await asyncio.gather(*thread_runs)
        stats = producer.pool.statistics() if producer.pool else None
        assert stats is not None
        assert stats.waiters == 0
    pool_after = producer.pool
    assert pool_after is not None
    after = pool_after.statistics()
    assert after.allocated == 0
    assert after.available == after.total

    total = (threads + coroutines) * each
    records = await consume_all(kafka_bootstrap, new_topic, total)
    assert len(records) == total
    by_key: dict[bytes, list[Any]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(record.key, []).append(record)
    expected_values = [value + b"%d" % i for i in range(each)]
    for n in range(threads):
        mine = by_key[b"thread-%d" % n]
        assert [r.value for r in mine] == expected_values  # once each, in the thread's order
        assert [f.result(0).offset for f in sent_by_thread[n]] == [r.offset for r in mine]
    for n in range(coroutines):
        mine = by_key[b"task-%d" % n]
        assert [r.value for r in mine] == expected_values
        assert task_offsets[n] == [r.offset for r in mine]
