"""Command line: ``aioaccum perf`` (like Kafka's kafka-producer-perf-test), ``aioaccum produce``
and ``aioaccum serve`` (REST Proxy's produce API over HTTP, in :mod:`aioaccum.serve`).

``perf`` prints the same lines as the Java tool, so the two can be set side by side: a window line
every 5 seconds and a final line with records/sec, MB/sec, average and maximum latency and the
50th/95th/99th/99.9th percentiles. The final line then adds what the Java tool does not say: the
CPU seconds the process spent per million records (``time.process_time``: user plus system time
of the whole process, every thread, from the first send to the end of ``flush()``), so a reader
sees the cost of the rate, not only the rate.

Both take the producer's settings as Kafka's tools do: ``--producer.config FILE``, a Java
``.properties`` file (the place for credentials, which on the command line would show in ``ps``
and the shell's history), then ``--producer-props KEY=VALUE ...``, which override the file;
:mod:`aioaccum.config.properties` reads them, for ``serve`` as well.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from aioaccum import _speedups
from aioaccum._runtime.loops import LoopFactory, default_loop_factory, describe_loop
from aioaccum.config.properties import producer_properties
from aioaccum.errors import AioAccumError
from aioaccum.producer import Producer

__all__ = ["main"]

_WINDOW_S = 5.0
# Latency is measured on a sample: a done-callback on every record would cost more than the
# send itself. 100,000 samples keep the 99.9th percentile meaningful.
_MAX_LATENCY_SAMPLES = 100_000


class _Stats:
    """Latency and throughput book-keeping, in the shape of Kafka's ProducerPerformance.Stats."""

    def __init__(self, num_records: int, record_size: int) -> None:
        self.start = time.monotonic()
        self.cpu_start = time.process_time()
        self.record_size = record_size
        self.sampling = max(1, num_records // min(max(num_records, 1), _MAX_LATENCY_SAMPLES))
        self.latencies: list[float] = []
        self.count = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.window_start = self.start
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def record(self, sent_at: float, now: float, weight: int) -> None:
        latency = (now - sent_at) * 1000
        self.count += weight
        self.total_latency += latency * weight
        self.max_latency = max(self.max_latency, latency)
        self.window_count += weight
        self.window_latency += latency * weight
        self.window_max = max(self.window_max, latency)
        self.latencies.append(latency)
        if now - self.window_start >= _WINDOW_S:
            self.print_window(now)

    def print_window(self, now: float) -> None:
        elapsed = max(now - self.window_start, 1e-9)
        rate = self.window_count / elapsed
        mb = rate * self.record_size / (1024 * 1024)
        avg = self.window_latency / max(self.window_count, 1)
        print(
            f"{self.window_count} records sent, {rate:.1f} records/sec ({mb:.2f} MB/sec), "
            f"{avg:.1f} ms avg latency, {self.window_max:.1f} ms max latency.",
            flush=True,
        )
        self.window_start = now
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def print_total(self, sent: int, cpu_s: float) -> dict[str, float]:
        """The final line; ``cpu_s`` is the process's CPU time over the run (``cpu_since``)."""
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = sent / elapsed
        cpu_per_m = cpu_s / max(sent, 1) * 1e6
        mb = rate * self.record_size / (1024 * 1024)
        avg = self.total_latency / max(self.count, 1)
        ordered = sorted(self.latencies)

        def pct(p: float) -> int:
            if not ordered:
                return 0
            return int(ordered[min(len(ordered) - 1, int(p * len(ordered)))])

        p50, p95, p99, p999 = pct(0.5), pct(0.95), pct(0.99), pct(0.999)
        print(
            f"{sent} records sent, {rate:f} records/sec ({mb:.2f} MB/sec), {avg:.2f} ms avg "
            f"latency, {self.max_latency:.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
            f"{p99} ms 99th, {p999} ms 99.9th. {cpu_per_m:.2f} CPU s per million records "
            f"({cpu_s:.2f} s user+sys).",
            flush=True,
        )
        return {
            "records": sent,
            "records_per_sec": rate,
            "mb_per_sec": mb,
            "avg_ms": avg,
            "cpu_s": cpu_s,
            "cpu_s_per_million": cpu_per_m,
        }

    def cpu_since(self) -> float:
        """CPU seconds (user + system, every thread of the process) since the clock started."""
        return time.process_time() - self.cpu_start


def _latency_callback(
    stats: _Stats, loop: asyncio.AbstractEventLoop
) -> Callable[[asyncio.Future[Any]], None]:
    sent_at = loop.time()

    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            stats.record(sent_at, loop.time(), stats.sampling)

    return done


async def _perf(args: argparse.Namespace, props: dict[str, str]) -> int:
    if "bootstrap.servers" not in props and "bootstrap_servers" not in props:
        raise SystemExit(
            "give --bootstrap-server, or bootstrap.servers in --producer-props or --producer.config"
        )
    rng = random.Random(0)
    payload = bytes(rng.randrange(65, 91) for _ in range(args.record_size))
    stats = _Stats(args.num_records, args.record_size)
    loop = asyncio.get_running_loop()
    throttle = args.throughput if args.throughput > 0 else None
    if args.transactional_id is not None:
        props = {**props, "transactional.id": args.transactional_id}
    transactions = args.transactional_id is not None
    # Kafka's tool commits every --transaction-duration-ms (3000 by default); a record count
    # per transaction makes costs comparable across machines.
    duration = (args.transaction_duration_ms or 3000) / 1000
    per_transaction = args.transaction_records or 0
    committed = 0
    async with Producer.from_properties(props) as producer:
        await producer.partitions_for(args.topic)
        stats.start = stats.window_start = time.monotonic()
        stats.cpu_start = time.process_time()
        in_transaction = 0
        opened = 0.0
        for i in range(args.num_records):
            if transactions and in_transaction == 0:
                producer.begin_transaction()
                opened = time.monotonic()
            future = await producer.send(args.topic, payload)
            if i % stats.sampling == 0:
                future.add_done_callback(_latency_callback(stats, loop))
            if transactions:
                in_transaction += 1
                if (per_transaction and in_transaction >= per_transaction) or (
                    not per_transaction and time.monotonic() - opened >= duration
                ):
                    await producer.commit_transaction()
                    committed += 1
                    in_transaction = 0
            if throttle is not None and i % 100 == 0:
                ahead = (i + 1) / throttle - (time.monotonic() - stats.start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        if in_transaction:
            await producer.commit_transaction()
            committed += 1
        await producer.flush()
        cpu_s = stats.cpu_since()
        metrics = producer.metrics()
    if transactions:
        print(f"transactions committed: {committed}", flush=True)
    errors = int(metrics.get("record-error-total", 0))
    sent = int(metrics.get("record-send-total", 0))
    # Before the final line, which stays last as in Kafka's tool.
    print(f"event loop: {describe_loop(loop)}", flush=True)
    print(f"hot path: {_speedups.describe()}", flush=True)
    stats.print_total(sent, cpu_s)
    if errors:
        print(f"{errors} records failed", file=sys.stderr)
        return 1
    return 0


async def _produce(args: argparse.Namespace, props: dict[str, str]) -> int:
    count = 0
    async with Producer.from_properties(props) as producer:
        futures = []
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key: bytes | None = None
            if args.key_separator is not None:
                sep = args.key_separator.encode()
                if sep in line:
                    key, line = line.split(sep, 1)
            futures.append(await producer.send(args.topic, line, key=key))
            count += 1
        await producer.flush()
        failed = sum(1 for f in futures if f.exception() is not None)
    print(f"{count - failed} records produced to {args.topic}, {failed} failed", file=sys.stderr)
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioaccum", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    perf = sub.add_parser("perf", help="producer throughput and latency test")
    perf.add_argument("--topic", required=True)
    perf.add_argument("--num-records", type=int, required=True)
    perf.add_argument("--record-size", type=int, required=True)
    perf.add_argument(
        "--throughput", type=float, required=True, help="records/sec cap; -1 for none"
    )
    perf.add_argument(
        "--transactional-id",
        help="send inside transactions with this transactional.id (as Kafka's tool)",
    )
    perf.add_argument(
        "--transaction-duration-ms", type=int,
        help="commit a transaction every this many ms (default 3000 with --transactional-id)",
    )
    perf.add_argument(
        "--transaction-records", type=int,
        help="commit a transaction every this many records instead of by time",
    )
    _add_producer_settings(perf)
    perf.add_argument("--bootstrap-server")
    _add_loop_choice(perf, uvloop_alias=True)

    produce = sub.add_parser("produce", help="send stdin lines to a topic")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--bootstrap-server", required=True)
    produce.add_argument("--key-separator", help="split each line into key and value")
    _add_producer_settings(produce)
    _add_loop_choice(produce, uvloop_alias=False)

    # Imported here, to keep `aioaccum perf` quick to start.
    from aioaccum.serve import HELP_EPILOG, add_arguments

    serve = sub.add_parser(
        "serve",
        help="produce over HTTP: Confluent REST Proxy's v2 and v3 produce API",
        description="Serve Confluent REST Proxy's produce API (v2 and v3) on top of a producer "
        "per worker process; needs the serve extra (pip install aioaccum[serve]).",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(serve)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from aioaccum.serve import ServeSettings

    settings = ServeSettings.from_arguments(args)
    try:
        from aioaccum.serve import serve
    except ImportError as exc:
        print(f"error: {exc}; install the extra: pip install aioaccum[serve]", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    return serve(settings)


def _add_producer_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--producer-props",
        nargs="*",
        metavar="KEY=VALUE",
        help="producer settings, Java (linger.ms) or Python (linger_ms) names; these override "
        "--producer.config",
    )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="a Java .properties file of producer settings (name=value lines); put "
        "credentials such as sasl.jaas.config here, not on the command line",
    )


def _add_loop_choice(parser: argparse.ArgumentParser, *, uvloop_alias: bool) -> None:
    loops = parser.add_mutually_exclusive_group()
    loops.add_argument(
        "--asyncio",
        action="store_true",
        help="run on asyncio's standard event loop (default: uvloop, where it is installed)",
    )
    if uvloop_alias:
        loops.add_argument(
            "--uvloop",
            action="store_true",
            help="no-op, kept for compatibility: uvloop is already the default",
        )


def _loop_factory(args: argparse.Namespace) -> LoopFactory:
    return asyncio.new_event_loop if args.asyncio else default_loop_factory()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = _perf if args.command == "perf" else _produce
    try:
        if args.command == "serve":
            return _serve(args)
        props = producer_properties(
            args.producer_config, args.producer_props or [], args.bootstrap_server
        )
        with asyncio.Runner(loop_factory=_loop_factory(args)) as runner:
            return runner.run(command(args, props))
    except AioAccumError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
