"""The topic changes under a running producer: partitions added, topic deleted and recreated,
replicas reassigned.

Each test produces continuously (acks=all, idempotence on) records whose values carry a
send-order id (:class:`~faults.workload.Ledger`) while an admin request changes the topic, then
reads the topic back (:func:`~faults.workload.read_back`): nothing acknowledged may be lost,
doubled, misplaced or reordered, and every record must end, acknowledged or with a typed error,
within bounds taken from the producer's settings.

- Partitions added (3 -> 6): the producer sees them within about ``metadata_max_age_ms`` (set to
  2 s here, against a default of 5 minutes), after which keyless records and records naming a new
  partition land there.
- Deleted and recreated with fewer partitions (6 -> 2): what was buffered or in flight for the old
  topic is acknowledged or fails typed within ``delivery_timeout_ms``; once the producer knows the
  new topic, ``partition=5`` is refused at ``send()`` naming the partition count, and every
  record goes to partition 0 or 1. The new topic is held against what it must contain: records
  sent from its creation on, in order; none acknowledged by the old topic. Records sent while
  the topic was being replaced may be in either topic, and their order against later records
  is only reported: the partition they were meant for no longer exists.
- Every partition's leader and one replica moved to another broker, twice
  (AlterPartitionReassignments, which aiokafka's admin client lacks, sent as a request).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest
from aiokafka.protocol.metadata import MetadataRequest
from faults import cluster
from faults.workload import (
    ACKED,
    FAILED,
    INDETERMINATE,
    NOT_SENT,
    OUTCOME_HEADER,
    Ledger,
    ReadBack,
    outcome_row,
    read_back,
    wait_until,
)

from aioaccum import ConfigError, FutureRecordMetadata, Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.three_brokers]

RATE = 1000  # records per second: enough to have batches in flight, light on 2 shared cores
WARM_UP_ACKS = 1000  # acknowledged before the change, so it hits a producer in full flow
AFTER_CHANGE_S = 2.0  # producing on once the change is seen, so the new layout is used
METADATA_MAX_AGE_MS = 2000
# Up to two refreshes (the first may reach a broker that has not applied the change yet), plus
# the records' own round trip on a busy machine. The default metadata_max_age_ms is 300000.
SEEN_WITHIN_S = 3 * METADATA_MAX_AGE_MS / 1000 + 4.0
REQUEST_TIMEOUT_MS = 5000
DELIVERY_TIMEOUT_MS = 12000
DELIVERY_MARGIN_S = 5.0
ADMIN_TIMEOUT_S = 30.0
LOGGERS = ("aioaccum", "aiokafka")
# Warnings and errors from the producer and aiokafka during a whole test: a condition said once
# (per node, per topic, or per interval), not once per retry or per record.
MAX_LOG_LINES = 40
REASSIGNMENTS = 2  # each moves every partition's leader: two leader changes per partition


@dataclass
class RoutedLedger(Ledger):
    """A :class:`Ledger` whose records may carry a key or name a partition, and which notes
    when each record was acknowledged (monotonic seconds)."""

    requested: dict[int, int] = field(default_factory=dict)
    """Record id -> the partition its send() named."""
    keyed: set[int] = field(default_factory=set)
    acked_at: dict[int, float] = field(default_factory=dict)

    async def send_to(
        self,
        producer: Producer,
        topic: str,
        *,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """:meth:`Ledger.send`, noting whether the record had a key or named a partition."""
        rid = self.offered
        if partition is not None:
            self.requested[rid] = partition
        if key is not None:
            self.keyed.add(rid)
        await self.send(producer, topic, key=key, partition=partition)

    def _done(self, rid: int, fut: FutureRecordMetadata) -> None:
        if rid not in self.acked_at and not fut.cancelled() and fut.exception() is None:
            self.acked_at[rid] = time.monotonic()
        super()._done(rid, fut)

    async def produce_routed(
        self,
        producer: Producer,
        topic: str,
        route: Callable[[int], tuple[bytes | None, int | None]],
        *,
        stop: Callable[[], bool],
    ) -> None:
        """:meth:`Ledger.produce` at :data:`RATE`, each record's key and partition given by
        ``route(record_id)``. One task sends every record, so ids follow the order of appends
        (two tasks could each take an id and append in the other order)."""
        started = time.monotonic()
        while not stop():
            due = int((time.monotonic() - started) * RATE) - self.offered
            if due <= 0:
                await asyncio.sleep(0.01)
                continue
            for _ in range(due):
                key, partition = route(self.offered)
                await self.send_to(producer, topic, key=key, partition=partition)
            await asyncio.sleep(0)

    def acked_in(self, partition: int, *, since: float = 0.0, explicit: bool = False) -> int:
        """Records acknowledged in ``partition`` at or after ``since``: keyless ones, or those
        that named it (``explicit``)."""
        return sum(
            1
            for rid, at in self.acked_at.items()
            if at >= since
            and self.partitions[rid] == partition
            and (rid in self.requested) == explicit
            and rid not in self.keyed
        )

    def acked_in_each(self, partitions: Iterable[int], *, since: float) -> bool:
        """Whether keyless records were acknowledged in every one of ``partitions`` at or
        after ``since``."""
        return all(self.acked_in(p, since=since) for p in partitions)

    def first_ack_in(self, partition: int, *, explicit: bool) -> float | None:
        times = [
            at
            for rid, at in self.acked_at.items()
            if self.partitions[rid] == partition
            and (rid in self.requested) == explicit
            and rid not in self.keyed
        ]
        return min(times, default=None)


def _report(ledger: Ledger, found: ReadBack, faults: str, extra: str = "") -> str:
    summary = (
        f"offered {ledger.offered}, acked {ledger.acked}, failed {dict(ledger.errors)}, not sent "
        f"{dict(ledger.send_errors)}, untyped {dict(ledger.untyped)}, pending {ledger.pending}; "
        f"{found}; samples {ledger.samples}; {extra}"
    )
    print(summary)
    print(OUTCOME_HEADER)
    print(outcome_row(ledger, found, faults))
    return summary


def _log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.split(".")[0] in LOGGERS
    ]


# --- what each broker says about the topic


class Brokers:
    """Metadata as every broker has it (a broker applies a change a moment after the
    controller answered the admin request), and admin requests."""

    def __init__(self, bootstrap: str) -> None:
        self._client = AIOKafkaClient(bootstrap_servers=bootstrap)
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)

    async def __aenter__(self) -> Brokers:
        await self._client.bootstrap()
        await self._admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._admin.close()
        await self._client.close()

    @property
    def admin(self) -> AIOKafkaAdminClient:
        return self._admin

    async def partitions(self, topic: str) -> list[dict[int, dict[str, Any]]]:
        """Per broker: partition number -> its metadata (empty when the topic is unknown)."""
        views = []
        for broker in sorted(b.nodeId for b in self._client.cluster.brokers()):
            response = await self._client.send(broker, MetadataRequest([topic]))
            views.append(
                {
                    int(p["partition"]): p
                    for t in response.to_object()["topics"]
                    if t["error_code"] == 0
                    for p in t["partitions"]
                }
            )
        return views

    async def wait(
        self,
        topic: str,
        holds: Callable[[dict[int, dict[str, Any]]], bool],
        *,
        what: str,
        timeout: float = ADMIN_TIMEOUT_S,
    ) -> dict[int, dict[str, Any]]:
        """Until ``holds`` is true of every broker's view; returns the first broker's view."""
        deadline = time.monotonic() + timeout
        while True:
            views = await self.partitions(topic)
            if all(holds(view) for view in views):
                return views[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {what} not seen within {timeout:.0f} s: {views}")
            await asyncio.sleep(0.1)

    async def reassign(self, topic: str, replicas: dict[int, list[int]]) -> None:
        """AlterPartitionReassignments (KIP-455), which aiokafka's admin client lacks."""
        request = AlterPartitionReassignmentsRequest(
            int(ADMIN_TIMEOUT_S * 1000),
            [(topic, [(p, nodes, {}) for p, nodes in sorted(replicas.items())], {})],
            {},
        )
        response = (await self._client.send(self._client.get_random_node(), request)).to_object()
        errors = [
            (p["partition_index"], p["error_code"], p["error_message"])
            for t in response["responses"]
            for p in t["partitions"]
            if p["error_code"]
        ]
        assert response["error_code"] == 0, response
        assert not errors, response


def _leaders_everywhere(count: int) -> Callable[[dict[int, dict[str, Any]]], bool]:
    return lambda view: len(view) == count and all(p["leader"] >= 0 for p in view.values())


async def _keep_trying(attempt: Callable[[], Awaitable[None]], *, what: str) -> None:
    """An admin request the controller may refuse for a moment (a topic still being deleted)."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        try:
            await attempt()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} kept failing for {ADMIN_TIMEOUT_S:.0f} s") from exc
            await asyncio.sleep(0.2)


def _producer(bootstrap: str, **settings: Any) -> Producer:
    return Producer(
        bootstrap,
        acks="all",
        enable_idempotence=True,
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
        **settings,
    )


# --- partitions added


@pytest.mark.timeout(180)
async def test_added_partitions_get_records_within_metadata_max_age(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await topic_factory(partitions=3, replication_factor=3)
    ledger = RoutedLedger()
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING)
    new = (3, 4, 5)
    refused_before = ""
    changed_at = float("inf")

    def route(rid: int) -> tuple[bytes | None, int | None]:
        # Keyless, but once the partitions were added, every 20th record names a new one:
        # refused at send() (ConfigError, noted as not sent) until the producer knows it.
        if time.monotonic() >= changed_at and rid % 20 == 0:
            return None, new[rid // 20 % len(new)]
        return None, None

    # Small batches make the sticky partition switch often, so that keyless records reach
    # each new partition within a fraction of the bound.
    async with Brokers(kafka_bootstrap) as brokers, _producer(
        kafka_bootstrap, batch_size=4096
    ) as producer:
        with pytest.raises(ConfigError, match=r"partitions 0\.\.2") as refused:
            await producer.send(topic, b"not sent", partition=3)
        refused_before = str(refused.value)
        producing = asyncio.create_task(
            ledger.produce_routed(producer, topic, route, stop=stop.is_set)
        )
        try:
            await wait_until(lambda: ledger.acked >= WARM_UP_ACKS, timeout=60)
            await brokers.admin.create_partitions({topic: NewPartitions(total_count=6)})
            changed_at = time.monotonic()
            await brokers.wait(topic, _leaders_everywhere(6), what="6 partitions with leaders")

            def all_new_partitions_used() -> bool:
                return all(
                    ledger.acked_in(p, since=changed_at)
                    and ledger.acked_in(p, since=changed_at, explicit=True)
                    for p in new
                )

            await wait_until(all_new_partitions_used, timeout=SEEN_WITHIN_S + 10)
            await asyncio.sleep(AFTER_CHANGE_S)
        finally:
            stop.set()
            await producing
    still_pending = await ledger.settle()
    found = await read_back(kafka_bootstrap, topic, ledger)
    keyless_after = {
        p: round(t - changed_at, 2)
        for p in new
        if (t := ledger.first_ack_in(p, explicit=False)) is not None
    }
    explicit_after = {
        p: round(t - changed_at, 2)
        for p in new
        if (t := ledger.first_ack_in(p, explicit=True)) is not None
    }
    per_partition = Counter(ledger.partitions[rid] for rid in ledger.acked_at)
    logs = _log_lines(caplog)
    summary = _report(
        ledger,
        found,
        "partitions 3 -> 6",
        f"first ack after the change, keyless {keyless_after}, explicit {explicit_after}; acked "
        f"per partition {dict(sorted(per_partition.items()))}; refused before: "
        f"{refused_before!r}; {len(logs)} log lines {logs[:10]}",
    )
    assert still_pending == 0, summary
    assert not ledger.untyped, summary
    # Nothing failed: adding partitions is no reason for any record to.
    assert ledger.failed == ledger.indeterminate == 0, summary
    # The only refusals: send(partition=3..5) before the producer knew those partitions.
    assert set(ledger.send_errors) <= {"ConfigError"}, summary
    assert all(
        ledger.requested.get(rid) in new
        for rid, state in enumerate(ledger.states)
        if state == NOT_SENT
    ), summary
    # Keyless and explicit records both reached every new partition, soon after the change.
    assert set(keyless_after) == set(new), summary
    assert set(explicit_after) == set(new), summary
    assert max(*keyless_after.values(), *explicit_after.values()) <= SEEN_WITHIN_S, summary
    assert found.clean, summary
    assert found.duplicated == 0, summary
    assert ledger.check_ack_order() == 0, summary
    assert len(logs) <= MAX_LOG_LINES, summary


# --- deleted and recreated


def _expected_in_recreated(
    ledger: RoutedLedger, acked_before_delete: bytes, first_after: int
) -> Ledger:
    """The ledger as the recreated topic must show it.

    Records acknowledged before the delete are in the old topic, which is gone: finding one in
    the new topic would mean it was written twice, so they count as failed (never to be found).
    Records offered from ``first_after`` on (the new topic existed on every broker) stand as
    they are. Records between, acknowledged during the churn, may have been written to either
    topic: indeterminate.
    """
    states = bytearray(ledger.states)
    for rid in range(min(first_after, len(states))):
        if rid < len(acked_before_delete) and acked_before_delete[rid] == ACKED:
            states[rid] = FAILED
        elif states[rid] == ACKED:
            states[rid] = INDETERMINATE
    return Ledger(
        value_size=ledger.value_size,
        states=states,
        partitions=array("i", ledger.partitions),
        offsets=array("q", ledger.offsets),
    )


@pytest.mark.timeout(180)
async def test_deleted_and_recreated_topic_ends_every_record_and_uses_only_new_partitions(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await topic_factory(partitions=6, replication_factor=3)
    ledger = RoutedLedger()
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    keys = [b"key-%d" % i for i in range(50)]

    known_at = float("inf")

    def route(rid: int) -> tuple[bytes | None, int | None]:
        # Keyless and keyed in turn; once the producer knows the new topic, every 20th record
        # names partition 1.
        if rid % 20 == 0 and time.monotonic() >= known_at:
            return None, 1
        return (keys[rid % len(keys)] if rid % 2 else None), None

    refused = ""
    async with Brokers(kafka_bootstrap) as brokers, _producer(
        kafka_bootstrap,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_block_ms=60000,
    ) as producer:
        producing = asyncio.create_task(
            ledger.produce_routed(producer, topic, route, stop=stop.is_set)
        )
        try:
            await wait_until(lambda: ledger.acked >= WARM_UP_ACKS, timeout=60)
            acked_before_delete = bytes(ledger.states)
            await brokers.admin.delete_topics([topic])
            deleted_at = time.monotonic()
            await brokers.wait(topic, lambda view: not view, what="the topic gone")

            async def recreate() -> None:
                response = await brokers.admin.create_topics([NewTopic(topic, 2, 3)])
                [(_, code, message)] = [tuple(e) for e in response.topic_errors]
                assert code == 0, f"create_topics: error {code} {message}"

            await _keep_trying(recreate, what="recreating the topic")
            await brokers.wait(topic, _leaders_everywhere(2), what="2 partitions with leaders")
            recreated_at = time.monotonic()
            first_after = ledger.offered

            async with asyncio.timeout(SEEN_WITHIN_S):
                while True:
                    if len(await producer.partitions_for(topic)) == 2:
                        break
                    await asyncio.sleep(0.05)
            known_at = time.monotonic()
            known_from = ledger.offered
            with pytest.raises(ConfigError, match=r"partitions 0\.\.1") as refusal:
                await producer.send(topic, b"not sent", partition=5)
            refused = str(refusal.value)
            await asyncio.sleep(AFTER_CHANGE_S)
        finally:
            stop.set()
            await producing
        stopped_at = time.monotonic()
        # Every record was offered before stopped_at: each ends by its delivery timeout.
        await wait_until(
            lambda: ledger.pending == 0, timeout=DELIVERY_TIMEOUT_MS / 1000 + DELIVERY_MARGIN_S
        )
        ended_in = time.monotonic() - stopped_at
    still_pending = await ledger.settle()
    expected = _expected_in_recreated(ledger, acked_before_delete, first_after)
    found = await read_back(kafka_bootstrap, topic, expected)
    after_known = range(known_from, ledger.offered)
    partitions_after = Counter(ledger.partitions[rid] for rid in after_known)
    during = Counter(
        ("acked" if ledger.states[rid] == ACKED else "not acked")
        for rid in range(len(acked_before_delete), first_after)
    )
    logs = _log_lines(caplog)
    bumps = sum("goes on with epoch" in r.getMessage() for r in caplog.records)
    summary = _report(
        ledger,
        found,
        "topic deleted (6 partitions) and recreated (2)",
        f"recreated {recreated_at - deleted_at:.1f} s after the delete, producer knew it "
        f"{known_at - recreated_at:.1f} s later; offered before the delete "
        f"{len(acked_before_delete)}, during {first_after - len(acked_before_delete)} "
        f"({dict(during)}), after {ledger.offered - first_after}; partitions of records "
        f"offered once the producer knew {dict(partitions_after)}; all ended {ended_in:.1f} s "
        f"after the last send; {bumps} epoch bump(s); read-back order violations (records "
        f"sent while the topic was being replaced included) {found.order_violations}; "
        f"refused: {refused!r}; {len(logs)} log lines {logs[:10]}",
    )
    assert still_pending == 0, summary
    assert not ledger.untyped, summary
    # Records buffered or in flight for the old topic's partitions 2..5 cannot be delivered.
    assert set(ledger.errors) <= {"DeliveryTimeoutError", "BrokerError"}, summary
    assert set(ledger.send_errors) <= {"ProducerTimeoutError"}, summary
    # Once the producer knew the new topic, every record went to partition 0 or 1 and arrived.
    assert all(ledger.states[rid] == ACKED for rid in after_known), summary
    assert set(partitions_after) == {0, 1}, summary
    assert all(
        ledger.partitions[rid] in (0, 1)
        for rid in range(first_after, ledger.offered)
        if ledger.states[rid] == ACKED
    ), summary
    # Against the new topic: everything acknowledged from the recreation on, exactly once and
    # where its acknowledgement said; nothing acknowledged by the old topic written again.
    assert found.lost == 0, summary
    assert found.duplicated == 0, summary
    assert found.misplaced == 0, summary
    assert found.found_failed == 0, summary
    assert found.foreign == 0, summary
    assert found.found > 0, summary
    # Ids rise with offsets in each partition of the new topic (the old one's offsets restart
    # there, so only the records it must hold are compared).
    assert expected.check_ack_order() == 0, summary
    assert len(logs) <= MAX_LOG_LINES, summary


# --- reassigned


async def _move_every_partition(brokers: Brokers, topic: str) -> str:
    """Reassign each partition of ``topic`` (replication factor 2 on 3 brokers): its leader
    leaves the replica set and the broker that had no replica joins it, first in the list.
    Waits until every broker shows the new replicas all in sync, led by the newcomer; returns
    what moved and how long it took."""
    before = await brokers.wait(topic, _leaders_everywhere(6), what="6 leaders")
    target: dict[int, list[int]] = {}
    for p, meta in before.items():
        [kept] = [n for n in meta["replicas"] if n != meta["leader"]]
        [newcomer] = {1, 2, 3} - set(meta["replicas"])
        target[p] = [newcomer, kept]
    started = time.monotonic()
    await brokers.reassign(topic, target)

    def done(view: dict[int, dict[str, Any]]) -> bool:
        return len(view) == len(target) and all(
            view[p]["replicas"] == target[p]
            and sorted(view[p]["isr"]) == sorted(target[p])
            and view[p]["leader"] == target[p][0]
            for p in target
        )

    await brokers.wait(topic, done, what="the reassignment", timeout=60)
    moves = ", ".join(
        f"{p}: {before[p]['replicas']} led by {before[p]['leader']} -> {target[p]}"
        for p in sorted(target)
    )
    return f"[{moves}] in {time.monotonic() - started:.1f} s"


@pytest.mark.timeout(180)
async def test_reassigned_replicas_and_leaders_lose_double_and_reorder_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await cluster.check_managed(kafka_bootstrap)
    topic = await topic_factory(
        partitions=6, replication_factor=2, configs={"min.insync.replicas": "2"}
    )
    ledger = RoutedLedger()
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING)
    rounds: list[str] = []
    retries = 0.0
    async with Brokers(kafka_bootstrap) as brokers, _producer(kafka_bootstrap) as producer:
        producing = asyncio.create_task(
            ledger.produce(producer, topic, rate=RATE, stop=stop.is_set)
        )
        try:
            await wait_until(lambda: ledger.acked >= WARM_UP_ACKS, timeout=60)
            for _ in range(REASSIGNMENTS):
                rounds.append(await _move_every_partition(brokers, topic))
                moved_at = time.monotonic()
                # Records reach every partition at its new leader before the next move.
                await wait_until(
                    functools.partial(ledger.acked_in_each, range(6), since=moved_at),
                    timeout=30,
                )
            await asyncio.sleep(AFTER_CHANGE_S)
        finally:
            stop.set()
            await producing
        retries = producer.metrics().get("record-retry-total", 0.0)
    still_pending = await ledger.settle()
    found = await read_back(kafka_bootstrap, topic, ledger)
    logs = _log_lines(caplog)
    summary = _report(
        ledger,
        found,
        f"{len(rounds)} reassignments, each moving every partition's leader and one replica",
        f"moves {rounds}; records retried {retries:.0f}; {len(logs)} log lines {logs[:10]}",
    )
    assert len(rounds) == REASSIGNMENTS, summary
    assert still_pending == 0, summary
    assert not ledger.untyped, summary
    assert ledger.failed == ledger.indeterminate == ledger.not_sent == 0, summary
    assert ledger.acked == ledger.offered, summary
    assert found.clean, summary
    assert found.duplicated == 0, summary
    assert ledger.check_ack_order() == 0, summary
    assert len(logs) <= MAX_LOG_LINES, summary
