#!/usr/bin/env python3
"""The Spark driver sink's producer side, measured without Spark.

The driver sink receives chunks of rows (Arrow batches) from Spark and sends every row, one
``send_arrow`` call per chunk. This script feeds ``produce`` (on the caller's loop) and
``produce_from_thread`` (from a thread without a loop, as the driver calls it) the same
synthetic chunks, with no Spark in the way, so that only the producer side counts.
Interleaved rounds, a fresh topic per run, end offsets
checked; prints the median records/s of each. The sink's settings are those of
``scripts/spark-demo``.

    .venv/bin/python scripts/bench_spark_driver.py [--rows 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from demo import create_topic, ensure_cluster, kafka_script
from spark_demo import end_offsets

from aioaccum.spark.rows import (
    Chunk,
    Tally,
    chunk_of,
    produce,
    produce_from_thread,
    run_coroutine,
)

SETTINGS = {"buffer_memory": 4 << 20, "batch_size": 65536, "linger_ms": 20}
CHUNK_ROWS = 10_000  # about 1 MiB of rows, the size of the blobs the driver pulls from Spark
PARTITIONS = 6


def chunks(rows: int) -> Iterator[Chunk]:
    value = b"v" * 100
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, rows)
        keys = [b"%d" % (i % 100_000) for i in range(start, stop)]
        batch = pa.record_batch(
            {"key": pa.array(keys, pa.binary()), "value": pa.array([value] * (stop - start))}
        )
        yield chunk_of(batch, ())


def via_async(bootstrap: str, topic: str, rows: int, tally: Tally) -> None:
    settings = {"bootstrap_servers": bootstrap, **SETTINGS}
    run_coroutine(lambda: produce(chunks(rows), topic, settings, tally))


def via_thread(bootstrap: str, topic: str, rows: int, tally: Tally) -> None:
    settings = {"bootstrap_servers": bootstrap, **SETTINGS}
    produce_from_thread(chunks(rows), topic, settings, tally)


WAYS: dict[str, Callable[[str, str, int, Tally], None]] = {
    "async Producer (produce)": via_async,
    "SyncProducer (produce_from_thread)": via_thread,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    bootstrap, started_cluster = ensure_cluster(args.bootstrap)
    try:
        run(bootstrap, args)
    finally:
        if started_cluster:
            kafka_script("down")


def run(bootstrap: str, args: argparse.Namespace) -> None:
    rates: dict[str, list[float]] = {name: [] for name in WAYS}
    for round_no in range(1, args.rounds + 1):
        for name, way in WAYS.items():
            topic = f"bench-spark-driver-{uuid.uuid4().hex[:8]}"
            asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
            tally = Tally()
            started = time.perf_counter()
            way(bootstrap, topic, args.rows, tally)
            elapsed = time.perf_counter() - started
            delivered = sum(asyncio.run(end_offsets(bootstrap, topic, PARTITIONS)).values())
            if tally.records != args.rows or delivered != args.rows or tally.failures:
                raise SystemExit(
                    f"{name}: {tally.records:,} counted, {delivered:,} on the broker, "
                    f"{tally.failures} failed ({tally.first_error}); expected {args.rows:,}"
                )
            rates[name].append(args.rows / elapsed)
            print(f"round {round_no} {name:<36} {args.rows / elapsed:>10,.0f} records/s")
    print()
    print(f"{args.rows:,} rows (6-byte keys, 100-byte values) in chunks of {CHUNK_ROWS:,}, "
          f"{args.rounds} round(s), settings {SETTINGS}")
    base = statistics.median(rates["async Producer (produce)"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} records/s | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
