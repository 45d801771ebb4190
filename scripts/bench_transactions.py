#!/usr/bin/env python3
"""What transactions cost: `aioaccum perf` throughput with a commit every N records, against
none, interleaved and repeated, on a running cluster.

    scripts/bench_transactions.py --bootstrap-server 127.0.0.1:19092 [--records 200000]
        [--sizes 100,1000,10000] [--repeats 3]

Prints one row per transaction size: the median records/s, and its ratio to the run without
transactions measured in the same rounds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

_RATE = re.compile(r"records sent, ([0-9.]+) records/sec")
_CLI = str(Path(sys.executable).with_name("aioaccum"))


def run(bootstrap: str, records: int, per: int | None) -> float:
    topic = f"txbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    command = [
        _CLI, "perf", "--topic", topic, "--num-records", str(records), "--record-size", "100",
        "--throughput", "-1", "--bootstrap-server", bootstrap,
    ]
    if per is not None:
        command += ["--transactional-id", f"txbench-{per}", "--transaction-records", str(per)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    found = _RATE.search(out.stdout.splitlines()[-1])
    if found is None:
        raise SystemExit(f"no rate in the output of {command}: {out.stdout[-500:]}")
    admin.delete_topics([topic])[topic].result(30)
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes: list[int | None] = [None, *(int(s) for s in args.sizes.split(","))]
    rates: dict[int | None, list[float]] = {size: [] for size in sizes}
    for round_ in range(args.repeats):
        for size in sizes:
            rate = run(args.bootstrap_server, args.records, size)
            rates[size].append(rate)
            print(f"round {round_ + 1}: {size or 'none'}: {rate:,.0f} records/s", flush=True)
    base = statistics.median(rates[None])
    print("\n| records per transaction | records/s (median) | vs none |")
    print("|---|---|---|")
    for size in sizes:
        median = statistics.median(rates[size])
        label = "none (idempotent)" if size is None else f"{size:,}"
        print(f"| {label} | {median:,.0f} | {median / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
