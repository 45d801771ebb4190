"""The broker side (cluster, topics, end offsets, quotas) and measuring one child process.

Topics are created (and deleted) a few thousand partitions per admin request, and a topic counts
as ready only once every partition's leader answers a ListOffsets request: metadata names the
leaders well before the brokers have created the logs (about 10 s for 6,000 partitions on the
project's machine), and a run started earlier would time the brokers' catching up.

Peak RSS and CPU seconds come from ``wait4``'s rusage of the child itself (the JVM for Java,
since ``scripts/kafka java-class`` execs it): the kernel's high-water mark, not a sample. That
peak also counts the parent's RSS at the fork (Linux keeps it across ``execve``), so the runner
prefers the peak a Python child reads of itself (VmHWM) and reports; the JVM outgrows the parent.
While the child runs, its RSS is also sampled for the memory-bound run's timeline, and a child
that passes ``rss_limit`` or its time limit is killed and reported as such.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.spec import MIB

SCRIPTS = Path(__file__).resolve().parent.parent
KAFKA = SCRIPTS / "kafka"
SAMPLE_EVERY_S = 0.1
# librdkafka's syslog level for the parent's admin clients: warnings only, not the notice that
# every deleted topic triggers.
QUIET = 4
# Topics per CreateTopics request are grouped up to this many partitions; KRaft's controller
# refuses a request that would write more than 10,000 metadata records at once.
PARTITIONS_PER_REQUEST = 5000
READY_TIMEOUT_S = 120.0
ADMIN_TIMEOUT_S = 60.0


def kafka_script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(KAFKA), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Cluster:
    """A cluster from scripts/kafka (1 broker unless told), or the one already running; stops
    only its own. ``brokers`` given and a cluster of another size running is an error: that
    cluster may be someone else's, and scripts/kafka would replace it."""

    def __init__(self, brokers: int | None = None) -> None:
        self.brokers = brokers
        self.bootstrap = ""
        self.lease: str | None = None

    def __enter__(self) -> Cluster:
        if kafka_script("status", timeout=30).returncode == 0:
            self.bootstrap = kafka_script("bootstrap", timeout=30).stdout.strip()
            size = len(self.bootstrap.split(","))
            if self.brokers is not None and size != self.brokers:
                raise SystemExit(
                    f"a {size}-broker cluster runs at {self.bootstrap}: pass --brokers {size}, "
                    "or --bootstrap, or stop it first (scripts/kafka down)"
                )
            print(f"bench: using the running cluster at {self.bootstrap}", file=sys.stderr)
            return self
        # A lease makes `release` stop the cluster only if this run started it.
        self.lease = str(os.getpid())
        brokers = str(self.brokers or 1)
        # Replication straight between brokers: the fault relay would cost CPU the clients
        # measured here share.
        up = kafka_script(
            "up", "--brokers", brokers, "--lease", self.lease, "--direct-replication",
            timeout=400,
        )
        if up.returncode != 0:
            kafka_script("release", self.lease, timeout=120)
            raise SystemExit(f"scripts/kafka up failed:\n{up.stdout}{up.stderr}")
        self.bootstrap = up.stdout.strip().splitlines()[-1]
        return self

    def __exit__(self, *_: object) -> None:
        if self.lease is not None:
            kafka_script("release", self.lease, timeout=120)


class Broker:
    """Admin work in the parent process, through confluent-kafka's AdminClient."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": QUIET})

    def brokers(self) -> int:
        """How many brokers the cluster's metadata lists."""
        return len(self.admin.list_topics(timeout=10).brokers)

    def create_topic(self, topic: str, partitions: int, replication: int = 1) -> None:
        self.create_topics([topic], partitions, replication)

    def create_topics(self, topics: list[str], partitions: int, replication: int = 1) -> None:
        """Creates the topics with ``replication`` replicas of each partition, and returns once
        every partition is served."""
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        per_request = max(1, PARTITIONS_PER_REQUEST // (partitions * replication))
        for start in range(0, len(topics), per_request):
            batch = [
                NewTopic(t, partitions, replication) for t in topics[start : start + per_request]
            ]
            futures = self.admin.create_topics(batch, request_timeout=ADMIN_TIMEOUT_S)
            for future in futures.values():
                future.result(timeout=ADMIN_TIMEOUT_S)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            # A metadata request first: list_offsets finds leaders in the admin client's cache,
            # which would otherwise keep saying that the new topics have none.
            self.admin.list_topics(timeout=10)
            try:
                self.offsets(topics, partitions)
                return
            except Exception as exc:  # not every leader has its log yet: ask again
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{topics[0]} and the others: not served after {READY_TIMEOUT_S:.0f} s"
                    ) from exc
            time.sleep(0.2)

    def delete_topic(self, topic: str) -> None:
        self.delete_topics([topic])

    def delete_topics(self, topics: list[str]) -> None:
        try:
            futures = self.admin.delete_topics(topics, request_timeout=ADMIN_TIMEOUT_S)
            for future in futures.values():
                future.result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:  # a leftover topic costs disk, not correctness
            print(f"bench: could not delete {topics[0]} ({len(topics)}): {exc}", file=sys.stderr)

    def offsets(self, topics: list[str], partitions: int) -> dict[tuple[str, int], int]:
        """The end offset of every partition of ``topics`` (``partitions`` each), in one
        ListOffsets request per leader; raises if any partition's leader cannot answer."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(t, p): latest for t in topics for p in range(partitions)}
        futures = self.admin.list_offsets(asked, request_timeout=ADMIN_TIMEOUT_S)
        return {
            (tp.topic, tp.partition): future.result(timeout=ADMIN_TIMEOUT_S).offset
            for tp, future in futures.items()
        }

    def end_offsets(self, topic: str) -> int:
        """The sum of one topic's end offsets, over the partitions its metadata lists."""
        meta = self.admin.list_topics(topic, timeout=10).topics[topic]
        return sum(self.offsets([topic], len(meta.partitions)).values())

    def set_producer_quota(self, client_id: str, bytes_per_s: int | None) -> None:
        """Sets (or with None removes) the broker's producer_byte_rate for one client id."""
        change = (
            ["--delete-config", "producer_byte_rate"]
            if bytes_per_s is None
            else ["--add-config", f"producer_byte_rate={bytes_per_s}"]
        )
        done = kafka_script(
            "configs",
            "--bootstrap-server",
            self.bootstrap,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            client_id,
            *change,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka-configs failed:\n{done.stdout}{done.stderr}")


@dataclass
class Measured:
    """What the parent saw of one child process."""

    exit_code: int | None
    wall_s: float
    peak_rss_mib: float
    cpu_s: float
    stdout: str
    stderr: str
    result: dict[str, Any] | None
    killed: str | None = None
    rss_timeline: list[tuple[float, float]] = field(default_factory=list)


def _rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB
    except (OSError, ValueError, IndexError):
        return None


def measure(
    argv: list[str],
    env_extra: dict[str, str],
    result_path: Path,
    *,
    time_limit_s: float,
    rss_limit_mib: float,
    stop_after_s: float | None = None,
) -> Measured:
    """Runs argv to the end (or a limit) and returns its rusage, output and JSON result.

    ``stop_after_s`` sends SIGTERM at that age (Java's memory-bound run, which has no deadline
    of its own); ``time_limit_s`` and ``rss_limit_mib`` kill it outright.
    """
    env = {**os.environ, **env_extra}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        timeline: list[tuple[float, float]] = []
        killed: str | None = None
        termed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            age = time.monotonic() - started
            rss = _rss_mib(proc.pid)
            if rss is not None:
                timeline.append((round(age, 2), round(rss, 1)))
            if killed is None and rss is not None and rss > rss_limit_mib:
                killed = f"RSS passed the {rss_limit_mib:.0f} MiB limit"
            elif killed is None and age > time_limit_s:
                killed = f"still running after {time_limit_s:.0f} s"
            if killed is not None:
                os.kill(proc.pid, signal.SIGKILL)
            elif stop_after_s is not None and age > stop_after_s and not termed:
                os.kill(proc.pid, signal.SIGTERM)
                termed = True
            time.sleep(SAMPLE_EVERY_S)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return Measured(
        exit_code=proc.returncode,
        wall_s=wall,
        peak_rss_mib=usage.ru_maxrss / 1024,  # kilobytes on Linux
        cpu_s=usage.ru_utime + usage.ru_stime,
        stdout=stdout,
        stderr=stderr,
        result=result,
        killed=killed,
        rss_timeline=timeline,
    )
