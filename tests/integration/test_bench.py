"""scripts/bench end to end: a quick run against the session's cluster, its JSON, its docs.

Checks what the run reports (counts verified by the broker, every field there, which of
aioaccum's hot paths ran), that records land where the partition-scaling workloads send them,
and that the docs generator keeps a hand-written section; never how fast anything was.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
# What --quick runs, and how many records: keyed-600p sends each of its 9,600 keys once.
QUICK_RECORDS = {"100b-16k": 20_000, "keyed-600p": 9_600}
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
    "cpu_s_per_m",
    "cpu_scope",
    "cpu_window_s",
    "own_peak_rss_mib",
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
    "cpu_s_per_m",
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
    # One repetition of each workload, the contenders in turn.
    assert [(r["workload"], r["contender"]) for r in runs] == [
        (w, c) for w in QUICK_RECORDS for c in CONTENDERS
    ]
    for run in runs:
        assert run.keys() >= RUN_FIELDS, RUN_FIELDS - run.keys()
        assert run["ok"], run["failure"]
        assert run["delivered"] == run["records"] == QUICK_RECORDS[run["workload"]]
        assert run["errors"] == 0
        assert run["records_per_s"] > 0
        assert run["peak_rss_mib"] > 0
        assert run["cpu_s"] > 0
        # Over the timed run only, so less than the whole process's CPU time.
        assert run["cpu_scope"] == "run"
        assert 0 < run["cpu_window_s"] < run["cpu_s"]
        assert run["cpu_s_per_m"] == pytest.approx(run["cpu_window_s"] / run["records"] * 1e6)
        # The child's own high-water mark, not wait4's (which counts the parent's at the fork).
        assert run["peak_rss_mib"] == round(run["own_peak_rss_mib"], 1) > 0
        assert run["p50_ms"] is not None
        assert run["p99_ms"] >= run["p50_ms"]


def test_quick_run_summarises_each_contender(quick_results: Any) -> None:
    summary = quick_results["summary"]
    assert [(s["workload"], s["contender"]) for s in summary] == [
        (w, c) for w in QUICK_RECORDS for c in CONTENDERS
    ]
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


def test_keyed_and_many_topic_runs_land_every_record_where_it_was_sent(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # 1,000 records: one per topic of topics-1000, and each of keyed-6p's 96 keys about ten
    # times, so the run checks every topic's share and that no partition stayed empty.
    out = tmp_path / "spread.json"
    done = run_bench(
        "--workload",
        "keyed-6p,topics-1000",
        "--records",
        "1000",
        "--repeat",
        "1",
        "--bootstrap",
        kafka_bootstrap,
        "--contenders",
        "aioaccum,aioaccum-bulk,confluent,java",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    ran = [(r["workload"], r["contender"]) for r in results["runs"]]
    assert ran == [
        ("keyed-6p", "aioaccum"),
        ("keyed-6p", "aioaccum-bulk"),
        ("keyed-6p", "confluent"),
        ("topics-1000", "aioaccum"),
        ("topics-1000", "confluent"),
    ]
    for run in results["runs"]:
        assert run["ok"], run["failure"]
        assert run["delivered"] == run["records"] == 1000
    # Java's tool sends neither keys nor to many topics: it sits both out, with no figure.
    sat_out = results["meta"]["sat_out"]
    assert sat_out["keyed-6p"] == {"java": "ProducerPerformance sends no keys"}
    assert sat_out["topics-1000"] == {
        "aioaccum-bulk": "a bulk call sends to one topic, so it cannot send to topics in turn",
        "java": "ProducerPerformance sends to one topic",
    }
    assert results["meta"]["workloads"]["topics-1000"]["partitions"] == 1
    assert results["meta"]["workloads"]["keyed-6p"]["partitions"] == 6


def test_defaults_and_lz4_workloads_run_every_client_with_its_own_settings(
    kafka_bootstrap: str, kafka_broker_count: int, tmp_path: Path
) -> None:
    # `defaults` replicates 3 times and leaves batch size, linger and buffer memory to each
    # client; `4k-1m-lz4` sends lz4 batches of up to 1 MiB. Java runs both; a workload that
    # needs more brokers than the cluster has is left out, saying why.
    out = tmp_path / "defaults.json"
    done = run_bench(
        "--workload",
        "defaults,4k-1m-lz4",
        "--records",
        "500",
        "--repeat",
        "1",
        "--bootstrap",
        kafka_bootstrap,
        "--contenders",
        "aioaccum,aioaccum-sync,confluent,java",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    ran = {r["workload"] for r in results["runs"]}
    if kafka_broker_count >= 3:
        assert ran == {"defaults", "4k-1m-lz4"}
        assert results["meta"]["workloads_not_run"] == {}
    else:
        assert ran == {"4k-1m-lz4"}
        assert "needs 3 brokers" in results["meta"]["workloads_not_run"]["defaults"]
    for run in results["runs"]:
        assert run["ok"], run["failure"]
        assert run["delivered"] == run["records"] == 500
        assert run["cpu_s_per_m"] > 0
        # Java's tool reports no CPU of its own: its figure is the whole JVM's.
        assert run["cpu_scope"] == ("process" if run["contender"] == "java" else "run")
    defaults = results["meta"]["workloads"].get("defaults")
    if defaults is not None:
        assert defaults["batch_size"] is defaults["linger_ms"] is defaults["buffer_memory"] is None
        assert defaults["replication"] == 3


def test_a_client_that_raises_fails_its_run_with_the_error_named() -> None:
    from benchlib.harness import Measured
    from benchlib.runner import record
    from benchlib.spec import WORKLOADS

    refused = "ConfigError: buffer_memory_allocation_strategy='incremental' is not available"
    measured = Measured(
        exit_code=1,
        wall_s=0.5,
        peak_rss_mib=40.0,
        cpu_s=0.3,
        stdout="",
        stderr="Traceback ...",
        result={"raised_error": refused},
    )
    run = record(WORKLOADS["keyed-6p"], "aioaccum-incremental", 0, 0, measured)
    assert not run["ok"]
    # The refusal alone: no exit code, and no count of records that were never sent.
    assert run["failure"] == f"the client raised {refused}"
    assert run["records_per_s"] is run["cpu_s_per_m"] is None


def test_targets_are_read_off_the_summary() -> None:
    from benchlib.targets import evaluate

    def row(workload: str, contender: str, **figures: Any) -> dict[str, Any]:
        base: dict[str, Any] = {
            "records_per_s": None, "mb_per_s": None, "cpu_s_per_m": None, "failures": []
        }
        return {"workload": workload, "contender": contender, **base, **figures}

    summary = [
        row("100b-16k", "aioaccum", records_per_s=500.0, cpu_s_per_m=3.0, peak_rss_mib=149.0),
        row("100b-16k", "confluent", records_per_s=400.0, cpu_s_per_m=2.4, peak_rss_mib=50.0),
        row("keyed-6p", "aioaccum-full", records_per_s=100.0),
        row("keyed-6p", "aioaccum-incremental", failures=["the client raised ConfigError: no"]),
    ]
    for s in summary:
        s.setdefault("cpu_scope", "run")
    runs = [{"workload": "100b-16k", "records": 1_000_000}, {"workload": "keyed-6p", "records": 1}]
    by = {(t["workload"], t["figure"]): t for t in evaluate(summary, runs)}
    speed = by[("100b-16k", "aioaccum ÷ confluent, records/s")]
    assert (speed["verdict"], speed["value"]) == ("met", 1.25)
    # Cost: lower is better, so the ratio is theirs over ours, and 0.8x misses ">= 1x".
    cpu = by[("100b-16k", "confluent ÷ aioaccum, CPU s per million records")]
    assert (cpu["verdict"], cpu["value"]) == ("missed", pytest.approx(0.8))
    rss = by[("100b-16k", "aioaccum, peak RSS")]
    assert (rss["verdict"], rss["value"]) == ("met", 149.0)
    aiokafka = by[("100b-16k", "aioaccum ÷ aiokafka, records/s")]
    assert aiokafka["verdict"] == "not measured"
    assert aiokafka["why"] == "aiokafka did not run 100b-16k"
    strategy = by[("keyed-6p", "aioaccum-incremental ÷ aioaccum-full, records/s")]
    assert strategy["verdict"] == "not measured"
    assert strategy["why"] == "aioaccum-incremental: the client raised ConfigError: no"


def test_records_in_the_wrong_place_fail_the_run() -> None:
    from benchlib.spec import WORKLOADS, spread_problem, topic_names

    topics_w = dataclasses.replace(WORKLOADS["topics-1000"], records=2500)
    topics = topic_names("t", topics_w.topics)
    counts = {(t, 0): 3 if i < 500 else 2 for i, t in enumerate(topics)}  # round robin
    assert spread_problem(topics_w, topics, counts) is None
    counts[(topics[0], 0)] -= 1
    counts[(topics[999], 0)] += 1
    assert spread_problem(topics_w, topics, counts) == (
        "2 of 1,000 topics hold other than their share (first: t-0 holds 2 of 3)"
    )
    keyed = WORKLOADS["keyed-6p"]
    partitions = {("t", p): 1 for p in range(6)}
    assert spread_problem(keyed, ["t"], partitions) is None
    partitions[("t", 5)] = 0
    assert spread_problem(keyed, ["t"], partitions) == "1 of 6 partitions got no records"


def test_list_says_which_workloads_each_contender_sits_out() -> None:
    done = run_bench("--list")
    assert done.returncode == 0, done.stderr
    for name in ("keyed-6p", "keyed-600p", "keyed-6000p", "topics-1000"):
        assert f" {name} " in done.stdout
    for name in ("defaults", "defaults-16k", "defaults-1m", "1k-1m-lz4", "4k-16k-lz4"):
        assert f" {name} " in done.stdout
    java = done.stdout.split("\n   java ", 1)[1]
    assert "sits out keyed-6p, keyed-600p, keyed-6000p: ProducerPerformance sends no keys" in java
    assert "sits out topics-1000: ProducerPerformance sends to one topic" in java
    # The allocation strategies are compared where they differ: the spread workloads.
    full = done.stdout.split("\n   aioaccum-full ", 1)[1].split("\n   aioaccum-incremental", 1)[0]
    assert "sits out 100b-16k," in full
    assert "keyed-6p" not in full
    assert "topics-1000" not in full


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


def test_the_gateway_benchmark_checks_every_answer_against_the_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # A short run of aioaccum serve under the asyncio load generator: every answered record
    # must be found in the topic at its offset, or the run is not clean.
    out = tmp_path / "serve.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH.parent / "bench_serve.py"),
            "--bootstrap-server",
            kafka_bootstrap,
            "--contenders",
            "aioaccum",
            "--load",
            "asyncio",
            "--duration",
            "1",
            "--warmup",
            "0.5",
            "--connections",
            "4",
            "--records-per-request",
            "1,10",
            "--repeat",
            "1",
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
    runs = json.loads(out.read_text())["runs"]
    assert [(run["contender"], run["records_per_request"]) for run in runs] == [
        ("aioaccum", 1),
        ("aioaccum", 10),
    ]
    for run in runs:
        assert run["clean"], run
        assert run["lost"] == run["unexplained"] == 0
        assert run["load"]["acked"] > 0
        assert run["in_topic"] >= run["load"]["acked"]
