"""Every broker down for twice ``delivery_timeout_ms`` while records keep coming, with a journal
and a small ``buffer_memory``: nothing lost, nothing doubled, order per partition kept, every
record's future succeeds, the pool stays within ``buffer_memory`` and the process's memory
within it plus a fixed overhead, however many records wait on disk meanwhile.

Stopping every broker would take the session's cluster from the tests that run beside this one,
so this module starts a one-node cluster of its own with ``scripts/kafka``, in a state folder of
its own and on ports shifted clear of the session's cluster (19092-19794) and of the rack-aware
test's (23092-23794); it is stopped and deleted afterwards. The producer runs in a process of
its own (``tests/faults/journal_outage_child.py``), so that its RSS is the producer's alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ._servers import REPO_ROOT
from .test_producer_crash import PARTITIONS, read_topic

pytestmark = pytest.mark.kafka

KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
CHILD = REPO_ROOT / "tests" / "faults" / "journal_outage_child.py"
# Ports 25092-25794: 6000 above the session's cluster.
PORT_OFFSET = 6000
START_TIMEOUT_S = 300.0
RATE = 3000  # records of 1000 bytes per second: 3 MB/s, against a pool of 2 MiB
BUFFER_MEMORY = 2 << 20
DELIVERY_TIMEOUT_MS = 3000
SEGMENT_BYTES = 4 << 20
# What the process may grow by beyond buffer_memory: the journal's one mapped segment (its
# page-cache pages count in RSS), the interpreter's allocator slack and the spilled records'
# futures (about 100 bytes each).
OVERHEAD = SEGMENT_BYTES + (24 << 20)
# How long every broker stays down: twice the delivery timeout here, longer in the soak run
# (scripts/chaos --scenario journal sets it).
DOWN_S = float(os.environ.get("AIOACCUM_JOURNAL_OUTAGE_S", 2 * DELIVERY_TIMEOUT_MS / 1000))


def _script(env: dict[str, str], *args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, str(KAFKA_SCRIPT), *args],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kafka {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """A one-node cluster of this module's own: its bootstrap and the environment that
    reaches it with scripts/kafka."""
    state = Path(tempfile.mkdtemp(prefix="aioaccum-kafka-outage-"))
    env = {
        **os.environ,
        "AIOACCUM_KAFKA_STATE": str(state),
        "AIOACCUM_KAFKA_PORT_OFFSET": str(PORT_OFFSET),
    }
    try:
        printed = _script(env, "up", "--brokers", "1", timeout=START_TIMEOUT_S)
        yield printed.strip().splitlines()[-1], env
    finally:
        try:
            _script(env, "down", timeout=120)
        finally:
            shutil.rmtree(state, ignore_errors=True)


async def _create_topic(bootstrap: str) -> str:
    name = f"aioaccum-outage-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        await admin.close()
    return name


def _env() -> dict[str, str]:
    tests = str(REPO_ROOT / "tests")
    path = [tests, str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.mark.timeout(400 + DOWN_S)
def test_all_brokers_down_past_the_delivery_timeout_loses_and_doubles_nothing(
    own_cluster: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    bootstrap, cluster_env = own_cluster
    topic = asyncio.run(_create_topic(bootstrap))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), bootstrap, topic, str(tmp_path / "journal"), str(RATE),
         str(BUFFER_MEMORY), str(DELIVERY_TIMEOUT_MS), str(SEGMENT_BYTES)],
        env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        began = time.monotonic()
        _script(cluster_env, "stop-broker", "1", timeout=60)
        time.sleep(DOWN_S)  # the child produces meanwhile
        down_for = time.monotonic() - began
        _script(cluster_env, "start-broker", "1", timeout=START_TIMEOUT_S)
        outage = time.monotonic() - began
        time.sleep(2)  # records keep coming once it is back, too
        child.stdin.write("stop\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()
    assert child.returncode == 0, out
    figures = json.loads(out.strip().splitlines()[-1])
    contents = read_topic(bootstrap, topic)
    offered = figures["offered"]
    found = {rid: len(positions) for rid, positions in contents.positions.items()}
    lost = offered - sum(1 for rid in range(offered) if rid in found)
    duplicated = sum(n - 1 for n in found.values() if n > 1)
    growth = figures["peak_rss"] - figures["rss_ready"]
    anon_growth = figures["peak_anon"] - figures["anon_ready"]
    print(
        f"\nall brokers down {down_for:.1f} s (back after {outage:.1f} s) | offered {offered} "
        f"| returned from send {offered} | acknowledged {figures['acked']} | found "
        f"{len(found)} | duplicated {duplicated} | lost {lost} | out of order "
        f"{contents.order_violations} | most spilled at once {figures['peak_spilled']} | "
        f"pool peak {figures['peak_pool']} of {BUFFER_MEMORY} | RSS growth {growth} "
        f"(anonymous {anon_growth}) bytes"
    )
    assert down_for >= 2 * DELIVERY_TIMEOUT_MS / 1000
    assert figures["failed"] == {}
    assert figures["acked"] == offered
    assert figures["out_of_order_acks"] == 0
    assert (lost, duplicated, contents.order_violations, contents.foreign) == (0, 0, 0, 0)
    # The outage outlasted memory several times over: records waited on disk alone.
    assert figures["peak_spilled"] * 1000 > 3 * BUFFER_MEMORY
    assert figures["peak_pool"] <= BUFFER_MEMORY
    assert growth <= BUFFER_MEMORY + OVERHEAD
