"""Producer: the public face: config in, pool, accumulator and sender wired, send/flush/close.

``await producer.send(...)`` waits only for the topic's metadata and for buffer memory, both
bounded by ``max_block_ms``, and returns a future that the sender resolves with the record's
:class:`RecordMetadata` once the broker acknowledged it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, cast

from aioaccum._core.accumulator import BufferRequest, RecordAccumulator
from aioaccum._core.batch import first_unfinished
from aioaccum._core.futures import FutureRecordMetadata, RecordMetadata, ThreadRecordFuture
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.lifecycle import ProducerState, move
from aioaccum._core.metrics import MetricValue, ProducerMetrics
from aioaccum._core.partitioner import BuiltInPartitioner
from aioaccum._core.records import estimate_size_in_bytes_upper_bound
from aioaccum._core.validate import (
    as_bytes,
    checked_timestamp,
    record_too_large,
    validate_headers,
    validate_topic,
    wall_clock_ms,
)
from aioaccum._kafka.adapter import AioKafkaAdapter, KafkaAdapter
from aioaccum._producer.send_arrow import send_arrow
from aioaccum._producer.send_many import NO_HEADERS, RECORD_BOUND, send_each, send_many
from aioaccum._runtime import journaled
from aioaccum._runtime.from_thread import (
    enable_threads,
    refuse_to_block_the_loop,
    wait_for_topic_from_thread,
)
from aioaccum._runtime.hooks import SendHooks
from aioaccum._runtime.journaling import at_least_once, close_journal, start_journal
from aioaccum._runtime.loops import LOOP_BUSY, LOOP_STOPPED, close_kafka, read_on
from aioaccum._runtime.pool import BufferPool
from aioaccum._runtime.send_records import RecordLike, send_records
from aioaccum._runtime.sender import Sender
from aioaccum._runtime.transactions import PreparedTransaction, Transactions, TxnState
from aioaccum._runtime.wiring import build_machinery
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import (
    AioAccumError,
    ConfigError,
    InvalidTxnStateError,
    ProducerClosedError,
    ProducerFailedError,
    TransactionAbortableError,
)

__all__ = [
    "FutureRecordMetadata",
    "Producer",
    "ProducerState",
    "RecordMetadata",
    "ThreadRecordFuture",
]

log = logging.getLogger(__name__)

_CLOSE_GRACE_S = 1.0  # for connections and tasks once every record has its outcome
# Set in the context of the sender task (and the tasks it starts) to the producer it serves.
_SENDER_OF: contextvars.ContextVar[Producer | None] = contextvars.ContextVar(
    "aioaccum_sender_of", default=None
)

_TRANSITIONS = {
    ProducerState.NEW: frozenset({ProducerState.RUNNING, ProducerState.CLOSED}),
    ProducerState.RUNNING: frozenset({ProducerState.CLOSED}),
    ProducerState.CLOSED: frozenset(),
}


class Producer:
    """An asyncio Kafka producer with a bounded buffer pool and per-partition batching.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of them.
        **config: Any setting of :class:`~aioaccum.config.ProducerConfig` by its Python name.

    Use ``async with Producer(...) as producer:`` or call :meth:`start` and :meth:`close`.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        config: ProducerConfig | None = None,
        kafka: KafkaAdapter | None = None,
        **settings: Any,
    ) -> None:
        config = ProducerConfig.from_arguments(config, bootstrap_servers, settings)
        self._config = config
        self._kafka_override = kafka
        self._kafka: KafkaAdapter | None = None
        self._partitions_cache: dict[str, list[int]] = {}  # see AioKafkaAdapter.topic_partitions
        self._pool: BufferPool | None = None
        self._acc: RecordAccumulator | None = None
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._metrics = ProducerMetrics(
            window=config.metrics_sample_window_ms / 1000,
            samples=config.metrics_num_samples,
            windowed=config.metrics_enabled,
            client_id=config.client_id,
        )
        self._partitioner = BuiltInPartitioner(
            config.sticky_partition_bytes, adaptive=config.partitioner_adaptive_partitioning_enable
        )
        self._state = ProducerState.NEW
        self._max_record_size = min(config.max_request_size, config.buffer_memory)
        self._sticky = config.partitioner is None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        # Read once per record: kept as plain attributes, away from the config's lookups.
        self._parts: tuple[KafkaAdapter, RecordAccumulator, Sender] | None = None
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        self._ignore_keys = config.partitioner_ignore_keys
        self._max_block_ms: float = config.max_block_ms
        self._batches_seen = 0
        self._transactions: Transactions | None = None
        # Interceptors and tracing (aioaccum._runtime.hooks): None when neither is set, and then
        # the send methods' one test of it is all they cost.
        self._hooks = SendHooks.for_config(config)
        self._journal: Any = None  # journal_sync='always': send() awaits its group commit
        self.journal_recovered = 0
        """Records a previous producer left in ``journal_dir``, sent again at :meth:`start`."""

    journal_at_least_once = property(at_least_once)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Producer:
        """Build from Java-style properties (``{"bootstrap.servers": ..., "linger.ms": 5}``)."""
        return cls(config=ProducerConfig.from_properties(properties))

    @property
    def config(self) -> ProducerConfig:
        return self._config

    # --- lifecycle

    async def start(self) -> None:
        """Connect to the cluster and start the sender task."""
        if self._state is ProducerState.RUNNING:
            return
        if self._state is ProducerState.CLOSED:
            raise ProducerClosedError("this producer was closed; create a new one")
        cfg = self._config
        if cfg.otel_metrics:
            from aioaccum._runtime.tracing import check_metrics_target  # only now: optional

            check_metrics_target(self, cfg.meter_provider)  # before anything is started
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        kafka = self._kafka_override or AioKafkaAdapter(cfg)
        if isinstance(kafka, AioKafkaAdapter):
            # A topic deleted and created again with fewer partitions would leave keyless
            # records stuck to a partition that is gone, failing at delivery_timeout_ms: a new
            # partition count draws the sticky partition afresh.
            kafka.on_partition_count_change(self._partitioner.remove_topic)
        await kafka.start()
        self._kafka, self._partitions_cache = kafka, getattr(kafka, "topic_partitions", {})
        self._pool, self._acc, self._sender, txn = build_machinery(
            cfg, kafka, self._partitioner, self._metrics, self._loop)
        # The sender's tasks, and every task they start, carry this producer in their context.
        context = contextvars.copy_context()
        context.run(_SENDER_OF.set, self)
        self._sender_task = asyncio.get_running_loop().create_task(
            self._sender.run(), name="aioaccum-sender", context=context)
        self._journal, self.journal_recovered = await start_journal(  # owed ones go first
            self._acc, kafka, self._pool, cfg)
        self._parts = (kafka, self._acc, self._sender)
        self._move(ProducerState.RUNNING)
        if cfg.otel_metrics:
            from aioaccum._runtime.tracing import observe_metrics  # only now: optional

            try:
                observe_metrics(self, cfg.meter_provider)
            except ConfigError:
                # Another producer of the same client_id started meanwhile.
                await self.close()
                raise
        if cfg.transactional_id is not None:
            await self._init_transactions(kafka, txn)

    async def _init_transactions(
        self, kafka: KafkaAdapter, txn: TransactionManager | None
    ) -> None:
        if not isinstance(kafka, AioKafkaAdapter) or txn is None:
            raise ConfigError("transactions need the Kafka adapter aioaccum starts itself")
        transactions = Transactions(
            self._config, kafka, txn, flush=self.flush, allow_send=self._allow_send
        )
        self._transactions = transactions
        assert self._sender is not None
        self._sender.before_produce = transactions.before_produce
        self._parts = None  # send() only inside a transaction
        try:
            await transactions.initialize()
        except BaseException:
            await self.close(timeout=0)
            raise

    def _allow_send(self, allowed: bool) -> None:
        """A transaction opened or ended: send() appends only while one is open."""
        if allowed and self._state is ProducerState.RUNNING:
            assert self._kafka is not None
            assert self._acc is not None
            assert self._sender is not None
            self._parts = (self._kafka, self._acc, self._sender)
        else:
            self._parts = None

    # --- transactions (Java's names; transactional_id must be set)

    def _txn(self, what: str) -> Transactions:
        transactions = self._transactions
        if transactions is None:
            if self._config.transactional_id is None:
                raise InvalidTxnStateError(
                    f"cannot {what}: the producer has no transactional_id; set "
                    "transactional_id='...' to use transactions"
                )
            raise InvalidTxnStateError(f"cannot {what}: call await producer.start() first")
        if self._state is ProducerState.CLOSED:
            raise ProducerClosedError(f"cannot {what}: the producer is closed")
        return transactions

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on commit or abort together."""
        self._txn("begin a transaction").begin()

    async def commit_transaction(self) -> None:
        """Flush, then commit the transaction: a read_committed consumer sees its records.

        Raises:
            TransactionAbortableError: A record of it failed: call :meth:`abort_transaction`.
            ProducerFencedError: Another producer took the transactional id; close this one.
            ProducerTimeoutError: The coordinator did not confirm within ``max_block_ms``;
                calling it again retries.
        """
        self._refuse_inside_sender("commit_transaction")
        await self._txn("commit").commit()

    async def abort_transaction(self) -> None:
        """Drop what is still queued, wait for requests out, then abort the transaction: none
        of its records becomes visible to a read_committed consumer."""
        self._refuse_inside_sender("abort_transaction")
        await self._txn("abort").abort()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Self]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it (then re-raises) when the block raises."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_after_error()
            raise
        try:
            await self.commit_transaction()
        except TransactionAbortableError:
            # The block's records failed: the next transaction() must find the producer ready.
            await self._abort_after_error()
            raise

    async def _abort_after_error(self) -> None:
        transactions = self._transactions
        if transactions is not None and transactions.state is not TxnState.FATAL_ERROR:
            try:
                await self.abort_transaction()
            except AioAccumError as exc:
                log.warning("aborting the transaction after an error failed: %s", exc)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[Any, int], group_id: str
    ) -> None:
        """Commit a consumer group's offsets with the transaction (consume-transform-produce).

        Args:
            offsets: ``{(topic, partition): next offset to consume}``; aiokafka's and Java's
                ``TopicPartition`` work as keys.
            group_id: The consumer group whose position moves when the transaction commits.
        """
        self._refuse_inside_sender("send_offsets_to_transaction")
        await self._txn("send offsets").send_offsets(offsets, group_id)

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush, and leave the transaction open for :func:`aioaccum.transactions.commit_prepared`
        to commit from any process (the first phase of a two-phase commit). :meth:`close`
        does not abort a prepared transaction; the broker does after
        ``transaction_timeout_ms`` if nobody commits it.

        Raises:
            TransactionAbortableError: A record of it failed: abort instead.
        """
        self._refuse_inside_sender("prepare_transaction")
        return await self._txn("prepare the transaction").prepare()

    @property
    def transaction_version(self) -> int:
        """2 when the cluster runs KIP-890's transaction protocol, 1 for the classic one, 0
        before :meth:`start` or without a transactional id."""
        return 0 if self._transactions is None else self._transactions.transaction_version

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting records, deliver what is buffered, then release everything.

        Args:
            timeout: Seconds to wait for buffered records. ``None`` waits until each has an
                outcome, which the delivery timeout bounds: at most ``delivery_timeout_ms``
                after the last ``send()``. Records still unsent after it fail with
                :class:`ProducerClosedError`. Closing the connections afterwards takes at most
                another second, even when a broker does not answer.
        """
        self._refuse_inside_sender("close")
        if self._state is ProducerState.CLOSED:
            return
        cancelled: BaseException | None = None
        transactions = self._transactions
        if transactions is not None and self._state is ProducerState.RUNNING and timeout != 0:
            loop = asyncio.get_running_loop()
            began = loop.time()
            try:
                async with asyncio.timeout(timeout):
                    await transactions.close()
            except TimeoutError:
                log.warning("close(%s) ended before the open transaction was aborted", timeout)
            except asyncio.CancelledError as exc:
                cancelled = exc  # stop at once below, as a cancelled close() does
                timeout = 0
            if timeout:
                timeout = max(timeout - (loop.time() - began), 0.0)
        self._move(ProducerState.CLOSED)
        self._parts = None
        sender, task = self._sender, self._sender_task
        if timeout is None:
            cfg = self._config
            # A backstop only: the sender's expiry ends every record well before it.
            timeout = (cfg.delivery_timeout_ms + cfg.request_timeout_ms) / 1000
        try:
            if sender is not None and task is not None:
                sender.initiate_close()
                try:
                    done, _ = await asyncio.wait({task}, timeout=timeout)
                except BaseException:
                    # close() itself was cancelled (a shutdown deadline): stop at once rather
                    # than leave the sender working against a closed connection.
                    sender.force_close()
                    raise
                if not done:
                    sender.force_close()  # every record has its outcome when this returns
                    done, _ = await asyncio.wait({task}, timeout=_CLOSE_GRACE_S)
                if not done:
                    # Its records have their outcomes; only a task that ignores cancellation
                    # can keep it, and close does not wait for that.
                    log.warning(
                        "the sender did not stop within %.1f s of being told to; cancelling it",
                        _CLOSE_GRACE_S,
                    )
                    task.cancel()
                if task.done() and not task.cancelled() and task.exception() is not None:
                    # Already logged by the sender, and every record it held has failed.
                    log.debug("sender ended with %r", task.exception())
        finally:
            if self._pool is not None:
                self._pool.close()
            await close_journal(self._acc)  # after the sender: its outcomes are journaled
            if self._kafka is not None:
                await close_kafka(self._kafka, _CLOSE_GRACE_S)
            if self._hooks is not None:
                self._hooks.close()  # the interceptors' close(), as Java's close() calls it
        if cancelled is not None:
            raise cancelled

    def _refuse_inside_sender(self, what: str) -> None:
        """Raise instead of deadlocking when the sender's own tasks would wait for the sender.

        Code in the network adapter runs in those tasks; a task it starts is not one of them
        (it carries the context, but the sender does not own it) and may wait."""
        if _SENDER_OF.get() is not self:
            return
        task = asyncio.current_task()
        sender = self._sender
        if task is not None and (
            task is self._sender_task or (sender is not None and sender.owns(task))
        ):
            raise RuntimeError(
                f"producer.{what}() was called from one of the producer's own sender tasks "
                "(code inside its network adapter), and would wait for that task itself: a "
                f"deadlock; run it in another task, e.g. asyncio.ensure_future(producer.{what}())"
            )

    # --- sending

    def _move(self, state: ProducerState) -> None:
        self._state = move("the producer", self._state, state, _TRANSITIONS)

    @property
    def state(self) -> ProducerState:
        """``NEW`` until :meth:`start`, ``RUNNING``, then ``CLOSED`` from :meth:`close` on."""
        return self._state

    def _running_parts(
        self, sending: bool = True
    ) -> tuple[KafkaAdapter, RecordAccumulator, Sender]:
        """The parts, or why there are none; ``sending``: for an append, which a transactional
        producer allows only inside a transaction."""
        if self._state is ProducerState.CLOSED:
            raise ProducerClosedError("cannot send: the producer is closed")
        if self._kafka is None or self._acc is None or self._sender is None:
            raise ProducerClosedError("cannot send: call await producer.start() first")
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise ProducerFailedError(
                f"the producer stopped on an error and takes no more records: {fatal!r}; "
                "create a new one"
            ) from fatal
        if sending and self._transactions is not None:
            self._transactions.check_send()
        return self._kafka, self._acc, self._sender

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> FutureRecordMetadata:
        """Buffer one record; return a future of its metadata.

        Waits (up to ``max_block_ms``) only for the topic's metadata and for memory (with
        ``journal_dir``, for journal room, and for memory up to journal_spill_after_ms only).

        The future is a :class:`FutureRecordMetadata` (Java's record future): it shares its
        batch's outcome and builds the :class:`RecordMetadata` when read. Await it, gather it,
        or wait for many at the cost of their batches with :func:`aioaccum.wait_all`.

        Cancellation: a ``send()`` that raises (``CancelledError`` included) has buffered
        nothing, and one that returns has buffered the record for good. The returned future
        only reports the outcome: the record is delivered whether or not anyone awaits it.
        Cancelling it, or cancelling a task while it awaits it (as ``asyncio.timeout`` or
        ``wait_for`` do), cancels that record's future alone, so its outcome is no longer
        reported, but the record is still sent, and is still waited for by :meth:`flush` and
        :meth:`close` (as in the Java client, where a record's future cannot be cancelled).
        To bound the wait and keep the outcome, await ``asyncio.shield(future)``.

        Raises:
            ProducerClosedError: The producer is closed or not started.
            SerializationError: Key, value or headers are not bytes and no serializer was given,
                or a serializer returned something else.
            ConfigError: The topic name, partition or ``timestamp_ms`` is invalid.
            RecordTooLargeError: The record exceeds ``max_request_size`` or ``buffer_memory``.
            BufferExhaustedError: No memory freed within ``max_block_ms`` (no journal_dir).
            ProducerTimeoutError: The topic's metadata did not arrive within ``max_block_ms``.
        """
        # Interceptors and tracing (the hooks) see the record first, and hear of its outcome
        # whether the append takes it or refuses it. Unset, this one test is all they cost.
        hooks = self._hooks
        record = span = None
        if hooks is not None:
            record, span = hooks.begin(topic, value, key, partition, timestamp_ms, headers)
            topic, value, key, partition, timestamp_ms, headers = record
        try:
            if hooks is not None:
                assert record is not None
                headers = hooks.headers(record, span)
            if self._parts is None:  # not started, or closed; a sender that failed: append refuses
                self._running_parts()
            # Read from the attributes, not the tuple: compiled, they are typed, and calls on
            # them skip Python's call protocol.
            acc = self._acc
            assert acc is not None  # set by start(), which made _parts
            if acc.batches_created - self._batches_seen >= acc.batches_per_turn:
                # A caller that never has to wait for memory never suspends, and the sender
                # would not run until the pool is full. Every few new batches (a turn's worth,
                # see TURN_BYTES), yield to it if its turn is due (a batch filled, a linger
                # ended): a cost shared by those batches' records. The yield comes before the
                # next append, not after the one that opened the batch: a send() cancelled here
                # has buffered nothing, so a send() that raises never delivers and one that
                # returns always does.
                self._batches_seen = acc.batches_created
                sender = self._sender
                assert sender is not None  # set by start(), with _acc
                if sender.wants_turn():
                    await asyncio.sleep(0)
                    if self._parts is None:
                        self._running_parts()
            kafka = self._kafka
            assert kafka is not None
            fast = (timestamp_ms is None and not headers and self._value_serializer is None
                    and self._key_serializer is None and (value is None or type(value) is bytes)
                    and (key is None or type(key) is bytes))
            if fast:  # the common record (bytes, no headers, stamped now): _checked in place
                header_list: Sequence[tuple[str, bytes | None]] = NO_HEADERS
                timestamp = wall_clock_ms()
                size = RECORD_BOUND + (0 if key is None else len(key)) + (
                    0 if value is None else len(value))
            if not fast or size > self._max_record_size:  # the rest, and records near the limit
                key, value, header_list, timestamp, size = self._checked(
                    key, value, headers, timestamp_ms
                )
            partitions = self._partitions_cache.get(topic) or kafka.partitions_for_topic(topic)
            max_block_ms: float = self._max_block_ms
            if not partitions:
                partitions, max_block_ms = await self._wait_for_topic(kafka, topic)
                if self._parts is None:
                    self._running_parts()  # closed, or the transaction ended meanwhile
            # Most records fit the open batch or a free pooled buffer: no suspension.
            appended = acc.append(
                topic, partition, timestamp, key, value, header_list, size, partitions, kafka,
                -1.0,  # the accumulator reads the loop's clock if the record opens a batch
            )
            if type(appended) is BufferRequest:
                appended = await self._append_after_wait(
                    acc, appended, max_block_ms, topic, partition, timestamp, key, value,
                    header_list, size, partitions, kafka,
                )
        except BaseException as exc:
            if hooks is not None:
                assert record is not None
                hooks.refused(record, span, exc)
            raise
        if self._journal is not None:
            await self._journal.committed()  # journal_sync='always': after an fdatasync
        if hooks is not None:
            assert record is not None
            hooks.follow(appended, record, span)  # type: ignore[arg-type]  # as below
        return appended  # type: ignore[return-value]  # a BufferRequest never comes back twice

    def _checked(
        self, key: Any, value: Any, headers: Sequence[tuple[str, bytes | None]] | None,
        timestamp_ms: int | None,
    ) -> tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int, int]:
        """One record serialized and checked: key, value, headers, timestamp, and an upper
        bound of its size. Raises the errors :meth:`send` documents."""
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if key is not None and type(key) is not bytes:
            key = as_bytes("key", key)
        if value is not None and type(value) is not bytes:
            value = as_bytes("value", value)
        header_list = validate_headers(headers) if headers else NO_HEADERS
        timestamp = checked_timestamp(timestamp_ms)
        # A cheap bound first (two 5-byte varints for the lengths); the exact one only near it.
        size = RECORD_BOUND + (0 if key is None else len(key)) + (
            0 if value is None else len(value)
        )
        if header_list or size > self._max_record_size:
            size = estimate_size_in_bytes_upper_bound(key, value, header_list)
            if size > self._max_record_size:
                self._raise_too_large(size)
        return key, value, header_list, timestamp, size

    def send_from_thread(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> ThreadRecordFuture:
        """:meth:`send` for plain threads: buffer one record from any thread.

        The calling thread appends the record itself (the accumulator is shared under a lock,
        as in Java's producer), so records of one thread keep their order, and nothing is
        handed between threads per record. It blocks while the topic's metadata is fetched and
        while the buffer pool has no room, each up to ``max_block_ms``, waiting for memory in
        the same queue as coroutines.

        Returns:
            A :class:`ThreadRecordFuture`: ``result(timeout)`` blocks until the broker answered.

        Raises:
            The errors of :meth:`send`, and ``RuntimeError`` when it would have to wait on the
            loop's own thread (in a record future's callback, say): waiting there would stop the
            loop that has to free the memory or fetch the metadata.
        """
        hooks = self._hooks  # as in send()
        record = span = None
        if hooks is not None:
            record, span = hooks.begin(topic, value, key, partition, timestamp_ms, headers)
            topic, value, key, partition, timestamp_ms, headers = record
        try:
            if hooks is not None:
                assert record is not None
                headers = hooks.headers(record, span)
            if self._parts is None:
                self._running_parts()
            if self._transactions is not None:
                # A thread's append could race a commit on the loop's thread and land in the
                # next transaction: transactions are for coroutines.
                raise InvalidTxnStateError(
                    "send_from_thread() does not run in transactions; send from a coroutine on "
                    "the producer's loop"
                )
            acc = self._acc
            kafka = self._kafka
            loop = self._loop
            assert acc is not None  # set by start(), which made _parts
            assert kafka is not None
            assert loop is not None
            if not acc.threaded:
                enable_threads(acc, loop, self._loop_thread)
            key, value, header_list, timestamp, size = self._checked(
                key, value, headers, timestamp_ms
            )
            partitions = kafka.partitions_for_topic(topic)
            max_block_ms: float = self._max_block_ms
            if not partitions:
                refuse_to_block_the_loop(self._loop_thread)
                partitions, max_block_ms = wait_for_topic_from_thread(
                    self._wait_for_topic(kafka, topic), loop, topic, max_block_ms
                )
            appended = acc.append(
                topic, partition, timestamp, key, value, header_list, size, partitions, kafka,
                -1.0, None, True,
            )
            if type(appended) is BufferRequest:
                pool = self._pool
                assert pool is not None
                refuse_to_block_the_loop(self._loop_thread)
                buffer = pool.allocate_blocking(appended.size, max_block_ms)
                appended = acc.append(
                    topic, partition, timestamp, key, value, header_list, size, partitions,
                    kafka, loop.time(), (appended, buffer), True,
                )
        except BaseException as exc:
            if hooks is not None:
                assert record is not None
                hooks.refused(record, span, exc)
            raise
        if self._journal is not None:
            self._journal.committed_from_thread()
        if hooks is not None:
            assert record is not None
            hooks.follow_from_thread(appended, record, span, loop)  # type: ignore[arg-type]
        return appended  # type: ignore[return-value]  # a BufferRequest never comes back twice

    async def _append_after_wait(
        self,
        acc: RecordAccumulator,
        request: BufferRequest,
        max_block_ms: float,
        topic: str,
        partition: int | None,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        size: int,
        partitions: Sequence[int],
        kafka: KafkaAdapter,
    ) -> FutureRecordMetadata:
        """Wait for the buffer the append asked for, then append with it (nothing in between
        can suspend, so a cancelled wait has appended nothing and a granted buffer is used)."""
        pool = self._pool
        loop = self._loop
        assert pool is not None
        assert loop is not None
        if isinstance(acc, journaled.JournaledAccumulator):  # journal room, or memory, or disk
            return await journaled.journaled_wait(self, acc, request, max_block_ms, topic,
                partition, timestamp_ms, key, value, headers, size, partitions, kafka)
        buffer = await pool.allocate(request.size, max_block_ms)
        if self._parts is None:
            # Closed, or a transaction ended while this send waited: the buffer goes back.
            pool.deallocate(buffer)
            self._running_parts()
        appended = acc.append(
            topic, partition, timestamp_ms, key, value, headers, size, partitions, kafka,
            loop.time(), granted=(request, buffer),
        )
        assert not isinstance(appended, BufferRequest)
        return cast(FutureRecordMetadata, appended)  # what try_append makes for the loop

    async def _wait_for_topic(self, kafka: KafkaAdapter, topic: str) -> tuple[Sequence[int], float]:
        """The topic's partitions once metadata has them, and what is left of max_block_ms."""
        validate_topic(topic)
        start = time.monotonic()
        partitions = await kafka.wait_for_topic(topic, self._max_block_ms / 1000)
        return partitions, max(self._max_block_ms - (time.monotonic() - start) * 1000, 0.0)

    def _raise_too_large(self, size: int) -> None:
        raise record_too_large(size, self._config.max_request_size, self._config.buffer_memory)

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        record_headers: Iterable[Sequence[tuple[str, bytes | None]] | None] | None = None,
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """Buffer many records for one topic; return one future of all their metadata.

        The bulk form of :meth:`send`: the same checks, partitioning, batching and memory wait,
        but one call and one future for the lot, which saves most of the per-record overhead.
        Records go in the order given; each ``key`` pairs with the ``value`` at its position.

        Args:
            topic: The topic of every record.
            values: The values (bytes, or anything ``value_serializer`` takes).
            keys: Keys, as many as values; ``None`` sends every record without a key.
            partition: Send every record to this partition instead of partitioning.
            timestamp_ms: One create time for every record; default now.
            headers: Headers every record carries, as ``(str, bytes)`` pairs.
            record_headers: Headers per record, as many entries as values (``None`` or a
                sequence of pairs each); they follow ``headers`` if both are given.

        Returns:
            A future of the records' :class:`RecordMetadata` in input order (a sequence that
            builds each when read), set once every record is acknowledged; if any record
            fails, it fails with the first error once every record has ended. Cancelling it
            does not stop delivery.

        Raises:
            The errors of :meth:`send`. Every record is serialized and checked before the first
            is buffered, so a bad one refuses the whole call. A wait for memory that times out,
            or a cancellation, can stop the call midway: the records already buffered stay
            buffered and will be delivered, and a note on the exception says how many.
            With interceptors or tracing set, each record goes through :meth:`send` in turn
            (its own ``on_send`` and span), and is checked as it goes.
        """
        if self._hooks is not None:
            return await send_each(
                self.send, topic, values, keys, partition, timestamp_ms, headers, record_headers
            )
        return await send_many(
            self, topic, values, keys, partition, timestamp_ms, headers, record_headers
        )

    async def send_records(
        self, records: Iterable[RecordLike]
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """Buffer records for any topics; return one future of all their metadata.

        :meth:`send_many` for records that differ in topic, partition or timestamp: each record
        is a tuple ``(topic, value, key, partition, timestamp_ms, headers)`` (fields after
        ``value`` may be left out) or an object with those attributes (``ProducerRecord``).
        Consecutive records with the same topic, partition and timestamp go through
        :meth:`send_many` together (its cost); records of one partition keep their order.

        Returns:
            A future of the records' :class:`RecordMetadata` in input order, set once every
            record is acknowledged; if any fails, it fails with the error of the first failed
            record's group, once all have ended. Cancelling it does not stop delivery.

        Raises:
            The errors of :meth:`send_many`. Each record's shape, topic, partition, timestamp
            and headers are checked before any is buffered; keys and values are serialized
            group by group, and a wait for memory that times out (or a cancellation) can stop
            the call midway: what was buffered stays buffered; notes on the exception say which.
        """
        return await send_records(self, records)

    async def send_arrow(
        self, rows: Any, topic: str | None = None
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """Buffer each row of a ``pyarrow.RecordBatch``, encoded from its buffers (no object per
        row); one future of all, as :meth:`send_many`. Columns as Spark's Kafka sink's (``value``,
        ``key``, ``headers``, ``topic``, ``partition``): see docs/arrow.md."""
        return await send_arrow(self, rows, topic)

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until each of those records has ended.

        Records appended while flushing are not waited for.
        """
        self._refuse_inside_sender("flush")
        _, acc, sender = self._running_parts(sending=False)
        pending = acc.incomplete_batches()
        acc.begin_flush()
        sender.wakeup()
        try:
            async with asyncio.timeout(timeout):
                pending += await journaled.load_spilled(acc, sender)  # records on disk, first
                first = 0  # O(n) checks for n batches in all (first_unfinished says why)
                while (first := first_unfinished(pending, first)) < len(pending):
                    if sender.fatal_error is not None:
                        raise ProducerFailedError(
                            f"the producer stopped on an error while flushing: "
                            f"{sender.fatal_error!r}; create a new one"
                        ) from sender.fatal_error
                    if sender.stopped:
                        raise ProducerClosedError("the producer closed while flushing")
                    await sender.wait_for_progress()
        finally:
            acc.end_flush()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions, waiting up to ``max_block_ms`` for its metadata."""
        kafka, _, _ = self._running_parts(sending=False)
        validate_topic(topic)
        partitions = kafka.partitions_for_topic(topic)
        if not partitions:
            partitions = await kafka.wait_for_topic(topic, self._config.max_block_ms / 1000)
        return list(partitions)

    def pending_records(self) -> int:
        """Records :meth:`send` accepted that have not ended (neither acknowledged nor failed),
        spilled ones included: what a :meth:`flush` now would wait for; 0 before start."""
        acc = self._acc
        if acc is None:
            return 0
        return sum(b.record_count for b in acc.incomplete_batches() if not b.is_done) + (
            journaled.spilled_records(acc))

    def metrics(self) -> dict[str, float]:
        """Java-named producer-level metrics (``record-send-rate``, ``bufferpool-wait-ratio``,
        ...); per-topic ones are in :meth:`metric_values`. Empty before :meth:`start`. Safe
        from any thread; see docs/observability.md."""
        pool, sender = self._pool, self._sender
        if pool is None or sender is None:
            return {}
        found = self._read_elsewhere(self.metrics, {})
        if found is not None:
            return cast("dict[str, float]", found)
        return self._metrics.snapshot(pool, sender.in_flight_requests)

    def metric_values(self) -> list[MetricValue]:
        """Every metric, producer-level and per topic, with its Java name, group, tags
        (``client-id``, ``topic``), kind (``counter`` or ``gauge``) and description: what
        exporters read (:class:`aioaccum.prometheus.ProducerCollector`). Empty before
        :meth:`start`. Safe from any thread; see docs/observability.md."""
        pool, sender = self._pool, self._sender
        if pool is None or sender is None:
            return []
        found = self._read_elsewhere(self.metric_values, [])
        if found is not None:
            return cast("list[MetricValue]", found)
        return self._metrics.values(pool, sender.in_flight_requests)

    def _read_elsewhere(self, read: Any, busy: object) -> object:
        """``read()`` on the producer's loop, from another thread (a scrape thread): the sender
        records metrics there. ``busy`` when the loop is too busy to answer (rather than a read
        racing its writes); None when this thread is the place to read."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread or not loop.is_running():
            return None

        async def on_loop() -> object:
            return read()

        found = read_on(loop, on_loop())
        return None if found is LOOP_STOPPED else busy if found is LOOP_BUSY else found

    @property
    def pool(self) -> BufferPool | None:
        return self._pool

    def __repr__(self) -> str:
        return f"<Producer {self._state.value} bootstrap={self._config.bootstrap_servers!r}>"

