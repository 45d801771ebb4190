"""Which contenders exist, whether this machine has them, and the Java one's command and output.

A contender is a name the command line takes (``--contenders aioaccum,java``), a line for the
docs, and an availability check. The Python ones run ``clients`` in a child process; Java runs
Kafka's own ``org.apache.kafka.tools.ProducerPerformance`` through ``scripts/kafka java-class``,
so its figures are the tool's own. A contender that is not available (a client not installed,
aioaccum without a bulk method) is reported and left out, never faked.

aioaccum's per-record contenders send alike and differ only in how they wait for the futures
they kept (``await`` each, ``asyncio.gather``, ``aioaccum.wait_all``). Workloads that keep no
futures (concurrent senders, each awaiting its own; the memory-bound run) would run the same code
under each name, so only ``aioaccum`` runs those.

To add a contender: a runner in ``clients`` (registered in ``ASYNC_RUNNERS``) or
``sync_clients`` (``SYNC_RUNNERS``) and an entry in ``CONTENDERS`` here.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.spec import Spec, Workload

SCRIPTS = Path(__file__).resolve().parent.parent
JAVA_PERF_CLASS = "org.apache.kafka.tools.ProducerPerformance"
# kafka-producer-perf-test.sh runs the tool with this heap; the JVM default would be a quarter
# of the machine's memory, which says nothing about the client.
JAVA_HEAP = "-Xmx512m"


def _module(name: str) -> Callable[[], str | None]:
    def check() -> str | None:
        return None if importlib.util.find_spec(name) is not None else f"{name} is not installed"

    return check


def _bulk() -> str | None:
    from aioaccum import Producer
    from benchlib.clients import BULK_METHODS

    if any(hasattr(Producer, name) for name in BULK_METHODS):
        return None
    return f"aioaccum's Producer has no {' or '.join(BULK_METHODS)} method yet"


def _wait_all() -> str | None:
    import aioaccum

    if hasattr(aioaccum, "wait_all"):
        return None
    return "this aioaccum has no wait_all"


def _confluent_aio() -> str | None:
    if importlib.util.find_spec("confluent_kafka") is None:
        return "confluent_kafka is not installed"
    try:
        importlib.import_module("confluent_kafka.aio")
    except ImportError:
        return "this confluent-kafka has no confluent_kafka.aio (AIOProducer)"
    return None


def _java() -> str | None:
    import shutil

    return None if shutil.which("java") else "no java on PATH"


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    idiom: str
    check: Callable[[], str | None]
    kind: str = "python"
    # Runs the concurrent-senders workload (Java's tool has one sending thread; a bulk call
    # is one sender by nature).
    concurrent: bool = True
    # Runs the memory-bound workload (which keeps no futures: a contender that differs from
    # another only in how it waits for them would repeat that one's run).
    memory_bound: bool = True
    memory_bound_why: str = "its run would repeat another contender's"
    # Why it cannot send a key with each record, or send to many topics in turn (the
    # partition-scaling workloads); None when it can.
    no_keys: str | None = None
    no_topics: str | None = None
    # Why it runs only the partition-scaling workloads (keys, many topics), if it does.
    spread_only: str | None = None

    def unavailable(self) -> str | None:
        """None when it can run here, else why not."""
        return self.check()

    def skips(self, w: Workload) -> str | None:
        """None when it takes part in ``w``, else why it sits that workload out."""
        if self.spread_only is not None and not w.spread:
            return self.spread_only
        if w.concurrency > 1 and not self.concurrent:
            return "one sender only"
        if w.memory_bound and not self.memory_bound:
            return self.memory_bound_why
        if w.keyed and self.no_keys is not None:
            return self.no_keys
        if w.topics > 1 and self.no_topics is not None:
            return self.no_topics
        return None


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender(
            "aioaccum",
            "`fut = await p.send(topic, value)` per record, futures kept, then `await fut` for "
            "each in order (the documented idiom) and `flush()`; uvloop",
            _module("aioaccum"),
        ),
        Contender(
            "aioaccum-gather",
            "as `aioaccum`, but waits with `asyncio.gather(*futures, return_exceptions=True)`; "
            "uvloop; one-sender workloads only (elsewhere it would repeat `aioaccum`)",
            _module("aioaccum"),
            concurrent=False,
            memory_bound=False,
        ),
        Contender(
            "aioaccum-wait-all",
            "as `aioaccum`, but waits with `aioaccum.wait_all(futures, return_exceptions=True)` "
            "(one wait per batch, not per record); uvloop; one-sender workloads only",
            _wait_all,
            concurrent=False,
            memory_bound=False,
        ),
        Contender(
            "aioaccum-bulk",
            "`await p.send_many(topic, values)` in chunks of 1,000 (one future per chunk; "
            "`keys=` the chunk's keys when keyed), when the Producer has such a method; uvloop",
            _bulk,
            concurrent=False,
            no_topics="a bulk call sends to one topic, so it cannot send to topics in turn",
        ),
        Contender(
            "aioaccum-nometrics",
            "as `aioaccum`, with `metrics_enabled=False`: lifetime totals only, no windowed "
            "or per-topic metrics (the price of metrics); one-sender workloads only",
            _module("aioaccum"),
            concurrent=False,
            memory_bound=False,
        ),
        *(
            Contender(
                f"aioaccum-journal-{mode}",
                f"as `aioaccum`, with `journal_dir=` a fresh folder and `journal_sync='{mode}'` "
                "(the price of the write-ahead journal); one-sender workloads only",
                _module("aioaccum"),
                concurrent=False,
                memory_bound=False,
            )
            for mode in ("none", "interval", "always")
        ),
        Contender(
            "aioaccum-interceptor",
            "as `aioaccum`, with one interceptor whose on_send and on_acknowledgement do "
            "nothing (the price of the hook); one-sender workloads only",
            _module("aioaccum"),
            concurrent=False,
            memory_bound=False,
        ),
        Contender(
            "aioaccum-tracing",
            "as `aioaccum`, with `tracer_provider=` OpenTelemetry's SDK TracerProvider: a span "
            "per record, dropped unexported (the price of tracing); one-sender workloads only",
            _module("opentelemetry.sdk"),
            concurrent=False,
            memory_bound=False,
        ),
        *(
            Contender(
                f"aioaccum-{strategy}",
                f"as `aioaccum`, with `buffer_memory_allocation_strategy='{strategy}'` "
                "(KIP-1332); uvloop",
                _module("aioaccum"),
                concurrent=False,
                memory_bound=False,
                spread_only="it compares allocation strategies where batches are many and "
                "small: the keyed and many-topics workloads only",
            )
            for strategy in ("full", "incremental")
        ),
        Contender(
            "aioaccum-sync",
            "`SyncProducer` from one thread: `fut = p.send(topic, value)` per record, futures "
            "kept, then `fut.result()` for each and `flush()`",
            _module("aioaccum"),
            concurrent=False,
            memory_bound=False,
            memory_bound_why="its one thread keeps every future; that run keeps none",
        ),
        Contender(
            "aiokafka",
            "`fut = await p.send(topic, value)` per record, then `asyncio.gather` over the "
            "futures; uvloop",
            _module("aiokafka"),
        ),
        Contender(
            "confluent",
            "`produce(topic, value, on_delivery=cb)` then `poll(0)` per record; on BufferError "
            "`poll(0.1)` and retry; `flush()`",
            _module("confluent_kafka"),
        ),
        Contender(
            "confluent-aio",
            "`confluent_kafka.aio.AIOProducer`: `fut = await p.produce(topic, value)`, futures "
            "gathered after `flush()`; its hand-over batch is min(1000, senders); uvloop",
            _confluent_aio,
        ),
        Contender(
            "kafka-python",
            "`fut = p.send(topic, value)` per record, futures kept, `flush()`, then each checked",
            _module("kafka"),
        ),
        Contender(
            "java",
            f"Kafka's `{JAVA_PERF_CLASS}` (`kafka-producer-perf-test`), `--throughput -1`, "
            f"JVM {JAVA_HEAP}; its own figures",
            _java,
            kind="java",
            concurrent=False,
            no_keys="ProducerPerformance sends no keys",
            no_topics="ProducerPerformance sends to one topic",
        ),
    )
}

DEFAULT_CONTENDERS = (
    "aioaccum",
    "aioaccum-gather",
    "aioaccum-wait-all",
    "aioaccum-bulk",
    "aioaccum-sync",
    "aioaccum-full",
    "aioaccum-incremental",
    "aiokafka",
    "confluent",
    "confluent-aio",
    "kafka-python",
    "java",
)
QUICK_CONTENDERS = ("aioaccum", "aiokafka", "confluent")


def child_command(spec: Spec) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that run ``spec``'s contender in a fresh process."""
    if CONTENDERS[spec.contender].kind == "java":
        return java_command(spec), {"JAVA_TOOL_OPTIONS": JAVA_HEAP}
    return [sys.executable, str(SCRIPTS / "bench.py"), "--child", spec.to_json()], {}


def java_command(spec: Spec) -> list[str]:
    if spec.spread:
        raise ValueError("ProducerPerformance sends neither keys nor to many topics")
    props: dict[str, object] = {
        "bootstrap.servers": spec.bootstrap,
        "client.id": spec.client_id,
        "acks": spec.acks,
        "compression.type": spec.compression,
        "enable.idempotence": str(spec.idempotence).lower(),
    }
    # Left out when None: the tool's producer then keeps Java's own default.
    for name, value in (
        ("batch.size", spec.batch_size),
        ("linger.ms", spec.linger_ms),
        ("buffer.memory", spec.buffer_memory),
    ):
        if value is not None:
            props[name] = value
    return [
        sys.executable,
        str(SCRIPTS / "kafka"),
        "java-class",
        JAVA_PERF_CLASS,
        "--topic",
        spec.topic,
        "--num-records",
        str(spec.records),
        "--record-size",
        str(spec.size),
        "--throughput",
        "-1",
        "--producer-props",
        *(f"{k}={v}" for k, v in props.items()),
    ]


_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)
_WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec .* max latency\.$")


def parse_java_output(stdout: str, records: int) -> dict[str, Any]:
    """The result fields from ProducerPerformance's lines (final line, or the windows so far)."""
    final = _FINAL.search(stdout)
    if final is not None:
        sent, rate = int(final.group(1)), float(final.group(2))
        return {
            "elapsed_s": sent / rate if rate else 0.0,
            "errors": records - sent,
            "offered": records,
            "p50_ms": float(final.group(5)),
            "p99_ms": float(final.group(7)),
            "latency_samples": sent,
            "raised": {},
            "longest_block_s": None,
            "timed_out": False,
            "baseline_rss_mib": None,
        }
    windows = [_WINDOW.match(line.strip()) for line in stdout.splitlines()]
    acked = sum(int(m.group(1)) for m in windows if m is not None)
    return {
        "elapsed_s": None,
        "errors": 0,
        "offered": None,
        "acked_by_windows": acked,
        "p50_ms": None,
        "p99_ms": None,
        "latency_samples": 0,
        "raised": {},
        "longest_block_s": None,
        "timed_out": True,
        "baseline_rss_mib": None,
    }
