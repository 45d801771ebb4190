"""What one sender turn costs the accumulator as partitions grow: ``ready`` + ``drain`` +
``expired_batches``, with no network.

Prints figures; it is not a test. Two tables:

* few with data: N partitions exist (10, 1,000, 100,000; every one has had a batch once, so
  the accumulator knows them all), 10 of them get a record each turn. The cost per turn should
  not follow N;
* all with data: every partition holds one batch, and turns run until all are drained. The
  cost per drained batch should not follow N.

    .venv/bin/python scripts/bench_ready.py [--sizes 10,1000,100000] [--turns 2000]
    AIOACCUM_NO_EXTENSIONS=1 .venv/bin/python scripts/bench_ready.py     # the pure-Python path
"""

from __future__ import annotations

import argparse
import time

import aioaccum._speedups as speedups
from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import StaticCluster
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._runtime.pool import BufferPool

TOPIC = "bench"
NODES = 3
BATCH_SIZE = 1024  # small, so that 100,000 partitions with a batch each fit in memory
MAX_REQUEST_SIZE = 1024 * 1024
VALUE = b"x" * 100


class Bench:
    def __init__(self, partitions: int) -> None:
        self.partitions = list(range(partitions))
        self.cluster = StaticCluster.uniform({TOPIC: partitions}, nodes=NODES)
        self.pool = BufferPool((partitions + 64) * BATCH_SIZE, BATCH_SIZE)
        self.acc = RecordAccumulator(
            self.pool, batch_size=BATCH_SIZE, linger=0.005, delivery_timeout=120.0
        )
        self.bound = estimate_size_in_bytes_upper_bound(None, VALUE, ())
        self.now = 1000.0
        self._done: list[ProducerBatch] = []

    def append(self, partition: int) -> None:
        got = self.acc.append(
            TOPIC, partition, 0, None, VALUE, (), self.bound, self.partitions, self.cluster,
            self.now,
        )
        assert not isinstance(got, BufferRequest), "the pool is sized for one batch each"

    def turn(self) -> int:
        """One sender turn's accumulator calls; returns the batches drained (and completes
        them, outside the timed part)."""
        check = self.acc.ready(self.cluster, self.now)
        drained = self.acc.drain(self.cluster, check.ready_nodes, MAX_REQUEST_SIZE, self.now)
        self.acc.expired_batches(self.now)
        count = 0
        for batches in drained.values():
            count += len(batches)
            self._done.extend(batches)
        return count

    def settle(self) -> None:
        for batch in self._done:
            batch.complete(0, -1)
            self.acc.deallocate(batch)
        self._done.clear()

    def warm(self) -> None:
        """Every partition gets a batch once, which is drained: all of them are known."""
        for p in self.partitions:
            self.append(p)
        self.now += 0.01
        while self.turn():
            self.settle()
        self.settle()


def few_with_data(partitions: int, turns: int) -> float:
    """Microseconds per turn with 10 partitions receiving a record each turn."""
    bench = Bench(partitions)
    bench.warm()
    step = max(partitions // 10, 1)
    hot = [(i * step) % partitions for i in range(10)]
    elapsed = 0.0
    drained = 0
    for _ in range(turns):
        for p in hot:
            bench.append(p)
        bench.now += 0.006  # past the linger: every hot partition is ready
        start = time.perf_counter()
        drained += bench.turn()
        elapsed += time.perf_counter() - start
        bench.settle()
    assert drained == 10 * turns, f"drained {drained} batches, expected {10 * turns}"
    return elapsed / turns * 1e6


def all_with_data(partitions: int, rounds: int) -> float:
    """Microseconds per drained batch with every partition holding a batch."""
    bench = Bench(partitions)
    bench.warm()
    elapsed = 0.0
    drained = 0
    for _ in range(rounds):
        for p in bench.partitions:
            bench.append(p)
        bench.now += 0.006
        while True:
            start = time.perf_counter()
            got = bench.turn()
            elapsed += time.perf_counter() - start
            bench.settle()
            if not got:
                break
            drained += got
    assert drained == partitions * rounds, f"drained {drained}, expected {partitions * rounds}"
    return elapsed / drained * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,1000,100000")
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"hot path: {speedups.describe()}")
    print(f"{'partitions':>11} | {'10 with data: us/turn':>22} | {'all with data: us/batch':>24}")
    first: tuple[float, float] | None = None
    for n in sizes:
        few = few_with_data(n, args.turns)
        rounds = max(1, 200_000 // n)
        every = all_with_data(n, min(rounds, 20))
        first = first or (few, every)
        print(
            f"{n:>11,} | {few:>14.1f} ({few / first[0]:4.2f}x) | {every:>15.2f} "
            f"({every / first[1]:4.2f}x)"
        )


if __name__ == "__main__":
    main()
