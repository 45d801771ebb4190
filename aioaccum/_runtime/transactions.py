"""Transactions: Kafka's transactional producer, and commits prepared elsewhere.

Theory of operation
-------------------
A producer with a ``transactional_id`` gets its producer id and epoch from the transaction
coordinator (InitProducerId with the id), which fences any older producer using the same id and
aborts what it left open. Records then go out only inside a transaction, begun by
:meth:`~aioaccum.Producer.begin_transaction` and ended by a commit or an abort (Kafka's
``TransactionManager`` states, :class:`TxnState`).

Two protocols exist, and the cluster's finalized feature ``transaction.version`` chooses:

- classic (1): each partition joins the transaction (AddPartitionsToTxn) before the first
  produce request that writes to it, and a group's offsets after AddOffsetsToTxn. The sender
  asks :meth:`Transactions.before_produce` about each request's batches, and awaits the step
  it returns, if any, before sending (a request whose partitions are in goes at once).
- KIP-890 (2): produce requests (v12) and TxnOffsetCommit (v5) add their partitions
  themselves, and the coordinator moves the epoch on at every EndTxn (v5), so a late request
  of an ended transaction can never join the next one.

A record that fails makes the transaction abortable: the sender drops what is still queued,
``commit_transaction`` raises :class:`~aioaccum.errors.TransactionAbortableError`, and only
``abort_transaction`` goes on. A fenced producer (:class:`~aioaccum.errors.ProducerFencedError`)
or one the coordinator refuses for good (:class:`~aioaccum.errors.TransactionFatalError`)
cannot go on at all.

Prepared transactions (the exactly-once Spark sink): :meth:`Transactions.prepare` flushes and
hands out the transaction's identity (:class:`PreparedTransaction`) without ending it;
:func:`commit_prepared`, in any process, ends it with EndTxn as that producer would have.
:func:`abort_transactional_ids` aborts whatever ids have open, as a new producer's
InitProducerId does.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from aioaccum._core import kafka_errors
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum._kafka.txn_requests import GROUP, TRANSACTION, TxnWire
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import (
    AioAccumError,
    BrokerError,
    ConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    ProducerTimeoutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionError,
    TransactionFatalError,
)

if TYPE_CHECKING:
    from aioaccum._core.batch import ProducerBatch

__all__ = [
    "PreparedTransaction",
    "Transactions",
    "TxnState",
    "abort_transactional_ids",
    "commit_prepared",
    "fetch_committed_offsets",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Answers that mean "ask again": the coordinator moved or is busy finishing the last step.
_MOVED = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})
_BUSY = frozenset({Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CONCURRENT_TRANSACTIONS})
_FENCED = frozenset({Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH})
_TRANSACTION_ABORTABLE = 120
_INVALID_TRANSACTION_TIMEOUT = 50
_OPERATION_NOT_ATTEMPTED = 55
_GROUP_AUTHORIZATION_FAILED = 30
_ILLEGAL_GENERATION = 22
_UNKNOWN_MEMBER_ID = 25
_FENCED_INSTANCE_ID = 82
# Produce answers after which no later transaction can do better (Java's
# maybeTransitionToErrorState).
_FATAL_PRODUCE = frozenset(
    {
        *_FENCED,
        Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        Errors.CLUSTER_AUTHORIZATION_FAILED,
        Errors.UNSUPPORTED_VERSION,
        Errors.INVALID_PRODUCER_ID_MAPPING,
    }
)
_ABORTABLE_CODES = frozenset(
    {
        Errors.UNKNOWN_PRODUCER_ID,
        Errors.TOPIC_AUTHORIZATION_FAILED,
        _TRANSACTION_ABORTABLE,
        _GROUP_AUTHORIZATION_FAILED,
        _ILLEGAL_GENERATION,
        _UNKNOWN_MEMBER_ID,
        _FENCED_INSTANCE_ID,
        _OPERATION_NOT_ATTEMPTED,
    }
)
# The first retries of a busy coordinator come soon (Java waits 20 ms after
# CONCURRENT_TRANSACTIONS: the last EndTxn is usually a few ms from done).
_BUSY_BACKOFF_S = 0.02


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    PREPARED = "prepared"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class PreparedTransaction(NamedTuple):
    """An open transaction, flushed and ready to be ended by :func:`commit_prepared` from any
    process: what a Spark task hands to the driver."""

    transactional_id: str
    producer_id: int
    epoch: int
    transaction_version: int
    empty: bool = False
    """Nothing was written in it: there is nothing to commit."""


def _name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return {
            _TRANSACTION_ABORTABLE: "TRANSACTION_ABORTABLE",
            _INVALID_TRANSACTION_TIMEOUT: "INVALID_TRANSACTION_TIMEOUT",
            _OPERATION_NOT_ATTEMPTED: "OPERATION_NOT_ATTEMPTED",
            _GROUP_AUTHORIZATION_FAILED: "GROUP_AUTHORIZATION_FAILED",
            _ILLEGAL_GENERATION: "ILLEGAL_GENERATION",
            _UNKNOWN_MEMBER_ID: "UNKNOWN_MEMBER_ID",
            _FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
        }.get(code, f"error code {code}")


def _error_for(code: int, what: str, config: ProducerConfig) -> TransactionError:
    """The typed error for a coordinator's answer ``code`` to step ``what``."""
    transactional_id = config.transactional_id
    text = f"{what} refused with {_name(code)} (error code {code})"
    if code in _FENCED:
        return ProducerFencedError(
            f"{text}: the producer with transactional_id {transactional_id!r} is fenced. "
            "Another producer started with the same id, the transaction was aborted, or the "
            "broker aborted it because it stayed open longer than transaction_timeout_ms="
            f"{config.transaction_timeout_ms}; nothing of it is committed. Close this "
            "producer; a new one may go on with the id",
            errno=code,
        )
    if code == _INVALID_TRANSACTION_TIMEOUT:
        return TransactionFatalError(
            f"{text}: transaction_timeout_ms={config.transaction_timeout_ms} is above the "
            "broker's transaction.max.timeout.ms (900000 by default); lower it, or raise "
            "that broker setting",
            errno=code,
        )
    if code in _ABORTABLE_CODES:
        return TransactionAbortableError(
            f"{text}; abort the transaction, then begin a new one", errno=code
        )
    if code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return TransactionFatalError(
            f"{text}: the principal may not use transactional_id {transactional_id!r}; an "
            "ACL must allow WRITE and DESCRIBE on it",
            errno=code,
        )
    return TransactionFatalError(f"{text}; close the producer", errno=code)


def _ended(code: int, commit: bool, transaction_version: int, *, prepared: bool = False) -> int:
    """EndTxn's answer, as a fenced producer where it means that.

    Under KIP-890 the broker's abort of a timed-out transaction moves the epoch on by one, so a
    late commit looks like a retry of an end, and Kafka 4.3 answers INVALID_TXN_STATE (the
    transaction ended as an abort) where the classic protocol answers PRODUCER_FENCED. A
    prepared transaction that someone aborted meanwhile gets INVALID_TXN_STATE on both.
    """
    if (
        commit
        and (transaction_version >= 2 or prepared)
        and code == Errors.INVALID_TXN_STATE
    ):
        return int(Errors.PRODUCER_FENCED)
    return code


class _Coordinators:
    """Finds coordinators and runs requests against them until they answer for good."""

    def __init__(self, wire: TxnWire, config: ProducerConfig) -> None:
        self._wire = wire
        self._config = config
        self._nodes: dict[tuple[int, str], int] = {}

    def forget(self, kind: int, key: str) -> None:
        self._nodes.pop((kind, key), None)

    async def run(
        self,
        kind: int,
        key: str,
        step: Callable[[int], Awaitable[tuple[int, T]]],
        *,
        what: str,
        timeout_ms: float,
    ) -> T:
        """``step(node)`` against the coordinator of ``key`` until its code is 0, retrying
        moved or busy coordinators and lost connections within ``timeout_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        backoff = self._config.retry_backoff_ms / 1000
        attempts = 0
        last: str = "no answer yet"
        while True:
            try:
                node = self._nodes.get((kind, key))
                if node is None:
                    node = self._nodes[(kind, key)] = await self._wire.coordinator(key, kind)
                code, result = await step(node)
            except (BrokerError, ProducerTimeoutError) as exc:
                if isinstance(exc, BrokerError) and not exc.retriable and exc.errno not in (
                    *_MOVED, *_BUSY
                ):
                    raise _error_for(exc.errno, what, self._config) from exc
                self.forget(kind, key)
                last = str(exc)
                delay = backoff
            else:
                if code == 0:
                    return result
                if code in _MOVED or code == Errors.REQUEST_TIMED_OUT:
                    self.forget(kind, key)
                    delay = backoff
                elif code not in _BUSY and kafka_errors.retriable(code):
                    delay = backoff  # a leader moving, a replica behind: Java retries these
                elif code in _BUSY:
                    delay = _BUSY_BACKOFF_S if attempts < 5 else backoff
                else:
                    raise _error_for(code, what, self._config)
                last = _name(code)
            attempts += 1
            if loop.time() + delay > deadline:
                raise ProducerTimeoutError(
                    f"{what} not done within {timeout_ms:.0f} ms ({attempts} attempt(s); "
                    f"last: {last}); is the transaction coordinator up? Call it again to retry"
                )
            log.debug("%s: attempt %d got %s; retrying", what, attempts, last)
            cap = self._config.retry_backoff_max_ms / 1000
            await asyncio.sleep(min(delay * min(attempts, 8), cap))


class Transactions:
    """The transactional side of one :class:`~aioaccum.Producer` (Kafka's
    ``TransactionManager`` above the per-partition sequences, which stay in
    :class:`~aioaccum._core.idempotence.TransactionManager`).

    Args:
        config: The producer's settings; ``transactional_id`` is set.
        kafka: The producer's started adapter.
        txn: The producer's sequence state; its producer id and epoch are set from here.
        flush: The producer's flush.
        allow_send: Called with whether ``send()`` may append now (only inside a transaction).
    """

    def __init__(
        self,
        config: ProducerConfig,
        kafka: AioKafkaAdapter,
        txn: TransactionManager,
        *,
        flush: Callable[[], Awaitable[None]],
        allow_send: Callable[[bool], None],
    ) -> None:
        assert config.transactional_id is not None
        self._config = config
        self._id: str = config.transactional_id
        self._kafka = kafka
        self._wire = TxnWire(kafka)
        self._coordinators = _Coordinators(self._wire, config)
        self._txn = txn
        self._flush = flush
        self._allow_send = allow_send
        self.state = TxnState.UNINITIALIZED
        self.transaction_version = 0
        self._error: TransactionError | None = None
        self._added: set[tuple[str, int]] = set()
        self._adding = asyncio.Lock()
        self._steps = asyncio.Lock()
        """Held while offsets are sent: a commit or an abort waits for them."""
        self._started = False
        """Whether the coordinator knows of this transaction (something was written)."""

    # --- states

    def _enter_error(self, error: TransactionError) -> TransactionError:
        if not isinstance(error, TransactionFatalError) and not isinstance(
            error, TransactionAbortableError
        ):
            return error
        if isinstance(error, TransactionFatalError):
            self.state = TxnState.FATAL_ERROR
        elif self.state is not TxnState.FATAL_ERROR:
            self.state = TxnState.ABORTABLE_ERROR
        if self._error is None or isinstance(error, TransactionFatalError):
            self._error = error
        self._allow_send(False)
        return error

    def _require(self, what: str, *allowed: TxnState) -> None:
        state = self.state
        if state in allowed:
            return
        if state is TxnState.FATAL_ERROR and self._error is not None:
            raise self._fatal_again(what)
        hint = {
            TxnState.READY: "call begin_transaction() first",
            TxnState.ABORTABLE_ERROR: "the transaction failed: call abort_transaction()",
            TxnState.UNINITIALIZED: "call await producer.start() first",
            TxnState.PREPARED: "the transaction is prepared: commit it with "
            "aioaccum.transactions.commit_prepared, or abort it",
            TxnState.COMMITTING: "a commit is under way or timed out: call "
            "commit_transaction() again to finish it",
            TxnState.ABORTING: "an abort is under way or timed out: call abort_transaction() "
            "again to finish it",
        }.get(state, "wait for the running step to return")
        raise InvalidTxnStateError(f"cannot {what} while the producer is {state.value}: {hint}")

    def _fatal_again(self, what: str) -> TransactionError:
        error = self._error
        assert error is not None
        again = type(error)(
            f"cannot {what}: the transactional producer stopped on an earlier error: {error}",
            errno=error.errno,
        )
        again.__cause__ = error
        return again

    def check_send(self) -> None:
        """Raises why ``send()`` may not append now (called only when it may not)."""
        if self.state is TxnState.ABORTABLE_ERROR and self._error is not None:
            error = TransactionAbortableError(
                f"cannot send: the transaction failed ({self._error}); call "
                "abort_transaction(), then begin a new one",
                errno=self._error.errno,
            )
            raise error from self._error
        self._require("send", TxnState.IN_TRANSACTION)

    # --- start

    async def initialize(self) -> None:
        """Learn the protocol version, then InitProducerId with the transactional id."""
        features = await self._features()
        self.transaction_version = 2 if features.get("transaction.version", 0) >= 2 else 1
        self._kafka.transactional_id = self._id
        self._kafka.produce_v12 = self.transaction_version >= 2
        producer_id, epoch = await self._init_producer_id()
        self._txn.set_producer_id_and_epoch(producer_id, epoch)
        self.state = TxnState.READY
        log.info(
            "transactional producer %r ready: producer id %d, epoch %d, transaction "
            "protocol %d", self._id, producer_id, epoch, self.transaction_version,
        )

    async def _features(self) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.max_block_ms / 1000
        while True:
            try:
                return await self._wire.finalized_features()
            except (BrokerError, ProducerTimeoutError) as exc:
                if loop.time() >= deadline:
                    raise ProducerTimeoutError(
                        f"no broker told its features within max_block_ms="
                        f"{self._config.max_block_ms}: {exc}"
                    ) from exc
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)

    async def _init_producer_id(self, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        async def step(node: int) -> tuple[int, tuple[int, int]]:
            answer = await self._wire.init_producer_id(
                node, self._id, self._config.transaction_timeout_ms, producer_id, epoch
            )
            return answer.error_code, (answer.producer_id, answer.epoch)

        try:
            return await self._coordinators.run(
                TRANSACTION, self._id, step, what="InitProducerId",
                timeout_ms=self._config.max_block_ms,
            )
        except TransactionError as exc:
            raise self._enter_error(exc) from None

    # --- the sender's hook

    def before_produce(
        self, batches: Sequence[ProducerBatch]
    ) -> Callable[[], Awaitable[None]] | None:
        """Make sure every partition of a request is in the transaction before it is sent:
        None when they are (the request goes at once), else the step that adds them, for the
        sender to await before sending."""
        if self.transaction_version >= 2:
            self._started = True  # produce v12 adds them itself
            return None
        new = {(b.tp[0], b.tp[1]) for b in batches} - self._added
        if not new:
            return None
        return functools.partial(self._add_before_produce, new)

    async def _add_before_produce(self, new: set[tuple[str, int]]) -> None:
        added = self._added
        async with self._adding:
            new -= added  # another request may have added them meanwhile
            if new:
                await self._add_partitions(new)
        # Only now does the coordinator know of the transaction; an abort before this sends
        # no EndTxn, which it would refuse with INVALID_TXN_STATE (Java's KAFKA-5260).
        self._started = True

    async def _add_partitions(self, partitions: set[tuple[str, int]]) -> None:
        producer = self._txn.producer

        async def step(node: int) -> tuple[int, None]:
            answer = await self._wire.add_partitions(
                node, self._id, producer.producer_id, producer.epoch, partitions
            )
            codes = set(answer.errors.values()) - {0}
            missing = partitions - set(answer.errors)
            if not codes and not missing:
                return 0, None
            # The worst code decides; OPERATION_NOT_ATTEMPTED only follows another one.
            codes.discard(_OPERATION_NOT_ATTEMPTED)
            for group in (_FENCED, _MOVED, _BUSY):
                found = codes & group
                if found:
                    return min(found), None
            return (min(codes) if codes else int(Errors.UNKNOWN_PRODUCER_ID)), None

        what = f"adding {len(partitions)} partition(s) to the transaction"
        try:
            await self._coordinators.run(
                TRANSACTION, self._id, step, what=what,
                timeout_ms=self._config.delivery_timeout_ms,
            )
        except TransactionError as exc:
            self._enter_error(exc)
            raise
        self._added |= partitions

    # --- begin, commit, abort

    def begin(self) -> None:
        self._require("begin a transaction", TxnState.READY)
        self._txn.batch_error = None
        self._added.clear()
        self._started = False
        self.state = TxnState.IN_TRANSACTION
        self._allow_send(True)

    async def _flush_transaction(self) -> None:
        """Wait for every record of the transaction; raise if any failed."""
        await self._flush()
        failed = self._txn.batch_error
        if failed is None:
            return
        if isinstance(failed, BrokerError) and failed.errno in _FATAL_PRODUCE:
            fatal = _error_for(failed.errno, "a produce request", self._config)
            raise self._enter_error(fatal) from failed
        if isinstance(failed, TransactionFatalError):
            raise self._enter_error(failed)
        error = TransactionAbortableError(
            f"the transaction cannot commit: a record failed ({failed}); call "
            "abort_transaction(), then begin a new one"
        )
        raise self._enter_error(error) from failed

    async def commit(self) -> None:
        if self.state is TxnState.ABORTABLE_ERROR and self._error is not None:
            raise TransactionAbortableError(
                f"cannot commit: the transaction failed ({self._error}); call "
                "abort_transaction()",
                errno=self._error.errno,
            ) from self._error
        self._require("commit", TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        self.state = TxnState.COMMITTING
        self._allow_send(False)
        await self._flushed_for_end()
        await self._end(commit=True)

    async def _flushed_for_end(self) -> None:
        """Wait for offsets being sent and for every record; when that is interrupted (a
        cancel, a stopped producer) before anything was ended, the transaction is open again,
        so that abort, close, or a second try still work."""
        try:
            async with self._steps:  # offsets being sent go first, or they would miss the end
                pass
            await self._flush_transaction()
        except TransactionError:
            raise
        except BaseException:
            if self.state is TxnState.COMMITTING:
                self.state = TxnState.IN_TRANSACTION
            raise

    async def abort(self) -> None:
        self._require(
            "abort", TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
            TxnState.PREPARED,
        )
        self.state = TxnState.ABORTING
        self._allow_send(False)
        async with self._steps:
            pass
        # Anything queued is never sent; requests out are waited for (their outcome decides
        # nothing now, but the broker must have them before the abort marker).
        self._txn.batch_error = self._txn.batch_error or TransactionAbortedError(
            "the transaction was aborted"
        )
        await self._flush()
        await self._end(commit=False)

    async def _end(self, *, commit: bool) -> None:
        txn = self._txn
        what = "commit (EndTxn)" if commit else "abort (EndTxn)"
        if self._started:
            producer = txn.producer
            version = self.transaction_version

            async def step(node: int) -> tuple[int, tuple[int, int]]:
                answer = await self._wire.end_txn(
                    node, self._id, producer.producer_id, producer.epoch, commit,
                    transaction_version=version,
                )
                return _ended(answer.error_code, commit, version), (
                    answer.producer_id, answer.epoch
                )

            try:
                producer_id, epoch = await self._coordinators.run(
                    TRANSACTION, self._id, step, what=what,
                    timeout_ms=self._config.max_block_ms,
                )
            except TransactionAbortableError as exc:
                if commit:
                    raise self._enter_error(exc) from None
                # An abort that may only be aborted again would loop for ever (as Java does).
                fatal = TransactionFatalError(f"{exc}; the abort itself failed", errno=exc.errno)
                raise self._enter_error(fatal) from exc
            except TransactionError as exc:
                raise self._enter_error(exc) from None
            self._started = False  # ended: a retry of what follows must not end it twice
            if producer_id >= 0:
                # KIP-890: every end moves the epoch on; sequences start again under it.
                txn.set_producer_id_and_epoch(producer_id, epoch)
        if txn.needs_reset:
            # Classic protocol after an unresolved sequence: a new epoch from the coordinator
            # (KIP-360), as nothing is in flight now.
            producer = txn.producer
            producer_id, epoch = await self._init_producer_id(producer.producer_id, producer.epoch)
            txn.set_producer_id_and_epoch(producer_id, epoch)
        txn.batch_error = None
        self._error = None
        self._added.clear()
        self._started = False
        self.state = TxnState.READY

    async def send_offsets(self, offsets: Mapping[Any, int], group_id: str) -> None:
        self._require("send offsets", TxnState.IN_TRANSACTION)
        if not isinstance(group_id, str) or not group_id:
            raise ConfigError(f"group_id must be a non-empty str, got {group_id!r}")
        checked: dict[tuple[str, int], int] = {}
        for tp, offset in offsets.items():
            topic, partition = tp[0], tp[1]
            if type(offset) is not int or offset < 0:
                raise ConfigError(
                    f"the offset for {topic}-{partition} must be an int >= 0 (the next offset "
                    f"to consume), got {offset!r}"
                )
            checked[(str(topic), int(partition))] = offset
        async with self._steps:
            await self._send_offsets(checked, group_id)

    async def _send_offsets(self, checked: dict[tuple[str, int], int], group_id: str) -> None:
        producer = self._txn.producer
        timeout_ms = self._config.max_block_ms
        try:
            if self.transaction_version < 2:

                async def add(node: int) -> tuple[int, None]:
                    code = await self._wire.add_offsets(
                        node, self._id, producer.producer_id, producer.epoch, group_id
                    )
                    return code, None

                await self._coordinators.run(
                    TRANSACTION, self._id, add, what="AddOffsetsToTxn", timeout_ms=timeout_ms
                )
                self._started = True

            async def commit(node: int) -> tuple[int, None]:
                errors = await self._wire.txn_offset_commit(
                    node, self._id, group_id, producer.producer_id, producer.epoch, checked,
                    transaction_version=self.transaction_version,
                )
                codes = set(errors.values()) - {0}
                if not codes:
                    return 0, None
                for group in (_FENCED, _MOVED, _BUSY):
                    if codes & group:
                        return min(codes & group), None
                return min(codes), None

            await self._coordinators.run(
                GROUP, group_id, commit, what="TxnOffsetCommit", timeout_ms=timeout_ms
            )
            self._started = True  # under KIP-890 the group joined the transaction just now
        except TransactionError as exc:
            raise self._enter_error(exc) from None

    async def prepare(self) -> PreparedTransaction:
        self._require("prepare", TxnState.IN_TRANSACTION)
        self.state = TxnState.COMMITTING
        self._allow_send(False)
        await self._flushed_for_end()
        producer = self._txn.producer
        self.state = TxnState.PREPARED
        return PreparedTransaction(
            self._id, producer.producer_id, producer.epoch, self.transaction_version,
            empty=not self._started,
        )

    async def close(self) -> None:
        """On a graceful close, abort an open transaction (as Java's sender does); a prepared
        one is left for its committer."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            log.info("aborting the open transaction of %r at close", self._id)
            try:
                await self.abort()
            except AioAccumError as exc:
                log.warning("could not abort the open transaction at close: %s; the broker "
                            "aborts it after transaction_timeout_ms", exc)


# --- ending transactions from another process


async def _with_wire(
    settings: dict[str, Any], work: Callable[[TxnWire, _Coordinators, ProducerConfig], Awaitable[T]]
) -> T:
    config = ProducerConfig.from_arguments(None, settings.pop("bootstrap_servers", None), settings)
    adapter = AioKafkaAdapter(config)
    await adapter.start()
    try:
        wire = TxnWire(adapter)
        return await work(wire, _Coordinators(wire, config), config)
    finally:
        await adapter.close()


async def commit_prepared(
    prepared: Sequence[PreparedTransaction],
    *,
    on_committed: Callable[[PreparedTransaction], None] | None = None,
    **settings: Any,
) -> int:
    """Commit transactions that producers prepared (:meth:`aioaccum.Producer.prepare_transaction`),
    possibly in other processes, with EndTxn as each producer would have. Returns how many
    were committed (empty ones have nothing to commit).

    ``settings`` are :class:`~aioaccum.Producer`'s (``bootstrap_servers``, security...);
    ``on_committed`` is told of each transaction once it is committed, so that a caller knows
    which are when a later one fails (the error's note says how many).

    Raises:
        ProducerFencedError: A transaction was aborted meanwhile: a later producer with its id
            started, or it stayed open past ``transaction_timeout_ms``. Earlier ones in
            ``prepared`` stay committed.
        ProducerTimeoutError: A coordinator did not answer within ``max_block_ms``.
    """

    async def work(wire: TxnWire, coordinators: _Coordinators, config: ProducerConfig) -> int:
        committed = 0
        for item in prepared:
            if item.empty:
                continue
            item_config = config.replace(transactional_id=item.transactional_id)

            async def step(node: int, item: PreparedTransaction = item) -> tuple[int, None]:
                answer = await wire.end_txn(
                    node, item.transactional_id, item.producer_id, item.epoch, True,
                    transaction_version=item.transaction_version,
                )
                code = _ended(answer.error_code, True, item.transaction_version, prepared=True)
                return code, None

            try:
                await _Coordinators(wire, item_config).run(
                    TRANSACTION, item.transactional_id, step,
                    what=f"commit of the prepared transaction {item.transactional_id!r}",
                    timeout_ms=config.max_block_ms,
                )
            except BaseException as exc:
                exc.add_note(
                    f"{committed} of the {len(prepared)} transaction(s) before this one were "
                    "committed"
                )
                raise
            committed += 1
            if on_committed is not None:
                on_committed(item)
        return committed

    return await _with_wire(dict(settings), work)


async def abort_transactional_ids(transactional_ids: Iterable[str], **settings: Any) -> int:
    """Abort whatever transaction each id has open, and fence any producer still using it
    (InitProducerId with the id, as a new producer does). Returns how many ids were handled.

    ``settings`` are :class:`~aioaccum.Producer`'s (``bootstrap_servers``, security...).
    """

    async def work(wire: TxnWire, coordinators: _Coordinators, config: ProducerConfig) -> int:
        handled = 0
        for transactional_id in transactional_ids:
            item_config = config.replace(transactional_id=transactional_id)

            async def step(node: int, tid: str = transactional_id) -> tuple[int, None]:
                answer = await wire.init_producer_id(node, tid, config.transaction_timeout_ms)
                return answer.error_code, None

            await _Coordinators(wire, item_config).run(
                TRANSACTION, transactional_id, step,
                what=f"aborting transactional id {transactional_id!r}",
                timeout_ms=config.max_block_ms,
            )
            handled += 1
        return handled

    return await _with_wire(dict(settings), work)


_UNSTABLE_OFFSET_COMMIT = 88


async def fetch_committed_offsets(
    group_id: str, partitions: Iterable[tuple[str, int]], **settings: Any
) -> dict[tuple[str, int], int]:
    """The offsets ``group_id`` has committed for ``partitions`` (-1 where none), as a
    ``read_committed`` consumer of the group would start from: offsets that a transaction
    commits are seen only once it committed, and while one is being completed the call waits
    for it (OffsetFetch with ``require_stable``, within ``max_block_ms``).

    ``settings`` are :class:`~aioaccum.Producer`'s (``bootstrap_servers``, security...).

    Raises:
        TransactionError: The group coordinator refused (the message names the code).
        ProducerTimeoutError: No stable answer within ``max_block_ms``.
    """
    wanted = list(partitions)

    async def work(wire: TxnWire, coordinators: _Coordinators, config: ProducerConfig) -> dict[
        tuple[str, int], int
    ]:
        async def step(node: int) -> tuple[int, dict[tuple[str, int], int]]:
            answer = await wire.offset_fetch(node, group_id, wanted)
            codes = {code for _, code in answer.offsets.values()} | {answer.error_code}
            codes.discard(0)
            if _UNSTABLE_OFFSET_COMMIT in codes:
                # A transaction with these offsets is being completed: ask again shortly.
                return int(Errors.COORDINATOR_LOAD_IN_PROGRESS), {}
            if codes:
                return min(codes), {}
            return 0, {tp: offset for tp, (offset, _) in answer.offsets.items()}

        return await coordinators.run(
            GROUP, group_id, step, what=f"OffsetFetch of group {group_id!r}",
            timeout_ms=config.max_block_ms,
        )

    return await _with_wire(dict(settings), work)
