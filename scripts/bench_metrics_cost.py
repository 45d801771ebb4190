#!/usr/bin/env python3
"""What recording the producer's metrics costs the sender: ProducerMetrics' calls timed on
their own, per batch and per request, on whichever hot path is installed (compiled, unless
AIOACCUM_NO_EXTENSIONS=1).

    .venv/bin/python scripts/bench_metrics_cost.py [--calls 200000] [--records-per-batch 100]

The sender makes these calls once per batch (acknowledged) and once per request (drained,
answered), never per record; the last line divides their sum by the records of a batch.
"""

from __future__ import annotations

import argparse
import time

from aioaccum import _speedups
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition
from aioaccum._core.metrics import ProducerMetrics
from aioaccum._core.records import MemoryRecordsBuilder

_BATCH_BYTES = 1 << 20


def batches(count: int, records: int) -> list[ProducerBatch]:
    out = []
    for i in range(count):
        builder = MemoryRecordsBuilder(bytearray(_BATCH_BYTES), write_limit=_BATCH_BYTES)
        batch = ProducerBatch(TopicPartition(f"topic-{i % 4}", i), builder, 0.0, loop=None)
        for _ in range(records):
            batch.try_append(0, None, b"x" * 100, ())
        batch.close()
        out.append(batch)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--records-per-batch", type=int, default=100)
    args = parser.parse_args()
    pool = batches(64, args.records_per_batch)
    metrics = ProducerMetrics()
    calls = args.calls
    began = time.perf_counter()
    for i in range(calls):
        metrics.record_success(pool[i & 63], 1.0 + i * 1e-6)
    acknowledged = time.perf_counter()
    for i in range(calls):
        metrics.record_drained(pool[i & 63 : (i & 63) + 1], 1.0 + i * 1e-6)
    drained = time.perf_counter()
    for i in range(calls):
        metrics.record_response(0.002, 0.0, 1.0 + i * 1e-6)
    answered = time.perf_counter()
    per_batch = (acknowledged - began) / calls
    per_drain = (drained - acknowledged) / calls
    per_answer = (answered - drained) / calls
    print(f"hot path: {_speedups.describe()}")
    print(f"per acknowledged batch (record_success): {per_batch * 1e6:.3f} us")
    print(f"per request drained (record_drained, one batch): {per_drain * 1e6:.3f} us")
    print(f"per answer (record_response): {per_answer * 1e6:.3f} us")
    total = (per_batch + per_drain + per_answer) / args.records_per_batch
    print(f"per record, {args.records_per_batch} records a batch: {total * 1e9:.1f} ns")


if __name__ == "__main__":
    main()
