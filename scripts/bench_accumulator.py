"""Appends per second into the RecordAccumulator, with no network.

Prints figures; it is not a test. Whenever the pool runs dry, every queued batch is drained and
released, as the sender would have, so the figure is mostly the append path.

    .venv/bin/python scripts/bench_accumulator.py [--records N] [--value-size B] [--codec lz4]
    .venv/bin/python scripts/bench_accumulator.py --profile     # cProfile, top 15 by tottime
    .venv/bin/python scripts/bench_accumulator.py --strategy incremental --partitions 6000

``--strategy incremental`` grows batches in pooled chunks (KIP-1332); records go round-robin over
``--partitions``, as uniformly keyed records do. Besides appends/s it prints the records per
drained batch: with ``full`` and many partitions the pool runs dry on batch_size buffers that
hold a record or two each.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.chunks import chunk_size_for
from aioaccum._core.cluster import StaticCluster
from aioaccum._core.codecs import CompressionType
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool

DRAINED = [0, 0]  # batches, records


async def run(
    records: int,
    value_size: int,
    codec: CompressionType,
    *,
    partitions_count: int = 6,
    batch_size: int = 16384,
    incremental: bool = False,
) -> float:
    chunk = chunk_size_for(batch_size) if incremental else 0
    pool = BufferPool(32 * 1024 * 1024, chunk or batch_size)
    acc = RecordAccumulator(
        pool, batch_size=batch_size, linger=0.005, delivery_timeout=120.0, compression=codec,
        chunk_size=chunk,
    )
    PARTITIONS = partitions_count
    cluster = StaticCluster.uniform({"bench": PARTITIONS}, nodes=3)
    partitions = list(range(PARTITIONS))
    value = b"x" * value_size
    bound = estimate_size_in_bytes_upper_bound(None, value, ())
    timestamp = int(time.time() * 1000)
    loop = asyncio.get_running_loop()
    append = acc.append
    start = time.perf_counter()
    for i in range(records):
        appended = append(
            "bench", i % PARTITIONS, timestamp, None, value, (), bound, partitions, cluster, 0.0
        )
        if isinstance(appended, BufferRequest):
            # Every batch buffer is out: ship what is queued, as the sender would, then retry.
            for batches in acc.drain(cluster, (0, 1, 2), 1 << 20, loop.time()).values():
                for batch in batches:
                    DRAINED[0] += 1
                    DRAINED[1] += batch.record_count
                    batch.record_parts()
                    batch.complete(0, -1)
                    acc.deallocate(batch)
            buffer = await pool.allocate(appended.size, 60000)
            append(
                "bench", i % PARTITIONS, timestamp, None, value, (), bound, partitions, cluster,
                0.0, granted=(appended, buffer),
            )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--codec", default="none")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--strategy", choices=("full", "incremental"), default="full")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16384)
    args = parser.parse_args()
    codec = CompressionType.from_name(args.codec)

    def once() -> float:
        return asyncio.run(run(
            args.records, args.value_size, codec, partitions_count=args.partitions,
            batch_size=args.batch_size, incremental=args.strategy == "incremental",
        ))

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        once()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return
    best = min(once() for _ in range(args.repeat))
    rate = args.records / best
    mb = rate * args.value_size / 1e6
    per_batch = DRAINED[1] / DRAINED[0] if DRAINED[0] else 0.0
    print(
        f"accumulator append: {args.records:,} x {args.value_size} B, codec={args.codec}, "
        f"{args.strategy}, {args.partitions} partitions, batch_size {args.batch_size}: "
        f"{rate:,.0f} appends/s, {mb:.1f} MB/s (best of {args.repeat}); "
        f"{per_batch:.1f} records per batch drained while the pool was dry"
    )


if __name__ == "__main__":
    main()
