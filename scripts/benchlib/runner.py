"""The command line of ``scripts/bench`` and the interleaved runs behind it."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchlib.contenders import (
    CONTENDERS,
    DEFAULT_CONTENDERS,
    QUICK_CONTENDERS,
    child_command,
    parse_java_output,
)
from benchlib.harness import Broker, Cluster, Measured, kafka_script, measure
from benchlib.spec import (
    BUFFER_MEMORY,
    DEFAULT_WORKLOADS,
    MIB,
    THROTTLED_CLIENT_ID,
    WORKLOADS,
    Spec,
    Workload,
    plural,
    spread_problem,
    topic_names,
)
from benchlib.targets import (
    TARGET_BROKERS,
    TARGET_CONTENDERS,
    TARGET_WORKLOADS,
    evaluate,
)
from benchlib.targets import lines as target_lines

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS_JSON = ROOT / "docs" / "bench" / "results.json"
# aioaccum's promise under a slow broker: its buffer plus this much for everything else.
RSS_ALLOWANCE_MIB = 64
QUICK_RECORDS = 20_000
QUICK_CONCURRENCY = 50
QUICK_TIME_LIMIT_S = 60
# What --quick runs without --workload: the plain workload, and partition scaling in small.
QUICK_WORKLOADS = ("100b-16k", "keyed-600p")
TIMELINE_POINTS = 120
# Brokers remove a deleted topic's files after log.segment.delete.delay.ms (60 s by default):
# after deleting this many partitions, the next workload waits that out plus a margin, so the
# removal (seconds of broker CPU for thousands of partitions) lands in no timed run.
SETTLE_AFTER_PARTITIONS = 1000
SETTLE_S = 75.0
# Warm-up runs on a workload's new shared topics: at most WARM_UP_RUNS, until two in a row
# agree within WARM_UP_AGREE (a fraction of the earlier one's rate). On a new topic of 6,000
# partitions the brokers took minutes to reach speed: four warm-up runs of 200,000 records made
# 10,023, 4,856, 6,510 and 4,592 records/s, and the counted runs that followed went from 7,000
# to 11,500 records/s in the first repetition to 13,000 to 35,000 in the second, every client
# alike.
WARM_UP_RUNS = 8
WARM_UP_AGREE = 0.2
# Two slow runs agree too: a keyed-6000p warm-up stopped after 6,391 and 5,532 records/s, and
# its first counted run made 8,995 where the next made 36,068. On a fresh topic of 6,000
# partitions, aioaccum's runs (its two allocation strategies in turn) made 4,499, 5,570, 8,131,
# 19,866, then about 33,000 records/s: so at least three warm-up runs, and agreement counts
# only from the third on.
WARM_UP_MIN = 3


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Producer clients side by side against a local cluster, interleaved.",
    )
    parser.add_argument("--list", action="store_true", help="list workloads and contenders")
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        help="workload name(s), comma separated; repeatable",
    )
    parser.add_argument("--all", action="store_true", help="every workload")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="issue 29's targets: their workloads and contenders on 3 brokers, then each "
        "target met or missed",
    )
    parser.add_argument("--contenders", help=f"default {','.join(DEFAULT_CONTENDERS)}")
    parser.add_argument("--repeat", type=int, help="repetitions (default 3; --quick 1)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: at most {QUICK_RECORDS:,} records, 1 repetition, "
        f"{','.join(QUICK_CONTENDERS)}",
    )
    parser.add_argument("--records", type=int, help="override every workload's record count")
    parser.add_argument("--bootstrap", help="use this cluster instead of starting one")
    parser.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        help="size of the cluster to start (default 1); a running one must be this size",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        help="override every workload's partitions per topic (default: the workload's own)",
    )
    parser.add_argument("--json", type=Path, help=f"results file (with --docs: {DOCS_JSON})")
    parser.add_argument(
        "--docs",
        action="store_true",
        help="write docs/benchmarks.md and docs/bench/*.png from the results",
    )
    parser.add_argument(
        "--render-docs",
        type=Path,
        metavar="JSON",
        help="only regenerate the docs from an existing results file",
    )
    parser.add_argument(
        "--memory-seconds",
        type=float,
        default=30.0,
        help="how long the memory-bound run offers records per contender",
    )
    parser.add_argument(
        "--throttle-bytes",
        type=int,
        default=1 * MIB,
        help="producer_byte_rate quota of the memory-bound run (bytes/s)",
    )
    parser.add_argument(
        "--rss-limit-mib", type=float, default=4096, help="kill a contender whose RSS passes this"
    )
    parser.add_argument(
        "--docs-dir", type=Path, default=ROOT / "docs", help="where --docs writes (default docs/)"
    )
    parser.add_argument("--time-limit", type=float, default=600, help="seconds per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def list_all() -> None:
    print("workloads:")
    for w in WORKLOADS.values():
        mark = ("*" if w.name in DEFAULT_WORKLOADS else " ") + (
            "q" if w.name in QUICK_WORKLOADS else " "
        )
        print(f" {mark} {w.name:<17} {w.describe()}")
        if w.note:
            print(f"    {'':<17} ({w.note})")
    print(
        "   (* = run when no --workload is given; q = run by --quick without --workload; "
        "--all runs every one)"
    )
    print("contenders:")
    for c in CONTENDERS.values():
        reason = c.unavailable()
        print(f"   {c.name:<18} {'available' if reason is None else 'unavailable: ' + reason}")
        sits_out: dict[str, list[str]] = {}
        for w in WORKLOADS.values():
            why = c.skips(w)
            if why is not None:
                sits_out.setdefault(why, []).append(w.name)
        for why, names in sits_out.items():
            print(f"   {'':<18}   sits out {', '.join(names)}: {why}")


def chosen_workloads(args: argparse.Namespace) -> list[Workload]:
    names = [n for arg in args.workload for n in arg.split(",") if n]
    if args.all:
        names = list(WORKLOADS)
    elif args.targets:
        names = list(dict.fromkeys([*TARGET_WORKLOADS, *names]))
    elif not names:
        names = list(QUICK_WORKLOADS if args.quick else DEFAULT_WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; see --list")
    picked = [WORKLOADS[n] for n in names]
    if args.records:
        picked = [dataclasses.replace(w, records=args.records) for w in picked]
    if args.partitions:
        picked = [dataclasses.replace(w, partitions=args.partitions) for w in picked]
    if args.quick:
        picked = [
            dataclasses.replace(
                w,
                records=quick_records(w),
                concurrency=min(w.concurrency, QUICK_CONCURRENCY),
            )
            for w in picked
        ]
    return picked


def quick_records(w: Workload) -> int:
    """--quick's record count: at most 20,000 (ten times that offered in the memory-bound
    run), and when keyed no more than one record per key, which still reaches every partition."""
    cap = QUICK_RECORDS * (10 if w.memory_bound else 1)
    if w.keyed:
        cap = min(cap, w.keys)
    return min(w.records, cap)


def machine_info() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    versions: dict[str, str] = {}
    for dist in ("aiokafka", "confluent-kafka", "kafka-python", "uvloop"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "not installed"
    try:
        import confluent_kafka

        versions["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "java": (java.stderr.splitlines() or ["?"])[0],
        "kafka": kafka_script("version", timeout=30).stdout.strip(),
        "aioaccum": f"git {rev}" if rev else "?",
        "os": platform.platform(),
        **versions,
    }


def spec_for(
    w: Workload, contender: str, bootstrap: str, topic: str, result: Path, memory_seconds: float
) -> Spec:
    return Spec(
        contender=contender,
        bootstrap=bootstrap,
        topic=topic,
        topics=w.topics,
        keys=w.keys,
        records=w.records,
        size=w.size,
        batch_size=w.batch_size,
        linger_ms=w.linger_ms,
        compression=w.compression,
        acks=w.acks,
        idempotence=w.idempotence,
        buffer_memory=w.buffer_memory,
        concurrency=w.concurrency,
        memory_bound=w.memory_bound,
        deadline_s=memory_seconds if w.memory_bound else 1e9,
        client_id=THROTTLED_CLIENT_ID if w.memory_bound else "aioaccum-bench",
        result_path=str(result),
    )


def one_run(
    broker: Broker,
    w: Workload,
    contender: str,
    rep: int,
    args: argparse.Namespace,
    shared: str | None,
) -> dict[str, Any]:
    """One contender's run of ``w``: on the workload's shared topics (``shared`` is their stem),
    counting what the end offsets rose by, or else on a fresh topic of the run's own."""
    stem = shared or f"bench-{w.name}-{contender}-{uuid.uuid4().hex[:8]}"
    topics = topic_names(stem, w.topics)
    if shared is None:
        broker.create_topics(topics, w.partitions, w.replication)
        before: dict[tuple[str, int], int] = {}
    else:
        before = broker.offsets(topics, w.partitions)
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        spec = spec_for(w, contender, broker.bootstrap, stem, result_path, args.memory_seconds)
        argv, env = child_command(spec)
        is_java = CONTENDERS[contender].kind == "java"
        limit = args.memory_seconds + 60 if w.memory_bound else args.time_limit
        if args.quick:
            limit = min(limit, QUICK_TIME_LIMIT_S)
        measured = measure(
            argv,
            env,
            result_path,
            time_limit_s=limit,
            rss_limit_mib=args.rss_limit_mib,
            stop_after_s=args.memory_seconds if w.memory_bound and is_java else None,
        )
    if is_java:
        measured.result = parse_java_output(measured.stdout, w.records)
    after = broker.offsets(topics, w.partitions)
    if shared is None:
        broker.delete_topics(topics)
    counts = {tp: end - before.get(tp, 0) for tp, end in after.items()}
    misplaced = spread_problem(w, topics, counts)
    return record(w, contender, rep, sum(counts.values()), measured, misplaced)


def record(
    w: Workload,
    contender: str,
    rep: int,
    delivered: int,
    m: Measured,
    misplaced: str | None = None,
) -> dict[str, Any]:
    res = m.result or {}
    run: dict[str, Any] = {
        "workload": w.name,
        "contender": contender,
        "rep": rep,
        "records": w.records,
        "size": w.size,
        "delivered": delivered,
        # The child's own high-water mark where it reported one (every Python contender), else
        # wait4's (the JVM's, far above the forking parent's RSS that wait4 also counts).
        "peak_rss_mib": round(res.get("own_peak_rss_mib") or m.peak_rss_mib, 1),
        "cpu_s": round(m.cpu_s, 2),
        "wall_s": round(m.wall_s, 2),
        "exit_code": m.exit_code,
        "killed": m.killed,
        **res,
    }
    problems = []
    raised = res.get("raised_error")
    if raised is not None:
        # The client raised (a setting it refuses, say): that is the reason, said first.
        problems.append(f"the client raised {raised}")
    if m.killed and not (w.memory_bound and "RSS" in m.killed):
        problems.append(m.killed)
    if m.exit_code not in (0, None) and not m.killed and not w.memory_bound and raised is None:
        problems.append(f"exit code {m.exit_code}")
    if m.result is None and not m.killed:
        problems.append("no result")
    # A client that raised before any record landed has said all there is to say.
    if not w.memory_bound and (raised is None or delivered > 0):
        if delivered != w.records:
            problems.append(f"broker holds {delivered:,} of {w.records:,} records")
        elif misplaced is not None:
            problems.append(misplaced)
        if res.get("errors"):
            problems.append(f"{res['errors']} records failed")
    run["ok"] = not problems
    run["failure"] = "; ".join(problems) or None
    if problems:
        run["stderr_tail"] = m.stderr[-1500:]
    if run["ok"] and not w.memory_bound and res.get("elapsed_s"):
        rate = w.records / res["elapsed_s"]
        run["records_per_s"] = rate
        run["mb_per_s"] = rate * w.size / 1e6
        run.update(cpu_per_million(res.get("cpu_window_s"), m.cpu_s, w.records))
    else:
        # A failed run is never timed, nor its cost per record taken.
        run["records_per_s"] = run["mb_per_s"] = run["cpu_s_per_m"] = None
        run["cpu_scope"] = None
    if w.memory_bound:
        step = max(1, len(m.rss_timeline) // TIMELINE_POINTS)
        run["rss_timeline"] = m.rss_timeline[::step]
        run["behaviour"] = behaviour(run)
    return run


def cpu_per_million(window_s: float | None, process_s: float, records: int) -> dict[str, Any]:
    """CPU seconds per million records: over the timed run (first send to last ack) where the
    child measured it (every Python contender: the process's user + system time, all its
    threads, from ``time.process_time``), else over the whole process (Java: the JVM's rusage
    from ``wait4``, its start-up and JIT compilation included)."""
    if window_s is not None:
        return {"cpu_s_per_m": window_s / records * 1e6, "cpu_scope": "run"}
    return {"cpu_s_per_m": process_s / records * 1e6, "cpu_scope": "process"}


def behaviour(run: dict[str, Any]) -> str:
    """What a client did when the broker could not keep up, in words, from what was measured."""
    if run.get("failure"):
        return f"run failed: {run['failure']}"
    parts = []
    if run.get("killed") and "RSS" in run["killed"]:
        parts.append(f"grew until killed ({run['killed']})")
    raised: dict[str, int] = run.get("raised") or {}
    if raised:
        parts.append("raised " + ", ".join(f"{name} x{n:,}" for name, n in raised.items()))
    if run.get("errors"):
        parts.append(f"failed {run['errors']:,} records")
    block = run.get("longest_block_s")
    if block is not None and block >= 0.1:
        parts.append(f"waited (longest send call {block:.1f} s)")
    base = run.get("baseline_rss_mib")
    if base is not None and run["peak_rss_mib"] - base > BUFFER_MEMORY / MIB + RSS_ALLOWANCE_MIB:
        parts.append(f"grew (+{run['peak_rss_mib'] - base:,.0f} MiB over its start)")
    if run["contender"] == "java" and not parts:
        parts.append("no error; send blocks on buffer.memory by design (not timed here)")
    return "; ".join(parts) or "kept up (never blocked, nothing raised)"


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = dict.fromkeys((r["workload"], r["contender"]) for r in runs)
    for workload, contender in keys:
        mine = [r for r in runs if r["workload"] == workload and r["contender"] == contender]
        ok = [r for r in mine if r["ok"]]

        def med(field: str, rs: list[dict[str, Any]] = ok) -> float | None:
            values = [r[field] for r in rs if r.get(field) is not None]
            return statistics.median(values) if values else None

        row: dict[str, Any] = {
            "workload": workload,
            "contender": contender,
            "runs": len(mine),
            "ok": len(ok),
            "records_per_s": med("records_per_s"),
            "mb_per_s": med("mb_per_s"),
            "p50_ms": med("p50_ms"),
            "p99_ms": med("p99_ms"),
            "peak_rss_mib": max((r["peak_rss_mib"] for r in mine), default=None),
            "cpu_s": med("cpu_s", mine),
            "cpu_s_per_m": med("cpu_s_per_m"),
            "cpu_scope": next((r["cpu_scope"] for r in ok if r.get("cpu_scope")), None),
            "failures": sorted({r["failure"] for r in mine if r["failure"]}),
        }
        path = hot_path(mine)
        if path is not None:
            row["hot_path"] = path
        if "behaviour" in mine[0]:
            row["behaviour"] = mine[0]["behaviour"]
            row["delivered"] = mine[0]["delivered"]
            row["offered"] = mine[0].get("offered")
        out.append(row)
    return out


def hot_path(rows: list[dict[str, Any]]) -> str | None:
    """Which hot path (compiled or pure Python) aioaccum's runs among ``rows`` reported, as
    ``aioaccum._speedups.describe()`` said in their process; None when none reported one."""
    seen = list(dict.fromkeys(r["hot_path"] for r in rows if r.get("hot_path")))
    return " / ".join(seen) or None


def memory_check(summary: list[dict[str, Any]]) -> dict[str, Any] | None:
    row = next((s for s in summary if s["contender"] == "aioaccum" and "behaviour" in s), None)
    if row is None:
        return None
    bound = BUFFER_MEMORY / MIB + RSS_ALLOWANCE_MIB
    within = row["peak_rss_mib"] is not None and row["peak_rss_mib"] <= bound
    waited = "waited" in row["behaviour"] and "raised" not in row["behaviour"]
    return {
        "bound_mib": bound,
        "peak_rss_mib": row["peak_rss_mib"],
        "within": within,
        "waited": waited,
        "passed": within and waited,
    }


def fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def print_summary(summary: list[dict[str, Any]], workloads: list[Workload]) -> None:
    described = {w.name: w.describe() for w in workloads}
    path = hot_path(summary)
    if path is not None:
        print(f"\naioaccum hot path: {path}")
    for workload in dict.fromkeys(s["workload"] for s in summary):
        rows = [s for s in summary if s["workload"] == workload]
        print(f"\n{workload}: {described[workload]}")
        print(
            f"  {'client':<22}{'records/s':>12}{'MB/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'RSS MiB':>9}{'CPU s':>7}{'CPU s/M':>9}  ok"
        )
        for s in rows:
            per_m = fmt(s.get("cpu_s_per_m"), ".2f")
            if s.get("cpu_scope") == "process":
                per_m += "*"
            print(
                f"  {s['contender']:<22}{fmt(s['records_per_s']):>12}"
                f"{fmt(s['mb_per_s'], '.1f'):>8}{fmt(s['p50_ms'], '.1f'):>8}"
                f"{fmt(s['p99_ms'], '.1f'):>8}{fmt(s['peak_rss_mib']):>9}"
                f"{fmt(s['cpu_s'], '.1f'):>7}{per_m:>9}  {s['ok']}/{s['runs']}"
                + (f"  {s['behaviour']}" if "behaviour" in s else "")
            )
            for failure in s["failures"]:
                print(f"    {s['contender']} failed: {failure}")
        if any(s.get("cpu_scope") == "process" for s in rows):
            print("  (* CPU s/M over the whole process, start-up included: no timed window)")
        ours = next((s for s in rows if s["contender"] == "aioaccum"), None)
        if ours and ours["records_per_s"]:
            for s in rows:
                if s["contender"] != "aioaccum" and s["records_per_s"]:
                    ratio = ours["records_per_s"] / s["records_per_s"]
                    print(f"  aioaccum / {s['contender']}: {ratio:.2f}x")
    check = memory_check(summary)
    if check is not None:
        verdict = "PASS" if check["passed"] else "FAIL"
        print(
            f"\nmemory check: aioaccum peak RSS {check['peak_rss_mib']:.0f} MiB <= "
            f"{check['bound_mib']:.0f} MiB (buffer_memory + {RSS_ALLOWANCE_MIB} MiB): "
            f"{check['within']}; waited instead of raising: {check['waited']}: {verdict}"
        )


def sitting_out(workloads: list[Workload], contenders: list[str]) -> dict[str, dict[str, str]]:
    """For each workload, the contenders that sit it out and why."""
    out: dict[str, dict[str, str]] = {}
    for w in workloads:
        for c in contenders:
            why = CONTENDERS[c].skips(w)
            if why is not None:
                out.setdefault(w.name, {})[c] = why
    return out


def run_all(
    args: argparse.Namespace, broker: Broker, workloads: list[Workload], contenders: list[str]
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    repeat = args.repeat or (1 if args.quick else 3)
    for n, w in enumerate(workloads):
        here = [c for c in contenders if CONTENDERS[c].skips(w) is None]
        reps = 1 if w.memory_bound else repeat  # a bounded-time observation, not a timing
        shared = f"bench-{w.name}-{uuid.uuid4().hex[:8]}" if w.shared_topics else None
        if shared is not None:
            began = time.monotonic()
            broker.create_topics(topic_names(shared, w.topics), w.partitions, w.replication)
            print(
                f"  {w.name}: {plural(w.topics, 'topic')} of {plural(w.partitions, 'partition')} "
                f"ready in {time.monotonic() - began:.0f} s, shared by its runs",
                flush=True,
            )
            if here:
                # The brokers' own warm-up: with thousands of partitions the first runs on a
                # new topic went 3 to 8 times slower than the same client minutes later, even
                # after one write to each partition (the JVM compiling the paths such requests
                # take, most likely). These runs write to every partition and topic too; every
                # counted run comes after them. One was not enough (see WARM_UP_RUNS), so they
                # go on until two in a row agree within WARM_UP_AGREE (from the WARM_UP_MIN-th
                # run on), or WARM_UP_RUNS.
                rates: list[float] = []
                while len(rates) < WARM_UP_RUNS:
                    warm = one_run(broker, w, here[0], -1, args, shared)
                    rates.append(float(warm["records_per_s"] or 0.0))
                    print(
                        f"  {w.name} warm-up run {here[0]:<22}{fmt(warm['records_per_s']):>12} "
                        "rec/s  (not counted)",
                        flush=True,
                    )
                    if len(rates) >= WARM_UP_MIN and rates[-2] > 0 and (
                        abs(rates[-1] - rates[-2]) <= WARM_UP_AGREE * rates[-2]
                    ):
                        break
        if w.memory_bound:
            broker.set_producer_quota(THROTTLED_CLIENT_ID, args.throttle_bytes)
        try:
            for rep in range(reps):
                # Each repetition starts one contender later, so that none always runs first
                # (on a cluster still warming up, or a machine whose load drifts).
                shift = rep % len(here) if here else 0
                for contender in here[shift:] + here[:shift]:
                    run = one_run(broker, w, contender, rep, args, shared)
                    runs.append(run)
                    rate = fmt(run["records_per_s"])
                    state = "ok" if run["ok"] else f"FAILED: {run['failure']}"
                    print(
                        f"  {w.name} rep {rep + 1}/{reps} {contender:<22}{rate:>12} rec/s  "
                        f"RSS {run['peak_rss_mib']:.0f} MiB  CPU {run['cpu_s']:.1f} s  "
                        f"{run.get('behaviour', state)}",
                        flush=True,
                    )
        finally:
            if w.memory_bound:
                broker.set_producer_quota(THROTTLED_CLIENT_ID, None)
            if shared is not None:
                broker.delete_topics(topic_names(shared, w.topics))
        deleted = w.topics * w.partitions if shared is not None else 0
        if deleted >= SETTLE_AFTER_PARTITIONS and n + 1 < len(workloads):
            print(
                f"  waiting {SETTLE_S:.0f} s: the brokers remove the {deleted:,} deleted "
                "partitions' logs a minute after the delete, and no run should time that",
                flush=True,
            )
            time.sleep(SETTLE_S)
    return runs


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.child:
        from benchlib.child import child_main

        return child_main(args.child)
    if args.list:
        list_all()
        return 0
    if args.render_docs:
        from benchlib.report import write_docs

        write_docs(json.loads(args.render_docs.read_text()), args.docs_dir)
        return 0
    workloads = chosen_workloads(args)
    if args.contenders:
        names = args.contenders.split(",")
    elif args.targets:
        names = list(TARGET_CONTENDERS)
    else:
        names = list(QUICK_CONTENDERS if args.quick else DEFAULT_CONTENDERS)
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise SystemExit(f"unknown contender(s) {unknown}; see --list")
    unavailable = {n: r for n in names if (r := CONTENDERS[n].unavailable()) is not None}
    for name, reason in unavailable.items():
        print(f"bench: leaving out {name}: {reason}", file=sys.stderr)
    contenders = [n for n in names if n not in unavailable]
    if len(contenders) < 1:
        raise SystemExit("no contender can run here")
    if args.bootstrap and args.brokers:
        raise SystemExit("--brokers sizes the cluster scripts/bench starts, not one at --bootstrap")
    skipped = sitting_out(workloads, contenders)
    for workload, why_not in skipped.items():
        for name, why in why_not.items():
            print(f"bench: {name} sits out {workload}: {why}", file=sys.stderr)
    started = time.time()
    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1):
        print(
            f"bench: load average {load_before[0]:.1f} on {os.cpu_count()} cores: other work "
            "competes for the CPU, figures will be noisy",
            file=sys.stderr,
        )
    if args.targets and not args.bootstrap and args.brokers is None:
        args.brokers = TARGET_BROKERS
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(Cluster(args.brokers)).bootstrap
        broker = Broker(bootstrap)
        brokers = broker.brokers()
        too_few = {
            w.name: f"needs {w.replication} brokers for its replication factor; the cluster "
            f"has {brokers} (start one with --brokers 3, or pass --bootstrap of one)"
            for w in workloads
            if w.replication > brokers
        }
        for name, why in too_few.items():
            print(f"bench: leaving out workload {name}: {why}", file=sys.stderr)
        workloads = [w for w in workloads if w.name not in too_few]
        runs = run_all(args, broker, workloads, contenders)
        del broker  # its admin client would log every lost connection once the cluster stops
    summary = summarize(runs)
    print_summary(summary, workloads)
    reached = evaluate(summary, runs) if args.targets else None
    if reached is not None:
        print("\ntargets (ratios of medians from this run):")
        print("\n".join(target_lines(reached)))
    meta: dict[str, Any] = {
        "command": "scripts/bench " + shlex.join(argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        # Other processes' load skews every contender; these say how busy the machine was.
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_info(),
        "repeat": args.repeat or (1 if args.quick else 3),
        "brokers": brokers,
        # --partitions, when it overrode every workload's own count (each is in "workloads").
        "partitions": args.partitions,
        "buffer_memory": BUFFER_MEMORY,
        "memory_seconds": args.memory_seconds,
        "throttle_bytes": args.throttle_bytes,
        "quick": args.quick,
        "workloads": {
            w.name: {**dataclasses.asdict(w), "describe": w.describe()} for w in workloads
        },
        "contenders": {n: CONTENDERS[n].idiom for n in names},
        "unavailable": unavailable,
        # Per workload, the contenders that cannot run it and why: no figure, not a fake one.
        "sat_out": skipped,
        # Workloads that could not run on this cluster at all, and why.
        "workloads_not_run": too_few,
        # As reported by the child processes that ran aioaccum (None if none did).
        "aioaccum_hot_path": hot_path(runs),
    }
    results = {
        "meta": meta,
        "runs": runs,
        "summary": summary,
        "memory_check": memory_check(summary),
    }
    if reached is not None:
        results["targets"] = reached
    out = args.json or (args.docs_dir / "bench" / "results.json" if args.docs else None)
    if out is None:
        out = Path(tempfile.gettempdir()) / f"aioaccum-bench-{int(started)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nresults: {out} ({meta['duration_s']:.0f} s)")
    if args.docs:
        from benchlib.report import write_docs

        write_docs(results, args.docs_dir)
    failed = [r for r in runs if not r["ok"]]
    return 1 if failed else 0
