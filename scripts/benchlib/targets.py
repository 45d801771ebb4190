"""Issue 29's targets, measured in one interleaved run: ``scripts/bench --targets``.

``--targets`` picks the workloads and contenders below; after the run each target is read off
the summary as a ratio of medians from the same run (records/s, the same ratio as MB/s within a
workload), or a figure against a bound, and marked met, missed or not measured (a contender
that failed or did not run; a workload left out). The table goes to the terminal, the results
JSON and the generated docs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# 1k and 4k records at 16 KiB, 128 KiB and 1 MiB batches, plain and lz4.
SIZED = tuple(
    f"{size}-{batch}{codec}"
    for size in ("1k", "4k")
    for codec in ("", "-lz4")
    for batch in ("16k", "128k", "1m")
)
TARGET_WORKLOADS = (
    "100b-16k",
    "defaults",
    "defaults-16k",
    "defaults-128k",
    "defaults-1m",
    "keyed-6p",
    "keyed-600p",
    "keyed-6000p",
    *SIZED,
)
TARGET_CONTENDERS = (
    "aioaccum",
    "aioaccum-bulk",
    "aioaccum-sync",
    "aioaccum-full",
    "aioaccum-incremental",
    "aiokafka",
    "confluent",
    "java",
)
# The defaults workloads replicate every partition 3 times.
TARGET_BROKERS = 3
RSS_TARGET_MIB = 150.0
# The peak-RSS target holds with this many futures kept (100b-16k's full count).
RSS_TARGET_RECORDS = 1_000_000


@dataclass(frozen=True, slots=True)
class Target:
    """One line of the targets: ``ours`` against ``theirs`` in ``workload``, or a bound."""

    label: str
    workload: str
    ours: str
    # A peer contender whose figure divides ours, or None when ``bound`` is the comparison.
    theirs: str | None
    field: str
    # Ratio targets: ours / theirs >= at_least. ``lower_is_better`` turns it into
    # theirs / ours (cost: CPU per record), so ">= 1.0x" always reads "at least as good".
    at_least: float
    lower_is_better: bool = False
    # An absolute upper bound on ours (peak RSS), instead of a ratio.
    bound: float | None = None


def targets() -> Iterator[Target]:
    yield Target("await send() each, futures kept", "100b-16k", "aioaccum", "confluent",
                 "records_per_s", 1.0)  # fmt: skip
    yield Target("await send() each, futures kept", "100b-16k", "aioaccum", "aiokafka",
                 "records_per_s", 5.0)  # fmt: skip
    yield Target("CPU per record", "100b-16k", "aioaccum", "confluent",
                 "cpu_s_per_m", 1.0, lower_is_better=True)  # fmt: skip
    yield Target("1M futures kept", "100b-16k", "aioaccum", None,
                 "peak_rss_mib", 0.0, bound=RSS_TARGET_MIB)  # fmt: skip
    yield Target("each client at its own defaults", "defaults", "aioaccum", "confluent",
                 "records_per_s", 1.0)  # fmt: skip
    for batch in ("16k", "128k", "1m"):
        yield Target("equal batch sizes", f"defaults-{batch}", "aioaccum", "confluent",
                     "records_per_s", 1.2)  # fmt: skip
    yield Target("SyncProducer, one thread", "100b-16k", "aioaccum-sync", "confluent",
                 "records_per_s", 1.0)  # fmt: skip
    yield Target("send_many", "100b-16k", "aioaccum-bulk", "confluent", "records_per_s", 1.5)
    for keyed in ("keyed-600p", "keyed-6000p"):
        yield Target("keyed", keyed, "aioaccum", "confluent", "records_per_s", 1.0)
    yield Target("incremental no slower than full", "keyed-6p", "aioaccum-incremental",
                 "aioaccum-full", "records_per_s", 1.0)  # fmt: skip
    yield Target("incremental ÷ full", "keyed-6000p", "aioaccum-incremental", "aioaccum-full",
                 "records_per_s", 1.5)  # fmt: skip
    for workload in SIZED:
        for peer in ("confluent", "java"):
            yield Target("MB/s", workload, "aioaccum", peer, "mb_per_s", 1.0)


def evaluate(summary: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target with its measured value and verdict: ``met``, ``missed`` or
    ``not measured`` (with why)."""
    by = {(s["workload"], s["contender"]): s for s in summary}
    records = {r["workload"]: r["records"] for r in runs}
    out = []
    for t in targets():
        row: dict[str, Any] = {
            "target": t.label,
            "workload": t.workload,
            "ours": t.ours,
            "theirs": t.theirs,
            "field": t.field,
            "figure": figure(t),
            "wanted": f"<= {t.bound:g} MiB" if t.bound is not None else f">= {t.at_least:g}x",
            "value": None,
        }
        mine = by.get((t.workload, t.ours))
        peer = by.get((t.workload, t.theirs)) if t.theirs is not None else None
        missing = _missing(t, mine, peer)
        if missing is None and t.bound is not None and records[t.workload] < RSS_TARGET_RECORDS:
            missing = f"the run kept {records[t.workload]:,} futures, not {RSS_TARGET_RECORDS:,}"
        if missing is not None:
            row.update(verdict="not measured", why=missing)
        elif t.bound is not None:
            assert mine is not None
            row["value"] = mine[t.field]
            row["verdict"] = "met" if mine[t.field] <= t.bound else "missed"
        else:
            assert mine is not None
            assert peer is not None
            ours, theirs = mine[t.field], peer[t.field]
            row["value"] = theirs / ours if t.lower_is_better else ours / theirs
            row["verdict"] = "met" if row["value"] >= t.at_least else "missed"
            if t.field == "cpu_s_per_m" and "process" in (mine["cpu_scope"], peer["cpu_scope"]):
                row["why"] = "one figure is over the whole process, start-up included"
        out.append(row)
    return out


FIELD_NAMES = {
    "records_per_s": "records/s",
    "mb_per_s": "MB/s",
    "cpu_s_per_m": "CPU s per million records",
    "peak_rss_mib": "peak RSS",
}


def figure(t: Target) -> str:
    """What is compared, in words: ``aioaccum ÷ confluent, records/s``."""
    name = FIELD_NAMES[t.field]
    if t.theirs is None:
        return f"{t.ours}, {name}"
    first, second = (t.theirs, t.ours) if t.lower_is_better else (t.ours, t.theirs)
    return f"{first} ÷ {second}, {name}"


def _missing(t: Target, mine: dict[str, Any] | None, peer: dict[str, Any] | None) -> str | None:
    """Why a target cannot be read off the summary, or None when it can."""
    for name, row in ((t.ours, mine), (t.theirs, peer)):
        if name is None:
            continue
        if row is None:
            return f"{name} did not run {t.workload}"
        if row.get(t.field) in (None, 0):
            failures = "; ".join(row.get("failures") or []) or "no successful run"
            return f"{name}: {failures}"
    return None


def format_value(row: dict[str, Any]) -> str:
    if row["value"] is None:
        return "–"
    return f"{row['value']:.0f} MiB" if row["field"] == "peak_rss_mib" else f"{row['value']:.2f}x"


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The targets as text lines for the terminal."""
    out = []
    for row in rows:
        text = (
            f"  {row['verdict']:<13}{row['workload']:<15}{row['figure']}: "
            f"{format_value(row)} (want {row['wanted']}; {row['target']})"
        )
        if row.get("why"):
            text += f" [{row['why']}]"
        out.append(text)
    return out
