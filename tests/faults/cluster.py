"""Broker failures on the scripts/kafka cluster: kill, restart, find leaders, wait for ISR;
and the cluster's transaction protocol version (``transaction.version``).

Everything goes through ``scripts/kafka`` with the caller's environment
(``AIOACCUM_KAFKA_STATE``, ``AIOACCUM_KAFKA_PORT_OFFSET``), so it acts on the same cluster that
the test session or ``scripts/chaos`` uses, and on no other. Subprocesses run without blocking
the event loop, so a producer keeps working while a broker is being killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

__all__ = [
    "ClusterControlError",
    "broker_pid",
    "check_managed",
    "cluster_ports",
    "kafka_script",
    "leader_counts",
    "restart_gracefully",
    "security_listener",
    "set_transaction_version",
    "start_broker",
    "stop_broker",
    "transaction_version",
    "wait_fully_replicated",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
SCRIPT_TIMEOUT_S = 300.0
# A FeatureCommand JVM plus the script's own 30 s wait for every node to apply the change.
FEATURE_TIMEOUT_S = 120.0
TRANSACTION_VERSION = "transaction.version"
GRACEFUL_STOP_S = 30.0
POLL_S = 0.1


class ClusterControlError(RuntimeError):
    """The cluster could not be controlled as asked (with the script's output)."""


async def kafka_script(*args: str, timeout: float = SCRIPT_TIMEOUT_S) -> str:
    """Run ``scripts/kafka ARGS``; return its stdout, or raise with its output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(KAFKA_SCRIPT),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        message = f"scripts/kafka {' '.join(args)} hung for {timeout:.0f}s"
        raise ClusterControlError(message) from None
    if proc.returncode != 0:
        raise ClusterControlError(
            f"scripts/kafka {' '.join(args)} failed (exit {proc.returncode}):\n"
            f"{out.decode(errors='replace')}{err.decode(errors='replace')}"
        )
    return out.decode()


def _kafka_script_sync(*args: str, timeout: float) -> str:
    """``scripts/kafka ARGS`` for callers without an event loop (fixtures); its stdout."""
    try:
        result = subprocess.run(
            [sys.executable, str(KAFKA_SCRIPT), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        message = f"scripts/kafka {' '.join(args)} hung for {timeout:.0f}s"
        raise ClusterControlError(message) from None
    if result.returncode != 0:
        raise ClusterControlError(
            f"scripts/kafka {' '.join(args)} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return result.stdout


def security_listener() -> dict[str, Any]:
    """``scripts/kafka security``: CA file, bootstrap and users of the SASL_SSL listener."""
    info: dict[str, Any] = json.loads(_kafka_script_sync("security", timeout=60))
    return info


def transaction_version() -> int:
    """The cluster's finalized ``transaction.version`` (``scripts/kafka feature``).

    1 is the classic protocol; 2 is KIP-890's (the coordinator bumps the producer epoch at
    every transaction end, and the producer adds partitions without AddPartitionsToTxn).
    """
    return int(_kafka_script_sync("feature", TRANSACTION_VERSION, timeout=60).strip())


def set_transaction_version(level: int) -> None:
    """Upgrade or downgrade ``transaction.version`` to ``level``; returns once every running
    node reports it, so a client connecting afterwards sees it wherever it connects."""
    _kafka_script_sync("feature", TRANSACTION_VERSION, str(level), timeout=FEATURE_TIMEOUT_S)


async def cluster_ports() -> dict[int, dict[str, int]]:
    """``scripts/kafka ports``: each node's client, controller, proxied and proxy ports."""
    raw = json.loads(await kafka_script("ports"))
    return {int(node): {name: int(port) for name, port in p.items()} for node, p in raw.items()}


async def check_managed(bootstrap: str) -> None:
    """Fail unless ``bootstrap`` is the cluster scripts/kafka runs with this environment.

    Broker kills and the PROXIED listener exist only there; an external cluster named by
    AIOACCUM_BOOTSTRAP cannot be used for these tests.
    """
    try:
        managed = (await kafka_script("bootstrap", timeout=60)).strip()
    except ClusterControlError as exc:
        raise ClusterControlError(
            f"fault tests need the cluster of scripts/kafka (same AIOACCUM_KAFKA_STATE and "
            f"AIOACCUM_KAFKA_PORT_OFFSET as the tests): {exc}"
        ) from exc
    if set(managed.split(",")) != {b.strip() for b in bootstrap.split(",")}:
        raise ClusterControlError(
            f"fault tests kill brokers of the cluster of scripts/kafka ({managed}), but the "
            f"session uses {bootstrap}: run them against the scripts/kafka cluster"
        )


async def stop_broker(node: int) -> None:
    """``kill -9`` node ``node`` (scripts/kafka stop-broker)."""
    await kafka_script("stop-broker", str(node))


async def start_broker(*nodes: int) -> None:
    """Start ``nodes`` again, together, and wait until each lists every node that runs."""
    await kafka_script("start-broker", *map(str, nodes))


def broker_pid(node: int) -> int | None:
    """Pid of node ``node`` if it runs and is a broker scripts/kafka started (else None)."""
    state = Path(os.environ.get("AIOACCUM_KAFKA_STATE", "/tmp/aioaccum-kafka")).expanduser()
    props = state / f"node-{node}" / "server.properties"
    try:
        pid = int((state / f"node-{node}" / "pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    # A recycled pid belongs to some other program: never signal it.
    if b"kafka.Kafka" not in cmdline or str(props).encode() not in cmdline:
        return None
    return pid


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited already


async def restart_gracefully(node: int) -> None:
    """SIGTERM node ``node`` (Kafka's controlled shutdown moves its leaders), then start it."""
    pid = broker_pid(node)
    if pid is None:
        raise ClusterControlError(f"node {node} is not running")
    os.kill(pid, signal.SIGTERM)
    for _ in range(int(GRACEFUL_STOP_S / POLL_S)):
        if not _alive(pid):
            break
        await asyncio.sleep(POLL_S)
    if broker_pid(node) is not None:
        await stop_broker(node)  # ignored SIGTERM: kill -9
    await start_broker(node)


async def _partition_metadata(bootstrap: str, topic: str) -> list[dict[str, object]]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = client.get_random_node()
        response = await client.send(node, MetadataRequest([topic]))
        topics = response.to_object()["topics"]
        return [p for t in topics if t["error_code"] == 0 for p in t["partitions"]]
    finally:
        await client.close()


async def leader_counts(bootstrap: str, topic: str) -> Counter[int]:
    """How many of ``topic``'s partitions each node leads."""
    partitions = await _partition_metadata(bootstrap, topic)
    return Counter(int(p["leader"]) for p in partitions if int(p["leader"]) >= 0)  # type: ignore[call-overload]


async def wait_fully_replicated(bootstrap: str, topic: str, timeout: float = 120.0) -> float:
    """Until every partition of ``topic`` has a leader and all replicas in sync.

    Returns the seconds waited. Killing the next broker before that could leave a partition
    below min.insync.replicas for longer than a fault is meant to last.
    """
    started = time.monotonic()
    while True:
        try:
            partitions = await _partition_metadata(bootstrap, topic)
        except Exception:  # a broker just restarted may refuse for a moment
            partitions = []
        if partitions and all(
            int(p["leader"]) >= 0  # type: ignore[call-overload]
            and sorted(p["isr"]) == sorted(p["replicas"])  # type: ignore[call-overload]
            for p in partitions
        ):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise ClusterControlError(
                f"{topic}: replicas not all in sync after {timeout:.0f}s: {partitions}"
            )
        await asyncio.sleep(0.5)
