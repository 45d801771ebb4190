#!/usr/bin/env python3
"""HTTP produce gateways side by side: `aioaccum serve` and Karapace's REST proxy, driven with
REST Proxy v2 produce requests (binary embedded format) on one cluster.

    scripts/bench_serve.py                                 1, 10 and 100 records per request,
                                                           10 s each, 3 interleaved rounds
    scripts/bench_serve.py --duration 3 --repeat 1         a quick look
    scripts/bench_serve.py --contenders aioaccum --workers 2
    scripts/bench_serve.py --karapace-venv PATH            beside Karapace, installed in PATH
                                                           by Karapace's own instructions

Each run gets a fresh topic and a fresh server on a free 127.0.0.1 port; a warm-up phase
(answers counted, not timed) precedes the timed one. The load generator is wrk when it is
installed (a Lua script reads every answer), else an asyncio client. Figures per run: records/s
and requests/s acknowledged, p50/p99 latency of a request, the server's peak RSS (its whole
process tree, sampled every 0.1 s) and its CPU. Each row is the median over the rounds whose
runs had no error; errors (non-2xx answers, records refused, socket errors, records answered
with an offset but missing from the topic) are reported, and make the exit status 1.

Without --bootstrap-server it starts a 1-broker cluster through scripts/kafka (honouring
AIOACCUM_KAFKA_PORT_OFFSET / AIOACCUM_KAFKA_STATE) unless one runs there, and stops only what
it started.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.harness import Broker, Cluster
from benchlib.serve_contenders import (
    AIOACCUM,
    KARAPACE_INSTALL,
    Launch,
    Settings,
    aioaccum_launch,
    karapace_launch,
    karapace_version,
)
from benchlib.serve_load import (
    WRK_INSTALL,
    LoadResult,
    Request,
    run_asyncio,
    run_wrk,
    wrk_version,
)

ROOT = Path(__file__).resolve().parent.parent
CONTENDERS = ("aioaccum", "karapace")
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ACCEPT_V2 = "application/vnd.kafka.v2+json"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
SETTLE_S = 1.0
SAMPLE_EVERY_S = 0.1
MIB = 1024 * 1024


# --- the server's process tree -------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _tree(pid: int) -> list[Any]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_cpu_s(pid: int) -> float:
    total = 0.0
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


class RssSampler(threading.Thread):
    """The peak of the summed RSS of a process and all its descendants, sampled."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_bytes = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_EVERY_S):
            rss = 0
            for proc in _tree(self.pid):
                with contextlib.suppress(psutil.Error):
                    rss += proc.memory_info().rss
            self.peak_bytes = max(self.peak_bytes, rss)

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        return self.peak_bytes / MIB


class Server:
    """One gateway process, started and stopped by this script only."""

    def __init__(self, launch: Launch, port: int) -> None:
        self.launch = launch
        self.port = port
        # Outlives this call, like the process writing to it: close() closes it.
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            launch.argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, **launch.env}, start_new_session=True,
        )
        self.sampler = RssSampler(self.proc.pid)
        self.sampler.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, chars: int = 1500) -> str:
        self.log.seek(0)
        return self.log.read()[-chars:]

    def wait_ready(self) -> float:
        """Seconds until the ready path answered 200; raises if the server died or hung."""
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited {self.proc.returncode} before it was ready:\n"
                    f"{self.log_tail()}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError):
                get = urllib.request.Request(
                    self.url(self.launch.ready_path), headers={"Accept": ACCEPT_V2}
                )
                with urllib.request.urlopen(get, timeout=5) as answer:
                    if answer.status == 200:
                        return time.monotonic() - started
            if time.monotonic() - started > READY_TIMEOUT_S:
                raise RuntimeError(
                    f"not ready after {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self) -> tuple[int | None, float, float]:
        """SIGTERM, then SIGKILL to the server's own process group after STOP_TIMEOUT_S.

        Returns the exit code, the seconds it took to stop and the peak RSS in MiB."""
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        peak = self.sampler.stop()
        return self.proc.returncode, time.monotonic() - started, peak

    def close(self) -> None:
        if self.proc.poll() is None:
            self.stop()
        self.log.close()


# --- one run -------------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    contender: str
    records_per_request: int
    round: int
    load: LoadResult | None = None
    warmup: LoadResult | None = None
    peak_rss_mib: float | None = None
    cpu_s: float | None = None
    ready_s: float | None = None
    exit_code: int | None = None
    in_topic: int | None = None
    lost: int = 0  # acknowledged to the client, missing from the topic
    unexplained: int = 0  # in the topic beyond what the answers and cut-off requests explain
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        phases = [p for p in (self.load, self.warmup) if p is not None]
        return sum(p.errors for p in phases) + self.lost + self.unexplained

    @property
    def clean(self) -> bool:
        return self.failure is None and self.load is not None and self.errors == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "contender": self.contender,
            "records_per_request": self.records_per_request,
            "round": self.round,
            "load": None if self.load is None else self.load.as_dict(),
            "warmup": None if self.warmup is None else self.warmup.as_dict(),
            "peak_rss_mib": self.peak_rss_mib,
            "cpu_s": self.cpu_s,
            "ready_s": self.ready_s,
            "exit_code": self.exit_code,
            "in_topic": self.in_topic,
            "lost": self.lost,
            "unexplained": self.unexplained,
            "failure": self.failure,
            "clean": self.clean,
        }


def v2_body(records: int, value_size: int) -> bytes:
    values = [base64.b64encode(os.urandom(value_size)).decode() for _ in range(records)]
    return json.dumps({"records": [{"value": v} for v in values]}).encode()


@dataclass(frozen=True, slots=True)
class Plan:
    broker: Broker
    bootstrap: str
    args: argparse.Namespace
    settings: Settings
    props: Path
    use_wrk: bool


def launch_for(plan: Plan, contender: str, port: int) -> Launch:
    if contender == "aioaccum":
        return aioaccum_launch(plan.bootstrap, port, plan.args.workers, plan.props)
    return karapace_launch(plan.bootstrap, port, plan.args.karapace_venv, plan.settings)


def load(plan: Plan, request: Request, seconds: float) -> LoadResult:
    args = plan.args
    if plan.use_wrk:
        return run_wrk(request, args.connections, seconds, args.wrk_threads)
    return run_asyncio(request, args.connections, seconds)


def run_one(plan: Plan, contender: str, per_request: int, round_: int) -> Run:
    args = plan.args
    run = Run(contender, per_request, round_)
    topic = f"serve-bench-{uuid.uuid4().hex[:8]}"
    plan.broker.create_topic(topic, args.partitions)
    port = free_port()
    server = Server(launch_for(plan, contender, port), port)
    try:
        run.ready_s = server.wait_ready()
        request = Request(
            server.url(f"/topics/{topic}"), v2_body(per_request, args.value_size),
            BINARY_V2, ACCEPT_V2, per_request,
        )
        if args.warmup > 0:
            run.warmup = load(plan, request, args.warmup)
        cpu_before = tree_cpu_s(server.proc.pid)
        run.load = load(plan, request, args.duration)
        run.cpu_s = tree_cpu_s(server.proc.pid) - cpu_before
        # wrk leaves the requests in flight at its deadline to the server: let them end, so
        # that the stop below times a server at rest, not a drain under load.
        time.sleep(SETTLE_S)
    except Exception as exc:  # one failed run is reported; the others still run
        run.failure = f"{type(exc).__name__}: {exc}"
    finally:
        run.exit_code, stop_s, run.peak_rss_mib = server.stop()
        if run.exit_code == -signal.SIGKILL:
            run.notes.append(f"killed: still running {STOP_TIMEOUT_S:.0f} s after SIGTERM")
        elif run.exit_code not in (0, -signal.SIGTERM):
            run.notes.append(f"exit code {run.exit_code} {stop_s:.1f} s after SIGTERM")
        server.close()
    if run.load is not None:
        check_topic(plan, run, topic, per_request)
    plan.broker.delete_topic(topic)
    return run


def check_topic(plan: Plan, run: Run, topic: str, per_request: int) -> None:
    """Every record answered with an offset must be in the topic. Records beyond those can come
    from requests cut off at the end of a phase (wrk stops with requests in flight, which the
    server still produces), and from requests whose answer was an error: they are allowed."""
    phases = [p for p in (run.warmup, run.load) if p is not None]
    acked = sum(p.acked for p in phases)
    allowed = sum(p.refused + p.non2xx * per_request for p in phases)
    allowed += len(phases) * plan.args.connections * per_request
    run.in_topic = plan.broker.end_offsets(topic)
    run.lost = max(0, acked - run.in_topic)
    run.unexplained = max(0, run.in_topic - acked - allowed)


# --- report --------------------------------------------------------------------------------


def _f(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def rates(run: Run) -> tuple[float | None, float | None]:
    if run.load is None or run.load.duration_s <= 0:
        return None, None
    return run.load.acked / run.load.duration_s, run.load.requests / run.load.duration_s


def error_summary(runs: list[Run]) -> str:
    parts: list[str] = []
    statuses: dict[int, int] = {}
    refused = sockets = timeouts = 0
    for run in runs:
        for phase in (run.warmup, run.load):
            if phase is None:
                continue
            for status, count in phase.statuses.items():
                statuses[status] = statuses.get(status, 0) + count
            refused += phase.refused
            sockets += phase.socket_errors
            timeouts += phase.timeouts
    parts += [f"{count:,} x {status}" for status, count in sorted(statuses.items())]
    named = [
        (refused, "records refused"), (sockets, "socket errors"), (timeouts, "time-outs"),
        (sum(r.lost for r in runs), "records lost"),
        (sum(r.unexplained for r in runs), "records unexplained"),
        (sum(1 for r in runs if r.failure), "runs failed"),
    ]
    parts += [f"{count:,} {what}" for count, what in named if count]
    return "; ".join(parts) if parts else "none"


def report(runs: list[Run], args: argparse.Namespace) -> list[str]:
    header = [
        "records/request", "server", "records/s", "requests/s", "p50 ms", "p99 ms",
        "peak RSS MiB", "server CPU %", "clean runs", "errors", "aioaccum ÷ server",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for per_request in args.records_per_request:
        ours: float | None = None
        for contender in args.contenders:
            mine = [
                r for r in runs
                if r.contender == contender and r.records_per_request == per_request
            ]
            clean = [r for r in mine if r.clean]
            # Figures come from the clean runs; with none, from all, and the row says so.
            used = clean or [r for r in mine if r.load is not None]
            records_s = _median([rates(r)[0] for r in used])
            requests_s = _median([rates(r)[1] for r in used])
            cpu = _median([
                100 * r.cpu_s / r.load.duration_s
                for r in used if r.cpu_s is not None and r.load and r.load.duration_s
            ])
            if contender == "aioaccum":
                ours = records_s
            ratio = (
                "" if contender == "aioaccum"
                else f"{ours / records_s:.2f}x" if ours and records_s else "–"
            )
            flag = "" if clean or not used else " (runs with errors)"
            lines.append("| " + " | ".join([
                f"{per_request:,}", f"`{contender}`{flag}", _f(records_s), _f(requests_s),
                _f(_median([r.load.p50_ms for r in used if r.load]), ".1f"),
                _f(_median([r.load.p99_ms for r in used if r.load]), ".1f"),
                _f(_median([r.peak_rss_mib for r in used]), ".0f"),
                _f(cpu, ".0f"), f"{len(clean)}/{len(mine)}", error_summary(mine), ratio,
            ]) + " |")
    return lines


def describe(plan: Plan, started: float, loadavg: tuple[float, float, float]) -> list[str]:
    args = plan.args
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    minutes = (time.monotonic() - started) / 60
    generator = (
        f"{wrk_version()}, {args.wrk_threads} thread(s)" if plan.use_wrk
        else "the asyncio client (aiohttp)"
    )
    lines = [
        f"Run on {when}, {minutes:.0f} min, median of {args.repeat} round(s); "
        f"load average {loadavg[0]:.1f} before and {os.getloadavg()[0]:.1f} after, "
        f"on {os.cpu_count()} cores.",
        f"Load: {generator}, {args.connections} connections, {args.duration:g} s timed after "
        f"{args.warmup:g} s of warm-up; REST Proxy v2 binary, values of {args.value_size:,} "
        f"random bytes; a fresh {args.partitions}-partition topic per run.",
        f"Producers: acks={plan.settings.acks}, linger {plan.settings.linger_ms} ms, other "
        "settings at each server's defaults.",
    ]
    if "aioaccum" in args.contenders:
        lines.append(
            f"aioaccum: git {_git_head()}, {args.workers} worker process(es), "
            f"Python {platform.python_version()}, hot path {_hot_path()}."
        )
    if "karapace" in args.contenders:
        lines.append(f"karapace: {karapace_version(args.karapace_venv)}, REST proxy alone.")
    return lines


def _hot_path() -> str:
    """Which implementation the server's interpreter loads, compiled or pure Python."""
    out = subprocess.run(
        [sys.executable, "-c", "import aioaccum._speedups as s; print(s.describe())"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    return out.stdout.strip() or f"unknown ({out.stderr.strip().splitlines()[-1:]})"


def _git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False, timeout=30,
        )
    except OSError:  # no git: the figures still stand, unattributed
        return "unknown"
    return out.stdout.strip() or "unknown"


def print_run(run: Run) -> None:
    if run.load is None:
        print(f"  {run.contender}: FAILED: {run.failure}", flush=True)
        return
    records_s, requests_s = rates(run)
    load = run.load
    text = (
        f"  {run.contender}: {_f(records_s)} records/s, {_f(requests_s)} requests/s, "
        f"p50 {_f(load.p50_ms, '.1f')} ms, p99 {_f(load.p99_ms, '.1f')} ms, "
        f"peak RSS {_f(run.peak_rss_mib, '.0f')} MiB, CPU {_f(run.cpu_s, '.1f')} s, "
        f"{run.in_topic:,} records in the topic"
    )
    if not run.clean:
        text += f"; ERRORS: {error_summary([run])}"
        firsts = [p.first_error for p in (run.warmup, run.load) if p and p.first_error]
        if firsts:
            text += f"; the first: {firsts[0]}"
    if run.failure:
        text += f"; FAILED: {run.failure}"
    for note in run.notes:
        text += f"; {note}"
    print(text, flush=True)


# --- main ----------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive numbers, comma-separated")
    return values


def _contenders(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; contenders: {', '.join(CONTENDERS)}")
    return names


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join((__doc__ or "").split("\n\n")[1:]),
    )
    add = parser.add_argument
    add("--bootstrap-server", help="a running cluster (default: start one with scripts/kafka)")
    add("--duration", type=float, default=10.0, help="timed seconds per run (default 10)")
    add("--warmup", type=float, default=2.0, help="untimed seconds before each (default 2)")
    add("--connections", type=int, default=32, help="concurrent connections (default 32)")
    add("--records-per-request", type=_ints, default=[1, 10, 100], metavar="N,N,...",
        help="records in each request, one row each (default 1,10,100)")
    add("--value-size", type=int, default=100, help="bytes per record value (default 100)")
    add("--repeat", type=int, default=3, help="interleaved rounds; rows are medians (default 3)")
    add("--contenders", type=_contenders, metavar="NAME,...",
        help=f"of {', '.join(CONTENDERS)} (default: aioaccum, and karapace with --karapace-venv)")
    add("--workers", type=int, default=1, help="aioaccum serve's worker processes (default 1)")
    add("--partitions", type=int, default=6, help="partitions of each run's topic (default 6)")
    add("--acks", default="1", choices=["0", "1", "all"], help="every producer's acks (1)")
    add("--linger-ms", type=int, default=5, help="every producer's linger (default 5)")
    add("--load", choices=["auto", "wrk", "asyncio"], default="auto",
        help="load generator: wrk if installed (auto), or the asyncio client")
    add("--wrk-threads", type=int, default=1, help="wrk's threads (default 1)")
    add("--json", type=Path, metavar="FILE", help="also write every run's figures to FILE")
    add("--karapace-venv", type=Path, metavar="PATH",
        help=f"venv where Karapace is installed, by its own instructions ({KARAPACE_INSTALL})")
    args = parser.parse_args(argv)
    if args.contenders is None:
        args.contenders = list(CONTENDERS) if args.karapace_venv else ["aioaccum"]
    return args


def choose_load(args: argparse.Namespace) -> bool:
    """True for wrk. A missing wrk is said plainly, with how to install it."""
    if args.load == "asyncio":
        return False
    if wrk_version() is not None:
        return True
    if args.load == "wrk":
        raise SystemExit(f"wrk is not installed; {WRK_INSTALL}")
    print(
        f"bench_serve: wrk is not installed; {WRK_INSTALL}. Using the asyncio client "
        "meanwhile, which takes more of the CPU that the servers share.",
        file=sys.stderr,
    )
    return False


@contextlib.contextmanager
def cluster(args: argparse.Namespace) -> Iterator[str]:
    if args.bootstrap_server:
        yield args.bootstrap_server
        return
    with Cluster(1) as running:
        yield running.bootstrap


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if "karapace" in args.contenders and (
        args.karapace_venv is None or karapace_version(args.karapace_venv) is None
    ):
        where = f"in {args.karapace_venv}" if args.karapace_venv else "named (--karapace-venv PATH)"
        raise SystemExit(
            f"no Karapace {where}: install it by its own instructions ({KARAPACE_INSTALL}) "
            "and pass its venv as --karapace-venv, or pass --contenders aioaccum"
        )
    if "aioaccum" in args.contenders and not AIOACCUM.exists():
        raise SystemExit(f"{AIOACCUM} not found: run scripts/setup-venv")
    use_wrk = choose_load(args)
    settings = Settings(args.acks, args.linger_ms)
    loadavg = os.getloadavg()
    started = time.monotonic()
    runs: list[Run] = []
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as props, cluster(args) as boot:
        props.write(f"acks={settings.acks}\nlinger.ms={settings.linger_ms}\n")
        props.flush()
        plan = Plan(Broker(boot), boot, args, settings, Path(props.name), use_wrk)
        print(f"bench_serve: cluster at {boot}", flush=True)
        # Rounds outermost, contenders innermost: drift in the machine's load spreads over
        # every contender alike.
        for round_ in range(1, args.repeat + 1):
            for per_request in args.records_per_request:
                print(f"round {round_}, {per_request} record(s) per request:", flush=True)
                for contender in args.contenders:
                    run = run_one(plan, contender, per_request, round_)
                    runs.append(run)
                    print_run(run)
        # Paragraphs, so that the output pastes into Markdown as it is.
        lines = ["", "\n\n".join(describe(plan, started, loadavg)), "", *report(runs, args)]
    print("\n".join(lines))
    bad = [r for r in runs if not r.clean]
    if bad:
        print(f"\n{len(bad)} of {len(runs)} run(s) had errors: {error_summary(bad)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": [r.as_dict() for r in runs]}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
