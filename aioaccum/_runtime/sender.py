"""Sender: the one long-lived task that carries out what the sender core decides.

Theory of operation
-------------------
Kafka's ``Sender`` split in two, as h11 splits a protocol from its I/O: every decision is made
by :class:`~aioaccum._core.sender_core.SenderCore` from state and ``now``; this module only does
what its actions say. Each turn of :meth:`Sender.run` polls the core, writes each
:class:`~aioaccum._core.sender_core.Produce` on the node's connection at once (without waiting
for earlier responses), asks the adapter for metadata or a producer id when told to, and sleeps
until woken (a batch filled or opened, a response arrived, flush, close) or until the core's
next deadline: linger is a timer on the event loop, never a polling loop.

No task per request: a request's end (its answers, a timeout, a lost connection) comes back as
a callback from the connection, :meth:`Sender._on_answer`, which hands it straight to the core
and carries out what the core returns. Only two things await: a transaction adding partitions
before their first request (a task for that request alone), and a node's connection being
opened (one task per node, in :mod:`aioaccum._kafka.connections`, with its requests queued).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.sender_core import (
    Action,
    EpochBumped,
    InitProducerId,
    Produce,
    RefreshMetadata,
    SenderCore,
    Wait,
)
from aioaccum._kafka.adapter import KafkaAdapter, ProduceHandle, TaskProduce
from aioaccum._kafka.logs import Throttle
from aioaccum.errors import AioAccumError

__all__ = ["TURN_BYTES", "Sender"]

TURN_BYTES = 64 * 1024
"""How many bytes of new batches (in ``batch_size`` units, one batch at least, and within a
sixteenth of ``buffer_memory``) a caller that never suspends appends between the sender's turns,
when one is due (the accumulator's ``batches_per_turn``). A turn per batch made each request
carry a batch or two: with 16 KiB batches a turn every 4 records of 4 KB or 16 of 1 KB, and
the turns' own cost (the ready check, a request and its answer per node) took a third of the
CPU. Four 16 KiB batches a turn cut it by 28-33%; from 64 KiB batches up, a turn per batch as
before. Eight cut another 9% of the instructions per 1 KB record (6 partitions on 3 brokers),
but keyed records over 6,000 partitions, where nearly every record opens a batch, then cost
28 CPU s per million records instead of 18: four it stays."""

_INF = float("inf")
_QUIET_INIT_ATTEMPTS = 5  # InitProducerId failures logged at DEBUG before the first warning

log = logging.getLogger(__name__)


class Sender:
    """Runs a :class:`SenderCore` against a Kafka adapter on the event loop.

    Args:
        core: The decisions.
        kafka: The network layer.
        acks: 0, 1 or -1 ("all").
        request_timeout_ms: How long the broker may take to answer a produce request.
        clock: Monotonic seconds; the event loop's clock by default.
    """

    def __init__(
        self,
        core: SenderCore,
        kafka: KafkaAdapter,
        *,
        acks: int,
        request_timeout_ms: int,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.core = core
        self._kafka = kafka
        self._acks = acks
        self._request_timeout_ms = request_timeout_ms
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        # Requests sent and not ended: handle -> (node, batches, when the request started).
        self._requests: dict[ProduceHandle, tuple[int, list[ProducerBatch], float]] = {}
        self._wakeup: asyncio.Future[None] | None = None
        self._woken = False
        # While asleep, the loop time its timer is set for (inf: none); while a turn is
        # running or due, -inf.
        self._deadline = -_INF
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_scheduled = False
        self._progress: list[asyncio.Future[None]] = []
        self._ended_seen = 0
        self._stopped = False
        # Request failures to one broker: told once a minute, not once per request.
        self._failure_log = Throttle()
        self.before_produce: (
            Callable[[list[Any]], Callable[[], Awaitable[None]] | None] | None
        ) = None
        """Called with a request's batches before it is sent (a transaction adds their
        partitions): None to send at once, or a step to await first, in a task of its own; an
        :class:`AioAccumError` from either fails the request as a whole."""

    # --- control from the producer

    def wakeup(self) -> None:
        """Make the sender run a turn now (Kafka's ``sender.wakeup()``)."""
        self._woken = True
        fut = self._wakeup
        if fut is not None and not fut.done():
            fut.set_result(None)

    def wake_by(self, deadline: float) -> None:
        """Make the sender run a turn at ``deadline`` (loop time) at the latest: a batch opened
        that will have lingered enough then. Costs a comparison when the sender's own timer
        is due sooner, as it is while batches are lingering."""
        if deadline >= self._deadline:
            return
        fut = self._wakeup
        loop = self._loop
        if fut is None or fut.done() or loop is None:
            return
        self._deadline = deadline
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, _resolve, fut)

    def wake_by_threadsafe(self, deadline: float) -> None:
        """:meth:`wake_by` from another thread: a wake-up when the sender sleeps past it, or
        is in a turn (which may have looked at the queues before this batch opened, and then
        sleep on a deadline that knows nothing of it)."""
        current = self._deadline
        if deadline < current or current == -_INF:
            self.wakeup_threadsafe()

    def wants_turn(self) -> bool:
        """Whether the sender has a turn due now: woken, or its timer has passed. A caller
        that appends without ever suspending yields to it then."""
        if self._woken:
            return True
        loop = self._loop
        return loop is not None and loop.time() >= self._deadline

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
        self.core.initiate_close()
        self.wakeup()

    def force_close(self) -> None:
        """Stop now; whatever is not acknowledged fails with ``ProducerClosedError`` before this
        returns, so no record waits on a request or a task that never ends."""
        self.core.force_close()
        self.abandon()
        self.wakeup()

    def abandon(self) -> None:
        """End every record that has not ended and wake whoever waits for one (the last word
        of any stop, however the loop ended)."""
        try:
            self.core.abandon()
        finally:
            self._notify_progress(always=True)

    @property
    def in_flight_requests(self) -> int:
        return self.core.in_flight_requests

    @property
    def fatal_error(self) -> BaseException | None:
        return self.core.fatal_error

    def owns(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` is one the sender started (a transaction's step before a request,
        InitProducerId, or a request of an adapter that carries each out in a task)."""
        if task in self._tasks:
            return True
        return any(
            isinstance(handle, TaskProduce) and handle.task is task for handle in self._requests
        )

    @property
    def stopped(self) -> bool:
        """Whether the loop has ended: nothing will make progress any more."""
        return self._stopped

    async def wait_for_progress(self) -> None:
        """Return after the next batch ends, or at once once the sender has stopped (flush
        waits on this)."""
        if self._stopped:
            return
        fut = asyncio.get_running_loop().create_future()
        self._progress.append(fut)
        await fut

    def _notify_progress(self, always: bool = False) -> None:
        ended = self.core.batches_ended
        if ended == self._ended_seen and not always:
            return
        self._ended_seen = ended
        waiters, self._progress = self._progress, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # --- the loop

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        core = self.core
        try:
            while core.must_run:
                timeout = 0.0
                for action in core.poll(self._kafka, clock()):
                    if isinstance(action, Wait):
                        timeout = action.timeout
                    else:
                        self._carry_out(action)
                self._notify_progress()
                await self._sleep(loop, timeout)
            if core.fatal_error is not None:
                raise core.fatal_error
        except asyncio.CancelledError:
            core.force_close()
            raise
        except BaseException as exc:
            if core.fatal_error is None:
                log.error("the aioaccum sender stopped on an error; every record not yet "
                          "acknowledged fails with ProducerFailedError", exc_info=exc)
            core.fail(exc)
            raise
        finally:
            await self._shutdown()

    def _carry_out(self, action: Action) -> None:
        if isinstance(action, Produce):
            self._send(action)
        elif isinstance(action, RefreshMetadata):
            self._kafka.request_metadata_update(action.topics)
        elif isinstance(action, InitProducerId):
            self._start(self._init_producer_id())
        elif isinstance(action, EpochBumped):
            log.info(
                "producer id %d goes on with epoch %d after a sequence error: %d queued "
                "batch(es) re-stamped, %d failed as possibly written",
                action.producer_id, action.epoch, action.restamped, action.dropped,
            )

    def _start(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.wakeup()

    async def _sleep(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        if self._woken or delay <= 0:
            self._woken = False
            await asyncio.sleep(0)
            return
        fut = self._wakeup = loop.create_future()
        if delay == _INF:
            self._deadline = _INF
        else:
            self._deadline = loop.time() + delay
            self._timer = loop.call_at(self._deadline, _resolve, fut)
        try:
            await fut
        finally:
            self._wakeup = None
            self._deadline = -_INF
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        # A wakeup that resolved the future has been seen; one that came later stays set.
        self._woken = False

    # --- requests

    def _now(self) -> float:
        clock = self._clock
        if clock is not None:
            return clock()
        loop = self._loop
        return (loop or asyncio.get_running_loop()).time()

    async def _init_producer_id(self) -> None:
        try:
            producer_id, epoch = await self._kafka.init_producer_id()
        except AioAccumError as exc:
            self.core.on_producer_id_error(exc, self._now())
            attempts = self.core.init_attempts
            if self.core.fatal_error is not None:
                return
            # A cluster just started answers COORDINATOR_LOAD_IN_PROGRESS for a few rounds:
            # worth a word only when it persists.
            if attempts < _QUIET_INIT_ATTEMPTS:
                log.debug("InitProducerId failed (attempt %d): %s", attempts, exc)
            elif (held := self._failure_log.allow("producer id")) is not None:
                log.warning(
                    "no producer id after %d attempts (last: %s); nothing is sent until one "
                    "comes: is __transaction_state available on the brokers?%s",
                    attempts, exc,
                    f" ({held} more failed attempt(s) since the last message)" if held else "",
                )
            return
        except Exception as exc:
            # A bug: stop the producer with it rather than wait for an id that never comes.
            log.exception("unexpected error while asking for a producer id")
            self.core.fail(exc)
            return
        restamped = self.core.on_producer_id(producer_id, epoch)
        if restamped:
            log.info("new producer id %d epoch %d after a sequence error; %d queued batch(es) "
                     "re-stamped", producer_id, epoch, restamped)

    def _send(self, request: Produce) -> None:
        node, batches = request
        # request-latency counts from here, as Java's from the request's creation after drain.
        sent = self._now()
        before = self.before_produce
        if before is not None:
            try:
                step = before(batches)
            except AioAccumError as exc:
                self._request_failed(node, batches, exc)
                return
            except Exception as exc:
                self._request_broken(node, batches, exc)
                return
            if step is not None:
                self._start(self._send_after(node, batches, sent, step))
                return
        self._write(node, batches, sent)

    def _write(self, node: int, batches: list[ProducerBatch], sent: float) -> None:
        try:
            # A loop, not a comprehension: compiled, ``batch`` is typed and each entry a C call.
            entries = []
            for batch in batches:
                entries.append(batch.request_entry())
            handle = self._kafka.send_produce(
                node, self._acks, self._request_timeout_ms, entries, self._on_answer
            )
        except Exception as exc:
            self._request_broken(node, batches, exc)
            return
        self._requests[handle] = (node, batches, sent)

    async def _send_after(
        self,
        node: int,
        batches: list[ProducerBatch],
        sent: float,
        step: Callable[[], Awaitable[None]],
    ) -> None:
        """A request whose partitions must join the transaction first: that step, then the
        write. Nothing of it is written before the step ends."""
        try:
            await step()
        except asyncio.CancelledError:
            self.core.on_request_cancelled(node, batches)
            self._ended()
            raise
        except AioAccumError as exc:
            self._request_failed(node, batches, exc)
            return
        except Exception as exc:
            self._request_broken(node, batches, exc)
            return
        self._write(node, batches, sent)

    def _on_answer(
        self, handle: ProduceHandle, answers: Any, error: BaseException | None
    ) -> None:
        """A request ended (answered, timed out, lost): the core decides what follows."""
        found = self._requests.pop(handle, None)
        if found is None:
            return  # given up at shutdown
        node, batches, sent = found
        if error is not None:
            if isinstance(error, AioAccumError):
                self._request_failed(node, batches, error)
            else:
                self._request_broken(node, batches, error)
            return
        core = self.core
        try:
            for action in core.on_produce_response(node, batches, answers, self._now(), sent):
                self._carry_out(action)
        except Exception as exc:
            self._request_broken(node, batches, exc)
            return
        self._ended()

    def _request_failed(
        self, node: int, batches: list[ProducerBatch], error: AioAccumError
    ) -> None:
        try:
            self._say_request_failed(node, error, batches)
            for action in self.core.on_produce_error(node, batches, error, self._now()):
                self._carry_out(action)
        except Exception as exc:
            self._request_broken(node, batches, exc)
            return
        self._ended()

    def _request_broken(
        self, node: int, batches: list[ProducerBatch], error: BaseException
    ) -> None:
        """A bug while sending or answering: fail what this request holds, then stop the
        producer, for the state it left (sequences, mutes, buffers) cannot be trusted any
        more."""
        core = self.core
        try:
            log.error("unexpected error while sending to node %d", node, exc_info=error)
            core.fail(error)
        finally:
            try:
                # Sent, and no answer taken in: ProducerFailedError, possibly written.
                core.on_request_cancelled(node, batches)
            finally:
                self._ended()

    def _ended(self) -> None:
        # Buffers came back even where no batch ended (an expired one was waiting for
        # them), and flush() waits for those too.
        self._notify_progress(always=True)
        self.wakeup()

    def _say_request_failed(
        self, node: int, error: AioAccumError, batches: list[Any]
    ) -> None:
        held = self._failure_log.allow((node, type(error)))
        if held is None:
            return
        log.warning(
            "a produce request to broker %d failed (%d batch(es)): %s; retrying until each "
            "record's delivery_timeout_ms (with journal_dir, until it is delivered): is the "
            "broker up and reachable?%s",
            node, len(batches), error,
            f" ({held} more failed request(s) to it since the last message)" if held else "",
        )

    # --- shutdown

    async def _shutdown(self) -> None:
        self._stopped = True
        finished = False
        requests = list(self._requests.items())
        self._requests.clear()
        try:
            # Every record has an outcome when the loop ends on its own (see must_run), so a
            # request still out only holds buffers: giving up on it loses nothing.
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            for handle, _ in requests:
                handle.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            for handle, _ in requests:
                await handle.released()
            finished = True
        finally:
            if finished:
                # No transport holds their buffers now (an aborted connection dropped them).
                for _, (node, batches, _sent) in requests:
                    self.core.on_request_cancelled(node, batches)
            self.abandon()
            if finished:
                # No request reads a buffer now, including one whose task never ran.
                self.core.release_buffers()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
