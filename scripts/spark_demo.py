"""The job behind scripts/spark-demo: a million-row DataFrame into Kafka through aioaccum.spark.

Runs PySpark in local mode on 127.0.0.1, writes the same DataFrame once per mode ("driver":
one producer in the driver; "executors": one producer per Spark task), checks the topic's end
offsets against the report, and prints records/s, MB/s and peak memory: the driver's Python
process, the JVM (which holds the executors in local mode) and Spark's Python workers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import uuid
from typing import Any, Literal

import psutil
from aiokafka import AIOKafkaConsumer, TopicPartition
from demo import create_topic, ensure_cluster, kafka_script

MIB = 1 << 20


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


class MemoryWatch:
    """Peak RSS of this process, of the JVM it started, and of Spark's Python workers."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self.baseline = self._me.memory_info().rss
        self.driver = self.baseline
        self.jvm = 0
        self.workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        self.driver = max(self.driver, self._me.memory_info().rss)
        jvm = workers = 0
        for child in self._me.children(recursive=True):
            try:
                name, rss = child.name(), child.memory_info().rss
            except psutil.Error:
                continue  # a worker that just ended
            if name == "java":
                jvm += rss
            elif name.startswith("python"):
                workers += rss
        self.jvm = max(self.jvm, jvm)
        self.workers = max(self.workers, workers)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def parse_props(items: list[str]) -> dict[str, Any]:
    """``name=value`` pairs (Python setting names); ints stay ints."""
    out: dict[str, Any] = {}
    for item in items:
        name, _, raw = item.partition("=")
        out[name.replace(".", "_")] = int(raw) if raw.lstrip("-").isdigit() else raw
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default=os.environ.get("AIOACCUM_BOOTSTRAP"),
                        help="use this cluster instead of starting a one-broker one")
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=6, help="Kafka partitions")
    parser.add_argument("--spark-partitions", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--mode", choices=["both", "driver", "executors"], default="both")
    parser.add_argument("--buffer-memory", type=int, default=4 * MIB,
                        help="producer buffer_memory (small, to show the driver's bound)")
    parser.add_argument("--producer-props", nargs="*", default=["linger_ms=20", "batch_size=65536"])
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--keep-kafka", action="store_true", help="leave a started broker up")
    args = parser.parse_args()  # fmt: skip

    bootstrap, started = ensure_cluster(args.bootstrap)
    try:
        return run(args, bootstrap)
    finally:
        if started and not args.keep_kafka:
            kafka_script("down")


def run(args: argparse.Namespace, bootstrap: str) -> int:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from aioaccum.spark import WriteReport, write_dataframe

    t0 = time.monotonic()
    spark = (
        SparkSession.builder.master(args.master)
        .appName("aioaccum-spark-demo")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark {spark.version} ({args.master}) up after {time.monotonic() - t0:.1f} s")
    df = spark.range(0, args.num_records, 1, args.spark_partitions).select(
        F.col("id").cast("string").alias("key"),
        F.rpad(F.col("id").cast("string"), args.record_size, ".").alias("value"),
    )
    settings = {"buffer_memory": args.buffer_memory, **parse_props(args.producer_props)}
    modes: list[Literal["driver", "executors"]] = (
        ["driver", "executors"] if args.mode == "both" else [args.mode]
    )
    results: list[tuple[WriteReport, MemoryWatch, bool]] = []
    try:
        for mode in modes:
            topic = f"aioaccum-spark-demo-{mode}-{uuid.uuid4().hex[:8]}"
            asyncio.run(create_topic(bootstrap, topic, args.partitions))
            print(f"\nmode={mode}: {args.num_records:,} rows -> {topic} on {bootstrap}", flush=True)
            with MemoryWatch() as memory:
                report = write_dataframe(
                    df, topic, key="key", value="value", bootstrap_servers=bootstrap,
                    mode=mode, progress=not args.no_progress, **settings,
                )  # fmt: skip
            ends = asyncio.run(end_offsets(bootstrap, topic, args.partitions))
            ok = sum(ends.values()) == args.num_records and {
                p: n for p, n in ends.items() if n
            } == report.per_partition
            print(f"end offsets {sum(ends.values()):,}: {'OK' if ok else 'MISMATCH'} "
                  f"({report.failures} failures)", flush=True)  # fmt: skip
            results.append((report, memory, ok))
    finally:
        spark.stop()

    print("\nsummary (buffer_memory "
          f"{args.buffer_memory / MIB:.0f} MiB, {args.record_size}-byte values)")  # fmt: skip
    print(f"  {'mode':<10}{'records':>11}{'seconds':>9}{'rec/s':>10}{'MB/s':>7}"
          f"{'driver RSS peak (+grew)':>25}{'JVM peak':>10}{'workers':>9}  offsets")  # fmt: skip
    for report, memory, ok in results:
        grew = (memory.driver - memory.baseline) / MIB
        print(
            f"  {report.mode:<10}{report.records:>11,}{report.seconds:>9.1f}"
            f"{report.records_per_second:>10,.0f}{report.megabytes_per_second:>7.1f}"
            f"{f'{memory.driver / MIB:.0f} MiB (+{grew:.0f})':>25}"
            f"{memory.jvm / MIB:>6.0f} MiB{memory.workers / MIB:>5.0f} MiB"
            f"  {'OK' if ok else 'MISMATCH'}"
        )
    return 0 if all(ok for _, _, ok in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
