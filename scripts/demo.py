"""The main job behind scripts/demo: produce with ``aioaccum perf``, read back, count, summarise."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
KAFKA = [sys.executable, str(ROOT / "scripts" / "kafka")]


def kafka_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KAFKA, *args], text=True, capture_output=True, check=False)


def ensure_cluster(bootstrap: str | None = None) -> tuple[str, bool]:
    """The bootstrap string (``bootstrap``, else AIOACCUM_BOOTSTRAP, else a local cluster that
    this starts if none runs), and whether this run started the cluster."""
    bootstrap = bootstrap or os.environ.get("AIOACCUM_BOOTSTRAP")
    if bootstrap:
        return bootstrap, False
    if kafka_script("status").returncode == 0:
        return kafka_script("bootstrap").stdout.strip(), False
    print("starting a local Kafka broker (scripts/kafka up --brokers 1) ...", flush=True)
    started = time.monotonic()
    up = subprocess.run([*KAFKA, "up", "--brokers", "1"], check=False)
    if up.returncode != 0:
        raise SystemExit("could not start Kafka; see the log tail above")
    print(f"Kafka is up after {time.monotonic() - started:.1f} s", flush=True)
    return kafka_script("bootstrap").stdout.strip(), True


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        await admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=min(3, brokers))]
        )
    finally:
        await admin.close()


async def read_back(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float
) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        count = 0
        deadline = time.monotonic() + timeout
        while count < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000, max_records=100_000)
            count += sum(len(records) for records in batch.values())
        return count
    finally:
        await consumer.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--keep-kafka", action="store_true", help="leave a started broker up")
    parser.add_argument("--producer-props", nargs="*", default=["acks=1", "linger.ms=5"])
    args = parser.parse_args()

    bootstrap, started = ensure_cluster()
    try:
        topic = f"aioaccum-demo-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topic(bootstrap, topic, args.partitions))
        print(f"topic {topic}: {args.partitions} partitions on {bootstrap}", flush=True)
        perf = [
            sys.executable, "-m", "aioaccum.cli", "perf",
            "--topic", topic,
            "--num-records", str(args.num_records),
            "--record-size", str(args.record_size),
            "--throughput", "-1",
            "--bootstrap-server", bootstrap,
            "--uvloop",
            "--producer-props", *args.producer_props,
        ]  # fmt: skip
        print("$ aioaccum " + " ".join(perf[3:]), flush=True)
        t0 = time.monotonic()
        result = subprocess.run(perf, check=False)
        produce_s = time.monotonic() - t0
        if result.returncode != 0:
            print(f"aioaccum perf failed with exit code {result.returncode}", file=sys.stderr)
            return 1
        t0 = time.monotonic()
        found = asyncio.run(
            read_back(bootstrap, topic, args.partitions, args.num_records, timeout=300)
        )
        read_s = time.monotonic() - t0
        ok = found == args.num_records
        print()
        print("summary")
        print(f"  records sent      {args.num_records:>12,}")
        print(f"  records read back {found:>12,}   {'OK' if ok else 'MISMATCH'}")
        print(f"  produce wall time {produce_s:>12.1f} s")
        print(f"  read-back time    {read_s:>12.1f} s")
        return 0 if ok else 1
    finally:
        if started and not args.keep_kafka:
            kafka_script("down")


if __name__ == "__main__":
    raise SystemExit(main())
