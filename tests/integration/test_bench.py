"""scripts/bench end to end: a quick run against the session's cluster, its JSON, its docs.

Checks what the run reports (counts verified by the broker, every field there) and that the
docs generator keeps a hand-written section; never how fast anything was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.kafka]

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"
CONTENDERS = ("aioaccum", "confluent")
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
    assert "`aioaccum`" in text
    assert "`confluent`" in text
    for chart in ("throughput", "rss"):
        assert (page.parent / "bench" / f"{chart}.png").stat().st_size > 0
