"""The command line against the real cluster: ``aioaccum perf`` and ``aioaccum produce``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .test_producer import consume_all

pytestmark = [pytest.mark.kafka]

# The final line of Kafka's kafka-producer-perf-test, which `aioaccum perf` mirrors, then the
# process's CPU seconds per million records and in all.
FINAL_LINE = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\. "
    r"([\d.]+) CPU s per million records \(([\d.]+) s user\+sys\)\.$"
)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioaccum.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def test_perf_prints_the_java_tools_final_line(kafka_bootstrap: str, new_topic: str) -> None:
    done = run_cli(
        "perf", "--topic", new_topic, "--num-records", "20000", "--record-size", "100",
        "--throughput", "-1", "--bootstrap-server", kafka_bootstrap,
        "--producer-props", "acks=1", "linger.ms=5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    final = done.stdout.strip().splitlines()[-1]
    match = FINAL_LINE.match(final)
    assert match, final
    assert int(match.group(1)) == 20000
    per_million, cpu_s = float(match.group(2)), float(match.group(3))
    assert cpu_s > 0
    # Both printed to 2 decimals: cpu_s's rounding (0.005 s) moves the quotient by 0.25.
    assert per_million == pytest.approx(cpu_s / 20000 * 1e6, abs=0.26)
    by_partition = await consume_all(kafka_bootstrap, new_topic, 20000)
    assert sum(len(v) for v in by_partition.values()) == 20000


async def test_produce_sends_stdin_lines_with_keys(kafka_bootstrap: str, new_topic: str) -> None:
    lines = "".join(f"user-{i % 5}:event {i}\n" for i in range(50))
    done = run_cli(
        "produce", "--topic", new_topic, "--bootstrap-server", kafka_bootstrap,
        "--key-separator", ":", stdin=lines,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "50 records produced" in done.stderr
    by_partition = await consume_all(kafka_bootstrap, new_topic, 50)
    records = sorted((r for rs in by_partition.values() for r in rs), key=lambda r: r.value or b"")
    assert len(records) == 50
    assert {(r.key, r.value) for r in records} == {
        (f"user-{i % 5}".encode(), f"event {i}".encode()) for i in range(50)
    }


def test_bad_producer_props_fail_with_the_setting_named() -> None:
    done = run_cli(
        "perf", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1",
        "--bootstrap-server", "127.0.0.1:1", "--producer-props", "linger.msec=5",
    )  # fmt: skip
    assert done.returncode != 0
    assert "linger.msec" in done.stderr
