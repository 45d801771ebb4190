#!/usr/bin/env python3
"""Producing from plain threads: SyncProducer beside confluent-kafka, kafka-python and the async
Producer, interleaved over rounds. Prints figures; it asserts nothing about speed.

    .venv/bin/python scripts/bench_sync.py                  3 rounds of 200,000 x 100 B
    .venv/bin/python scripts/bench_sync.py --quick          5,000 records, 1 round (CI smoke run)
    .venv/bin/python scripts/bench_sync.py --contenders aioaccum-sync-1,confluent --json out.json

Each round runs every contender once, in turn (A B C …, A B C …), so that drift in the machine's
load spreads over all of them; the table gives each contender's median records/s and its ratio to
confluent-kafka and to kafka-python from the same run. Every run is its own process (as in
``scripts/bench``: no client's threads outlive its run into the next) writing to a fresh topic.
Before the clock starts it sends one warm-up record to every partition and waits for them, so
metadata, connections and the new topic's leaders are in place for every client alike (a leader
not ready yet answers with a retriable error, and a retried batch may land after later ones when
idempotence is off); the clock then runs from the first timed send to
the last outcome read. Afterwards the topic's end offsets must add up to the records sent
(warm-ups included), or the run fails and is not timed.

Every client gets acks=1, linger 5 ms, idempotence off and no key; everything else is its own
default (librdkafka's ``batch.size`` is 1,000,000 bytes, the others' 16 KiB) unless
``--batch-size`` sets one value for all.

``aioaccum-sync-4`` also checks order: each thread's values start with ``{thread}:{seq}:``, and
after the run the topic is read back to check that every record arrived exactly once and that,
in every partition, each thread's sequence numbers increase. Exit status 1 when a run fails, a
count is off or the order check fails.

Without ``--bootstrap`` it uses the cluster that ``scripts/kafka`` runs, or starts a one-broker
one and stops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from benchlib.harness import QUIET, Broker, Cluster, Measured, measure
from benchlib.spec import payload

RECORDS = 200_000
QUICK_RECORDS = 5_000
ROUNDS = 3
THREADS = 4
RSS_LIMIT_MIB = 4096
# The warm-up record every run sends first; it has no ':' so it cannot pass for a tagged value.
WARM_UP = b"warm-up"

CONTENDERS: dict[str, str] = {
    "aioaccum-sync-1": "SyncProducer; one thread: `fut = p.send(topic, value)` per record, every "
    "future kept, then `fut.result()` for each",
    "aioaccum-sync-4": f"SyncProducer shared by {THREADS} threads, each sending its share of the "
    "records as `aioaccum-sync-1` does and reading its own futures; order checked",
    "confluent": "`produce(topic, value, on_delivery=cb)` then `poll(0)` per record, the callback "
    "keeping each outcome; on BufferError `poll(0.1)` and retry; `flush()`",
    "kafka-python": "`fut = p.send(topic, value)` per record, every future kept, then `fut.get()` "
    "for each",
    "aioaccum-async": "async Producer on uvloop: `fut = await p.send(topic, value)` per record, "
    "every future kept, then `await fut` for each (for reference)",
}
MODULES = {
    "aioaccum-sync-1": "aioaccum",
    "aioaccum-sync-4": "aioaccum",
    "confluent": "confluent_kafka",
    "kafka-python": "kafka",
    "aioaccum-async": "aioaccum",
}


@dataclass(frozen=True, slots=True)
class Job:
    """What one child process runs."""

    contender: str
    bootstrap: str
    topic: str
    records: int
    size: int
    batch_size: int | None
    result_path: str
    partitions: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    def all(self) -> range:
        """Every partition of the topic: each gets a warm-up record."""
        return range(self.partitions)

    @classmethod
    def from_json(cls, text: str) -> Job:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)


def shares(records: int, threads: int) -> list[int]:
    """How many records each thread sends: as even as it goes, the first ones one more."""
    share, extra = divmod(records, threads)
    return [share + (1 if n < extra else 0) for n in range(threads)]


def tag(thread: int, seq: int, size: int) -> bytes:
    """The value ``{thread}:{seq}:`` padded with dots to ``size`` bytes."""
    return f"{thread}:{seq}:".encode().ljust(size, b".")


def untag(value: bytes) -> tuple[int, int] | None:
    """``(thread, seq)`` of a tagged value, None for any other value."""
    parts = value.split(b":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


# --- the contenders, each in its own child process ------------------------------------------


@dataclass
class Outcome:
    elapsed_s: float
    errors: int
    # aioaccum's record-retry-total: with idempotence off, a retried batch may land after later
    # batches of its partition, which explains an order-check failure.
    retries: float | None = None


def record_retries(producer: object) -> float | None:
    """The producer's ``record-retry-total``, when its ``metrics()`` has one."""
    metrics = getattr(producer, "metrics", None)
    try:
        value = metrics().get("record-retry-total") if callable(metrics) else None
    except Exception:
        return None
    return None if value is None else float(value)


def aioaccum_settings(job: Job) -> dict[str, Any]:
    settings: dict[str, Any] = {"acks": 1, "linger_ms": 5, "enable_idempotence": False}
    if job.batch_size is not None:
        settings["batch_size"] = job.batch_size
    return settings


class ResultFuture(Protocol):
    """What SyncProducer.send returns, as far as this benchmark reads it."""

    def result(self, timeout: float | None = None) -> object: ...


def read_results(futures: Sequence[ResultFuture]) -> int:
    """``future.result()`` for every future in order; returns how many failed."""
    errors = 0
    for future in futures:
        try:
            future.result()
        except Exception:
            errors += 1
    return errors


def run_sync_one(job: Job) -> Outcome:
    from aioaccum.sync import SyncProducer

    with SyncProducer(job.bootstrap, **aioaccum_settings(job)) as producer:
        for future in [producer.send(job.topic, WARM_UP, partition=p) for p in job.all()]:
            future.result()
        topic, value, send = job.topic, payload(job.size), producer.send
        started = time.perf_counter()
        futures = [send(topic, value) for _ in range(job.records)]
        errors = read_results(futures)
        elapsed = time.perf_counter() - started
        return Outcome(elapsed, errors, record_retries(producer))


def run_sync_threads(job: Job) -> Outcome:
    from aioaccum.sync import SyncProducer

    values = [
        [tag(n, seq, job.size) for seq in range(count)]
        for n, count in enumerate(shares(job.records, THREADS))
    ]
    errors = [0] * THREADS
    raised: list[BaseException] = []
    start = threading.Barrier(THREADS + 1)
    with SyncProducer(job.bootstrap, **aioaccum_settings(job)) as producer:
        for future in [producer.send(job.topic, WARM_UP, partition=p) for p in job.all()]:
            future.result()
        topic, send = job.topic, producer.send

        def work(n: int) -> None:
            start.wait()
            try:
                futures = [send(topic, value) for value in values[n]]
                errors[n] = read_results(futures)
            except BaseException as exc:
                raised.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for worker in workers:
            worker.start()
        start.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        retries = record_retries(producer)
    if raised:
        raise raised[0]
    return Outcome(elapsed, sum(errors), retries)


def run_confluent(job: Job) -> Outcome:
    from confluent_kafka import KafkaError, Message, Producer

    config: dict[str, str | int | bool] = {
        "bootstrap.servers": job.bootstrap,
        "acks": 1,
        "linger.ms": 5,
        "enable.idempotence": False,
    }
    if job.batch_size is not None:
        config["batch.size"] = job.batch_size
    producer = Producer(config)
    outcomes: list[KafkaError | None] = []  # one per delivery report: None when acknowledged

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        outcomes.append(err)

    for p in job.all():
        producer.produce(job.topic, WARM_UP, partition=p, on_delivery=on_delivery)
    producer.flush()
    outcomes.clear()
    topic, value, produce, poll = job.topic, payload(job.size), producer.produce, producer.poll
    started = time.perf_counter()
    for _ in range(job.records):
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # the queue is full: serve delivery reports, then try again
                poll(0.1)
        poll(0)
    producer.flush()
    elapsed = time.perf_counter() - started
    failed = sum(1 for err in outcomes if err is not None)
    return Outcome(elapsed, failed + job.records - len(outcomes))


def run_kafka_python(job: Job) -> Outcome:
    from kafka import KafkaProducer

    settings: dict[str, Any] = {"acks": 1, "linger_ms": 5, "enable_idempotence": False}
    if job.batch_size is not None:
        settings["batch_size"] = job.batch_size
    producer = KafkaProducer(bootstrap_servers=job.bootstrap, **settings)
    for warm_up in [producer.send(job.topic, WARM_UP, partition=p) for p in job.all()]:
        warm_up.get(timeout=60)
    topic, value, send = job.topic, payload(job.size), producer.send
    started = time.perf_counter()
    futures = [send(topic, value) for _ in range(job.records)]
    errors = 0
    for future in futures:
        try:
            future.get()
        except Exception:
            errors += 1
    elapsed = time.perf_counter() - started
    producer.close()
    return Outcome(elapsed, errors)


async def produce_async(job: Job) -> Outcome:
    from aioaccum import Producer

    async with Producer(job.bootstrap, **aioaccum_settings(job)) as producer:
        await asyncio.gather(
            *[producer.send_and_wait(job.topic, WARM_UP, partition=p) for p in job.all()]
        )
        topic, value, send = job.topic, payload(job.size), producer.send
        started = time.perf_counter()
        futures = [await send(topic, value) for _ in range(job.records)]
        errors = 0
        for future in futures:
            try:
                await future
            except Exception:
                errors += 1
        elapsed = time.perf_counter() - started
        return Outcome(elapsed, errors, record_retries(producer))


def run_async(job: Job) -> Outcome:
    import uvloop

    outcome: Outcome = uvloop.run(produce_async(job))
    return outcome


RUNNERS: dict[str, Callable[[Job], Outcome]] = {
    "aioaccum-sync-1": run_sync_one,
    "aioaccum-sync-4": run_sync_threads,
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aioaccum-async": run_async,
}


def child_main(job_json: str) -> int:
    job = Job.from_json(job_json)
    outcome = RUNNERS[job.contender](job)
    Path(job.result_path).write_text(json.dumps(dataclasses.asdict(outcome)))
    return 0


# --- the parent: topics, runs, checks, report ---------------------------------------------


def read_topic(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every value in the topic, per partition, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "aioaccum-bench-sync",
            "enable.auto.commit": False,
            "log_level": QUIET,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        values: dict[int, list[bytes]] = {p: [] for p in ends}
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 120
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic}: partitions {sorted(left)} not read in 120 s")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None:
                    raise RuntimeError(f"reading {topic}: a message with no partition or offset")
                values[partition].append(msg.value() or b"")
                if offset + 1 >= ends[partition]:
                    left.discard(partition)
        return values
    finally:
        consumer.close()


def order_problems(
    values: dict[int, list[bytes]], counts: list[int], partitions: int
) -> list[str]:
    """What is wrong with the tagged records of a run, as lines; empty when all is well."""
    seen: Counter[tuple[int, int]] = Counter()
    warm_ups = strangers = 0
    backwards: list[str] = []
    for partition, partition_values in sorted(values.items()):
        last: dict[int, int] = {}
        for value in partition_values:
            tagged = untag(value)
            if tagged is None:
                if value == WARM_UP:
                    warm_ups += 1
                else:
                    strangers += 1
                continue
            seen[tagged] += 1
            thread, seq = tagged
            if seq <= last.get(thread, -1):
                backwards.append(
                    f"partition {partition}: thread {thread} seq {seq} after {last[thread]}"
                )
            last[thread] = seq
    expected = {(n, seq) for n, count in enumerate(counts) for seq in range(count)}
    missing = expected - seen.keys()
    extra = seen.keys() - expected
    duplicated = [key for key, n in seen.items() if n > 1]
    problems = []
    if missing:
        problems.append(f"{len(missing):,} records missing, e.g. {sorted(missing)[:3]}")
    if duplicated:
        problems.append(f"{len(duplicated):,} records delivered twice or more")
    if extra or strangers:
        problems.append(f"{len(extra) + strangers:,} records that no thread sent")
    if warm_ups != partitions:
        problems.append(f"{warm_ups} warm-up records (expected {partitions}, one per partition)")
    if backwards:
        problems.append(f"{len(backwards):,} out of order, first: {backwards[0]}")
    return problems


def one_run(
    broker: Broker, contender: str, round_no: int, args: argparse.Namespace
) -> dict[str, Any]:
    topic = f"bench-sync-{contender}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, args.partitions)
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        job = Job(
            contender,
            broker.bootstrap,
            topic,
            args.records,
            args.record_size,
            args.batch_size,
            str(result_path),
            args.partitions,
        )
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", job.to_json()]
        measured = measure(
            argv, {}, result_path, time_limit_s=args.time_limit, rss_limit_mib=RSS_LIMIT_MIB
        )
    try:
        delivered = broker.end_offsets(topic)
        order = None
        if contender == "aioaccum-sync-4" and measured.result is not None:
            values = read_topic(broker.bootstrap, topic)
            order = order_problems(values, shares(args.records, THREADS), args.partitions)
    finally:
        broker.delete_topic(topic)
    return record(
        contender, round_no, args.records + args.partitions, delivered, order, measured
    )


def record(
    contender: str,
    round_no: int,
    records: int,
    delivered: int,
    order: list[str] | None,
    m: Measured,
) -> dict[str, Any]:
    res = m.result or {}
    problems = []
    if m.killed:
        problems.append(m.killed)
    elif m.exit_code != 0:
        problems.append(f"exit code {m.exit_code}")
    elif m.result is None:
        problems.append("no result")
    if res.get("errors"):
        problems.append(f"{res['errors']:,} records failed")
    if delivered != records:
        problems.append(f"broker holds {delivered:,} records, sent {records:,} (with warm-ups)")
    retries = res.get("retries")
    if order:
        problems.append("order check: " + "; ".join(order))
        if retries:
            problems.append(
                f"the producer retried {retries:,.0f} records (with idempotence off a retried "
                "batch may land after later ones)"
            )
    ok = not problems
    elapsed = res.get("elapsed_s")
    run: dict[str, Any] = {
        "contender": contender,
        "round": round_no,
        "records": records,
        "delivered": delivered,
        "elapsed_s": elapsed,
        "records_per_s": records / elapsed if ok and elapsed else None,
        "errors": res.get("errors"),
        "retries": retries,
        "cpu_s": round(m.cpu_s, 2),
        "peak_rss_mib": round(m.peak_rss_mib, 1),
        "wall_s": round(m.wall_s, 2),
        "order": None if order is None else (order or "ok"),
        "ok": ok,
        "failure": "; ".join(problems) or None,
    }
    if not ok:
        run["stderr_tail"] = m.stderr[-2000:]
    return run


def summarize(runs: list[dict[str, Any]], contenders: list[str]) -> list[dict[str, Any]]:
    medians: dict[str, float | None] = {}
    for name in contenders:
        rates = [r["records_per_s"] for r in runs if r["contender"] == name and r["ok"]]
        medians[name] = statistics.median(rates) if rates else None

    def ratio(name: str, base: str) -> float | None:
        ours, theirs = medians[name], medians.get(base)
        return ours / theirs if ours and theirs else None

    rows = []
    for name in contenders:
        mine = [r for r in runs if r["contender"] == name]
        rows.append(
            {
                "contender": name,
                "records_per_s": medians[name],
                "rounds_ok": sum(1 for r in mine if r["ok"]),
                "rounds": len(mine),
                "vs_confluent": ratio(name, "confluent"),
                "vs_kafka_python": ratio(name, "kafka-python"),
                "cpu_s": statistics.median(r["cpu_s"] for r in mine) if mine else None,
                "order": [r["order"] for r in mine if r["order"] is not None] or None,
            }
        )
    return rows


def fmt(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def table(summary: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| contender | records/s (median) | ÷ confluent | ÷ kafka-python | CPU s | ok rounds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| `{s['contender']}` | {fmt(s['records_per_s'])} | {fmt(s['vs_confluent'], '.2f')} "
            f"| {fmt(s['vs_kafka_python'], '.2f')} | {fmt(s['cpu_s'], '.1f')} "
            f"| {s['rounds_ok']}/{s['rounds']} |"
        )
    return lines


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "cores": str(os.cpu_count())}
    for dist in ("aioaccum", "confluent-kafka", "kafka-python", "uvloop"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    try:
        import confluent_kafka

        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench_sync.py",
        description="Plain-thread producing: SyncProducer, confluent-kafka, kafka-python and the "
        "async Producer, interleaved over rounds.",
    )
    parser.add_argument("--bootstrap", help="default: the cluster scripts/kafka runs (or starts)")
    parser.add_argument(
        "--records", type=int, help=f"per run (default {RECORDS:,}; --quick {QUICK_RECORDS:,})"
    )
    parser.add_argument("--record-size", type=int, default=100, help="bytes (default 100)")
    parser.add_argument("--rounds", type=int, help=f"default {ROUNDS}; --quick 1")
    parser.add_argument("--partitions", type=int, default=6, help="of each topic (default 6)")
    parser.add_argument(
        "--batch-size", type=int, help="one batch size for every client (default: each its own)"
    )
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"comma separated, from {','.join(CONTENDERS)} (default all)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run for CI")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--time-limit", type=float, default=600, help="seconds per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.records = args.records or (QUICK_RECORDS if args.quick else RECORDS)
    args.rounds = args.rounds or (1 if args.quick else ROUNDS)
    return args


def chosen(args: argparse.Namespace) -> list[str]:
    names = [n for n in args.contenders.split(",") if n]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown or not names:
        raise SystemExit(f"unknown contender(s) {unknown}; choose from {', '.join(CONTENDERS)}")
    missing = [n for n in names if importlib.util.find_spec(MODULES[n]) is None]
    if missing:
        raise SystemExit(f"not installed: {', '.join(f'{n} ({MODULES[n]})' for n in missing)}")
    if "aioaccum-sync-4" in names:
        longest = tag(THREADS - 1, shares(args.records, THREADS)[0] - 1, 0)
        if len(longest) > args.record_size:
            raise SystemExit(f"--record-size {args.record_size} cannot hold the tag {longest!r}")
    return names


def run_rounds(args: argparse.Namespace, contenders: list[str]) -> list[dict[str, Any]]:
    """Every contender once per round, in turn; prints each run as it ends."""
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        broker = Broker(args.bootstrap or stack.enter_context(Cluster()).bootstrap)
        for round_no in range(1, args.rounds + 1):
            for contender in contenders:
                run = one_run(broker, contender, round_no, args)
                runs.append(run)
                state = "ok" if run["ok"] else f"FAILED: {run['failure']}"
                if run["order"] == "ok":
                    state += ", order ok"
                if run["retries"]:
                    state += f", {run['retries']:,.0f} records retried"
                print(
                    f"  round {round_no}/{args.rounds} {contender:<16}"
                    f"{fmt(run['records_per_s']):>11} records/s  CPU {run['cpu_s']:5.1f} s  "
                    f"{state}",
                    flush=True,
                )
                if not run["ok"] and run.get("stderr_tail"):
                    print("    " + run["stderr_tail"].strip().replace("\n", "\n    "))
    return runs


def order_verdict(runs: list[dict[str, Any]]) -> str | None:
    """One line on aioaccum-sync-4's order checks; None when none ran."""
    checked = [r for r in runs if r["order"] is not None]
    bad = [r for r in checked if r["order"] != "ok"]
    if not checked:
        return None
    if not bad:
        return f"order ok ({len(checked)} run(s) of aioaccum-sync-4)"
    details = " | ".join("; ".join(r["order"]) for r in bad)
    return f"ORDER CHECK FAILED in {len(bad)} of {len(checked)} run(s): {details}"


def loads(values: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in values)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child)
    contenders = chosen(args)
    command = shlex.join([".venv/bin/python", "scripts/bench_sync.py", *argv])
    started = time.time()
    load_before = os.getloadavg()
    print(f"command: {command}\nload average before: {loads(load_before)}", flush=True)
    runs = run_rounds(args, contenders)
    load_after = os.getloadavg()
    summary = summarize(runs, contenders)
    settings = (
        f"{args.records:,} records x {args.record_size} B per run, {args.rounds} round(s), "
        f"{args.partitions} partitions, acks=1, linger 5 ms, idempotence off, keyless, batch size "
        + (f"{args.batch_size:,} B for all" if args.batch_size else "each client's default")
    )
    print(f"\n{settings}\n")
    print("\n".join(table(summary)))
    print(f"\ncommand: {command}")
    print(
        f"load average before: {loads(load_before)}, after: {loads(load_after)} "
        f"({os.cpu_count()} cores)"
    )
    verdict = order_verdict(runs)
    if verdict is not None:
        print(verdict)
    if args.json:
        meta = {
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "duration_s": round(time.time() - started, 1),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after],
            "settings": settings,
            **{k: vars(args)[k] for k in ("records", "record_size", "rounds", "partitions")},
            "batch_size": args.batch_size,
            "contenders": {n: CONTENDERS[n] for n in contenders},
            "versions": versions(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        results = {"meta": meta, "runs": runs, "summary": summary}
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"results: {args.json}")
    failed = [r for r in runs if not r["ok"]]
    if failed:
        print(f"{len(failed)} of {len(runs)} run(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
