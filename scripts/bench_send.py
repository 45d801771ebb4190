"""Per-record send throughput: aioaccum against aiokafka and confluent-kafka, same broker, same run.

Each contender runs in its own process (so peak RSS is its own), interleaved over repetitions
(A B C, A B C, ...), all with acks=1, linger 5 ms, batch 16 KiB, no compression. Prints the
median records/s per client, the ratios aioaccum/peer, and each client's peak RSS. Delivered
counts are checked from the topic's end offsets after every run. Prints figures; not a test.

    .venv/bin/python scripts/bench_send.py --bootstrap 127.0.0.1:19092 [--records 1000000]

Without --bootstrap it uses the running scripts/kafka cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ("aioaccum", "aiokafka", "confluent")


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _run_aioaccum(bootstrap: str, topic: str, n: int, payload: bytes, loop: str) -> int:
    from aioaccum import Producer

    errors = 0
    async with Producer(bootstrap, acks=1, linger_ms=5) as producer:
        send = producer.send
        for _ in range(n):
            await send(topic, payload)
        await producer.flush()
        errors = int(producer.metrics()["record-error-total"])
    return errors


async def _run_aiokafka(bootstrap: str, topic: str, n: int, payload: bytes, loop: str) -> int:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    await producer.start()
    futures = []
    try:
        send = producer.send
        for _ in range(n):
            futures.append(await send(topic, payload))
        results = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        await producer.stop()
    return sum(1 for r in results if isinstance(r, BaseException))


def _run_confluent(bootstrap: str, topic: str, n: int, payload: bytes) -> int:
    from confluent_kafka import Producer as CProducer

    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    producer = CProducer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 16384}
    )
    produce, poll = producer.produce, producer.poll
    for _ in range(n):
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.05)
        poll(0)
    producer.flush()
    return errors


def child(client: str, bootstrap: str, topic: str, n: int, size: int, loop: str) -> None:
    payload = b"x" * size
    start = time.perf_counter()
    if client == "confluent":
        errors = _run_confluent(bootstrap, topic, n, payload)
    else:
        runner = _run_aioaccum if client == "aioaccum" else _run_aiokafka
        if loop == "uvloop":
            import uvloop

            errors = uvloop.run(runner(bootstrap, topic, n, payload, loop))
        else:
            errors = asyncio.run(runner(bootstrap, topic, n, payload, loop))
    elapsed = time.perf_counter() - start
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "client": client,
                "seconds": elapsed,
                "errors": errors,
                "rss_mib": _peak_rss_mib(),
                "cpu_s": cpu.ru_utime + cpu.ru_stime,
            }
        )
    )


async def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    await asyncio.sleep(1.0)  # let leaders settle before timing anything


async def _end_offsets(bootstrap: str, topic: str) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic) or set()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return int(sum(ends.values()))
    finally:
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--child", nargs=2, metavar=("CLIENT", "TOPIC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    bootstrap = args.bootstrap or subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kafka"), "bootstrap"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if args.child:
        child(args.child[0], bootstrap, args.child[1], args.records, args.record_size, args.loop)
        return

    clients = args.clients.split(",")
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    for rep in range(args.repeat):
        for client in clients:
            topic = f"bench-{client}-{uuid.uuid4().hex[:8]}"
            asyncio.run(_create_topic(bootstrap, topic, args.partitions))
            out = subprocess.run(
                [sys.executable, __file__, "--bootstrap", bootstrap, "--records",
                 str(args.records), "--record-size", str(args.record_size), "--loop", args.loop,
                 "--child", client, topic],
                check=True, capture_output=True, text=True, env=dict(os.environ),
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            delivered = asyncio.run(_end_offsets(bootstrap, topic))
            result["delivered"] = delivered
            if delivered != args.records or result["errors"]:
                print(f"  {client}: {delivered} of {args.records} delivered, "
                      f"{result['errors']} errors: not a valid result", flush=True)
            result["rate"] = args.records / result["seconds"]
            runs[client].append(result)
            print(f"  rep {rep + 1} {client:<9} {result['rate']:>12,.0f} rec/s  "
                  f"rss {result['rss_mib']:.0f} MiB  cpu {result['cpu_s']:.1f} s", flush=True)

    print(f"\n{args.records:,} x {args.record_size} B, acks=1, linger 5 ms, loop={args.loop}, "
          f"median of {args.repeat}:")
    med = {c: statistics.median(r["rate"] for r in runs[c]) for c in clients}
    for client in clients:
        rss = max(r["rss_mib"] for r in runs[client])
        mb = med[client] * args.record_size / 1e6
        print(f"  {client:<10} {med[client]:>12,.0f} records/s  {mb:6.1f} MB/s  "
              f"peak RSS {rss:.0f} MiB")
    if "aioaccum" in med:
        for peer in clients:
            if peer != "aioaccum":
                print(f"  aioaccum / {peer}: {med['aioaccum'] / med[peer]:.2f}x")


if __name__ == "__main__":
    main()
