"""docs/benchmarks.md and docs/bench/*.png, written from one results JSON of ``scripts/bench``.

Everything above the end marker is regenerated; whatever follows the marker (hand-written
sections) is kept as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchlib.spec import DEFAULT_PARTITIONS

END_MARKER = "<!-- end of generated section -->"
MIB = 1024 * 1024
COLORS = {
    "aioaccum": "#d62728",
    "aioaccum-gather": "#e377c2",
    "aioaccum-wait-all": "#ff7f0e",
    "aioaccum-bulk": "#ff9896",
    "aioaccum-full": "#bcbd22",
    "aioaccum-incremental": "#dbdb8d",
    "aioaccum-sync": "#c49c94",
    "aiokafka": "#1f77b4",
    "confluent": "#2ca02c",
    "confluent-aio": "#98df8a",
    "kafka-python": "#9467bd",
    "java": "#8c564b",
}


def _f(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours and theirs else "–"


def _hot_path_line(meta: dict[str, Any]) -> list[str]:
    """The header's line on which of aioaccum's hot paths ran, if any aioaccum contender did."""
    if not any(name.startswith("aioaccum") for name in meta["contenders"]):
        return []
    path = meta.get("aioaccum_hot_path")
    if not path:
        return ["aioaccum's hot path (compiled or pure Python) was not recorded by this run.", ""]
    return [
        f"aioaccum's hot path: **{path}**, as `aioaccum._speedups.describe()` reported it in "
        "the processes that ran aioaccum (`AIOACCUM_NO_EXTENSIONS=1` selects the pure-Python "
        "one).",
        "",
    ]


def _cluster_line(meta: dict[str, Any]) -> str:
    brokers = meta.get("brokers", 1)
    return "single-broker cluster" if brokers == 1 else f"{brokers}-broker cluster"


def _topics_line(workloads: dict[str, Any]) -> str:
    """How runs get their topics, and what their end offsets must show."""
    if not any(w.get("shared_topics") for w in workloads.values()):
        return (
            "every run writes to a fresh topic whose end offsets must equal the records sent, "
            "or the run counts as failed and is not timed."
        )
    return (
        "every run writes to a fresh topic whose end offsets must equal the records sent, or "
        "the run counts as failed and is not timed. The partition-scaling workloads instead "
        "create their topics once and share them between their runs, each run's count being "
        "the rise of the end offsets of every partition of every topic; there, each topic must "
        "also hold its exact round-robin share, and with keys no partition may be left empty."
    )


def _partitions_line(meta: dict[str, Any], workloads: dict[str, Any]) -> str:
    # Older results name one count for every topic; newer ones name each workload's own.
    line = (
        f"Topics have {meta['partitions']} partitions, replication factor 1."
        if meta.get("partitions")
        else f"Topics have {DEFAULT_PARTITIONS} partitions unless the workload names another "
        "count, replication factor 1."
    )
    if any(w.get("keyed") or w.get("topics", 1) > 1 for w in workloads.values()):
        line += (
            " In the keyed and many-topics workloads every client sends record i to topic "
            "i mod topics with key i mod keys (keys `k0`, `k1`, …), in the same order, passing "
            "topic, value and key to its own send call; each client's default partitioner "
            "places keyed records (murmur2; CRC32 for librdkafka)."
        )
    return line


def _own_defaults_line(workloads: dict[str, Any]) -> str:
    """The exception to equal settings: workloads that leave them to each client."""
    own = [n for n, w in workloads.items() if w.get("batch_size", 0) is None]
    if not own:
        return ""
    names = ", ".join(f"`{n}`" for n in own)
    return (
        f" Except in {names}: there only acks and idempotence are set; batch size, linger and "
        "buffer memory are each client's own default (librdkafka `batch.size` 1,000,000 and "
        "`linger.ms` 5; Java 16 KiB and 5 ms; aiokafka 16 KiB and 0 ms; aioaccum its own, see "
        "docs/configuration.md)."
    )


def _cpu_per_m(s: dict[str, Any]) -> str:
    text = _f(s.get("cpu_s_per_m"), ".2f")
    return text + "\\*" if s.get("cpu_scope") == "process" else text


def _targets_section(rows: list[dict[str, Any]]) -> list[str]:
    from benchlib.targets import format_value

    out = [
        "## Targets",
        "",
        "Issue 29's targets, read off this run's medians (`scripts/bench --targets`).",
        "",
    ]
    out += _table(
        ["target", "workload", "figure", "measured", "wanted", "verdict"],
        [
            [
                r["target"],
                f"`{r['workload']}`",
                r["figure"],
                format_value(r),
                r["wanted"],
                r["verdict"] + (f" ({r['why']})" if r.get("why") else ""),
            ]
            for r in rows
        ],
    )
    return [*out, ""]


def render(results: dict[str, Any], charts: list[str]) -> str:
    meta, summary = results["meta"], results["summary"]
    machine = meta["machine"]
    workloads: dict[str, Any] = meta["workloads"]
    sat_out: dict[str, dict[str, str]] = meta.get("sat_out", {})
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by scripts/bench --docs from docs/bench/results.json: edit below the "
        "end marker only. -->",
        "",
        "aioaccum against the other Python Kafka producers and Java's own, all sending to the "
        f"same local {_cluster_line(meta)} in one run. Each contender runs in its own process; "
        "the contenders take turns (A B C …, A B C …) so that drift in the machine's load "
        f"spreads over all of them, and {_topics_line(workloads)}",
        "",
        "Regenerate everything on this page (tables, charts, `docs/bench/results.json`) with:",
        "",
        "```sh",
        meta["command"],
        "```",
        "",
        f"Run on {meta['date']}, {meta['duration_s'] / 60:.0f} min, median of {meta['repeat']} "
        f"repetition(s). Load average {meta['load_before'][0]:.1f} before and "
        f"{meta['load_after'][0]:.1f} after, on {machine['cores']} cores"
        + (
            ": other processes competed for the CPU, so absolute figures are low and "
            "noisy; the ratios from the same run are the figures to read."
            if max(meta["load_before"][0], meta["load_after"][0]) > machine["cores"]
            else "."
        )
        + (" **Quick (smoke) run: counts too small to mean anything.**" if meta["quick"] else ""),
        "",
        *_hot_path_line(meta),
        "## Machine",
        "",
    ]
    out += _table(["what", "version"], [[k, str(v)] for k, v in machine.items()])
    out += ["", "## Settings", ""]
    out += [
        f"Every client gets the same settings, in its own names: acks, batch size "
        f"(`batch.size`; aiokafka `max_batch_size`), linger, compression, "
        f"{meta['buffer_memory'] // MIB} MiB of buffer memory (`buffer.memory`; librdkafka "
        "`queue.buffering.max.kbytes`, with `queue.buffering.max.messages` raised to 10,000,000 "
        "so that bytes are the bound), and idempotence off for `acks=1`, on for `acks=all` "
        "(the clients' own defaults disagree). aiokafka and kafka-python have no buffer-memory "
        "setting: aiokafka waits for a partition's batch to drain, kafka-python's buffer is "
        f"unbounded. {_partitions_line(meta, workloads)} "
        "Java's tool runs with `-Xmx512m`, the heap its shell script gives it."
        + _own_defaults_line(workloads),
        "",
        "Throughput is records sent / time from the first send to the last acknowledgement "
        "(Java: the tool's own figure, same definition). MB/s is 10^6 bytes of values per "
        "second. Latency is send call to acknowledgement callback, on about 20,000 sampled "
        "records (Java: the tool's own percentiles, every record). Peak RSS is the client "
        "process's own high-water mark (VmHWM, read by the Python contenders at exit; `wait4`'s "
        "rusage for the JVM); CPU s is the whole process's user + system time (interpreter or "
        "JVM start-up included), from `wait4`'s rusage. CPU s/M is CPU seconds per million "
        "records over the timed run (first send to last acknowledgement): the process's "
        "`time.process_time()` (every thread, librdkafka's included) for the Python contenders; "
        "Java's, marked \\*, is the JVM's whole-process figure, start-up and JIT included, as "
        "the tool reports no CPU of its own.",
        "",
        "## Contenders",
        "",
    ]
    out += _table(
        ["contender", "how it sends"], [[f"`{n}`", i] for n, i in meta["contenders"].items()]
    )
    for name, reason in meta["unavailable"].items():
        out.append(f"\n`{name}` did not run: {reason}.")
    out += ["", "## Workloads", ""]
    out += _table(
        ["workload", "what"],
        [
            [f"`{n}`", w["describe"] + (f"; {w['note']}" if w["note"] else "")]
            for n, w in workloads.items()
        ],
    )
    for name, why in meta.get("workloads_not_run", {}).items():
        out.append(f"\n`{name}` did not run: {why}.")
    out += ["", "## Results", ""]
    if results.get("targets"):
        out += _targets_section(results["targets"])
    throughput = [n for n, w in workloads.items() if not w["memory_bound"]]
    for name in throughput:
        rows = [s for s in summary if s["workload"] == name]
        ours = next((s["records_per_s"] for s in rows if s["contender"] == "aioaccum"), None)
        out += [f"### `{name}`: {workloads[name]['describe']}", ""]
        out += _table(
            [
                "client",
                "records/s",
                "MB/s",
                "p50 ms",
                "p99 ms",
                "peak RSS MiB",
                "CPU s",
                "CPU s/M",
                "ok runs",
                "aioaccum ÷ client",
            ],
            [
                [
                    f"`{s['contender']}`",
                    _f(s["records_per_s"]),
                    _f(s["mb_per_s"], ".1f"),
                    _f(s["p50_ms"], ".1f"),
                    _f(s["p99_ms"], ".1f"),
                    _f(s["peak_rss_mib"]),
                    _f(s["cpu_s"], ".1f"),
                    _cpu_per_m(s),
                    f"{s['ok']}/{s['runs']}",
                    _ratio(ours, s["records_per_s"]) if s["contender"] != "aioaccum" else "",
                ]
                for s in rows
            ],
        )
        for s in rows:
            for failure in s["failures"]:
                out.append(f"\n`{s['contender']}` failed: {failure}")
        for contender, why in sat_out.get(name, {}).items():
            out.append(f"\n`{contender}` did not run this workload: {why}.")
        out.append("")
    peers = list(dict.fromkeys(s["contender"] for s in summary if s["contender"] != "aioaccum"))
    if throughput and peers:
        out += ["### aioaccum's throughput ÷ each client's, same run", ""]
        by = {(s["workload"], s["contender"]): s["records_per_s"] for s in summary}
        out += _table(
            ["workload", *[f"`{p}`" for p in peers]],
            [
                [f"`{w}`", *[_ratio(by.get((w, "aioaccum")), by.get((w, p))) for p in peers]]
                for w in throughput
            ],
        )
        out.append("")
    memory = [n for n, w in workloads.items() if w["memory_bound"]]
    for name in memory:
        rows = [s for s in summary if s["workload"] == name]
        out += [
            f"## Memory-bound run: `{name}`",
            "",
            f"{workloads[name]['describe']}. The broker's `producer_byte_rate` quota for the "
            f"clients' id is {meta['throttle_bytes'] / MIB:g} MiB/s (set with `kafka-configs` "
            "and removed afterwards), far below what any client offers, so buffers fill. Each "
            f"client offers records for {meta['memory_seconds']:g} s and is then stopped "
            "without flushing; 'acked' is what the broker holds by then. Every send call is "
            "timed, so blocking shows as a long call; errors raised are counted.",
            "",
        ]
        out += _table(
            ["client", "offered", "acked by broker", "peak RSS MiB", "what it did"],
            [
                [
                    f"`{s['contender']}`",
                    _f(s.get("offered")),
                    _f(s.get("delivered")),
                    _f(s["peak_rss_mib"]),
                    s["behaviour"],
                ]
                for s in rows
            ],
        )
        check = results.get("memory_check")
        if check:
            out += [
                "",
                f"Check: aioaccum's peak RSS {check['peak_rss_mib']:.0f} MiB within "
                f"buffer_memory + 64 MiB = {check['bound_mib']:.0f} MiB: "
                f"{'yes' if check['within'] else '**no**'}; waited rather than raised: "
                f"{'yes' if check['waited'] else '**no**'}.",
            ]
        out.append("")
    if charts:
        out += ["## Charts", ""]
        out += [f"![{c}](bench/{c}.png)" for c in charts]
        out.append("")
    return "\n".join(out) + "\n"


def _grouped_bars(
    summary: list[dict[str, Any]],
    workloads: list[str],
    field: str,
    ylabel: str,
    title: str,
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contenders = list(dict.fromkeys(s["contender"] for s in summary))
    by = {(s["workload"], s["contender"]): s.get(field) for s in summary}
    fig, ax = plt.subplots(figsize=(max(7.5, 1.4 * len(workloads) + 3.5), 4.5))
    width = 0.8 / max(len(contenders), 1)
    for i, contender in enumerate(contenders):
        xs = [w_i + (i - (len(contenders) - 1) / 2) * width for w_i in range(len(workloads))]
        ys = [by.get((w, contender)) or 0.0 for w in workloads]
        ax.bar(xs, ys, width, label=contender, color=COLORS.get(contender))
    ax.set_xticks(range(len(workloads)), workloads, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _memory_chart(results: dict[str, Any], workload: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for run in results["runs"]:
        if run["workload"] == workload and run.get("rss_timeline"):
            # Points under 5 MiB are the process being exec'd or torn down, not the client.
            points = [(x, y) for x, y in run["rss_timeline"] if y >= 5]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, label=run["contender"], color=COLORS.get(run["contender"]))
    bound = results["meta"]["buffer_memory"] / MIB + 64
    ax.axhline(bound, linestyle="--", color="grey", label="buffer_memory + 64 MiB")
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"RSS while the broker is throttled ({workload})")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(results: dict[str, Any], docs: Path) -> None:
    """Writes docs/benchmarks.md and docs/bench/*.png; keeps what follows the end marker."""
    import json

    bench = docs / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    workloads: dict[str, Any] = results["meta"]["workloads"]
    throughput = [n for n, w in workloads.items() if not w["memory_bound"]]
    charts = []
    summary = [s for s in results["summary"] if s["workload"] in throughput]
    if throughput:
        _grouped_bars(
            summary, throughput, "mb_per_s", "MB/s (median)", "Throughput", bench / "throughput.png"
        )
        _grouped_bars(
            summary,
            throughput,
            "records_per_s",
            "records/s (median)",
            "Records per second",
            bench / "records.png",
        )
        _grouped_bars(
            summary,
            throughput,
            "peak_rss_mib",
            "peak RSS (MiB)",
            "Peak RSS of the client process",
            bench / "rss.png",
        )
        charts += ["throughput", "records", "rss"]
    for name, w in workloads.items():
        if w["memory_bound"]:
            _memory_chart(results, name, bench / "memory.png")
            charts.append("memory")
            break
    page = docs / "benchmarks.md"
    tail = ""
    if page.exists():
        old = page.read_text()
        if END_MARKER in old:
            tail = old.split(END_MARKER, 1)[1].lstrip("\n")
    page.write_text(
        render(results, charts) + "\n" + END_MARKER + "\n" + ("\n" + tail if tail else "")
    )
    results_path = bench / "results.json"
    if not results_path.exists() or json.loads(results_path.read_text()) != results:
        results_path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"docs: {page} and {bench}/ ({', '.join(charts)})")
