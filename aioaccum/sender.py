"""Sender: the one long-lived task that moves batches from the accumulator to the brokers.

Theory of operation
-------------------
A port of Kafka's ``Sender.runOnce``. Each turn of :meth:`Sender.run`:

1. asks the accumulator which nodes are ready (``ready(cluster, now)``) and refreshes metadata for
   topics whose leader is unknown;
2. keeps the nodes with fewer than ``max_in_flight`` requests outstanding and drains at most one
   batch per partition for each, within ``max_request_size``;
3. fails batches that outlived ``delivery_timeout_ms``, queued or in flight;
4. starts one produce request per node as its own task, without waiting for earlier responses;
5. sleeps until woken (a batch filled, a batch opened, a response arrived, flush, close) or until
   the accumulator's next deadline: linger is a timer on the event loop, never a polling loop.

Responses complete the records, or put retriable failures back at the head of their partition
after an exponential backoff with jitter, or split batches the broker found too large. A batch's
buffer goes back to the pool only once its request has finished with it (Kafka KAFKA-19012).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._core.batch import ProducerBatch
from aioaccum._core.cluster import TopicPartition
from aioaccum._core.idempotence import TransactionManager
from aioaccum._kafka import KafkaAdapter, PartitionResponse
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    DeliveryTimeoutError,
    ProducerClosedError,
)

if TYPE_CHECKING:
    from aioaccum.metrics import ProducerMetrics

__all__ = ["Sender"]

log = logging.getLogger(__name__)

_MESSAGE_TOO_LARGE = 10
_OUT_OF_ORDER_SEQUENCE = 45
_DUPLICATE_SEQUENCE = 46
_INVALID_PRODUCER_EPOCH = 47
_UNKNOWN_PRODUCER_ID = 59
# Answers after which the broker's idea of this producer's sequences is no longer ours: the
# producer gets a new id/epoch and re-stamps what it still holds (Kafka's epoch bump).
_SEQUENCE_RESET_ERRORS = frozenset({_OUT_OF_ORDER_SEQUENCE, _INVALID_PRODUCER_EPOCH,
                                    _UNKNOWN_PRODUCER_ID})


class Sender:
    """Drives the accumulator's batches to the brokers.

    Args:
        accumulator: Where batches wait.
        kafka: The network layer.
        acks: 0, 1 or -1 ("all").
        request_timeout_ms: How long the broker may take to answer a produce request.
        max_request_size: Cap of one produce request, in bytes.
        max_in_flight: Requests outstanding per broker connection.
        delivery_timeout: Seconds from append until a record is failed.
        retries: Attempts after the first before a retriable error becomes final.
        retry_backoff: First backoff between retries, in seconds.
        retry_backoff_max: Cap of the exponential backoff, in seconds.
        transaction_manager: Present when idempotence is on.
        metrics: Where counts and times are recorded.
        clock: Monotonic seconds; the event loop's clock by default.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        kafka: KafkaAdapter,
        *,
        acks: int,
        request_timeout_ms: int,
        max_request_size: int,
        max_in_flight: int,
        delivery_timeout: float,
        retries: int,
        retry_backoff: float,
        retry_backoff_max: float,
        transaction_manager: TransactionManager | None,
        metrics: ProducerMetrics,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._acc = accumulator
        self._kafka = kafka
        self._acks = acks
        self._request_timeout_ms = request_timeout_ms
        self._max_request_size = max_request_size
        self._max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout
        self._retries = retries
        self._retry_backoff = retry_backoff
        self._retry_backoff_max = retry_backoff_max
        self._txn = transaction_manager
        self._metrics = metrics
        self._clock = clock
        self._rng = rng or random.Random()
        self._in_flight: dict[int, int] = {}
        self._in_flight_batches: set[ProducerBatch] = set()
        self._request_tasks: set[asyncio.Task[None]] = set()
        self._wakeup: asyncio.Future[None] | None = None
        self._woken = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_scheduled = False
        self._running = True
        self._force_close = False
        self._progress: list[asyncio.Future[None]] = []
        self._fatal: BaseException | None = None
        self._init_task: asyncio.Task[None] | None = None
        self._muted: set[TopicPartition] = set()
        # Per partition, the sequence the broker expects after the last batch it acknowledged
        # under the current producer id (Kafka's lastAckedSequence + 1).
        self._next_expected: dict[TopicPartition, int] = {}
        self._init_attempts = 0
        self._next_init_at = 0.0

    # --- control from the producer

    def wakeup(self) -> None:
        """Make the sender run a turn now (Kafka's ``sender.wakeup()``)."""
        self._woken = True
        fut = self._wakeup
        if fut is not None and not fut.done():
            fut.set_result(None)

    def wakeup_threadsafe(self) -> None:
        """:meth:`wakeup` from another thread: one loop callback at a time, however many
        threads ask meanwhile."""
        loop = self._loop
        if loop is None or self._wake_scheduled:
            return  # not running yet (its first turn looks anyway), or a wake is on its way
        self._wake_scheduled = True
        try:
            loop.call_soon_threadsafe(self._wake_from_thread)
        except RuntimeError:
            self._wake_scheduled = False  # the loop is closed: nothing left to wake

    def _wake_from_thread(self) -> None:
        self._wake_scheduled = False
        self.wakeup()

    def initiate_close(self) -> None:
        """Finish what is buffered, then stop."""
        self._running = False
        self._acc.close()
        self.wakeup()

    def force_close(self) -> None:
        """Stop now; whatever is not acknowledged fails with ``ProducerClosedError``."""
        self._force_close = True
        self.initiate_close()

    @property
    def in_flight_requests(self) -> int:
        return sum(self._in_flight.values())

    @property
    def fatal_error(self) -> BaseException | None:
        return self._fatal

    def owns(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` is one the sender started (a request, or InitProducerId)."""
        return task in self._request_tasks or task is self._init_task

    def _set_fatal(self, error: BaseException) -> None:
        self._fatal = error
        # The accumulator refuses appends from now on, so send() needs no check of its own.
        self._acc.fatal_error = error

    async def wait_for_progress(self) -> None:
        """Return after the next batch ends (flush waits on this)."""
        fut = asyncio.get_running_loop().create_future()
        self._progress.append(fut)
        await fut

    def _notify_progress(self) -> None:
        waiters, self._progress = self._progress, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # --- the loop

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        try:
            while self._running or (
                not self._force_close and (self._acc.has_incomplete() or self.in_flight_requests)
            ):
                if self._fatal is not None:
                    raise self._fatal
                delay = self._run_once(clock())
                await self._sleep(loop, delay)
        except BaseException as exc:
            if self._fatal is None:
                self._set_fatal(exc)
            if not isinstance(exc, asyncio.CancelledError):
                log.error("the aioaccum sender stopped on an error", exc_info=exc)
            raise
        finally:
            await self._shutdown()

    # --- producer id (idempotence)

    def _needs_producer_id(self) -> bool:
        txn = self._txn
        return txn is not None and (not txn.has_producer_id or txn.needs_reset)

    def _maybe_init_producer_id(self, now: float) -> float:
        """Start InitProducerId when due; returns how long until the next attempt may start.

        A reset waits until no request is in flight, so that every batch the broker may still
        answer for is back in its queue before sequences start over.
        """
        if self._init_task is not None or self.in_flight_requests:
            return float("inf")
        if now < self._next_init_at:
            return self._next_init_at - now
        task = asyncio.get_running_loop().create_task(self._init_producer_id())
        self._init_task = task
        task.add_done_callback(self._on_task_done)
        return float("inf")

    async def _init_producer_id(self) -> None:
        assert self._txn is not None
        try:
            producer_id, epoch = await self._kafka.init_producer_id()
        except AioAccumError as exc:
            if isinstance(exc, BrokerError) and not exc.retriable:
                self._set_fatal(exc)
                return
            self._init_attempts += 1
            loop = asyncio.get_running_loop()
            self._next_init_at = (self._clock or loop.time)() + self._backoff(self._init_attempts)
            log.warning("InitProducerId failed (attempt %d): %s", self._init_attempts, exc)
            return
        finally:
            self._init_task = None
        self._init_attempts = 0
        resetting = self._txn.has_producer_id
        self._txn.set_producer_id_and_epoch(producer_id, epoch)
        self._next_expected.clear()
        if resetting:
            restamped = self._acc.restamp_sequences()
            log.info(
                "new producer id %d epoch %d after a sequence error; %d queued batch(es) "
                "re-stamped", producer_id, epoch, restamped,
            )

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._request_tasks.discard(task)
        self.wakeup()

    async def _sleep(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        if self._woken or delay <= 0:
            self._woken = False
            await asyncio.sleep(0)
            return
        fut = self._wakeup = loop.create_future()
        handle = loop.call_later(delay, _resolve, fut) if delay != float("inf") else None
        try:
            await fut
        finally:
            self._wakeup = None
            if handle is not None:
                handle.cancel()
        # A wakeup that resolved the future has been seen; one that came later stays set.
        self._woken = False

    def _run_once(self, now: float) -> float:
        check = self._acc.ready(self._kafka, now)
        delay = check.next_check_in
        if check.unknown_leader_topics:
            self._kafka.request_metadata_update(sorted(check.unknown_leader_topics))
            delay = min(delay, self._retry_backoff)
        if self._needs_producer_id():
            # Nothing is drained without a valid producer id; expiry still runs below.
            delay = min(delay, self._maybe_init_producer_id(now))
            drained: dict[int, list[ProducerBatch]] = {}
        else:
            nodes = [
                n for n in check.ready_nodes if self._in_flight.get(n, 0) < self._max_in_flight
            ]
            drained = self._acc.drain(self._kafka, nodes, self._max_request_size, now)

        for batch in self._acc.expired_batches(now):
            self._fail_batch(batch, self._delivery_timeout_error(batch, now), now)
        for batch in list(self._in_flight_batches):
            if batch.is_done:
                continue
            if batch.has_reached_delivery_timeout(self._delivery_timeout, now):
                # The records fail now; the buffer waits for the request to finish with it.
                batch.fail(self._delivery_timeout_error(batch, now))
                self._metrics.record_errors(batch.record_count)
                self._notify_progress()
                if self._txn is not None:
                    self._txn.request_reset()  # the outcome of its sequence range is unknown

        loop = asyncio.get_running_loop()
        for node, batches in drained.items():
            self._in_flight[node] = self._in_flight.get(node, 0) + 1
            self._in_flight_batches.update(batches)
            self._metrics.record_drained(batches, now)
            for batch in batches:
                if self._must_mute(batch):
                    self._acc.mute(batch.tp)
                    self._muted.add(batch.tp)
            task = loop.create_task(self._send_request(node, batches))
            self._request_tasks.add(task)
            task.add_done_callback(self._on_task_done)
        if any(self._in_flight[n] < self._max_in_flight for n in drained):
            # One batch per partition per request: a node may have more ready right away.
            delay = 0.0
        pending = [b.created for b in self._in_flight_batches if not b.is_done]
        if pending:
            delay = min(delay, max(min(pending) + self._delivery_timeout - now, 0.0))
        return delay

    def _must_mute(self, batch: ProducerBatch) -> bool:
        """Whether no other batch of this partition may be sent until this one is answered."""
        if self._max_in_flight == 1:
            # Strict order without idempotence, even when the leader moves to another node
            # (Kafka's guaranteeMessageOrder).
            return True
        return self._txn is not None and not self._txn.has_acknowledged(batch.tp)

    def _backoff(self, attempts: int) -> float:
        """Exponential backoff with +-20% jitter (Kafka's ``ExponentialBackoff``)."""
        base = min(self._retry_backoff * 2.0 ** max(attempts - 1, 0), self._retry_backoff_max)
        return base * self._rng.uniform(0.8, 1.2)

    # --- requests and responses

    async def _send_request(self, node: int, batches: list[ProducerBatch]) -> None:
        loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        unhandled = list(batches)
        try:
            try:
                responses = await self._kafka.produce(
                    node,
                    acks=self._acks,
                    timeout_ms=self._request_timeout_ms,
                    batches=[(b.tp, b.records()) for b in batches],
                )
            except AioAccumError as exc:
                now = clock()
                if isinstance(exc, BrokerError) and exc.invalid_metadata:
                    self._kafka.request_metadata_update([b.tp.topic for b in batches])
                while unhandled:
                    self._handle_error(unhandled.pop(), exc, now)
            else:
                now = clock()
                while unhandled:
                    batch = unhandled.pop()
                    self._handle_response(batch, responses.get(batch.tp), now)
        except asyncio.CancelledError:
            for batch in batches:
                batch.abort(ProducerClosedError("the producer closed before a response came"))
                self._acc.deallocate(batch)
            raise
        except Exception as exc:
            # A bug must not strand records: fail whatever this request still holds.
            log.exception("unexpected error while sending to node %d", node)
            error = BrokerError(f"unexpected error while sending to node {node}: {exc!r}")
            error.__cause__ = exc
            for batch in unhandled:
                batch.fail(error)
                self._acc.deallocate(batch)
        finally:
            self._in_flight[node] -= 1
            self._in_flight_batches.difference_update(batches)
            for batch in batches:
                if batch.tp in self._muted:
                    self._muted.discard(batch.tp)
                    self._acc.unmute(batch.tp)
            self._notify_progress()
            self.wakeup()

    def _handle_response(
        self, batch: ProducerBatch, response: PartitionResponse | None, now: float
    ) -> None:
        if response is None:
            error = BrokerError(
                f"the broker's answer did not mention {batch.tp.topic}-{batch.tp.partition}",
                retriable=True,
            )
            self._handle_error(batch, error, now)
            return
        if response.error is None or response.error.errno == _DUPLICATE_SEQUENCE:
            if self._txn is not None and batch.base_sequence >= 0:
                self._txn.mark_acknowledged(batch.tp)
                self._next_expected[batch.tp] = batch.base_sequence + batch.record_count
            if batch.complete(response.base_offset, response.log_append_time):
                self._metrics.record_success(batch, now)
            self._acc.deallocate(batch)
            return
        self._handle_error(batch, response.error, now)

    def _handle_error(self, batch: ProducerBatch, error: AioAccumError, now: float) -> None:
        if batch.is_done:
            # Already failed by the delivery timeout while in flight; only the buffer was waiting.
            self._acc.deallocate(batch)
            return
        errno = error.errno if isinstance(error, BrokerError) else -1
        if errno == _MESSAGE_TOO_LARGE and batch.record_count > 1:
            self._metrics.record_split()
            self._acc.split_and_reenqueue(batch, now, self._backoff(batch.attempts + 1))
            return
        if (
            errno in _SEQUENCE_RESET_ERRORS
            and self._txn is not None
            and not self._follows_unresolved_batch(batch, errno)
        ):
            self._txn.request_reset()
        if self._can_retry(batch, error, now):
            if isinstance(error, BrokerError) and error.invalid_metadata:
                self._kafka.request_metadata_update([batch.tp.topic])
            self._metrics.record_retries(batch.record_count)
            self._acc.reenqueue(batch, now, self._backoff(batch.attempts + 1))
            return
        if batch.has_reached_delivery_timeout(self._delivery_timeout, now):
            error = self._delivery_timeout_error(batch, now, cause=error)
        self._fail_batch(batch, error, now)

    def _follows_unresolved_batch(self, batch: ProducerBatch, errno: int) -> bool:
        """Whether an out-of-order answer only means an earlier batch is not written yet.

        After a leader change, a batch retried to the new leader can arrive before the retry of
        the batch ahead of it. The broker then sees a gap, but no sequence is lost: the batch is
        retried after the earlier one, under the same producer id (Kafka's
        ``TransactionManager.canRetry``). A new producer id here would re-stamp batches whose
        earlier attempt may have been written, and the broker could no longer de-duplicate them.
        """
        if errno != _OUT_OF_ORDER_SEQUENCE:
            return False
        expected = self._next_expected.get(batch.tp)
        return expected is not None and batch.base_sequence > expected

    def _can_retry(self, batch: ProducerBatch, error: AioAccumError, now: float) -> bool:
        if batch.has_reached_delivery_timeout(self._delivery_timeout, now):
            return False
        if batch.attempts >= self._retries:
            return False
        if isinstance(error, BrokerError):
            if error.errno in _SEQUENCE_RESET_ERRORS and self._txn is not None:
                # Re-sent after the producer id reset, in its original order.
                return True
            return error.retriable
        # Timeouts and connection errors surfaced as ProducerTimeoutError are retriable.
        return True

    def _fail_batch(self, batch: ProducerBatch, error: BaseException, now: float) -> None:
        if batch.base_sequence >= 0 and self._txn is not None:
            # Its sequence range is never written: later batches must not wait for it.
            self._txn.request_reset()
        if batch.fail(error):
            self._metrics.record_errors(batch.record_count)
        self._acc.deallocate(batch)
        self._notify_progress()

    def _delivery_timeout_error(
        self, batch: ProducerBatch, now: float, cause: BaseException | None = None
    ) -> DeliveryTimeoutError:
        age_ms = (now - batch.created) * 1000
        message = (
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"{age_ms:.0f} ms has passed since batch creation "
            f"(delivery_timeout_ms={self._delivery_timeout * 1000:.0f})"
        )
        if cause is not None:
            message = f"{message}; last error: {cause}"
        return DeliveryTimeoutError(message)

    # --- shutdown

    async def _shutdown(self) -> None:
        tasks = list(self._request_tasks)
        if self._init_task is not None:
            tasks.append(self._init_task)
        if self._force_close or self._fatal is not None:
            for task in tasks:
                task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        error = ProducerClosedError("the producer closed before these records were sent")
        if self._fatal is not None and not isinstance(self._fatal, asyncio.CancelledError):
            error = ProducerClosedError(
                f"the producer stopped on an error before these records were sent: {self._fatal!r}"
            )
            error.__cause__ = self._fatal
        self._acc.close()
        for _ in self._acc.abort_undrained_batches(error):
            pass
        self._notify_progress()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
