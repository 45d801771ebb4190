"""SyncProducer against the real cluster: several threads at once, read back with aiokafka."""

from __future__ import annotations

import asyncio
import threading

import pytest

from aioaccum import ThreadRecordFuture
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
