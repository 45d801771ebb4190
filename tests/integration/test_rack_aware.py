"""Rack-aware partitioning (KIP-1123) on a cluster whose brokers declare racks.

The session's cluster declares none, so this module starts a cluster of its own with
``scripts/kafka up --racks``: node 1 in rack az1, nodes 2 and 3 in az2, in a state folder of its
own and on ports shifted clear of the session's cluster (19092-19794) and of the fault and
benchmark clusters, which use the default ports too. It is stopped and deleted afterwards.
The Kafka release is the script's (``AIOACCUM_KAFKA_VERSION`` chooses another, as for every
cluster the script starts).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from aioaccum import Producer, wait_all
from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum.config import ProducerConfig

pytestmark = pytest.mark.kafka

KAFKA_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka"
RACKS = ("az1", "az2", "az2")
# Ports 23092-23794: 4000 above the session's cluster, whose ports span 19092-19794.
PORT_OFFSET = 4000
START_TIMEOUT_S = 300.0
PARTITIONS = 6
RECORDS = 3000
VALUE = b"r" * 100


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
def racked_bootstrap() -> Iterator[str]:
    """A 3-node cluster of this module's own whose brokers declare RACKS."""
    state = Path(tempfile.mkdtemp(prefix="aioaccum-kafka-racks-"))
    env = {
        **os.environ,
        "AIOACCUM_KAFKA_STATE": str(state),
        "AIOACCUM_KAFKA_PORT_OFFSET": str(PORT_OFFSET),
    }
    try:
        # Replication straight between the brokers: no fault relay is needed here.
        printed = _script(
            env, "up", "--brokers", "3", "--racks", ",".join(RACKS), "--direct-replication",
            timeout=START_TIMEOUT_S,
        )  # fmt: skip
        yield printed.strip().splitlines()[-1]
    finally:
        try:
            _script(env, "down", timeout=120)
        finally:
            shutil.rmtree(state, ignore_errors=True)


async def _create_topic(bootstrap: str) -> tuple[str, dict[int, int]]:
    """A new topic of PARTITIONS partitions, one replica each, and its partitions' leaders."""
    name = f"aioaccum-racks-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        await admin.close()
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        deadline = time.monotonic() + 60
        while True:
            # Every broker must know the leaders before a producer asks any of them.
            answers = []
            for broker in client.cluster.brokers():
                response = await client.send(broker.nodeId, MetadataRequest([name]))
                (topic,) = response.to_object()["topics"]
                answers.append({p["partition"]: p["leader"] for p in topic["partitions"]})
            first = answers[0]
            led = len(first) == PARTITIONS and all(leader >= 0 for leader in first.values())
            if led and all(answer == first for answer in answers):
                return name, first
            assert time.monotonic() < deadline, f"no leaders for {name}: {answers}"
            await asyncio.sleep(0.1)
    finally:
        await client.close()


async def _produce(bootstrap: str, topic: str, **settings: Any) -> set[int]:
    """Send RECORDS keyless records; the partitions the brokers acknowledged them in."""
    # Small batches: the sticky partition moves on every few records, so thousands of records
    # make hundreds of draws.
    async with Producer(bootstrap, batch_size=1024, linger_ms=1, **settings) as producer:
        futures = [await producer.send(topic, VALUE) for _ in range(RECORDS)]
        acknowledged = await wait_all(futures)
    return {metadata.partition for metadata in acknowledged}


async def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def test_brokers_racks_reach_the_cluster_view(racked_bootstrap: str) -> None:
    config = ProducerConfig(
        bootstrap_servers=racked_bootstrap, client_rack="az2", partitioner_rack_aware=True
    )
    adapter = AioKafkaAdapter(config)
    await adapter.start()
    try:
        assert [adapter.rack_of(node) for node in (1, 2, 3)] == list(RACKS)
        assert adapter.rack_of(99) is None
        assert adapter.client_rack == "az2"
    finally:
        await adapter.close()
    unaware = AioKafkaAdapter(config.replace(partitioner_rack_aware=False))
    assert unaware.client_rack is None


async def test_keyless_records_stay_on_leaders_in_the_clients_rack(racked_bootstrap: str) -> None:
    topic, leaders = await _create_topic(racked_bootstrap)
    in_rack = {p for p, leader in leaders.items() if RACKS[leader - 1] == "az2"}
    assert 0 < len(in_rack) < PARTITIONS, leaders  # the test needs both kinds
    used = await _produce(racked_bootstrap, topic, client_rack="az2", partitioner_rack_aware=True)
    assert used == in_rack
    # Read back from the brokers: nothing went to the partitions led in az1.
    ends = await _end_offsets(racked_bootstrap, topic)
    assert sum(ends.values()) == RECORDS
    assert all(ends[p] == 0 for p in set(range(PARTITIONS)) - in_rack), ends


async def test_a_rack_without_leaders_falls_back_to_every_partition(
    racked_bootstrap: str,
) -> None:
    topic, _ = await _create_topic(racked_bootstrap)
    used = await _produce(racked_bootstrap, topic, client_rack="az9", partitioner_rack_aware=True)
    assert used == set(range(PARTITIONS))


async def test_a_rack_alone_does_not_steer_records(racked_bootstrap: str) -> None:
    topic, _ = await _create_topic(racked_bootstrap)
    used = await _produce(racked_bootstrap, topic, client_rack="az2")
    assert used == set(range(PARTITIONS))
