"""Chaos run behind scripts/chaos: produce through a fault proxy while brokers die, then count.

One aioaccum producer (acks=all, idempotence on) writes records whose values carry a send-order
id to a topic with replication factor 3 and min.insync.replicas 2. It bootstraps at the fault
proxy, so all its traffic crosses tests/faults/proxy.py. Meanwhile a seeded schedule injects
faults: ``kill`` (kill -9 the leader of the most partitions, start it again), ``restart``
(graceful restart of a node), and the proxy's ``stall``, ``node-stall``, ``slow``, ``reset``
and ``half-open``. Afterwards the topic is read back with confluent-kafka (librdkafka:
independent of aioaccum and of aiokafka) and every record accounted for. The exit status is 1
when an acknowledged record is missing, misplaced or out of order, when a record was written
twice, when a record that failed definitely (not ``possibly_written``) is in the log anyway,
when a record failed with an error outside aioaccum's tree, when a future was left pending
after close, when memory or tasks leaked, when fewer records were acknowledged than the
scenario's floor, or (broker faults only, where nothing should fail) when any record failed.

``--short`` is the CI run: each kind of fault once, in an order from a random seed that is
printed (``--seed`` repeats a run). ``--security sasl_ssl`` produces over the cluster's SASL_SSL
listener (broker faults only: the proxy carries plaintext).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import ssl
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import faults.cluster as cluster  # noqa: E402
from faults.proxy import Direction, Fault, FaultProxy  # noqa: E402
from faults.workload import (  # noqa: E402
    OUTCOME_HEADER,
    Ledger,
    ReadBack,
    outcome_row,
    read_back,
)

from aioaccum import Producer  # noqa: E402

KINDS = ("kill", "restart", "stall", "node-stall", "slow", "reset", "half-open")
# The least share of offered records that must be acknowledged, per scenario: faults through
# the proxy may fail records (a stall past delivery_timeout_ms), broker faults must not.
FLOORS = {"random": 0.5, "brokers": 1.0}
PARTITIONS = 6
DELIVERY_TIMEOUT_MS = 20_000
REQUEST_TIMEOUT_MS = 5_000


@dataclass
class FaultLog:
    counts: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    started: float = field(default_factory=time.monotonic)

    def say(self, message: str) -> None:
        print(f"chaos: {time.monotonic() - self.started:7.1f}s {message}", flush=True)


class Injector:
    """Applies one fault of a kind, waits it out, heals it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        proxy: FaultProxy,
        rng: random.Random,
        log: FaultLog,
        ledger: Ledger,
        *,
        max_stall: float,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.proxy = proxy
        self.rng = rng
        self.log = log
        self.ledger = ledger
        self.max_stall = max_stall

    async def inject(self, kind: str, node: int | None = None) -> None:
        actions: dict[str, Callable[[], Awaitable[str]]] = {
            "kill": self.kill,
            "restart": lambda: self.restart(node),
            "stall": self.stall,
            "node-stall": self.node_stall,
            "slow": self.slow,
            "reset": self.reset,
            "half-open": self.half_open,
        }
        begun = time.monotonic()
        self.log.say(f"{kind} ... (acked so far {self.ledger.acked}/{self.ledger.offered})")
        detail = await actions[kind]()
        took = time.monotonic() - begun
        self.log.counts[kind] += 1
        self.log.seconds[kind] += took
        self.log.say(f"{kind} done in {took:.1f}s: {detail}")

    async def _proxy_fault(self, fault: Fault, seconds: float, node: int | None = None) -> str:
        self.proxy.set_fault(fault, node=node)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.proxy.clear()
        where = "all nodes" if node is None else f"node {node}"
        return f"{fault} on {where} for {seconds:.1f}s"

    async def kill(self) -> str:
        leaders = await cluster.leader_counts(self.bootstrap, self.topic)
        victim, led = leaders.most_common(1)[0]
        down_for = self.rng.uniform(2.0, 8.0)
        await cluster.stop_broker(victim)
        await asyncio.sleep(down_for)
        await cluster.start_broker(victim)
        synced = await cluster.wait_fully_replicated(self.bootstrap, self.topic)
        return f"node {victim} (leader of {led}) down {down_for:.1f}s, in sync {synced:.1f}s later"

    async def restart(self, node: int | None = None) -> str:
        node = node or self.rng.randint(1, 3)
        await cluster.restart_gracefully(node)
        synced = await cluster.wait_fully_replicated(self.bootstrap, self.topic)
        return f"node {node} restarted, in sync {synced:.1f}s later"

    async def stall(self) -> str:
        return await self._proxy_fault(Fault.stall(), self.rng.uniform(1.0, self.max_stall))

    async def node_stall(self) -> str:
        node = self.rng.randint(1, 3)
        seconds = self.rng.uniform(1.0, self.max_stall)
        return await self._proxy_fault(Fault.stall(), seconds, node)

    async def slow(self) -> str:
        rate = self.rng.choice((20_000, 100_000, 400_000))
        return await self._proxy_fault(Fault.slow(rate), self.rng.uniform(2.0, 8.0))

    async def reset(self) -> str:
        return await self._proxy_fault(Fault.reset(), self.rng.uniform(0.1, 3.0))

    async def half_open(self) -> str:
        fault = Fault.half_open(self.rng.choice(list(Direction)), drop=self.rng.random() < 0.5)
        return await self._proxy_fault(fault, self.rng.uniform(1.0, self.max_stall))


@dataclass
class Outcome:
    ledger: Ledger
    found: ReadBack
    faults: FaultLog
    pending_after_close: int
    pool_whole: bool
    leftover_tasks: int
    produce_s: float
    metrics: dict[str, float]
    scenario: str
    floor: int


async def create_topic(bootstrap: str) -> str:
    topic = f"aioaccum-chaos-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})]
        )
        for result in response.to_object()["topic_errors"]:
            if result["error_code"] != 0:
                raise SystemExit(f"creating {topic} failed: {result}")
    finally:
        await admin.close()
    await cluster.wait_fully_replicated(bootstrap, topic)
    return topic


async def run(args: argparse.Namespace, bootstrap: str) -> Outcome:
    await cluster.check_managed(bootstrap)
    rng = random.Random(args.seed)
    topic = await create_topic(bootstrap)
    log = FaultLog()
    ledger = Ledger(value_size=args.record_size)
    log.say(f"topic {topic}, seed {args.seed}, rate {args.rate}/s, duration {args.duration}s")
    faults_done = asyncio.Event()
    deadline = time.monotonic() + args.duration
    baseline = asyncio.all_tasks()

    async with FaultProxy.for_cluster(await cluster.cluster_ports()) as proxy:
        injector = Injector(
            bootstrap, topic, proxy, rng, log, ledger, max_stall=args.max_stall
        )

        async def schedule() -> None:
            try:
                await asyncio.sleep(2.0)  # traffic first, so faults hit requests in flight
                if args.scenario == "brokers":
                    for _ in range(1 if args.short else 3):
                        await injector.inject("kill")
                    for node in (rng.randint(1, 3),) if args.short else (1, 2, 3):
                        await injector.inject("restart", node)
                    return
                if args.short:
                    for kind in rng.sample(KINDS, len(KINDS)):
                        await injector.inject(kind)
                        await asyncio.sleep(rng.uniform(0.5, 2.0))
                    return
                while time.monotonic() < deadline:
                    await injector.inject(rng.choice(KINDS))
                    await asyncio.sleep(rng.uniform(1.0, 5.0))
            finally:
                faults_done.set()

        common = {
            "acks": "all",
            "enable_idempotence": True,
            "compression_type": args.compression,
            **security_settings(args.security),
        }
        if args.scenario == "brokers":
            # Broker failures only: straight to the brokers, with the default timeouts.
            target = common.pop("bootstrap_servers", bootstrap)
            producer = Producer(target, **common)
        else:
            producer = Producer(
                proxy.bootstrap,
                delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                **common,
            )
        started = time.monotonic()
        await producer.start()
        try:
            faulting = asyncio.create_task(schedule())
            await ledger.produce(
                producer,
                topic,
                rate=args.rate,
                stop=lambda: faults_done.is_set()
                and time.monotonic() >= deadline
                and ledger.offered >= args.records,
            )
            await faulting
        finally:
            for node in (1, 2, 3):
                if cluster.broker_pid(node) is None:
                    await cluster.start_broker(node)
            await producer.close()
        produce_s = time.monotonic() - started
        pending = await ledger.settle()
        metrics = producer.metrics()
        assert producer.pool is not None
        stats = producer.pool.statistics()
        pool_whole = stats.available == stats.total and stats.allocated == 0
        current = asyncio.current_task()
        leftover = [
            t for t in asyncio.all_tasks() - baseline - proxy.tasks() if t is not current
        ]
        for task in leftover:
            log.say(f"left running after close: {task!r}")
    log.say(f"closed after {produce_s:.1f}s; reading {topic} back")
    found = await read_back(bootstrap, topic, ledger)
    floor = int(FLOORS[args.scenario] * ledger.offered)
    return Outcome(
        ledger, found, log, pending, pool_whole, len(leftover), produce_s, metrics,
        args.scenario, floor,
    )


def security_settings(security: str) -> dict[str, object]:
    """Producer settings for the cluster's SASL_SSL listener (``scripts/kafka security``)."""
    if security == "plaintext":
        return {}
    listener = cluster.security_listener()
    user = listener["users"]["SCRAM-SHA-512"]
    return {
        "bootstrap_servers": listener["bootstrap"],
        "security_protocol": "SASL_SSL",
        "ssl_context": ssl.create_default_context(cafile=listener["ca_file"]),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user["username"],
        "sasl_plain_password": user["password"],
    }


def table(outcome: Outcome) -> tuple[str, bool]:
    ledger, found, faults = outcome.ledger, outcome.found, outcome.faults
    rows: list[tuple[str, str, bool]] = [
        ("records offered", f"{ledger.offered}", True),
        ("acknowledged", f"{ledger.acked}", True),
        ("found (distinct ids)", f"{found.found}", True),
        ("found, not acknowledged", f"{found.found_unacked}", True),
        ("duplicated", f"{found.duplicated}", found.duplicated == 0),
        ("  of which acknowledged", f"{found.duplicated_acked}", found.duplicated_acked == 0),
        ("lost (acknowledged, not found)", f"{found.lost}", found.lost == 0),
        ("misplaced (not at acked offset)", f"{found.misplaced}", found.misplaced == 0),
        ("out of order in a partition", f"{found.order_violations}", found.order_violations == 0),
        ("acks out of order", f"{ledger.check_ack_order()}", ledger.check_ack_order() == 0),
        ("foreign records", f"{found.foreign}", found.foreign == 0),
        (
            f"acknowledged >= floor ({FLOORS[outcome.scenario]:.0%} of offered)",
            f"{ledger.acked} >= {outcome.floor}",
            ledger.acked >= outcome.floor,
        ),
        ("failed definitely", f"{ledger.failed}", strict_ok(outcome, ledger.failed)),
        ("  of which found in the log", f"{found.found_failed}", found.found_failed == 0),
        (
            "indeterminate (possibly written)",
            f"{ledger.indeterminate}",
            strict_ok(outcome, ledger.indeterminate),
        ),
        ("  of which found in the log", f"{found.found_indeterminate}", True),
        ("pending after close", f"{outcome.pending_after_close}", outcome.pending_after_close == 0),
        ("pool back to its total", f"{outcome.pool_whole}", outcome.pool_whole),
        ("tasks left after close", f"{outcome.leftover_tasks}", outcome.leftover_tasks == 0),
    ]
    for name, count in sorted(ledger.errors.items()):
        rows.append((f"failed: {name}", f"{count}", True))
    for name, count in sorted(ledger.send_errors.items()):
        rows.append((f"send() raised: {name}", f"{count}", strict_ok(outcome, count)))
    for name, count in sorted(ledger.untyped.items()):
        rows.append((f"UNTYPED: {name}", f"{count}", False))
    accounted = (
        ledger.acked + ledger.failed + ledger.indeterminate + ledger.not_sent + ledger.pending
    )
    rows.append(("acked+failed+not sent == offered", f"{accounted}", accounted == ledger.offered))
    for kind in KINDS:
        rows.append(
            (f"fault {kind}", f"{faults.counts[kind]} ({faults.seconds[kind]:.0f}s)", True)
        )
    retries = outcome.metrics.get("record-retry-total", 0.0)
    rows += [
        ("retries (record-retry-total)", f"{retries:.0f}", True),
        ("produce + faults time", f"{outcome.produce_s:.1f}s", True),
        ("read-back time", f"{found.seconds:.1f}s", True),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'':2}{name:<{width}}  {value}" if ok else f"! {name:<{width}}  {value}"
             for name, value, ok in rows]
    ok = all(good for _, _, good in rows)
    for name, messages in sorted(ledger.samples.items()):
        lines.append(f"  e.g. {name}: {messages[0][:160]}")
    if found.lost_samples:
        lines.append(f"  lost ids e.g. {found.lost_samples}")
    if found.duplicate_samples:
        lines.append(f"  duplicated ids e.g. {found.duplicate_samples}")
    if found.found_failed_samples:
        lines.append(f"  failed definitely yet found, ids e.g. {found.found_failed_samples}")
    faults_text = ", ".join(f"{kind} x{n}" for kind, n in faults.counts.items() if n)
    lines += ["", OUTCOME_HEADER, outcome_row(ledger, found, faults_text)]
    return "\n".join(lines), ok


def strict_ok(outcome: Outcome, failures: int) -> bool:
    """Broker faults alone must fail no record; the proxy's faults may."""
    return outcome.scenario != "brokers" or failures == 0


async def start_cluster() -> str:
    print("chaos: starting a 3-node Kafka (scripts/kafka up --brokers 3) ...", flush=True)
    out = await cluster.kafka_script("up", "--brokers", "3", "--lease", str(os.getpid()))
    return out.strip().splitlines()[-1]


async def main_async(args: argparse.Namespace) -> int:
    began = time.monotonic()
    bootstrap = args.bootstrap
    if not bootstrap:
        bootstrap = await start_cluster()
    try:
        if args.scenario == "journal":
            return await journal_soak(args, bootstrap, began)
        outcome = await run(args, bootstrap)
    finally:
        if not args.bootstrap:
            await cluster.kafka_script("release", str(os.getpid()))
    text, ok = table(outcome)
    print(text)
    print(f"chaos: {'PASS' if ok else 'FAIL'} in {time.monotonic() - began:.0f}s", flush=True)
    return 0 if ok else 1


async def journal_soak(args: argparse.Namespace, bootstrap: str, began: float) -> int:
    """The journal's proofs, longer than in the test suite: ``--kills`` kill -9s of a producer
    process with a journal, in a row on the same folder, then every broker of a cluster of the
    test's own down for ``--duration`` seconds while records keep coming. Each test prints its
    table (offered | returned from send | found | duplicated | lost | recovered) and fails on
    any record lost or doubled."""
    env = {
        **os.environ,
        "AIOACCUM_BOOTSTRAP": bootstrap,
        "AIOACCUM_JOURNAL_KILLS": str(args.kills),
        "AIOACCUM_JOURNAL_OUTAGE_S": str(args.duration),
    }
    tests = ["tests/integration/test_journal_crash.py", "tests/integration/test_journal_outage.py"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", *tests, env=env
    )
    code = await process.wait()
    verdict = "PASS" if code == 0 else "FAIL"
    print(f"chaos: journal {verdict} in {time.monotonic() - began:.0f}s", flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="CI run: each fault once")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of faults (default 300, or 60 with --short)")
    parser.add_argument("--seed", type=int, default=None,
                        help="fault schedule seed (default random, and printed)")
    parser.add_argument("--security", choices=("plaintext", "sasl_ssl"), default="plaintext",
                        help="sasl_ssl: produce over the SASL_SSL listener (with --scenario "
                        "brokers: the proxy carries plaintext only)")
    parser.add_argument("--compression", default="none",
                        choices=("none", "gzip", "snappy", "lz4", "zstd"))
    parser.add_argument("--rate", type=float, default=None,
                        help="records per second (default 4000, or 2000 with --short)")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--records", type=int, default=0,
                        help="keep producing until at least this many records were offered")
    parser.add_argument(
        "--scenario",
        choices=("random", "brokers", "journal"),
        default="random",
        help="random: seeded faults of every kind for --duration; brokers: kill -9 the "
        "busiest leader and restart it three times, then restart every node in turn; "
        "journal: --kills kill -9s of a producer with a journal_dir, then every broker of a "
        "cluster of its own down for --duration seconds (default 120, or 6 with --short)",
    )
    parser.add_argument("--kills", type=int, default=None,
                        help="journal: kill -9s in a row (default 20, or 4 with --short)")
    parser.add_argument("--max-stall", type=float, default=None,
                        help="longest stall/half-open, s (default 30; 8 with --short)")
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("AIOACCUM_BOOTSTRAP"),
        help="a running scripts/kafka cluster (same AIOACCUM_KAFKA_STATE/PORT_OFFSET); "
        "default AIOACCUM_BOOTSTRAP, else a cluster is started",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s %(message)s")
    # aiokafka logs every refused reconnect while a broker is down: thousands of lines that
    # only restate the faults this run injects.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if args.duration is None:
        if args.scenario == "journal":
            args.duration = 6.0 if args.short else 120.0
        else:
            args.duration = 60.0 if args.short else 300.0
    if args.kills is None:
        args.kills = 4 if args.short else 20
    if args.rate is None:
        args.rate = 2000.0 if args.short else 4000.0
    if args.max_stall is None:
        args.max_stall = 8.0 if args.short else 30.0
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    print(f"chaos: seed {args.seed} (repeat this run with --seed {args.seed})", flush=True)
    if args.security != "plaintext" and args.scenario != "brokers":
        parser.error("--security sasl_ssl needs --scenario brokers: the fault proxy carries "
                     "plaintext only")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
