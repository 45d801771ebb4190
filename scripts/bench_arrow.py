#!/usr/bin/env python3
"""Arrow rows into Kafka: ``send_arrow`` against ``send_many``, records/s.

The same rows (string key, 100-byte value; one million by default) in Arrow batches of
10,000 rows are sent three ways, each to a fresh topic, in interleaved rounds:

* ``send_arrow``: one call per batch, encoded from the Arrow buffers;
* ``send_many(to_pylist)``: the batch's columns turned into Python lists, then one
  ``send_many`` call (what the Spark sinks did before ``send_arrow``);
* ``send_many(lists)``: the same lists made beforehand, not timed (the bulk path alone).

Counts are checked against the topics' end offsets; prints the median records/s of each.

    .venv/bin/python scripts/bench_arrow.py [--rows 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from demo import create_topic, ensure_cluster
from spark_demo import end_offsets

from aioaccum import Producer, _speedups

PARTITIONS = 8
BATCH_ROWS = 10_000
SETTINGS: dict[str, Any] = {"acks": 1, "linger_ms": 5}


def batches(rows: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, rows, BATCH_ROWS):
        ids = range(start, min(start + BATCH_ROWS, rows))
        out.append(
            pa.record_batch(
                {
                    "key": pa.array([f"key-{i % 100_000}" for i in ids]),
                    "value": pa.array([f"{i:v>100}".encode() for i in ids], pa.binary()),
                }
            )
        )
    return out


Way = Callable[[Producer, str, Sequence[Any]], Awaitable[list[asyncio.Future[Any]]]]


async def via_arrow(producer: Producer, topic: str, data: Sequence[Any]) -> list[Any]:
    return [await producer.send_arrow(batch, topic) for batch in data]


async def via_pylist(producer: Producer, topic: str, data: Sequence[Any]) -> list[Any]:
    futures = []
    for batch in data:
        keys = batch.column(0).cast(pa.binary()).to_pylist()
        values = batch.column(1).to_pylist()
        futures.append(await producer.send_many(topic, values, keys=keys))
    return futures


async def via_lists(producer: Producer, topic: str, data: Sequence[Any]) -> list[Any]:
    return [await producer.send_many(topic, values, keys=keys) for keys, values in data]


async def run(bootstrap: str, way: Way, data: Sequence[Any], rows: int) -> float:
    topic = f"bench-arrow-{uuid.uuid4().hex[:10]}"
    await create_topic(bootstrap, topic, PARTITIONS)
    async with Producer(bootstrap, **SETTINGS) as producer:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        futures = await way(producer, topic, data)
        for future in futures:
            await future
        elapsed = time.perf_counter() - start
    # With acks=1 the high watermark follows the leader's acknowledgement by a replication.
    deadline = time.monotonic() + 30
    count = sum((await end_offsets(bootstrap, topic, PARTITIONS)).values())
    while count < rows and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        count = sum((await end_offsets(bootstrap, topic, PARTITIONS)).values())
    if count != rows:
        raise SystemExit(f"{topic}: {count} records, expected {rows}")
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    bootstrap, _started = ensure_cluster(args.bootstrap)
    print(_speedups.describe())
    arrow = batches(args.rows)
    lists = [(b.column(0).cast(pa.binary()).to_pylist(), b.column(1).to_pylist()) for b in arrow]
    ways: dict[str, tuple[Way, Sequence[Any]]] = {
        "send_arrow": (via_arrow, arrow),
        "send_many(to_pylist)": (via_pylist, arrow),
        "send_many(lists)": (via_lists, lists),
    }
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for round_no in range(args.rounds):
        for name, (way, data) in ways.items():
            rate = asyncio.run(run(bootstrap, way, data, args.rows))
            rates[name].append(rate)
            print(f"round {round_no + 1} {name:>22}: {rate:>12,.0f} records/s", flush=True)
    print()
    for name in ways:
        print(f"{name:>22}: {statistics.median(rates[name]):>12,.0f} records/s (median)")


if __name__ == "__main__":
    main()
