"""The synchronous Python contenders (confluent-kafka's ``Producer``, kafka-python), each in
its own child process like the asyncio ones in ``clients``, with the same ``Recorder``.

With concurrent senders each is a thread that waits for its record's acknowledgement before the
next; in the memory-bound mode the loop checks the deadline every 1,000 records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from benchlib.clients import (
    Recorder,
    confluent_config,
    deadline_passed,
    exit_now,
    given,
    routes,
)
from benchlib.spec import Spec, payload


def run_confluent(spec: Spec, rec: Recorder) -> None:
    from confluent_kafka import Producer as CProducer

    producer = CProducer(confluent_config(spec))
    producer.list_topics(spec.topic_names()[0], timeout=10)
    data, every, topic = payload(spec.size), spec.sample_every, spec.topic
    produce, poll = producer.produce, producer.poll

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            rec.errors += 1

    def probed(probe: Callable[[Any], None]) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            on_delivery(err, msg)
            probe(None)

        return callback

    if spec.concurrency > 1:
        rec.begin()
        _concurrent_confluent(spec, rec, producer, data, on_delivery)
        rec.end()
        return
    if spec.spread:
        plan = routes(spec)
        rec.begin()
        for i, (to_topic, key) in enumerate(plan):
            callback = on_delivery if i % every else probed(rec.probe())
            while True:
                try:
                    produce(to_topic, data, key, on_delivery=callback)
                    break
                except BufferError as exc:
                    rec.raised_one(exc)
                    poll(0.1)
            poll(0)
        rec.offered = spec.records
        producer.flush()
        rec.end()
        return
    rec.begin()
    for i in range(spec.records):
        if spec.memory_bound and i % 1000 == 0 and deadline_passed(rec):
            exit_now(rec)
        callback = on_delivery if i % every else probed(rec.probe())

        began = time.perf_counter() if spec.memory_bound else 0.0
        while True:
            try:
                produce(topic, data, on_delivery=callback)
                break
            except BufferError as exc:
                # The documented answer to a full queue: serve callbacks, then try again.
                rec.raised_one(exc)
                poll(0.1)
                if spec.memory_bound and deadline_passed(rec):
                    exit_now(rec)
        if spec.memory_bound:
            rec.longest_block_s = max(rec.longest_block_s, time.perf_counter() - began)
        rec.offered += 1
        poll(0)
    if spec.memory_bound:
        exit_now(rec)
    producer.flush()
    rec.end()


def _concurrent_confluent(
    spec: Spec, rec: Recorder, producer: Any, data: bytes, on_delivery: Callable[[Any, Any], None]
) -> None:
    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    def sender(index: int, count: int) -> None:
        for i in range(count):
            acked = threading.Event()
            probe = rec.probe() if (index + i) % spec.sample_every == 0 else None

            def callback(err: Any, msg: Any, acked: threading.Event = acked) -> None:
                on_delivery(err, msg)
                acked.set()

            while True:
                try:
                    producer.produce(spec.topic, data, on_delivery=callback)
                    break
                except BufferError as exc:
                    rec.raised_one(exc)
                    time.sleep(0.01)
            acked.wait()
            if probe is not None:
                probe(None)

    poll_thread = threading.Thread(target=poller, daemon=True)
    poll_thread.start()
    run_threads(spec, sender)
    stop.set()
    poll_thread.join()
    producer.flush()
    rec.offered = spec.records


def run_threads(spec: Spec, target: Callable[[int, int], None]) -> None:
    threading.stack_size(256 * 1024)  # a thousand default 8 MiB stacks would be address waste
    share, extra = divmod(spec.records, spec.concurrency)
    threads = [
        threading.Thread(target=target, args=(n, share + (1 if n < extra else 0)))
        for n in range(spec.concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_kafka_python(spec: Spec, rec: Recorder) -> None:
    from kafka import KafkaProducer

    # kafka-python 3 has no buffer_memory setting: its accumulator is unbounded.
    producer = KafkaProducer(
        bootstrap_servers=spec.bootstrap,
        acks=spec.acks_int if spec.acks != "all" else "all",
        compression_type=None if spec.compression == "none" else spec.compression,
        enable_idempotence=spec.idempotence,
        client_id=spec.client_id,
        **given(batch_size=spec.batch_size, linger_ms=spec.linger_ms),
    )
    producer.partitions_for(spec.topic_names()[0])
    data, every, topic, send = payload(spec.size), spec.sample_every, spec.topic, producer.send

    def failed(_exc: Any) -> None:
        rec.errors += 1

    if spec.concurrency > 1:

        def sender(index: int, count: int) -> None:
            for i in range(count):
                probe = rec.probe() if (index + i) % every == 0 else None
                try:
                    send(topic, data).get(timeout=120)
                except Exception as exc:
                    rec.errors += 1
                    rec.raised_one(exc)
                if probe is not None:
                    probe(None)

        rec.begin()
        run_threads(spec, sender)
        rec.offered = spec.records
        producer.flush()
        rec.end()
        producer.close()
        return
    futures: list[Any] = []
    if spec.spread:
        plan = routes(spec)
        rec.begin()
        for i, (to_topic, key) in enumerate(plan):
            try:
                future = send(to_topic, data, key)
            except Exception as exc:
                rec.raised_one(exc)
                continue
            if i % every == 0:
                future.add_callback(rec.probe())
            futures.append(future)
        rec.offered = spec.records
        producer.flush()
        rec.errors += sum(1 for f in futures if f.failed())
        rec.end()
        producer.close()
        return
    rec.begin()
    for i in range(spec.records):
        if spec.memory_bound and i % 1000 == 0 and deadline_passed(rec):
            exit_now(rec)
        began = time.perf_counter() if spec.memory_bound else 0.0
        try:
            future = send(topic, data)
        except Exception as exc:
            rec.raised_one(exc)
            continue
        if i % every == 0:
            future.add_callback(rec.probe())
        if spec.memory_bound:
            rec.longest_block_s = max(rec.longest_block_s, time.perf_counter() - began)
            future.add_errback(failed)
        else:
            futures.append(future)
        rec.offered += 1
    if spec.memory_bound:
        exit_now(rec)
    producer.flush()
    rec.errors += sum(1 for f in futures if f.failed())
    rec.end()
    producer.close()


def run_aioaccum_sync(spec: Spec, rec: Recorder) -> None:
    """aioaccum's ``SyncProducer`` from one thread: ``fut = p.send(topic, value)`` per record
    (with the record's topic and key in the partition-scaling workloads), every future kept,
    then ``fut.result()`` for each and ``flush()``."""
    import asyncio

    from aioaccum.sync import SyncProducer
    from benchlib.clients import aioaccum_hot_path, aioaccum_settings

    rec.hot_path = aioaccum_hot_path()
    with SyncProducer(spec.bootstrap, **aioaccum_settings(spec)) as producer:
        # The topic's metadata before the clock starts, as every contender has it: SyncProducer
        # has no partitions_for of its own, so the async Producer's runs on its loop thread.
        loop = producer._loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(
            producer.producer.partitions_for(spec.topic_names()[0]), loop
        ).result()
        data, every, send = payload(spec.size), spec.sample_every, producer.send
        topic = spec.topic
        plan = routes(spec) if spec.spread else None
        futures: list[Any] = []
        keep = futures.append
        rec.begin()
        # The probes' callbacks run on the producer's loop thread when a batch is acknowledged.
        if plan is None:
            for i in range(spec.records):
                if i % every == 0:
                    probe = rec.probe()
                    future = send(topic, data)
                    future.add_done_callback(probe)
                else:
                    future = send(topic, data)
                keep(future)
        else:
            for i, (to_topic, key) in enumerate(plan):
                if i % every == 0:
                    probe = rec.probe()
                    future = send(to_topic, data, key)
                    future.add_done_callback(probe)
                else:
                    future = send(to_topic, data, key)
                keep(future)
        rec.offered = spec.records
        for future in futures:
            try:
                future.result()
            except Exception:
                rec.errors += 1
        producer.flush()
        rec.end()


SYNC_RUNNERS: dict[str, Callable[[Spec, Recorder], None]] = {
    "aioaccum-sync": run_aioaccum_sync,
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
}
