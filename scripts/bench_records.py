"""Micro-benchmarks for aioaccum._core.records.MemoryRecordsBuilder (prints figures; not a test).

Usage: PYTHONPATH=. python scripts/bench_records.py [--records 300000] [--profile]

It measures whichever builder aioaccum._speedups chose, and says which on its first line: the
compiled one, or with AIOACCUM_NO_EXTENSIONS=1 the pure-Python reference.

1. Appends per second of 100-byte values (null key, no headers, no compression) into 16 KiB
   pooled buffers: ``try_append`` until the batch is full, then ``close()``; the same buffer is
   reused for every batch, as the pool would hand it back. Reported with and without close().
2. The same with a 20-byte key and two headers, to show what headers cost.
3. MB/s of 1 KiB values (JSON-like, so they compress) through lz4 batches, close() included,
   with the compression-ratio estimator learning across batches as the accumulator drives it.
4. The whole life of a small chunked batch, what keys spread over many partitions make: a
   builder over 2 KiB pooled chunks, three keyed 100-byte records, ``close()`` and the views
   handed to the socket (``build_parts``), in µs per batch.
5. With ``--profile``: cProfile of (1), sorted by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time
from collections.abc import Sequence

from aioaccum import _speedups
from aioaccum._core.chunks import chunk_size_for
from aioaccum._core.codecs import CompressionRatioEstimator, CompressionType
from aioaccum._core.records import Header, MemoryRecordsBuilder

BATCH = 16 * 1024
TS = 1_700_000_000_000


def fill_batches(
    records: int,
    key: bytes | None,
    value: bytes,
    headers: Sequence[Header],
) -> tuple[float, float, int]:
    """Return (seconds in try_append, seconds in close, batches)."""
    buffer = bytearray(BATCH)
    appending = closing = 0.0
    done = batches = 0
    clock = time.perf_counter
    while done < records:
        builder = MemoryRecordsBuilder(buffer, write_limit=BATCH)
        try_append = builder.try_append
        ts = TS + batches
        start = clock()
        while try_append(ts, key, value, headers) >= 0:
            done += 1
        middle = clock()
        builder.close()
        closing += clock() - middle
        appending += middle - start
        batches += 1
    return appending, closing, batches


def small_batches(batches: int, per_batch: int = 3) -> float:
    """Return µs per batch of ``per_batch`` records over incremental chunks, start to send."""
    chunk = chunk_size_for(BATCH)
    key, value = b"key-1234", b"v" * 100

    def take(size: int) -> bytearray:
        return bytearray(max(size, chunk))

    def give_back(_: bytearray) -> None:
        pass

    start = time.perf_counter()
    for n in range(batches):
        builder = MemoryRecordsBuilder(
            bytearray(chunk), write_limit=BATCH, chunk_size=chunk, chunk_source=take,
            chunk_sink=give_back,
        )  # fmt: skip
        for i in range(per_batch):
            builder.try_append(TS + n + i, key, value, ())
        builder.close()
        builder.build_parts()
    return (time.perf_counter() - start) / batches * 1e6


def json_like_values(count: int, size: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        parts: list[str] = []
        while sum(len(p) for p in parts) < size:
            parts.append(
                f'{{"user":{rng.randrange(10**6)},"event":"{rng.choice(["view", "click", "buy"])}",'
                f'"price":{rng.random() * 100:.2f},"ts":{rng.randrange(10**12)}}},'
            )
        values.append("".join(parts).encode()[:size])
    return values


def lz4_throughput(total_bytes: int) -> tuple[float, float, float]:
    """Return (MB/s of uncompressed values, mean compression ratio, mean batch size)."""
    values = json_like_values(256, 1024)
    estimator = CompressionRatioEstimator()
    lz4 = CompressionType.LZ4
    buffer = bytearray(BATCH)
    written = batches = sent = 0
    ratios = 0.0
    start = time.perf_counter()
    i = 0
    while written < total_bytes:
        builder = MemoryRecordsBuilder(
            buffer,
            compression=lz4,
            write_limit=BATCH,
            estimated_ratio=estimator.estimation("t", lz4),
        )
        while builder.try_append(TS, None, values[i & 255], ()) >= 0:
            written += 1024
            i += 1
        builder.close()
        sent += len(builder.build())
        estimator.update_estimation("t", lz4, builder.compression_ratio)
        ratios += builder.compression_ratio
        batches += 1
    elapsed = time.perf_counter() - start
    return written / elapsed / 1e6, ratios / batches, sent / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--lz4-mb", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(f"MemoryRecordsBuilder: {_speedups.describe()}")
    gc.collect()

    value = b"v" * 100
    fill_batches(20_000, None, value, ())  # warm up
    best = min((fill_batches(args.records, None, value, ()) for _ in range(3)), key=sum)
    appending, closing, batches = best
    print(
        f"100-byte values, no compression, {args.records} records in {batches} batches:\n"
        f"  try_append: {appending / args.records * 1e9:6.0f} ns/record "
        f"= {args.records / appending:,.0f} appends/s\n"
        f"  with close: {(appending + closing) / args.records * 1e9:6.0f} ns/record "
        f"= {args.records / (appending + closing):,.0f} appends/s "
        f"(close: {closing / batches * 1e6:.1f} µs/batch)"
    )

    headers: list[Header] = [("trace-id", b"0123456789abcdef"), ("source", b"bench")]
    appending, closing, batches = fill_batches(args.records, b"k" * 20, value, headers)
    print(
        f"100-byte values + 20-byte key + 2 headers: "
        f"{appending / args.records * 1e9:.0f} ns/record try_append"
    )

    small_batches(20_000)  # warm up
    per_batch = min(small_batches(args.records // 3) for _ in range(3))
    print(f"3 keyed 100-byte records in 2 KiB chunks, open to views for the socket: "
          f"{per_batch:.2f} µs/batch")  # fmt: skip

    mbps, ratio, size = lz4_throughput(args.lz4_mb * 1_000_000)
    print(
        f"1 KiB JSON-like values, lz4, close included: {mbps:.1f} MB/s of values "
        f"(ratio {ratio:.3f}, {size:,.0f} bytes per sent batch, batch_size {BATCH})"
    )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        fill_batches(args.records, None, value, ())
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
