"""scripts/bench end to end: a quick run against the session's cluster, its JSON, its docs.

Checks what the run reports (counts verified by the broker, every field there, which of
aioaccum's hot paths ran) and that the docs generator keeps a hand-written section; never how
fast anything was.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aioaccum import _speedups
from aioaccum._core.cluster import TopicPartition
from aioaccum._core.futures import FutureRecordMetadata, ProduceRequestResult
from aioaccum.errors import BrokerError

pytestmark = [pytest.mark.kafka]

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"
sys.path.insert(0, str(BENCH.parent))  # benchlib, for the test of the waiting idioms
# aioaccum's three ways of waiting for per-record futures, its bulk path, and one peer.
CONTENDERS = ("aioaccum", "aioaccum-gather", "aioaccum-wait-all", "aioaccum-bulk", "confluent")
AIOACCUM = tuple(c for c in CONTENDERS if c.startswith("aioaccum"))
RUN_FIELDS = {
    "workload",
    "contender",
    "rep",
    "records",
    "delivered",
    "ok",
    "failure",
    "records_per_s",
    "mb_per_s",
    "p50_ms",
    "p99_ms",
    "peak_rss_mib",
    "cpu_s",
    "elapsed_s",
    "errors",
}
SUMMARY_FIELDS = {
    "workload",
    "contender",
    "runs",
    "ok",
    "records_per_s",
    "mb_per_s",
    "p50_ms",
    "p99_ms",
    "peak_rss_mib",
    "cpu_s",
}


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def quick_results(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    done = run_bench(
        "--quick",
        "--bootstrap",
        kafka_bootstrap,
        "--contenders",
        ",".join(CONTENDERS),
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def test_quick_run_verifies_every_count_against_the_broker(quick_results: Any) -> None:
    runs = quick_results["runs"]
    assert [r["contender"] for r in runs] == list(CONTENDERS)  # one repetition, in turn
    for run in runs:
        assert run.keys() >= RUN_FIELDS, RUN_FIELDS - run.keys()
        assert run["ok"], run["failure"]
        assert run["delivered"] == run["records"] == 20_000
        assert run["errors"] == 0
        assert run["records_per_s"] > 0
        assert run["peak_rss_mib"] > 0
        assert run["cpu_s"] > 0
        assert run["p50_ms"] is not None
        assert run["p99_ms"] >= run["p50_ms"]


def test_quick_run_summarises_each_contender(quick_results: Any) -> None:
    summary = quick_results["summary"]
    assert [s["contender"] for s in summary] == list(CONTENDERS)
    for row in summary:
        assert row.keys() >= SUMMARY_FIELDS
        assert row["runs"] == row["ok"] == 1
    machine = quick_results["meta"]["machine"]
    assert {"cores", "cpu", "python", "java", "kafka"} <= machine.keys()


def test_quick_run_names_the_hot_path_aioaccum_ran(quick_results: Any) -> None:
    # The children inherit this process's environment, so they chose as this process did.
    expected = _speedups.describe()
    assert quick_results["meta"]["aioaccum_hot_path"] == expected
    for run in quick_results["runs"]:
        if run["contender"] in AIOACCUM:
            assert run["hot_path"] == expected, run["contender"]
        else:
            assert "hot_path" not in run
    for row in quick_results["summary"]:
        assert row.get("hot_path") == (expected if row["contender"] in AIOACCUM else None)
    idioms = quick_results["meta"]["contenders"]
    assert "`await fut`" in idioms["aioaccum"]
    assert "asyncio.gather" in idioms["aioaccum-gather"]
    assert "aioaccum.wait_all" in idioms["aioaccum-wait-all"]
    assert "send_many" in idioms["aioaccum-bulk"]


@pytest.mark.parametrize("wait", ["aioaccum", "aioaccum-gather", "aioaccum-wait-all"])
async def test_each_way_of_waiting_counts_every_failed_record(wait: str) -> None:
    from benchlib.clients import AIOACCUM_WAITS, Recorder
    from benchlib.runner import spec_for
    from benchlib.spec import WORKLOADS

    loop = asyncio.get_running_loop()
    good, bad = (ProduceRequestResult(TopicPartition("t", p), loop) for p in (0, 1))
    futures: list[Any] = [
        FutureRecordMetadata(result, n, 0, 0, 1) for n in range(3) for result in (good, bad)
    ]
    plain: asyncio.Future[None] = loop.create_future()  # other clients' kind of future
    plain.set_exception(BrokerError("failed"))
    futures.append(plain)
    good.set(0, -1, None)
    bad.set(-1, -1, BrokerError("failed"))
    spec = spec_for(WORKLOADS["100b-16k"], wait, "b:9092", "t", Path("unused"), 1.0)
    rec = Recorder(spec)
    await AIOACCUM_WAITS[wait](futures, rec)
    assert rec.errors == 4  # the three records of the failed batch, and the plain future


def test_docs_are_regenerated_from_the_json_keeping_the_hand_written_tail(
    quick_results: Any, tmp_path: Path
) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(quick_results))
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text("old tables\n<!-- end of generated section -->\n\n## Spark sink\nby hand\n")
    done = run_bench("--render-docs", str(results), "--docs-dir", str(page.parent))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "old tables" not in text
    assert text.rstrip().endswith("<!-- end of generated section -->\n\n## Spark sink\nby hand")
    for contender in CONTENDERS:
        assert f"| `{contender}` |" in text  # in the contenders table and the results
    assert f"aioaccum's hot path: **{_speedups.describe()}**" in text
    for chart in ("throughput", "rss"):
        assert (page.parent / "bench" / f"{chart}.png").stat().st_size > 0


def test_the_thread_benchmark_checks_counts_and_order(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "sync.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH.parent / "bench_sync.py"),
            "--quick",
            "--bootstrap",
            kafka_bootstrap,
            "--contenders",
            "aioaccum-sync-1,aioaccum-sync-4,confluent",
            "--json",
            str(out),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    summary = {row["contender"]: row for row in results["summary"]}
    assert set(summary) == {"aioaccum-sync-1", "aioaccum-sync-4", "confluent"}
    for row in summary.values():
        assert row["rounds_ok"] == row["rounds"] == 1
        assert row["records_per_s"] > 0
    # Four threads, each with its own numbered records: delivered once each, in order.
    assert summary["aioaccum-sync-4"]["order"] == ["ok"]
