"""Brokers die under load: nothing acknowledged is lost or doubled, nothing fails untyped.

A paced producer (acks=all, idempotence on) writes records whose values carry a send-order id
to a topic with replication factor 3 and min.insync.replicas 2, while the leader of the most
partitions is killed with ``kill -9`` and started again, and then every broker is restarted in
turn. The whole topic is then read back with aiokafka. scripts/chaos runs the long version.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from faults import cluster
from faults.workload import OUTCOME_HEADER, Ledger, outcome_row, read_back, wait_until

from aioaccum import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

PARTITIONS = 6
# Records per second while the faults run; the run lasts as long as the faults take (about
# 100 s here), so this is what sets the record count.
RATE = 2000
MIN_RECORDS = 20_000
KILLED_FOR_S = 2.0


# Four broker starts take one to four minutes, depending on how busy the machine is.
@pytest.mark.timeout(600)
async def test_leader_kill_and_rolling_restart_lose_and_double_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await topic_factory(
        partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    ledger = Ledger()
    faults: list[str] = []
    faults_done = asyncio.Event()

    async def inject() -> None:
        try:
            # Let the producer get going, so the kill hits requests in flight.
            await wait_until(lambda: ledger.acked >= RATE, timeout=120)
            leaders = await cluster.leader_counts(kafka_bootstrap, topic)
            victim = leaders.most_common(1)[0][0]
            await cluster.stop_broker(victim)
            faults.append(f"kill -9 node {victim} (leader of {leaders[victim]})")
            await asyncio.sleep(KILLED_FOR_S)
            await cluster.start_broker(victim)
            await cluster.wait_fully_replicated(kafka_bootstrap, topic)
            for node in (1, 2, 3):
                await cluster.restart_gracefully(node)
                faults.append(f"restart node {node}")
                await cluster.wait_fully_replicated(kafka_bootstrap, topic)
        finally:
            faults_done.set()

    started = time.monotonic()
    try:
        async with Producer(kafka_bootstrap, acks="all", enable_idempotence=True) as producer:
            injector = asyncio.create_task(inject())
            await ledger.produce(
                producer,
                topic,
                rate=RATE,
                stop=lambda: faults_done.is_set() and ledger.offered >= MIN_RECORDS,
            )
            await injector
    finally:
        # Leave the shared cluster whole for the tests that follow, whatever happened.
        for node in (1, 2, 3):
            if cluster.broker_pid(node) is None:
                await cluster.start_broker(node)
    still_pending = await ledger.settle()
    produce_s = time.monotonic() - started

    found = await read_back(kafka_bootstrap, topic, ledger)
    summary = (
        f"{produce_s:.0f}s, faults {faults}: offered {ledger.offered}, acked {ledger.acked}, "
        f"failed {dict(ledger.errors)}, not sent {dict(ledger.send_errors)}, untyped "
        f"{dict(ledger.untyped)}, pending {still_pending}; {found}; samples {ledger.samples}"
    )
    print(summary)
    print(OUTCOME_HEADER)
    print(outcome_row(ledger, found, "; ".join(faults)))
    assert len(faults) == 4, summary
    assert not ledger.untyped, summary
    assert still_pending == 0, summary
    accounted = ledger.acked + ledger.failed + ledger.indeterminate + ledger.not_sent
    assert accounted == ledger.offered, summary
    # Broker failures alone, with default timeouts: every record must get through.
    assert ledger.failed + ledger.indeterminate + ledger.not_sent == 0, summary
    assert ledger.acked > 0, summary
    assert found.lost == 0, summary
    assert found.duplicated == 0, summary
    assert found.misplaced == 0, summary
    assert found.order_violations == 0, summary
    assert found.foreign == 0, summary
    assert found.found_failed == 0, summary
    assert ledger.check_ack_order() == 0, summary
