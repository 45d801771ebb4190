"""The sender's decisions, with no I/O: what to send, when, and what an answer means.

Theory of operation
-------------------
A port of the deciding half of Kafka's ``Sender``.
:class:`SenderCore` is a state machine in the style of h11: it is told the time and what happened,
it changes the pure state it owns (the accumulator's queues, the batches, the idempotence entries,
the in-flight counts), and it returns :data:`Action` values that say what I/O to do. The asyncio
shell (``aioaccum._runtime.sender``) carries the actions out and reports back; it decides nothing.
So every rule here can be tested with a fake ``now``, a
:class:`~aioaccum._core.cluster.StaticCluster` and no event loop.

``poll(cluster, now)`` is one turn of Kafka's ``runOnce``:

1. ask the accumulator which nodes are ready, and refresh metadata for unknown leaders;
2. without a producer id (idempotence), ask for one and drain nothing;
3. otherwise drain at most one batch per partition for each node with room in flight;
4. fail batches that outlived ``delivery_timeout_ms``, queued or in flight;
5. return one :class:`Produce` per node, and a :class:`Wait` with the time until the next
   deadline (linger, backoff, delivery timeout).

Answers come back through :meth:`SenderCore.on_produce_response` and
:meth:`~SenderCore.on_produce_error`; :mod:`aioaccum._core.kafka_errors` holds the table from
error code to decision. A batch's buffer returns to the pool only once its request is over
(Kafka KAFKA-19012).
"""

from __future__ import annotations

import copy
import enum
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeAlias

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import ClusterView, TopicPartition
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.kafka_errors import Decision, Errors, rule_for
from aioaccum._core.lifecycle import move
from aioaccum._core.ready_index import CLOCK_TOLERANCE
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    DeliveryTimeoutError,
    ProducerClosedError,
    ProducerFailedError,
    TransactionAbortedError,
)

if TYPE_CHECKING:
    from aioaccum._core.metrics import ProducerMetrics

__all__ = [
    "Action",
    "EpochBumped",
    "InitProducerId",
    "PartitionAnswer",
    "Produce",
    "RefreshMetadata",
    "SenderCore",
    "SenderState",
    "Wait",
]


class PartitionAnswer(Protocol):
    """What the broker said about one batch (the adapter's ``PartitionResponse``)."""

    @property
    def error(self) -> AioAccumError | None: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def log_append_time(self) -> int: ...


class Produce(NamedTuple):
    """Send these batches to ``node`` in one produce request."""

    node: int
    batches: list[ProducerBatch]


class RefreshMetadata(NamedTuple):
    """Ask for fresh metadata of these topics."""

    topics: tuple[str, ...]


class InitProducerId(NamedTuple):
    """Ask the cluster for a producer id and epoch; answer with ``on_producer_id``."""


class EpochBumped(NamedTuple):
    """The producer went on under ``epoch`` after a sequence problem (for the log)."""

    producer_id: int
    epoch: int
    restamped: int
    """Queued batches given new sequences."""
    dropped: int
    """Batches failed instead, for they may be written already."""


class Wait(NamedTuple):
    """Sleep at most ``timeout`` seconds (``inf``: until woken); always the last action."""

    timeout: float


Action: TypeAlias = Produce | RefreshMetadata | InitProducerId | EpochBumped | Wait


class SenderState(enum.Enum):
    RUNNING = "running"
    CLOSING = "closing"
    """Send what is buffered, then stop."""
    FORCE_CLOSING = "force_closing"
    """Stop now; what is not acknowledged fails."""
    FAILED = "failed"
    """An error the producer cannot go on from; see ``fatal_error``."""


_TRANSITIONS = {
    SenderState.RUNNING: frozenset(
        {SenderState.CLOSING, SenderState.FORCE_CLOSING, SenderState.FAILED}
    ),
    SenderState.CLOSING: frozenset({SenderState.FORCE_CLOSING, SenderState.FAILED}),
    SenderState.FORCE_CLOSING: frozenset({SenderState.FAILED}),
    SenderState.FAILED: frozenset(),
}
_INF = float("inf")
# Read on every turn: a module constant is a cached lookup, where an enum member read from its
# class goes through the class's attribute hook (Python 3.11), a tenth of a turn's checks.
_RUNNING = SenderState.RUNNING
_CLOSING = SenderState.CLOSING
# Answers that leave a batch possibly in the log: the leader wrote it and the replication wait
# ended without an outcome.
# NOT_LEADER_OR_FOLLOWER too: with acks=all, a leader that lost its leadership while waiting for
# its followers answers it for a batch it had appended, which may survive on the new leader.
_MAYBE_WRITTEN = frozenset({
    Errors.REQUEST_TIMED_OUT,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.KAFKA_STORAGE_ERROR,
})


class SenderCore:
    """Decides what the sender does; see the module's theory of operation.

    Args:
        accumulator: Where batches wait.
        max_request_size: Cap of one produce request, in bytes.
        max_in_flight: Requests outstanding per broker connection.
        delivery_timeout: Seconds from append until a record is failed.
        retries: Attempts after the first before a retriable error becomes final.
        retry_backoff: First backoff between retries, in seconds.
        retry_backoff_max: Cap of the exponential backoff, in seconds.
        transaction_manager: Present when idempotence is on.
        metrics: Where counts and times are recorded.
        rng: Draws the backoff jitter; seed it for repeatable tests.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        *,
        max_request_size: int,
        max_in_flight: int,
        delivery_timeout: float,
        retries: int,
        retry_backoff: float,
        retry_backoff_max: float,
        transaction_manager: TransactionManager | None,
        metrics: ProducerMetrics,
        rng: random.Random | None = None,
    ) -> None:
        self._acc = accumulator
        self._max_request_size = max_request_size
        self._max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout
        self._retries = retries
        self._retry_backoff = retry_backoff
        self._retry_backoff_max = retry_backoff_max
        self._txn = transaction_manager
        self._metrics = metrics
        self._rng = rng or random.Random()
        self.state = SenderState.RUNNING
        self.fatal_error: BaseException | None = None
        self._in_flight: dict[int, int] = {}
        # Requests out, by their first batch (a batch is in one request at a time): (batches,
        # when the oldest batch still pending reaches the delivery timeout). Expiry looks at
        # requests, a few per node, not at every batch in flight.
        self._requests: dict[ProducerBatch, tuple[list[ProducerBatch], float]] = {}
        # No request's expiry comes before this (it may lag behind: a request that ended
        # leaves it early, which costs one look too many, never one too few). Each turn looks
        # at the requests only once it has passed.
        self._requests_expire_at = _INF
        self._init_pending = False
        self._init_attempts = 0
        self._next_init_at = 0.0
        self.batches_ended = 0
        """Grows whenever a batch ends; the shell wakes flush() when it moved."""

    # --- lifecycle

    def _move(self, state: SenderState) -> None:
        self.state = move("the sender", self.state, state, _TRANSITIONS)

    def initiate_close(self) -> None:
        """Finish what is buffered, then stop."""
        if self.state is SenderState.RUNNING:
            self._move(SenderState.CLOSING)
        self._acc.close()

    def force_close(self) -> None:
        """Stop now; whatever is not acknowledged fails with ``ProducerClosedError``."""
        if self.state is not SenderState.FAILED:
            self._move(SenderState.FORCE_CLOSING)
        self._acc.close()

    def fail(self, error: BaseException) -> None:
        """Stop on an error nothing can recover from; appends are refused from now on."""
        if self.fatal_error is None:
            self.fatal_error = error
            self._acc.fatal_error = error
        self._move(SenderState.FAILED)

    @property
    def must_run(self) -> bool:
        """Whether the shell's loop goes on: running, or closing with work left."""
        state = self.state
        if state is _RUNNING:
            return True
        if state is _CLOSING:
            # Until every record has an outcome. A request whose records all expired only holds
            # buffers, and the shell cancels it on the way out rather than wait for an answer
            # that may never come.
            return self._acc.has_unended()
        return False


    @property
    def in_flight_requests(self) -> int:
        return sum(self._in_flight.values())

    # --- one turn

    def poll(self, cluster: ClusterView, now: float) -> list[Action]:
        """One turn of the sender at time ``now``; the last action is always a :class:`Wait`."""
        acc = self._acc
        check = acc.ready(cluster, now)
        delay = check.next_check_in
        actions: list[Action] = []
        if check.unknown_leader_topics:
            actions.append(RefreshMetadata(tuple(sorted(check.unknown_leader_topics))))
            delay = min(delay, self._retry_backoff)
        drained: dict[int, list[ProducerBatch]] = {}
        txn = self._txn
        if txn is not None and txn.batch_error is not None:
            # The transaction can only abort now: what is queued is never sent (Java's
            # abortUndrainedBatches), so a commit's flush ends at once and reports why.
            self._abort_queued(txn.batch_error)
        if self._needs_producer_id():
            # Nothing is drained without a valid producer id; expiry still runs below.
            delay = min(delay, self._maybe_init_producer_id(now, actions))
        else:
            in_flight = self._in_flight
            nodes = [n for n in check.ready_nodes if in_flight.get(n, 0) < self._max_in_flight]
            if nodes:
                drained = acc.drain(cluster, nodes, self._max_request_size, now)

        for batch in acc.expired_batches(now):
            self._fail_batch(batch, self._delivery_timeout_error(batch, now))
        self._expire_in_flight(now)

        for node, batches in drained.items():
            self._start_request(node, batches, now)
            actions.append(Produce(node, batches))
            if self._in_flight[node] < self._max_in_flight:
                # One batch per partition per request: the node may have more ready right away.
                delay = 0.0
        if self._requests:
            # Woken once the deadline has passed, for records fail at it, not before (a bound
            # that lags wakes the turn that corrects it).
            expires = self._requests_expire_at
            if expires + CLOCK_TOLERANCE - now < delay:
                delay = max(expires + CLOCK_TOLERANCE - now, 0.0)
        actions.append(Wait(delay))
        return actions

    def _abort_queued(self, cause: BaseException) -> None:
        error = TransactionAbortedError(
            "not sent: the transaction failed before this record was sent, and must be aborted "
            f"(first error: {cause})"
        )
        error.__cause__ = cause
        txn = self._txn
        for batch in self._acc.abort_queued(error):
            if batch.base_sequence >= 0 and txn is not None:
                # Its sequence range is never written: the abort must move the epoch on, or
                # the partition's next batch would wait for it.
                txn.request_reset()
            self._metrics.record_errors(batch.tp.topic, batch.record_count)
            self.batches_ended += 1

    def _start_request(self, node: int, batches: list[ProducerBatch], now: float) -> None:
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        expires = self._expiry_of(batches)
        self._requests[batches[0]] = (batches, expires)
        if expires < self._requests_expire_at:
            self._requests_expire_at = expires
        self._metrics.record_drained(batches, now)
        txn = self._txn
        for batch in batches:
            if txn is not None:
                txn.add_in_flight(batch)
            if self._must_mute(batch):
                self._acc.mute(batch.tp)

    def _must_mute(self, batch: ProducerBatch) -> bool:
        """Whether no other batch of this partition may be sent until this one is answered."""
        if self._max_in_flight == 1:
            # Strict order without idempotence, even when the leader moves to another node
            # (Kafka's guaranteeMessageOrder).
            return True
        return self._txn is not None and not self._txn.has_acknowledged(batch.tp)

    def _expiry_of(self, batches: list[ProducerBatch]) -> float:
        """When the oldest batch of a request that has not ended reaches the delivery timeout."""
        oldest = _INF
        for batch in batches:
            if batch.created < oldest and not batch.is_done:
                oldest = batch.created
        return oldest + self._delivery_timeout

    def _expire_in_flight(self, now: float) -> None:
        if now < self._requests_expire_at:
            return
        earliest = _INF
        for key, (batches, expires) in list(self._requests.items()):
            if expires > now:
                earliest = min(earliest, expires)
                continue
            for batch in batches:
                if batch.is_done or not batch.has_reached_delivery_timeout(
                    self._delivery_timeout, now
                ):
                    continue
                # The records fail now; the buffer waits for the request to finish with it.
                batch.possibly_written = True
                error = self._delivery_timeout_error(batch, now)
                if batch.fail(error):
                    self._metrics.record_errors(batch.tp.topic, batch.record_count)
                    self.batches_ended += 1
                if self._txn is not None:
                    # The outcome of its sequence range is unknown: a reset follows.
                    self._txn.on_batch_failed(batch, error)
            expires = self._expiry_of(batches)
            self._requests[key] = (batches, expires)
            earliest = min(earliest, expires)
        self._requests_expire_at = earliest

    # --- producer id (idempotence)

    def _needs_producer_id(self) -> bool:
        txn = self._txn
        return txn is not None and (not txn.has_producer_id or txn.needs_reset)

    def _maybe_init_producer_id(self, now: float, actions: list[Action]) -> float:
        """Get a producer id or a new epoch when due; returns how long until an attempt may
        start.

        A reset waits until no request is in flight, so that every batch the broker may still
        answer for is back in its queue before sequences start over. A batch sent without a
        definite answer then fails (``possibly_written``) instead of being re-sent under new
        sequences, where the broker could no longer recognise a second copy.
        """
        txn = self._txn
        assert txn is not None
        if self._init_pending or self._requests or txn.transactional:
            # A transactional producer's id and epoch come from its coordinator: at start, and
            # after a failed batch, when the transaction is aborted.
            return _INF
        if txn.has_producer_id:
            dropped = []
            for batch in self._acc.take_possibly_written():
                if txn.is_foreign(batch):
                    # Its identity is not the one starting over: the broker still tells a copy.
                    self._acc.reenqueue(batch, now, 0.0)
                else:
                    dropped.append(batch)
                    self._fail_batch(batch, self._unknown_outcome_error(batch))
            if txn.bump_epoch():
                restamped = self._acc.restamp_sequences()
                producer = txn.producer
                actions.append(
                    EpochBumped(producer.producer_id, producer.epoch, restamped, len(dropped))
                )
                return 0.0
        if now + CLOCK_TOLERANCE < self._next_init_at:
            return self._next_init_at - now
        self._init_pending = True
        actions.append(InitProducerId())
        return _INF

    def on_producer_id(self, producer_id: int, epoch: int) -> int:
        """The cluster gave a producer id and epoch. Returns how many queued batches were
        re-stamped under it (only after a reset)."""
        assert self._txn is not None
        self._init_pending = False
        self._init_attempts = 0
        resetting = self._txn.has_producer_id
        self._txn.set_producer_id_and_epoch(producer_id, epoch)
        return self._acc.restamp_sequences() if resetting else 0

    def on_producer_id_error(self, error: AioAccumError, now: float) -> None:
        """InitProducerId failed: retry it after a backoff, or stop if retrying cannot help."""
        self._init_pending = False
        if isinstance(error, BrokerError) and not error.retriable:
            self.fail(error)
            return
        self._init_attempts += 1
        self._next_init_at = now + self._backoff(self._init_attempts)

    @property
    def init_attempts(self) -> int:
        return self._init_attempts

    # --- answers

    def on_produce_response(
        self,
        node: int,
        batches: list[ProducerBatch],
        answers: Mapping[TopicPartition, PartitionAnswer],
        now: float,
        sent: float | None = None,
    ) -> list[Action]:
        """The broker answered a request; returns metadata refreshes the answers call for.

        ``sent`` is when the request started (for ``request-latency``); the broker's throttle
        time comes with the answers as ``throttle_time_ms``, when the adapter reports it.
        """
        if sent is not None:
            self._metrics.record_response(
                now - sent, getattr(answers, "throttle_time_ms", 0), now
            )
        stale: set[str] = set()
        for batch in batches:
            answer = answers.get(batch.tp)
            if answer is None:
                error = BrokerError(
                    f"the broker's answer did not mention {batch.tp.topic}-{batch.tp.partition}",
                    retriable=True,
                )
                self._on_batch_error(batch, error, now, stale)
            elif answer.error is None or rule_for(answer.error).decision is Decision.SUCCEED:
                # A duplicate is a batch an earlier attempt wrote; the broker says where.
                self._complete(batch, answer.base_offset, answer.log_append_time, now)
            else:
                self._on_batch_error(batch, answer.error, now, stale)
        self._end_request(node, batches)
        return [RefreshMetadata(tuple(sorted(stale)))] if stale else []

    def on_produce_error(
        self, node: int, batches: list[ProducerBatch], error: AioAccumError, now: float
    ) -> list[Action]:
        """The request as a whole failed (a lost connection, a timeout)."""
        stale: set[str] = set()
        if isinstance(error, BrokerError) and error.invalid_metadata:
            stale.update(b.tp.topic for b in batches)
        for batch in batches:
            if error.possibly_written:  # no answer, after the request may have arrived
                batch.possibly_written = True
            self._on_batch_error(batch, error, now, stale)
        self._end_request(node, batches)
        return [RefreshMetadata(tuple(sorted(stale)))] if stale else []

    def on_request_cancelled(self, node: int, batches: list[ProducerBatch]) -> None:
        """The shell cancelled a request at shutdown: its records fail, its buffers return."""
        error = self._unanswered_error()
        for batch in batches:
            if batch.abort(error):
                self.batches_ended += 1
            self._acc.deallocate(batch)
        self._end_request(node, batches)

    def _end_request(self, node: int, batches: list[ProducerBatch]) -> None:
        if not batches or self._requests.pop(batches[0], None) is None:
            return  # ended already, before whatever the shell reports now went wrong
        count = self._in_flight.get(node, 0)
        if count <= 1:
            self._in_flight.pop(node, None)
        else:
            self._in_flight[node] = count - 1
        txn = self._txn
        acc = self._acc
        for batch in batches:
            if txn is not None:
                txn.remove_in_flight(batch)
            acc.unmute(batch.tp)

    def _complete(
        self, batch: ProducerBatch, base_offset: int, log_append_time: int, now: float
    ) -> None:
        txn = self._txn
        if txn is not None:
            # Batches set aside as out of order before a recovered one: written, as it was.
            for earlier in txn.written_before(batch):
                self._complete(earlier, -1, -1, now)
            txn.mark_acknowledged(batch)
        if batch.complete(base_offset, log_append_time):
            self._metrics.record_success(batch, now)
            self.batches_ended += 1
        self._acc.deallocate(batch)

    def decide(self, batch: ProducerBatch, error: BaseException, now: float) -> Decision:
        """What happens to ``batch`` after ``error``: the table's rule, then the batch's limits.

        Splitting does not count against ``retries`` (it is not a retry of the same bytes);
        every other retry stops at ``retries`` attempts or at the delivery timeout.
        """
        decision = rule_for(error).decision
        txn = self._txn
        if decision is Decision.SPLIT and batch.record_count <= 1:
            decision = Decision.FAIL
        elif decision is Decision.BUMP_EPOCH:
            if txn is None:
                decision = Decision.FAIL
            elif (
                isinstance(error, BrokerError)
                and error.errno == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                and txn.follows_unresolved_batch(batch)
            ):
                decision = Decision.RETRY
            elif txn.transactional:
                decision = Decision.FAIL  # the transaction aborts; its abort moves the epoch
        if decision in (Decision.RETRY, Decision.BUMP_EPOCH) and (
            batch.attempts >= self._retries
            or batch.has_reached_delivery_timeout(self._delivery_timeout, now)
        ):
            decision = Decision.FAIL
        return decision

    def _on_batch_error(
        self, batch: ProducerBatch, error: AioAccumError, now: float, stale: set[str]
    ) -> None:
        if batch.is_done:
            # Already failed by the delivery timeout while in flight; only the buffer was waiting.
            self._acc.deallocate(batch)
            return
        if isinstance(error, BrokerError) and error.errno in _MAYBE_WRITTEN:
            batch.possibly_written = True
        decision = self.decide(batch, error, now)
        txn = self._txn
        if txn is not None and txn.is_foreign(batch) and self._foreign_error(batch, error,
                                                                            decision, now):
            return
        if decision is Decision.SPLIT:
            self._metrics.record_split()
            self._acc.split_and_reenqueue(batch, now, self._backoff(batch.attempts + 1))
            return
        if decision is Decision.BUMP_EPOCH:
            assert txn is not None
            txn.request_reset()  # re-sent in its original order under the new epoch
        if decision is Decision.FAIL:
            self._on_failed(batch, error, now)
            return
        if rule_for(error).refresh_metadata:
            stale.add(batch.tp.topic)
        self._metrics.record_retries(batch.tp.topic, batch.record_count)
        self._acc.reenqueue(batch, now, self._backoff(batch.attempts + 1))

    def _foreign_error(
        self, batch: ProducerBatch, error: AioAccumError, decision: Decision, now: float
    ) -> bool:
        """A batch re-sent under an earlier producer's identity (after a crash, from the
        journal; see ``TransactionManager.adopt``) was refused; True if that is dealt with.

        Out of order with a later batch of the same identity to go: set aside for its answer.
        Unknown to the broker otherwise: it goes again under this producer's id, first in its
        partition, at once (with the batches set aside before it); too large: it splits under
        this producer's id. Failed for good: the batches set aside before it go again."""
        txn = self._txn
        assert txn is not None
        if decision is Decision.BUMP_EPOCH:
            if (
                isinstance(error, BrokerError)
                and error.errno == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                and txn.park(batch)
            ):
                return True
            disowned = txn.disown(batch, error)
            for own in reversed(disowned):
                self._acc.reenqueue(own, now, 0.0)
            return True
        if decision is Decision.SPLIT:
            earlier = txn.disown(batch, error)[:-1]
            self._metrics.record_split()
            self._acc.split_and_reenqueue(batch, now, self._backoff(batch.attempts + 1))
        elif decision is Decision.FAIL:
            earlier = txn.unpark(batch, error)
            self._on_failed(batch, error, now)
        else:
            return False
        for own in reversed(earlier):  # ahead of the batch's own records, in order
            self._acc.reenqueue(own, now, 0.0)
        return True

    def _on_failed(self, batch: ProducerBatch, error: BaseException, now: float) -> None:
        if batch.has_reached_delivery_timeout(self._delivery_timeout, now):
            self._fail_batch(batch, self._delivery_timeout_error(batch, now, cause=error))
        else:
            self._fail_batch(batch, error)

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.possibly_written and isinstance(error, AioAccumError) and not (
            error.possibly_written
        ):
            # The last answer was definite, but an earlier attempt went unanswered.
            error = copy.copy(error)
            error.possibly_written = True
        if self._txn is not None:
            self._txn.on_batch_failed(batch, error)
        if batch.fail(error):
            self._metrics.record_errors(batch.tp.topic, batch.record_count)
            self.batches_ended += 1
        self._acc.deallocate(batch)

    def _backoff(self, attempts: int) -> float:
        """Exponential backoff with +-20% jitter (Kafka's ``ExponentialBackoff``)."""
        base = min(self._retry_backoff * 2.0 ** max(attempts - 1, 0), self._retry_backoff_max)
        return base * self._rng.uniform(0.8, 1.2)

    def _delivery_timeout_error(
        self, batch: ProducerBatch, now: float, cause: BaseException | None = None
    ) -> DeliveryTimeoutError:
        age_ms = (now - batch.created) * 1000
        message = (
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"{age_ms:.0f} ms has passed since batch creation "
            f"(delivery_timeout_ms={self._delivery_timeout * 1000:.0f})"
        )
        if batch.possibly_written:
            message = f"{message}; sent without a definite answer, so possibly written"
        if cause is not None:
            message = f"{message}; last error: {cause}"
        return DeliveryTimeoutError(message, possibly_written=batch.possibly_written)

    def _unknown_outcome_error(self, batch: ProducerBatch) -> DeliveryTimeoutError:
        return DeliveryTimeoutError(
            f"giving up on {batch.record_count} record(s) for {batch.tp.topic}-"
            f"{batch.tp.partition} after {batch.attempts + 1} attempt(s): an attempt got no "
            "answer, so the broker may have written them, and the producer must start its "
            "sequences over (a new epoch) after another batch's failure; sending them again "
            "could write them twice. Check the topic before sending them again.",
            possibly_written=True,
        )

    # --- shutdown

    def closing_error(self) -> ProducerClosedError:
        """The error for records still queued when the sender stops."""
        fatal = self.fatal_error
        if fatal is None:
            return ProducerClosedError("the producer closed before these records were sent")
        error = ProducerFailedError(
            f"the producer stopped on an error before these records were sent: {fatal!r}"
        )
        error.__cause__ = fatal
        return error

    def _unanswered_error(self) -> ProducerClosedError:
        """For records of a request still out when the producer stops: sent, so possibly
        written."""
        fatal = self.fatal_error
        if fatal is None:
            error = ProducerClosedError(
                "the producer closed before the broker answered; the records were sent and "
                "may have been written"
            )
        else:
            error = ProducerFailedError(
                f"the producer stopped on an error before the broker answered: {fatal!r}; the "
                "records were sent and may have been written"
            )
            error.__cause__ = fatal
        error.possibly_written = True
        return error

    def release_buffers(self) -> None:
        """Return the buffers of ended batches no request holds any more: call only once
        every request task has finished (a task that never ran leaves its batches here)."""
        self._acc.release_ended()

    def abandon(self) -> None:
        """End every record that has not ended, now, with :meth:`closing_error`: those queued,
        those in requests still out (a late answer no longer changes them), and any a failure
        left in neither. Nothing here waits, so a stop cannot hang on a request or a task."""
        self._acc.close()
        unanswered = self._unanswered_error()
        for batches, _ in list(self._requests.values()):
            for batch in batches:
                if batch.abort(unanswered):
                    self.batches_ended += 1
        self._requests.clear()
        self._in_flight.clear()
        self.batches_ended += len(self._acc.abort_unended(self.closing_error()))
