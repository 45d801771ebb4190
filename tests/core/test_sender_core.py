"""The sender's rules, with no event loop: a fake ``now``, a static cluster, and the actions.

Each test drives :class:`SenderCore` the way the asyncio shell does (poll, then report what the
broker said) and checks the actions it returns and the state it leaves: h11's way of testing a
protocol without sockets.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import pytest

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import FinalState, ProducerBatch
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.idempotence import MAX_EPOCH, TransactionManager
from aioaccum._core.kafka_errors import RULES, Decision, Errors, rule_for
from aioaccum._core.lifecycle import IllegalStateTransition
from aioaccum._core.metrics import ProducerMetrics
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._core.sender_core import (
    EpochBumped,
    InitProducerId,
    Produce,
    RefreshMetadata,
    SenderCore,
    SenderState,
    Wait,
)
from aioaccum._runtime.pool import BufferPool
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    DeliveryTimeoutError,
    ProducerClosedError,
    ProducerFailedError,
    ProducerTimeoutError,
)

BATCH = 1024
T0 = 1000.0
TS = 1_700_000_000_000
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
CLUSTER = StaticCluster.uniform({"t": 2}, nodes=2)  # t-0 -> node 0, t-1 -> node 1


@dataclass(frozen=True)
class Answer:
    error: AioAccumError | None = None
    base_offset: int = 0
    log_append_time: int = -1


def broker(
    code: Errors, *, retriable: bool = False, invalid_metadata: bool = False
) -> BrokerError:
    return BrokerError(
        code.name, errno=code, retriable=retriable, invalid_metadata=invalid_metadata
    )


class Harness:
    """A core over a real accumulator and pool, with time in the test's hands."""

    def __init__(
        self,
        *,
        idempotent: bool = False,
        retries: int = 10,
        delivery_timeout: float = 120.0,
        max_in_flight: int = 5,
        linger: float = 0.0,
    ) -> None:
        self.pool = BufferPool(64 * BATCH, BATCH)
        self.txn = TransactionManager() if idempotent else None
        self.acc = RecordAccumulator(
            self.pool,
            batch_size=BATCH,
            linger=linger,
            delivery_timeout=delivery_timeout,
            transaction_manager=self.txn,
        )
        self.metrics = ProducerMetrics(clock=lambda: T0)
        self.core = SenderCore(
            self.acc,
            max_request_size=1 << 20,
            max_in_flight=max_in_flight,
            delivery_timeout=delivery_timeout,
            retries=retries,
            retry_backoff=0.1,
            retry_backoff_max=1.0,
            transaction_manager=self.txn,
            metrics=self.metrics,
            rng=random.Random(7),
        )

    def append(self, tp: TopicPartition, now: float, n: int = 1) -> list[FutureRecordMetadata]:
        value = b"v" * 100
        bound = estimate_size_in_bytes_upper_bound(b"k", value, [])
        futures = []
        for _ in range(n):
            appended = self.acc.append(
                tp.topic, tp.partition, TS, b"k", value, [], bound, [0, 1], CLUSTER, now
            )
            assert not isinstance(appended, BufferRequest)
            assert isinstance(appended, FutureRecordMetadata)
            futures.append(appended)
        return futures

    def poll(self, now: float, cluster: StaticCluster = CLUSTER) -> list[object]:
        actions: list[object] = list(self.core.poll(cluster, now))
        assert isinstance(actions[-1], Wait), "the last action is always a Wait"
        return actions

    def produce(self, now: float) -> list[Produce]:
        return [a for a in self.poll(now) if isinstance(a, Produce)]

    def one_batch(self, tp: TopicPartition, now: float) -> tuple[int, ProducerBatch]:
        [request] = self.produce(now)
        [batch] = request.batches
        assert batch.tp == tp
        return request.node, batch

    def held(self) -> int:
        stats = self.pool.statistics()
        return stats.total - stats.available


def stamp(batch: ProducerBatch) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) as written in the batch's v2 header."""
    producer_id, epoch, sequence = struct.unpack_from(">qhi", batch.records(), 43)
    return producer_id, epoch, sequence


# --- the table


def test_every_named_code_has_a_rule() -> None:
    assert set(RULES) == set(Errors)


@pytest.mark.parametrize(
    ("code", "decision", "refresh"),
    [
        (Errors.NONE, Decision.SUCCEED, False),
        (Errors.DUPLICATE_SEQUENCE_NUMBER, Decision.SUCCEED, False),
        (Errors.MESSAGE_TOO_LARGE, Decision.SPLIT, False),
        (Errors.NOT_LEADER_OR_FOLLOWER, Decision.RETRY, True),
        (Errors.UNKNOWN_TOPIC_OR_PARTITION, Decision.RETRY, True),
        (Errors.NOT_ENOUGH_REPLICAS, Decision.RETRY, False),
        (Errors.REQUEST_TIMED_OUT, Decision.RETRY, False),
        (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Decision.BUMP_EPOCH, False),
        (Errors.INVALID_PRODUCER_EPOCH, Decision.BUMP_EPOCH, False),
        (Errors.UNKNOWN_PRODUCER_ID, Decision.BUMP_EPOCH, False),
        (Errors.INVALID_REQUIRED_ACKS, Decision.FAIL, False),
        (Errors.TOPIC_AUTHORIZATION_FAILED, Decision.FAIL, False),
        (Errors.RECORD_LIST_TOO_LARGE, Decision.FAIL, False),
    ],
)
def test_rule_per_code(code: Errors, decision: Decision, refresh: bool) -> None:
    rule = rule_for(broker(code))
    assert (rule.decision, rule.refresh_metadata) == (decision, refresh)


def test_codes_outside_the_table_follow_their_flags() -> None:
    assert rule_for(BrokerError("x", errno=9999, retriable=False)).decision is Decision.FAIL
    lost = BrokerError("connection error", retriable=True, invalid_metadata=True)
    assert rule_for(lost).decision is Decision.RETRY
    assert rule_for(lost).refresh_metadata
    assert rule_for(ProducerTimeoutError("request timed out")).decision is Decision.RETRY


@pytest.mark.parametrize(
    ("code", "records", "idempotent", "attempts", "expected"),
    [
        (Errors.MESSAGE_TOO_LARGE, 3, False, 0, Decision.SPLIT),
        (Errors.MESSAGE_TOO_LARGE, 1, False, 0, Decision.FAIL),  # nothing left to split
        (Errors.MESSAGE_TOO_LARGE, 3, False, 10, Decision.SPLIT),  # a split is not a retry
        (Errors.NOT_LEADER_OR_FOLLOWER, 1, False, 0, Decision.RETRY),
        (Errors.NOT_LEADER_OR_FOLLOWER, 1, False, 10, Decision.FAIL),  # retries spent
        (Errors.UNKNOWN_PRODUCER_ID, 1, True, 0, Decision.BUMP_EPOCH),
        (Errors.UNKNOWN_PRODUCER_ID, 1, False, 0, Decision.FAIL),  # no epoch to bump
        (Errors.INVALID_PRODUCER_EPOCH, 1, True, 10, Decision.FAIL),
        (Errors.INVALID_REQUIRED_ACKS, 1, False, 0, Decision.FAIL),
    ],
)
def test_decision_applies_the_batch_limits(
    code: Errors, records: int, idempotent: bool, attempts: int, expected: Decision
) -> None:
    h = Harness(idempotent=idempotent, retries=10)
    h.append(TP0, T0, n=records)
    [batch] = h.acc.drain(CLUSTER, [0], 1 << 20, T0)[0]
    for _ in range(attempts):
        batch.reenqueued(T0, 0.0)
    assert h.core.decide(batch, broker(code), T0) is expected


def test_decision_fails_at_the_delivery_timeout() -> None:
    h = Harness(delivery_timeout=5.0)
    h.append(TP0, T0)
    [batch] = h.acc.drain(CLUSTER, [0], 1 << 20, T0)[0]
    error = broker(Errors.NOT_ENOUGH_REPLICAS)
    assert h.core.decide(batch, error, T0 + 4.9) is Decision.RETRY
    assert h.core.decide(batch, error, T0 + 5.0) is Decision.FAIL


# --- poll


def test_poll_produces_one_request_per_ready_node_and_waits_for_linger() -> None:
    h = Harness(linger=0.05)
    h.append(TP0, T0)
    h.append(TP1, T0)
    [wait] = h.poll(T0 + 0.01)
    assert isinstance(wait, Wait)
    assert wait.timeout == pytest.approx(0.04)
    requests = h.produce(T0 + 0.05)
    assert sorted(r.node for r in requests) == [0, 1]
    assert h.core.in_flight_requests == 2


def test_poll_asks_for_metadata_of_topics_without_a_leader() -> None:
    h = Harness()
    h.append(TP0, T0)
    leaderless = CLUSTER.with_leader(TP0, None)
    actions = h.poll(T0, leaderless)
    assert RefreshMetadata(("t",)) in actions
    assert not [a for a in actions if isinstance(a, Produce)]


def test_node_at_max_in_flight_is_not_drained() -> None:
    h = Harness(max_in_flight=1)
    h.append(TP0, T0)
    h.one_batch(TP0, T0)
    h.append(TP0, T0)
    assert h.produce(T0 + 1) == []  # muted and at its limit until the answer comes


def test_success_completes_records_and_returns_the_buffer() -> None:
    h = Harness()
    futures = h.append(TP0, T0, n=3)
    node, batch = h.one_batch(TP0, T0)
    assert h.held() == BATCH
    actions = h.core.on_produce_response(node, [batch], {TP0: Answer(base_offset=40)}, T0)
    assert actions == []
    assert [f.result().offset for f in futures] == [40, 41, 42]
    assert h.held() == 0
    assert h.core.in_flight_requests == 0
    assert h.metrics.records_sent == 3


def test_leader_moved_retries_after_backoff_and_refreshes_metadata() -> None:
    h = Harness()
    futures = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    error = broker(Errors.NOT_LEADER_OR_FOLLOWER, retriable=True, invalid_metadata=True)
    actions = h.core.on_produce_response(node, [batch], {TP0: Answer(error)}, T0)
    assert actions == [RefreshMetadata(("t",))]
    assert not futures[0].done()
    assert h.produce(T0 + 0.05) == []  # backoff 0.1 s, +-20%
    node, again = h.one_batch(TP0, T0 + 0.2)
    assert again is batch
    assert batch.attempts == 1
    assert h.metrics.record_retries_total == 1


def test_whole_request_lost_retries_every_batch() -> None:
    h = Harness()
    h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    lost = BrokerError("connection error", retriable=True, invalid_metadata=True)
    assert h.core.on_produce_error(node, [batch], lost, T0) == [RefreshMetadata(("t",))]
    assert h.acc.queued_batches(TP0) == 1


def test_message_too_large_splits_and_keeps_each_record_future() -> None:
    h = Harness()
    futures = h.append(TP0, T0, n=4)
    node, batch = h.one_batch(TP0, T0)
    h.core.on_produce_response(
        node, [batch], {TP0: Answer(broker(Errors.MESSAGE_TOO_LARGE))}, T0
    )
    assert h.metrics.splits_total == 1
    assert h.acc.queued_batches(TP0) >= 1
    offset = 0
    while not all(f.done() for f in futures):
        for request in h.produce(T0 + 2):
            for part in request.batches:
                answer = {part.tp: Answer(base_offset=offset)}
                offset += part.record_count
                h.core.on_produce_response(request.node, [part], answer, T0 + 2)
    assert sorted(f.result().offset for f in futures) == [0, 1, 2, 3]
    assert h.held() == 0


def test_fatal_error_fails_records_with_the_broker_error() -> None:
    h = Harness()
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    error = broker(Errors.TOPIC_AUTHORIZATION_FAILED)
    h.core.on_produce_response(node, [batch], {TP0: Answer(error)}, T0)
    assert future.exception() is not None
    assert isinstance(future.exception(), BrokerError)
    assert future.exception().errno == Errors.TOPIC_AUTHORIZATION_FAILED  # type: ignore[union-attr]
    assert batch.final_state is FinalState.FAILED
    assert h.held() == 0


def test_retries_that_reach_the_delivery_timeout_fail_with_the_last_error() -> None:
    h = Harness(delivery_timeout=1.0)
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    error = broker(Errors.NOT_ENOUGH_REPLICAS, retriable=True)
    h.core.on_produce_response(node, [batch], {TP0: Answer(error)}, T0 + 1.0)
    failure = future.exception()
    assert isinstance(failure, DeliveryTimeoutError)
    assert "NOT_ENOUGH_REPLICAS" in str(failure)


def test_queued_batch_expires_at_the_delivery_timeout() -> None:
    h = Harness(delivery_timeout=2.0)
    [future] = h.append(TP0, T0)
    h.poll(T0 + 2.0, CLUSTER.with_leader(TP0, None))
    assert isinstance(future.exception(), DeliveryTimeoutError)
    assert h.held() == 0


def test_in_flight_batch_expires_but_keeps_its_buffer_until_the_answer() -> None:
    h = Harness(delivery_timeout=2.0)
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    wait = h.poll(T0 + 1.0)[-1]
    assert isinstance(wait, Wait)
    # Wakes just past the in-flight deadline (timers fire to the millisecond).
    assert 1.0 < wait.timeout <= 1.002
    h.poll(T0 + 1.9999)
    assert not future.done()  # never before the deadline
    h.poll(T0 + 2.0)
    assert isinstance(future.exception(), DeliveryTimeoutError)
    assert h.held() == BATCH  # the request may still read the buffer
    h.core.on_produce_response(node, [batch], {TP0: Answer(base_offset=5)}, T0 + 3.0)
    assert h.held() == 0


# --- idempotence


def idempotent_started() -> Harness:
    h = Harness(idempotent=True)
    h.append(TP0, T0)
    actions = h.poll(T0)
    assert InitProducerId() in actions  # nothing is drained without a producer id
    assert not [a for a in actions if isinstance(a, Produce)]
    assert h.core.on_producer_id(1000, 0) == 0
    return h


def test_producer_id_comes_first_then_batches_are_stamped() -> None:
    h = idempotent_started()
    _node, batch = h.one_batch(TP0, T0)
    assert stamp(batch) == (1000, 0, 0)


def test_first_batch_of_a_partition_is_alone_in_flight_until_acknowledged() -> None:
    h = idempotent_started()
    node, first = h.one_batch(TP0, T0)
    h.append(TP0, T0)
    assert h.produce(T0) == []  # muted: the broker has no sequence state for us yet
    h.core.on_produce_response(node, [first], {TP0: Answer(base_offset=0)}, T0)
    assert h.txn is not None
    assert h.txn.has_acknowledged(TP0)
    node, second = h.one_batch(TP0, T0)
    assert second.base_sequence == 1
    h.append(TP0, T0)
    assert len(h.produce(T0)) == 1  # acknowledged: a second request may go out meanwhile


def test_out_of_order_behind_an_unanswered_batch_is_retried_under_the_same_id() -> None:
    h = idempotent_started()
    node, first = h.one_batch(TP0, T0)
    h.core.on_produce_response(node, [first], {TP0: Answer(base_offset=0)}, T0)
    h.append(TP0, T0)
    _, _second = h.one_batch(TP0, T0)
    h.append(TP0, T0)
    _, third = h.one_batch(TP0, T0)
    gap = broker(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
    h.core.on_produce_response(node, [third], {TP0: Answer(gap)}, T0)
    assert h.txn is not None
    assert not h.txn.needs_reset
    assert h.core.decide(third, gap, T0) is Decision.RETRY


def test_unknown_producer_id_bumps_the_epoch_once_nothing_is_in_flight() -> None:
    h = idempotent_started()
    [future] = h.append(TP0, T0)
    h.append(TP1, T0)
    requests = h.produce(T0)
    assert len(requests) == 2
    by_node = {r.node: r.batches for r in requests}
    lost = broker(Errors.UNKNOWN_PRODUCER_ID)
    h.core.on_produce_response(0, by_node[0], {TP0: Answer(lost)}, T0)
    assert h.txn is not None
    assert h.txn.needs_reset
    # Node 1's request is still out: no new epoch until its answer is in.
    assert not any(isinstance(a, EpochBumped) for a in h.poll(T0 + 1))
    h.core.on_produce_response(1, by_node[1], {TP1: Answer(base_offset=0)}, T0 + 1)
    actions = h.poll(T0 + 1)
    # KIP-360: the same producer id with the next epoch, made here and not asked for.
    assert EpochBumped(1000, 1, 1, 0) in actions
    assert InitProducerId() not in actions
    _, again = h.one_batch(TP0, T0 + 1)
    assert stamp(again) == (1000, 1, 0)
    h.core.on_produce_response(0, [again], {TP0: Answer(base_offset=9)}, T0 + 1)
    assert future.result().offset == 10  # the batch's second record: the first came earlier


def test_a_batch_sent_without_an_answer_is_not_resent_under_a_new_epoch() -> None:
    h = idempotent_started()
    [unanswered] = h.append(TP0, T0)
    node, first = h.one_batch(TP0, T0)
    # The request times out: the broker may have written it. It goes back for a retry.
    timed_out = ProducerTimeoutError("no answer in 30000 ms")
    timed_out.possibly_written = True  # as the adapter marks a request that was written
    h.core.on_produce_error(node, [first], timed_out, T0)
    assert first.possibly_written
    h.append(TP1, T0)
    node1, second = h.one_batch(TP1, T0)
    lost = broker(Errors.UNKNOWN_PRODUCER_ID)
    h.core.on_produce_response(node1, [second], {TP1: Answer(lost)}, T0)
    [later] = h.append(TP1, T0)  # queued, never sent
    actions = h.poll(T0 + 1)
    [bumped] = [a for a in actions if isinstance(a, EpochBumped)]
    assert bumped.dropped == 1
    failure = unanswered.exception()
    assert isinstance(failure, DeliveryTimeoutError)
    assert failure.possibly_written
    assert "could write them twice" in str(failure)
    assert not later.done()  # never sent: re-stamped under the new epoch and sent again
    resent = [b for r in h.produce(T0 + 1) for b in r.batches]
    assert {stamp(b)[:2] for b in resent} == {(1000, 1)}
    assert TP0 not in {b.tp for b in resent}  # the possibly written batch is not among them


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    h = idempotent_started()
    assert h.txn is not None
    h.txn.set_producer_id_and_epoch(1000, MAX_EPOCH)
    h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    lost = broker(Errors.UNKNOWN_PRODUCER_ID)
    h.core.on_produce_response(node, [batch], {TP0: Answer(lost)}, T0)
    assert InitProducerId() in h.poll(T0 + 1)


def test_init_producer_id_retries_with_backoff_and_stops_on_a_fatal_error() -> None:
    h = Harness(idempotent=True)
    h.append(TP0, T0)
    assert InitProducerId() in h.poll(T0)
    h.core.on_producer_id_error(ProducerTimeoutError("no answer"), T0)
    actions = h.poll(T0)
    assert InitProducerId() not in actions
    wait = actions[-1]
    assert isinstance(wait, Wait)
    assert 0.08 <= wait.timeout <= 0.12
    assert InitProducerId() in h.poll(T0 + 0.2)
    denied = broker(Errors.CLUSTER_AUTHORIZATION_FAILED)
    h.core.on_producer_id_error(denied, T0 + 0.2)
    assert h.core.state is SenderState.FAILED
    assert h.core.fatal_error is denied
    assert not h.core.must_run
    h.core.abandon()
    assert h.acc.fatal_error is denied
    assert h.held() == 0


# --- lifecycle and shutdown


def test_closing_runs_until_the_last_batch_ends() -> None:
    h = Harness(linger=10.0)
    h.append(TP0, T0)
    h.core.initiate_close()
    assert h.core.state is SenderState.CLOSING
    assert h.core.must_run
    node, batch = h.one_batch(TP0, T0)  # closing makes lingering batches ready
    assert h.core.must_run  # in flight
    h.core.on_produce_response(node, [batch], {TP0: Answer()}, T0)
    assert not h.core.must_run


def test_cancelled_request_aborts_its_records_and_frees_its_buffer() -> None:
    h = Harness()
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    h.core.force_close()
    h.core.on_request_cancelled(node, [batch])
    assert isinstance(future.exception(), ProducerClosedError)
    assert h.held() == 0
    assert h.core.in_flight_requests == 0


def test_a_crash_while_handling_an_answer_fails_the_records_once_as_possibly_written() -> None:
    h = Harness()
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    bug = KeyError("bug")
    h.core.fail(bug)  # what the shell does when handling a request raises
    h.core.on_request_cancelled(node, [batch])
    h.core.on_request_cancelled(node, [batch])  # reported twice: no effect
    failure = future.exception()
    assert isinstance(failure, ProducerFailedError)
    assert failure.__cause__ is bug
    assert failure.possibly_written  # it was sent, and its answer was never taken in
    assert h.core.in_flight_requests == 0
    assert h.held() == 0


def test_queued_records_fail_with_the_fatal_error_as_cause() -> None:
    h = Harness(linger=10.0)
    [future] = h.append(TP0, T0)
    bug = RuntimeError("codec exploded")
    h.core.fail(bug)
    h.core.abandon()
    failure = future.exception()
    assert isinstance(failure, ProducerFailedError)
    assert failure.__cause__ is bug


def test_abandon_ends_queued_in_flight_and_stranded_records_at_once() -> None:
    h = Harness()
    [in_flight] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    [queued] = h.append(TP0, T0)
    [stranded] = h.append(TP1, T0)
    # As a drain that raised half-way leaves a batch: in neither a queue nor a request.
    h.acc._batches[TP1].clear()
    h.core.fail(RuntimeError("drain broke"))
    h.core.abandon()
    for future in (in_flight, queued, stranded):
        failure = future.exception()
        assert isinstance(failure, ProducerFailedError)
        assert isinstance(failure.__cause__, RuntimeError)
    assert h.core.in_flight_requests == 0
    assert h.held() == BATCH  # the request still out keeps its buffer until its task ends
    h.core.on_request_cancelled(node, [batch])  # which it does later: no second outcome
    assert isinstance(in_flight.exception(), ProducerFailedError)
    assert h.held() == 0


def test_closing_ends_once_every_record_has_an_outcome_even_with_a_request_out() -> None:
    h = Harness(delivery_timeout=5.0)
    [future] = h.append(TP0, T0)
    h.core.initiate_close()
    h.one_batch(TP0, T0)
    assert h.core.must_run
    h.poll(T0 + 5.0)  # the request never answers: its records expire in flight
    assert isinstance(future.exception(), DeliveryTimeoutError)
    assert not h.core.must_run  # the shell cancels the request instead of waiting for it


def test_lifecycle_moves_are_checked() -> None:
    h = Harness()
    h.core.fail(RuntimeError("x"))
    with pytest.raises(IllegalStateTransition, match="from FAILED to CLOSING"):
        h.core._move(SenderState.CLOSING)
    h.core.force_close()  # after a failure, closing is a no-op, not an error
    assert h.core.state is SenderState.FAILED


def test_a_retry_deadline_a_sliver_away_counts_as_reached() -> None:
    # A timer can fire before the clock shows its deadline (timer resolution); asking to wait
    # nanoseconds more then spins the loop without the clock ever moving.
    h = Harness(idempotent=True)
    h.append(TP0, T0)
    assert InitProducerId() in h.poll(T0)
    h.core.on_producer_id_error(ProducerTimeoutError("no answer"), T0)
    wait = h.poll(T0)[-1]
    assert isinstance(wait, Wait)
    assert InitProducerId() in h.poll(T0 + wait.timeout - 1e-9)


def test_a_definite_refusal_after_an_unanswered_attempt_stays_possibly_written() -> None:
    h = idempotent_started()
    [future] = h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    timed_out = ProducerTimeoutError("no answer")
    timed_out.possibly_written = True
    h.core.on_produce_error(node, [batch], timed_out, T0)
    [request] = h.produce(T0 + 1)  # the retry, after its backoff
    refused = broker(Errors.INVALID_TIMESTAMP)  # final: but the first attempt may be written
    h.core.on_produce_response(request.node, request.batches, {TP0: Answer(refused)}, T0 + 2)
    failure = future.exception()
    assert isinstance(failure, BrokerError)
    assert failure.errno == Errors.INVALID_TIMESTAMP
    assert failure.possibly_written


def test_a_request_that_never_reached_a_broker_leaves_its_batch_definite() -> None:
    h = idempotent_started()
    h.append(TP0, T0)
    node, batch = h.one_batch(TP0, T0)
    h.core.on_produce_error(node, [batch], ProducerTimeoutError("node not ready"), T0)
    assert not batch.possibly_written
