"""Durability proofs on the 3-node cluster, each able to fail.

- acks=all with two of three replicas gone: nothing is acknowledged while they are gone, and
  everything acknowledged is found once when they are back. In the same test the negative
  control: acks=1 with an unclean leader election loses acknowledged records, and the checker
  must say so (a checker that cannot see loss proves nothing).
- A hard bounce as in Kafka's replication tests: the leader of the most partitions is killed
  with ``kill -9`` and kept down for 20 s; leadership must move, and nothing acknowledged is
  lost or doubled.
- A paused leader: SIGSTOP past the request timeout, then SIGCONT, a zombie that wakes up
  believing it leads; nothing acknowledged is lost or doubled.
- A leader cut off from its followers (replication runs through the cluster's fault relay):
  once they drop out of the ISR, nothing is acknowledged; after the heal nothing is missing.
- A "possibly written" replay: the link stalls for longer than ``delivery_timeout_ms`` with
  requests on it, then heals with those requests still in the proxy. The producer goes on under
  a new epoch; no acknowledged record is in the log twice, and ids rise in every partition.

Every run prints the table: offered | acknowledged | found | duplicated | lost | failed
(definite) | indeterminate | faults. Records are read back with confluent-kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AIOKafkaNewTopic
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
)
from faults import cluster
from faults.proxy import Fault, FaultProxy
from faults.workload import OUTCOME_HEADER, Ledger, ReadBack, outcome_row, read_back, wait_until

from aioaccum import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

ADMIN_TIMEOUT_S = 30.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


async def topic_config(bootstrap: str, topic: str, name: str) -> str:
    """A topic setting as the broker has it (not as the test asked for it)."""

    def describe() -> str:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = _admin(bootstrap)  # kept alive until the answer is in
        [future] = admin.describe_configs([resource]).values()
        entries = future.result(timeout=ADMIN_TIMEOUT_S)
        return str(entries[name].value)

    return await asyncio.to_thread(describe)


async def partition_state(bootstrap: str, topic: str) -> dict[str, object]:
    """Leader, replicas and ISR of partition 0 of ``topic``, from a metadata request."""
    [partition] = [p for p in await cluster._partition_metadata(bootstrap, topic)
                   if p["partition"] == 0]
    return partition


async def poll_until(check: object, *, timeout: float, what: str) -> None:
    """Await ``check()`` (a coroutine function returning bool) until true, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await check():  # type: ignore[operator]
                return
        except Exception as exc:  # a node just killed or started refuses for a while
            logging.getLogger(__name__).debug("%s: not yet (%r)", what, exc)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def restore(nodes: tuple[int, ...] = (1, 2, 3)) -> None:
    """Start every node that is down, together: the cluster is shared with the tests that
    follow."""
    down = [node for node in nodes if cluster.broker_pid(node) is None]
    if down:
        await cluster.start_broker(*down)


def report(ledger: Ledger, found: ReadBack, faults: str) -> str:
    row = outcome_row(ledger, found, faults)
    print(OUTCOME_HEADER)
    print(row)
    return f"{row}; errors {dict(ledger.errors)} {ledger.samples}; {found}"


@contextlib.asynccontextmanager
async def producing(
    bootstrap: str, topic: str, *, rate: float, **settings: Any
) -> AsyncIterator[Ledger]:
    """Produce ``topic``'s records at ``rate`` per second (acks=all, idempotence on) while the
    body injects its fault; afterwards every node that is down is started again."""
    ledger = Ledger()
    stop = asyncio.Event()
    try:
        async with Producer(
            bootstrap, acks="all", enable_idempotence=True, **settings
        ) as producer:
            task = asyncio.create_task(
                ledger.produce(producer, topic, rate=rate, stop=stop.is_set)
            )
            try:
                yield ledger
            finally:
                stop.set()
                await task
    finally:
        await restore()


async def check(
    bootstrap: str, topic: str, ledger: Ledger, faults: str, *, floor: int, strict: bool = True
) -> str:
    """Read ``topic`` back and hold it against ``ledger``: nothing acknowledged lost, doubled,
    moved or reordered, no definite failure in the log, at least ``floor`` acknowledged and,
    ``strict``, no record failed at all. Returns the summary for further assertions."""
    assert await ledger.settle() == 0
    found = await read_back(bootstrap, topic, ledger)
    summary = report(ledger, found, faults)
    assert ledger.acked >= floor, summary
    if strict:
        assert ledger.failed == ledger.indeterminate == ledger.not_sent == 0, summary
    assert not ledger.untyped, summary
    assert found.clean, summary
    assert found.duplicated_acked == 0, summary
    assert ledger.check_ack_order() == 0, summary
    return summary


async def replicated_topic(topic_factory: TopicFactory, bootstrap: str, partitions: int) -> str:
    """A topic with replication factor 3 and min.insync.replicas 2, as the broker has it."""
    topic = await topic_factory(
        partitions=partitions, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    assert await topic_config(bootstrap, topic, "min.insync.replicas") == "2"
    return topic




# --- acks=all, with a negative control


@pytest.mark.timeout(900)
async def test_acks_all_acknowledges_nothing_without_min_insync_replicas_and_the_checker_sees_loss(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await replicated_topic(topic_factory, kafka_bootstrap, 1)
    state = await partition_state(kafka_bootstrap, topic)
    assert len(state["replicas"]) == 3  # type: ignore[arg-type]
    leader = int(state["leader"])  # type: ignore[call-overload]
    followers = tuple(n for n in (1, 2, 3) if n != leader)

    settings = {"request_timeout_ms": 5000, "delivery_timeout_ms": 300_000}
    async with producing(kafka_bootstrap, topic, rate=200, **settings) as ledger:
        await wait_until(lambda: ledger.acked >= 500, timeout=60)
        for node in followers:
            await cluster.stop_broker(node)
        # A request the followers had fetched before dying may still be answered.
        await asyncio.sleep(2.0)
        acked_when_gone, offered_when_gone = ledger.acked, ledger.offered
        await asyncio.sleep(10.0)  # the fault: two of three replicas gone for 10 s
        acked_while_gone = ledger.acked - acked_when_gone
        offered_while_gone = ledger.offered - offered_when_gone
        await restore(followers)
        await cluster.wait_fully_replicated(kafka_bootstrap, topic, timeout=180)
        resumed_at = ledger.acked
        await wait_until(lambda: ledger.acked >= resumed_at + 500, timeout=120)
    summary = await check(
        kafka_bootstrap, topic, ledger, f"followers {followers} of leader {leader} kill -9 "
        f"for 12 s ({acked_while_gone} of {offered_while_gone} acknowledged meanwhile)",
        floor=1500,
    )
    assert offered_while_gone > 1000, summary  # records kept coming while they were gone
    assert acked_while_gone == 0, summary

    # The negative control: acks=1, and a replica that missed records elected uncleanly.
    lost = await _acks_one_with_unclean_election(kafka_bootstrap)
    print(f"negative control (acks=1, unclean election): {lost} acknowledged record(s) lost")
    assert lost > 0, "the checker did not see the loss an unclean election must cause"


async def _acks_one_with_unclean_election(bootstrap: str) -> int:
    """Write with acks=1 to a leader whose only follower is down, kill the leader, elect the
    follower uncleanly; returns how many acknowledged records the checker found lost."""
    first, second = 2, 3  # node 1 stays up throughout, so the controllers keep a quorum
    topic = f"aioaccum-unclean-{int(time.time() * 1000)}"

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([
            AIOKafkaNewTopic(
                topic,
                num_partitions=-1,
                replication_factor=-1,
                replica_assignments={0: [first, second]},
                topic_configs={
                    "unclean.leader.election.enable": "true",
                    "min.insync.replicas": "1",
                },
            )
        ])
        assert all(e[1] == 0 for e in response.topic_errors), response
    finally:
        await admin.close()
    await cluster.wait_fully_replicated(bootstrap, topic)
    assert await topic_config(bootstrap, topic, "unclean.leader.election.enable") == "true"
    ledger = Ledger()
    try:
        async with Producer(bootstrap, acks=1, enable_idempotence=False, linger_ms=0) as producer:
            await ledger.produce(producer, topic, rate=0, stop=lambda: False, limit=200)
            await producer.flush(timeout=60)
            await cluster.stop_broker(second)
            # Written to the leader alone, and acknowledged: acks=1 waits for no follower.
            await ledger.produce(producer, topic, rate=0, stop=lambda: False, limit=2200)
            await producer.flush(timeout=60)
        assert ledger.acked == 2200, (ledger.errors, ledger.samples)
        await cluster.stop_broker(first)
        await cluster.start_broker(second)

        async def elected() -> bool:
            def elect() -> None:
                partition = ConfluentTopicPartition(topic, 0)
                admin = _admin(bootstrap)
                future = admin.elect_leaders(ElectionType.UNCLEAN, [partition])
                future.result(timeout=ADMIN_TIMEOUT_S)

            try:
                await asyncio.to_thread(elect)
            except Exception as exc:
                logging.getLogger(__name__).debug("unclean election not done yet: %r", exc)
            state = await partition_state(bootstrap, topic)
            leader: int = state["leader"]  # type: ignore[assignment]
            return leader == second

        await poll_until(elected, timeout=120, what=f"an unclean election of node {second}")
        found = await read_back(bootstrap, topic, ledger)
        report(ledger, found, "acks=1; follower down, leader kill -9, unclean election")
        return found.lost
    finally:
        await restore()


# --- hard bounce


@pytest.mark.timeout(600)
async def test_hard_bounce_moves_leadership_and_loses_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await replicated_topic(topic_factory, kafka_bootstrap, 6)
    async with producing(kafka_bootstrap, topic, rate=1000) as ledger:
        await wait_until(lambda: ledger.acked >= 2000, timeout=60)
        leaders = await cluster.leader_counts(kafka_bootstrap, topic)
        victim, led = leaders.most_common(1)[0]
        await cluster.stop_broker(victim)
        down_at = time.monotonic()

        async def moved() -> bool:
            counts = await cluster.leader_counts(kafka_bootstrap, topic)
            return victim not in counts and sum(counts.values()) == 6

        await poll_until(moved, timeout=60, what=f"leadership moving off node {victim}")
        moved_after = time.monotonic() - down_at
        acked_at_move = ledger.acked
        await asyncio.sleep(max(0.0, 20.0 - (time.monotonic() - down_at)))
        acked_while_down = ledger.acked - acked_at_move
        down_for = time.monotonic() - down_at
        await cluster.start_broker(victim)
        await cluster.wait_fully_replicated(kafka_bootstrap, topic, timeout=180)
        back_at = ledger.acked
        await wait_until(lambda: ledger.acked >= back_at + 2000, timeout=120)
    summary = await check(
        kafka_bootstrap, topic, ledger,
        f"kill -9 node {victim} (leader of {led}/6) for {down_for:.0f} s, "
        f"leadership moved in {moved_after:.1f} s",
        floor=10_000,
    )
    assert down_for >= 20.0, summary
    assert acked_while_down > 1000, summary  # the other two kept serving with 2 in sync


# --- possibly written


@pytest.mark.timeout(300)
async def test_requests_stalled_past_the_delivery_timeout_are_never_written_twice(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await replicated_topic(topic_factory, kafka_bootstrap, 3)
    caplog.set_level(logging.INFO, logger="aioaccum._runtime.sender")
    settings = {"linger_ms": 5, "request_timeout_ms": 2000, "delivery_timeout_ms": 6000}
    async with (
        FaultProxy.for_cluster(await cluster.cluster_ports()) as proxy,
        producing(proxy.bootstrap, topic, rate=1000, **settings) as ledger,
    ):
        await wait_until(lambda: ledger.acked >= 1000, timeout=60)
        # Requests on the wire stay in the proxy: after the heal they reach the broker long
        # after their records were reported failed.
        proxy.set_fault(Fault.stall())
        await wait_until(lambda: ledger.indeterminate > 0, timeout=60)
        await asyncio.sleep(2.0)  # more of them expire while the link is still down
        proxy.clear()
        healed_at = ledger.acked
        await wait_until(lambda: ledger.acked >= healed_at + 3000, timeout=120)
    summary = await check(
        kafka_bootstrap, topic, ledger,
        "stall of every link past delivery_timeout_ms, then heal", floor=4000, strict=False,
    )
    bumps = [r.getMessage() for r in caplog.records if "goes on with epoch" in r.getMessage()]
    assert bumps, summary  # the producer went on under a new epoch, not a new producer id
    assert ledger.indeterminate > 0, summary


# --- a paused leader


@pytest.mark.timeout(600)
async def test_a_leader_paused_past_the_request_timeout_loses_nothing_when_it_wakes(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await replicated_topic(topic_factory, kafka_bootstrap, 6)
    paused: int | None = None
    try:
        async with producing(
            kafka_bootstrap, topic, rate=1000, request_timeout_ms=5000
        ) as ledger:
            await wait_until(lambda: ledger.acked >= 2000, timeout=60)
            leaders = await cluster.leader_counts(kafka_bootstrap, topic)
            victim, led = leaders.most_common(1)[0]
            paused = cluster.broker_pid(victim)
            assert paused is not None
            acked_at_pause = ledger.acked
            os.kill(paused, signal.SIGSTOP)  # a zombie: connections open, nothing answers
            await asyncio.sleep(15.0)  # three request timeouts; the controller fences it
            acked_while_paused = ledger.acked - acked_at_pause
            os.kill(paused, signal.SIGCONT)
            paused = None
            await cluster.wait_fully_replicated(kafka_bootstrap, topic, timeout=180)
            woke_at = ledger.acked
            await wait_until(lambda: ledger.acked >= woke_at + 2000, timeout=120)
    finally:
        if paused is not None:
            os.kill(paused, signal.SIGCONT)
    # Requests to a paused leader get no answer: their batches are possibly written. Should an
    # epoch bump follow, those still queued fail as indeterminate rather than risk a second copy;
    # nothing may fail definitely.
    summary = await check(
        kafka_bootstrap, topic, ledger,
        f"SIGSTOP node {victim} (leader of {led}/6) for 15 s ({acked_while_paused} "
        "acknowledged meanwhile), then SIGCONT",
        floor=8000,
        strict=False,
    )
    assert ledger.failed == ledger.not_sent == 0, summary


# --- a leader cut off from its followers


@pytest.mark.timeout(600)
async def test_a_leader_cut_off_from_its_followers_acknowledges_nothing_and_loses_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    # Fails here, loudly, when the cluster's replication does not go through the relay.
    await cluster.kafka_script("replication", "heal")
    topic = await replicated_topic(topic_factory, kafka_bootstrap, 1)
    state = await partition_state(kafka_bootstrap, topic)
    leader = int(state["leader"])  # type: ignore[call-overload]
    settings = {"request_timeout_ms": 5000, "delivery_timeout_ms": 300_000}
    async with producing(kafka_bootstrap, topic, rate=200, **settings) as ledger:
        await wait_until(lambda: ledger.acked >= 500, timeout=60)
        # Clients and controllers still reach the leader; its followers do not.
        await cluster.kafka_script("replication", "stall", str(leader))
        try:
            await asyncio.sleep(2.0)  # answers the followers fetched before the cut
            acked_at_cut = ledger.acked
            cut_at = time.monotonic()

            # After replica.lag.time.max.ms (30 s), at the leader's next check (every 15 s),
            # both followers drop out of the ISR; then acks=all writes are refused
            # (NOT_ENOUGH_REPLICAS). Until then they wait for followers that never fetch.
            async def alone() -> bool:
                state = await partition_state(kafka_bootstrap, topic)
                return state["isr"] == [leader]

            await poll_until(alone, timeout=120, what=f"the ISR shrinking to leader {leader}")
            await asyncio.sleep(5.0)  # and writes are refused for a while
            cut_for = time.monotonic() - cut_at + 2.0
            isr_during_cut = (await partition_state(kafka_bootstrap, topic))["isr"]
            acked_during_cut = ledger.acked - acked_at_cut
        finally:
            await cluster.kafka_script("replication", "heal")
        await cluster.wait_fully_replicated(kafka_bootstrap, topic, timeout=180)
        healed_at = ledger.acked
        await wait_until(lambda: ledger.acked >= healed_at + 500, timeout=120)
    summary = await check(
        kafka_bootstrap, topic, ledger,
        f"leader {leader} cut off from its followers for {cut_for:.0f} s (ISR then "
        f"{isr_during_cut})",
        floor=1000,
    )
    assert isr_during_cut == [leader], summary  # the cut took: the followers fell out
    assert acked_during_cut == 0, summary
