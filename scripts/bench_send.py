"""The producer's own cost per record, with no network: each way of sending and of waiting.

Prints figures; it is not a test. The broker is an adapter that acknowledges every request at
once, so what is measured is aioaccum alone: ``send()``, the accumulator, the sender's loop, batch
completion and the record futures, on one event loop (uvloop unless ``--asyncio``).

    .venv/bin/python scripts/bench_send.py [--records N] [--value-size B] [--mode MODE ...]
    .venv/bin/python scripts/bench_send.py --profile --mode wait_all   # cProfile, top 20
    .venv/bin/python scripts/bench_send.py --journal none             # with a journal_dir

Modes: ``await_each`` (``await fut`` for every kept future, in order, dropping each metadata
once read), ``gather``
(``asyncio.gather`` over the kept futures), ``wait_all`` (``aioaccum.wait_all``), ``send_many``,
and for threads ``sync_1`` / ``sync_4`` (``SyncProducer.send`` from 1 or 4 threads at once, every
future kept, then every ``result()`` read by the thread that sent it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvloop

import aioaccum
from aioaccum import Producer
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum._speedups import describe
from aioaccum.sync import SyncProducer

# The fake broker adapter of the unit tests, which this script shares.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from unit.fake_kafka import FakeKafka

MODES = ("await_each", "gather", "wait_all", "send_many", "sync_1", "sync_4")
TOPIC = "bench"


class InstantKafka(FakeKafka):
    """The test suite's fake broker, but acknowledging every batch at once without decoding it,
    with offsets per partition."""

    def __init__(self, partitions: int) -> None:
        super().__init__(StaticCluster.uniform({TOPIC: partitions}, nodes=1))
        self.offsets: dict[TopicPartition, int] = {}

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        out = {}
        for tp, data in batches:
            count = int.from_bytes(data[57:61], "big")
            base = self.offsets.get(tp, 0)
            self.offsets[tp] = base + count
            out[tp] = PartitionResponse(None, base, -1)
        return out


def settings(journal: str | None, idempotent: bool) -> dict[str, Any]:
    """acks=1 without idempotence, unless ``idempotent`` or a journal (which needs it): then
    also ``journal_dir`` (a fresh temporary folder) and ``journal_sync``."""
    if journal is None and not idempotent:
        return {"acks": 1, "enable_idempotence": False}
    out: dict[str, Any] = {"acks": -1, "enable_idempotence": True}
    if journal is not None:
        out["journal_dir"] = tempfile.mkdtemp(prefix="aioaccum-bench-send-")
        out["journal_sync"] = journal
    return out


async def run(mode: str, records: int, value_size: int, partitions: int,
              journal: str | None = None, idempotent: bool = False,
              batch_size: int | None = None, keyed: bool = False,
              strategy: str | None = None) -> tuple[float, float]:
    """Seconds of process CPU and of wall time for ``records`` sent and waited for; with
    ``keyed``, each record has one of 16 keys per partition, in turn."""
    value = b"x" * value_size
    pool = [f"key-{i}".encode() for i in range(16 * partitions)] if keyed else [None]
    keys = [pool[i % len(pool)] for i in range(records)]
    kafka = InstantKafka(partitions)
    sizes: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    if strategy is not None:
        sizes["buffer_memory_allocation_strategy"] = strategy
    async with Producer(kafka=kafka, linger_ms=5, **sizes,
                        **settings(journal, idempotent)) as producer:
        cpu, wall = time.process_time(), time.perf_counter()
        if mode == "send_many":
            chunk = 10_000
            waits = []
            for start in range(0, records, chunk):
                n = min(chunk, records - start)
                waits.append(await producer.send_many(
                    TOPIC, [value] * n, keys=keys[start : start + n] if keyed else None
                ))
            # Read every metadata once, as the other modes do.
            out: list[Any] = [None for w in waits for _ in await w]
        else:
            send = producer.send
            futures = [await send(TOPIC, value, key) for key in keys]
            if mode == "await_each":
                # Each metadata is read and dropped, as a caller checking every record would.
                out = []
                for f in futures:
                    await f
                    out.append(None)
            elif mode == "gather":
                out = await asyncio.gather(*futures)
            else:
                # Each metadata is built as it is read; read every one, as await_each does.
                out = [None for _ in await aioaccum.wait_all(futures)]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if len(out) != records or sum(kafka.offsets.values()) != records:
        raise SystemExit(f"{mode}: {len(out)} results, {sum(kafka.offsets.values())} acked")
    return cpu, wall


def run_threads(
    threads: int,
    records: int,
    value_size: int,
    partitions: int,
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> tuple[float, float]:
    """As :func:`run`, through ``SyncProducer`` from ``threads`` threads at once."""
    value = b"x" * value_size
    kafka = InstantKafka(partitions)
    share = records // threads
    read = [0] * threads
    with SyncProducer(
        kafka=kafka, acks=1, enable_idempotence=False, linger_ms=5, loop_factory=loop_factory
    ) as producer:
        start = threading.Barrier(threads + 1)

        def work(index: int) -> None:
            send = producer.send
            start.wait()
            futures = [send(TOPIC, value) for _ in range(share)]
            for future in futures:
                future.result()
                read[index] += 1

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        start.wait()
        cpu, wall = time.process_time(), time.perf_counter()
        for worker in workers:
            worker.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    acked = sum(kafka.offsets.values())
    if sum(read) != share * threads or acked != share * threads:
        raise SystemExit(f"{threads} threads: {sum(read)} read, {acked} acked")
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--mode", nargs="*", choices=MODES, default=list(MODES))
    parser.add_argument("--asyncio", action="store_true", help="the stdlib loop, not uvloop")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--journal", choices=("none", "interval", "always"),
                        help="with a journal_dir in a fresh temporary folder, this journal_sync"
                        " (and idempotence)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch_size (default: the producer's own); per-batch costs weigh "
                        "more in small batches")
    parser.add_argument("--keyed", action="store_true",
                        help="a key per record, 16 keys per partition (the bench's keyed-*)")
    parser.add_argument("--strategy", choices=("full", "incremental"), default=None,
                        help="buffer_memory_allocation_strategy (default: the producer's own)")
    parser.add_argument("--idempotent", action="store_true",
                        help="acks='all' and idempotence (the baseline of --journal)")
    args = parser.parse_args()
    loop_factory = asyncio.new_event_loop if args.asyncio else uvloop.new_event_loop
    if len(args.mode) > 1:
        # One process per mode, so each peak RSS is its own.
        print(f"hot path: {describe()}; loop: {'asyncio' if args.asyncio else 'uvloop'}")
        rest = [a for a in sys.argv[1:] if a not in args.mode and a != "--mode"]
        for mode in args.mode:
            subprocess.run([sys.executable, __file__, "--mode", mode, *rest], check=True)
        return
    for mode in args.mode:
        gc.collect()
        if mode.startswith("sync_"):
            cpu, wall = run_threads(
                int(mode[5:]), args.records, args.value_size, args.partitions, loop_factory
            )
            report(mode, args.records, cpu, wall)
            continue
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            coro = run(mode, args.records, args.value_size, args.partitions, args.journal,
                       args.idempotent, args.batch_size, args.keyed, args.strategy)
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                cpu, wall = runner.run(coro)
                profiler.disable()
                pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)
            else:
                cpu, wall = runner.run(coro)
        report(mode, args.records, cpu, wall)


def report(mode: str, records: int, cpu: float, wall: float) -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{mode:>10}: {records / wall:>10,.0f} records/s, "
        f"{cpu / records * 1e6:5.2f} us CPU/record, peak RSS {rss:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
