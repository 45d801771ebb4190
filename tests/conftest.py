"""Fixtures shared by the whole suite.

Kafka
    A test that needs a real cluster is marked ``@pytest.mark.kafka`` or requests one of the
    fixtures below (which marks it ``kafka`` for ``-m "not kafka"``). The session's cluster is
    the one named by ``AIOACCUM_BOOTSTRAP`` when that is set; otherwise ``scripts/kafka up
    --brokers 3`` starts one on 127.0.0.1 (or finds it running) under a lease for this session,
    and the session's end releases it: the cluster stops when the last session using it ends,
    unless a person started it by hand. Not getting a cluster fails the test; it is never a
    skip. Unit tests that ask for none of this never start Java.

    ``kafka_bootstrap``    the bootstrap string, e.g. "127.0.0.1:19092,127.0.0.1:19093,..."
    ``kafka_broker_count`` how many brokers the cluster metadata lists
    ``topic_factory``      ``await topic_factory(partitions=6, replication_factor=None,
                           configs=None)`` creates a fresh, uniquely named topic and returns its
                           name; the topics are deleted after the test (best effort)
    ``new_topic``          one such topic with the defaults (6 partitions, RF 3 on 3 brokers)
    ``listener``           ``scripts/kafka security``: CA file, bootstrap and users of the
                           cluster's SASL_SSL listener
    ``transaction_version`` runs the test twice, as ``[tv1]`` and ``[tv2]``, with the
                           cluster's ``transaction.version`` feature set to 1 (classic) or 2
                           (KIP-890); its value is that level, and the level the cluster had
                           before is restored after the test. It needs the cluster of
                           scripts/kafka: an AIOACCUM_BOOTSTRAP cluster fails it.

    ``schema_registry_url`` the Confluent-compatible base URL of the session's schema
                           registry: ``AIOACCUM_SCHEMA_REGISTRY_URL`` when set, otherwise
                           ``scripts/registry up`` starts Apicurio Registry on 127.0.0.1 (or
                           finds it running) under a lease for this session, like the cluster.
                           A registry that cannot start fails the test; it is never a skip.

    ``@pytest.mark.three_brokers`` implies ``kafka`` and fails a test when the cluster has
    fewer than 3 brokers.

Event loops
    Async tests run on the default asyncio loop. A test whose behaviour may depend on the loop
    opts in to running on uvloop as well, either with ``@pytest.mark.any_loop`` or by
    requesting the ``any_loop`` fixture (its value names the running loop: "asyncio" or
    "uvloop"). It is then collected twice, as ``test_x[asyncio]`` and ``test_x[uvloop]``.
    ``@pytest.mark.asyncio(loop_factories=["uvloop"])`` narrows a test to one of them. Loops
    are chosen through pytest-asyncio's ``pytest_asyncio_loop_factories`` hook, so async
    fixtures run on the same loop as their test; session-scoped event loops are not supported
    together with this parametrisation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest
import uvloop
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from faults import cluster
from faults.cluster import ClusterControlError, security_listener

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
REGISTRY_SCRIPT = REPO_ROOT / "scripts" / "registry"
# A first run downloads ~160 MB through Maven, then the script waits up to 120 s for the API.
REGISTRY_START_TIMEOUT_S = 400.0
CLUSTER_BROKERS = 3
# Covers a first run that downloads the jars plus the script's own 120 s readiness wait.
CLUSTER_START_TIMEOUT_S = 400.0
TOPIC_READY_TIMEOUT_S = 30.0

KAFKA_FIXTURES = frozenset(
    {"kafka_bootstrap", "kafka_broker_count", "topic_factory", "new_topic", "transaction_version"}
)

LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "any_loop: run this async test on the default asyncio loop and on uvloop"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Before `-m` deselection runs, so that `-m "not kafka"` also drops tests that only
    # request a Kafka fixture.
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & KAFKA_FIXTURES or item.get_closest_marker("three_brokers") is not None:
            item.add_marker(pytest.mark.kafka)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Keep looptime away from synchronous tests.

    looptime asks the loop policy of any test that has one for its current loop; for a plain
    ``def`` test that makes a fresh loop nobody closes, and its ResourceWarning then fails
    whichever later test happens to collect it.
    """
    # pytest-asyncio marks every async test (auto mode) and may wrap its function.
    if pyfuncitem.get_closest_marker("asyncio") is None:
        pyfuncitem.funcargs.pop("event_loop_policy", None)
    return (yield)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Both loops for tests that opt in, the default loop for the rest."""
    if item.get_closest_marker("any_loop") is not None or "any_loop" in getattr(
        item, "fixturenames", ()
    ):
        return dict(LOOP_FACTORIES)
    return {"asyncio": LOOP_FACTORIES["asyncio"]}


@pytest.fixture
async def any_loop() -> str:
    """Name of the loop the test runs on; requesting it runs the test on every loop."""
    loop = asyncio.get_running_loop()
    return "uvloop" if isinstance(loop, uvloop.Loop) else "asyncio"


# --- the cluster ---------------------------------------------------------------------------


def _run_script(script: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One of the project's service scripts (scripts/kafka, scripts/registry), its output kept."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _kafka_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return _run_script(KAFKA_SCRIPT, *args, timeout=timeout)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap string of the session's Kafka cluster (see the module docstring)."""
    external = os.environ.get("AIOACCUM_BOOTSTRAP")
    if external:
        yield external
        return
    # The lease lets several sessions on one machine share the cluster: the script stops it
    # when the last of them leaves, and only if a session (not a person) started it.
    lease = str(os.getpid())
    try:
        up = _kafka_script(
            "up",
            "--brokers",
            str(CLUSTER_BROKERS),
            "--lease",
            lease,
            timeout=CLUSTER_START_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/kafka up hung for {exc.timeout}s", pytrace=False)
    if up.returncode != 0:
        _kafka_script("release", lease, timeout=120)
        pytest.fail(
            f"scripts/kafka up --brokers {CLUSTER_BROKERS} failed (exit {up.returncode}):\n"
            f"{up.stdout}{up.stderr}",
            pytrace=False,
        )
    try:
        yield up.stdout.strip().splitlines()[-1]
    finally:
        released = _kafka_script("release", lease, timeout=120)
        if released.returncode != 0:
            print(f"scripts/kafka release failed:\n{released.stderr}", file=sys.stderr)


@pytest.fixture(scope="session")
def kafka_broker_count(kafka_bootstrap: str) -> int:
    """How many brokers the cluster metadata lists."""
    listed = _kafka_script("brokers", "--bootstrap", kafka_bootstrap, timeout=60)
    if listed.returncode != 0:
        pytest.fail(f"cannot read the cluster metadata:\n{listed.stderr}", pytrace=False)
    return len(listed.stdout.splitlines())


@pytest.fixture(autouse=True)
def _kafka_marker_gate(request: pytest.FixtureRequest) -> None:
    """Brings the cluster up for `kafka` tests and holds `three_brokers` tests to 3 brokers."""
    node = request.node
    if node.get_closest_marker("three_brokers") is not None:
        count: int = request.getfixturevalue("kafka_broker_count")
        if count < CLUSTER_BROKERS:
            pytest.fail(f"needs {CLUSTER_BROKERS} brokers, the cluster has {count}")
    elif node.get_closest_marker("kafka") is not None:
        request.getfixturevalue("kafka_bootstrap")


# --- the schema registry --------------------------------------------------------------------


def _registry_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return _run_script(REGISTRY_SCRIPT, *args, timeout=timeout)


@pytest.fixture(scope="session")
def schema_registry_url() -> Iterator[str]:
    """Base URL of the session's schema registry (see the module docstring)."""
    external = os.environ.get("AIOACCUM_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    lease = str(os.getpid())
    try:
        up = _registry_script("up", "--lease", lease, timeout=REGISTRY_START_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _registry_script("release", lease, timeout=60)
        pytest.fail(f"scripts/registry up hung for {exc.timeout}s", pytrace=False)
    if up.returncode != 0:
        _registry_script("release", lease, timeout=60)
        pytest.fail(
            f"scripts/registry up failed (exit {up.returncode}):\n{up.stdout}{up.stderr}",
            pytrace=False,
        )
    try:
        yield up.stdout.strip().splitlines()[-1]
    finally:
        released = _registry_script("release", lease, timeout=60)
        if released.returncode != 0:
            print(f"scripts/registry release failed:\n{released.stderr}", file=sys.stderr)


# --- topics --------------------------------------------------------------------------------


class TopicFactory(Protocol):
    """Creates a fresh topic and returns its name."""

    async def __call__(
        self,
        *,
        partitions: int = 6,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> str: ...


async def _wait_for_leaders(client: AIOKafkaClient, topic: str, partitions: int) -> None:
    """Until every broker's metadata shows a leader for each partition of a new topic.

    The controller answers CreateTopics before all brokers have applied the change, and a
    test's client may ask any of them.
    """
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    waiting = {broker.nodeId for broker in client.cluster.brokers()}
    while waiting:
        for node_id in sorted(waiting):
            response = await client.send(node_id, MetadataRequest([topic]))
            described = response.to_object()["topics"]
            found = [p for t in described if t["error_code"] == 0 for p in t["partitions"]]
            if len(found) == partitions and all(p["leader"] >= 0 for p in found):
                waiting.discard(node_id)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"topic {topic} not ready on brokers {sorted(waiting)} "
                f"after {TOPIC_READY_TIMEOUT_S}s"
            )
        await asyncio.sleep(0.05)


@pytest.fixture
async def topic_factory(
    request: pytest.FixtureRequest, kafka_bootstrap: str, kafka_broker_count: int
) -> AsyncIterator[TopicFactory]:
    """Creates uniquely named topics for one test and deletes them afterwards."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    client = AIOKafkaClient(bootstrap_servers=kafka_bootstrap)
    await client.bootstrap()
    created: list[str] = []
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80]

    async def create(
        *,
        partitions: int = 6,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        if replication_factor is None:
            replication_factor = min(3, kafka_broker_count)
        name = f"aioaccum-{stem}-{uuid.uuid4().hex[:10]}"
        response = await admin.create_topics(
            [NewTopic(name, partitions, replication_factor, topic_configs=dict(configs or {}))]
        )
        for result in response.to_object()["topic_errors"]:
            if result["error_code"] != 0:
                raise RuntimeError(
                    f"creating topic {name} failed: error {result['error_code']} "
                    f"{result['error_message']}"
                )
        created.append(name)
        await _wait_for_leaders(client, name, partitions)
        return name

    try:
        yield create
    finally:
        try:
            if created:
                # Best effort: a failed delete only leaves a topic on a throwaway cluster.
                with contextlib.suppress(Exception):
                    await admin.delete_topics(created)
        finally:
            await client.close()
            await admin.close()


@pytest.fixture
async def new_topic(topic_factory: TopicFactory) -> str:
    """A fresh topic with 6 partitions and replication factor 3 (fewer on a smaller cluster)."""
    return await topic_factory()


@pytest.fixture(scope="module")
def listener(kafka_bootstrap: str) -> dict[str, Any]:
    """``scripts/kafka security`` of the session's cluster: CA file, bootstrap, users."""
    try:
        return security_listener()
    except ClusterControlError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(params=[1, 2], ids=["tv1", "tv2"])
def transaction_version(request: pytest.FixtureRequest, kafka_bootstrap: str) -> Iterator[int]:
    """The cluster's ``transaction.version`` for one test: 1 or 2, restored afterwards."""
    level: int = request.param
    # The feature is cluster-wide and scripts/kafka sets it on its own cluster only: with
    # AIOACCUM_BOOTSTRAP naming another one the test would run on an unchanged cluster.
    managed = _kafka_script("bootstrap", timeout=60)
    if managed.returncode != 0 or set(managed.stdout.strip().split(",")) != {
        address.strip() for address in kafka_bootstrap.split(",")
    }:
        pytest.fail(
            f"transaction_version sets the feature on the cluster of scripts/kafka "
            f"({managed.stdout.strip() or managed.stderr.strip()}), but the session uses "
            f"{kafka_bootstrap}",
            pytrace=False,
        )
    try:
        previous = cluster.transaction_version()
        cluster.set_transaction_version(level)
    except ClusterControlError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield level
    try:
        cluster.set_transaction_version(previous)
    except ClusterControlError as exc:
        pytest.fail(f"restoring transaction.version={previous}: {exc}", pytrace=False)
