"""aiokafka's ``AIOKafkaProducer``, run by aioaccum: change the import line, keep the code.

``from aioaccum.compat import AIOKafkaProducer`` takes aiokafka's constructor arguments, with
aiokafka's defaults, and offers its methods: ``start``, ``stop``, ``send`` (a coroutine that returns
a future), ``send_and_wait``, ``create_batch``/``send_batch``, ``partitions_for``, ``flush``, the
transaction methods and ``async with``. Futures resolve to aiokafka's own
:class:`aiokafka.structs.RecordMetadata`, and errors are aiokafka's classes as well as aioaccum's
(see :mod:`aioaccum.compat.errors`). ``docs/migrating-from-aiokafka.md`` lists how each argument
maps to :class:`~aioaccum.config.ProducerConfig` (:mod:`aioaccum.config.aiokafka_config` does it),
what behaves differently, and the few arguments that are refused.

This module, like ``_kafka.py``, names aiokafka: its users' types (``RecordMetadata``,
``TopicPartition``, the error classes) are aiokafka's. The producer underneath is a plain
:class:`aioaccum.Producer`; serializers run here, so that ``create_batch()`` can apply them as
aiokafka's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer
from aiokafka.record.default_records import DefaultRecordMetadata
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from aiokafka.structs import RecordMetadata as AIOKafkaRecordMetadata

from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.futures import RecordMetadata as AioAccumRecordMetadata
from aioaccum._core.records import RECORD_BATCH_OVERHEAD, estimate_size_in_bytes_upper_bound
from aioaccum._core.validate import as_bytes, validate_headers
from aioaccum.compat.errors import (
    AuthenticationFailedError,
    BufferExhaustedError,
    DeliveryTimeoutError,
    IllegalOperation,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerClosed,
    ProducerFenced,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    aiokafka_error,
)
from aioaccum.config.aiokafka_config import (
    AIOKAFKA_DEFAULTS,
    DEFAULT_PARTITIONER,
    MISSING,
    config_from_aiokafka,
)
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import AioAccumError
from aioaccum.producer import Producer

__all__ = [
    "AIOKAFKA_DEFAULTS",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "AuthenticationFailedError",
    "BatchBuilder",
    "BufferExhaustedError",
    "DeliveryTimeoutError",
    "IllegalOperation",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "OffsetAndMetadata",
    "ProducerClosed",
    "ProducerFenced",
    "RecordMetadata",
    "TopicPartition",
    "TransactionContext",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "config_from_aiokafka",
]

RecordMetadata = AIOKafkaRecordMetadata
"""aiokafka's ``RecordMetadata``: what the futures of this module resolve to."""


_CREATE_TIME, _LOG_APPEND_TIME = 0, 1


@contextlib.contextmanager
def _aiokafka_errors(*, metadata_wait: bool = False) -> Iterator[None]:
    """Raise aioaccum's errors as their aiokafka twins."""
    try:
        yield
    except AioAccumError as exc:
        twin = aiokafka_error(exc, metadata_wait=metadata_wait)
        if twin is exc:
            raise
        raise twin from exc.__cause__


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AIOKafkaProducer:
    """aiokafka's producer API over :class:`aioaccum.Producer`.

    Takes aiokafka's constructor arguments with aiokafka's defaults (``linger_ms=0``,
    ``acks=1``, ``enable_idempotence=False``, ``request_timeout_ms=40000``, ...), so a program
    keeps its behaviour; ``docs/migrating-from-aiokafka.md`` says how each maps and what
    differs. Keyword arguments beyond aiokafka's are :class:`ProducerConfig` settings
    (``buffer_memory=``, ``delivery_timeout_ms=``, ...), and ``kafka=``, a broker adapter, as
    :class:`aioaccum.Producer` takes (tests pass a fake).

    Raises:
        ConfigError: An argument is invalid or has no meaning here (GSSAPI).
    """

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        bootstrap_servers: str | Sequence[str] = "localhost",
        client_id: str | None = None,
        metadata_max_age_ms: int = 300000,
        request_timeout_ms: int = 40000,
        api_version: str | None = None,
        acks: Any = MISSING,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        compression_type: str | None = None,
        max_batch_size: int = 16384,
        partitioner: Callable[[bytes | None, list[int], list[int]], int] = DEFAULT_PARTITIONER,
        max_request_size: int = 1048576,
        linger_ms: int = 0,
        retry_backoff_ms: int = 100,
        security_protocol: str = "PLAINTEXT",
        ssl_context: Any = None,
        connections_max_idle_ms: int | None = 540000,
        enable_idempotence: bool = False,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_password: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_kerberos_service_name: str = "kafka",
        sasl_kerberos_domain_name: str | None = None,
        sasl_oauth_token_provider: Any = None,
        **settings: Any,
    ) -> None:
        given = dict(locals())  # aiokafka's arguments, by name
        arguments = {name: given[name] for name in AIOKAFKA_DEFAULTS}
        kafka = settings.pop("kafka", None)
        config = config_from_aiokafka(arguments, settings)
        self._producer = Producer(config=config, kafka=kafka)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._no_acks = config.acks == 0
        self._batch_size = config.batch_size

    @property
    def producer(self) -> Producer:
        """The :class:`aioaccum.Producer` underneath (its ``metrics()``, ``send_many()``...)."""
        return self._producer

    @property
    def config(self) -> ProducerConfig:
        """The aioaccum settings the aiokafka arguments became."""
        return self._producer.config

    # --- lifecycle

    async def start(self) -> None:
        """Connect to the cluster (and, with a ``transactional_id``, get the producer id).

        Raises:
            KafkaConnectionError: No bootstrap server answered.
        """
        with _aiokafka_errors():
            await self._producer.start()

    async def stop(self) -> None:
        """Deliver what is buffered, then close the connections (aioaccum's ``close()``)."""
        with _aiokafka_errors():
            await self._producer.close()

    async def flush(self) -> None:
        """Wait until every record sent so far has been acknowledged or has failed."""
        with _aiokafka_errors():
            await self._producer.flush()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions, waiting up to ``request_timeout_ms`` for its metadata.

        Raises:
            UnknownTopicOrPartitionError: The topic did not show up in time.
        """
        with _aiokafka_errors(metadata_wait=True):
            return set(await self._producer.partitions_for(topic))

    # --- sending

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        return key, value

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[AIOKafkaRecordMetadata | None]:
        """Buffer one record; return a future of its aiokafka ``RecordMetadata``.

        As aiokafka's: cancelling the returned future does not stop the record, cancelling the
        ``send()`` coroutine does; with ``acks=0`` the future resolves to ``None``.

        Raises:
            UnknownTopicOrPartitionError: The topic's metadata did not arrive in time.
            BufferExhaustedError: No buffer memory in time (a ``KafkaTimeoutError``).
            MessageSizeTooLargeError: The record is larger than ``max_request_size``.
            IllegalOperation: A transactional producer sent outside a transaction.
            ProducerClosed: The producer is stopped or not started.
        """
        key, value = self._serialize(key, value)
        if timestamp_ms is None:
            timestamp_ms = _now_ms()  # known here, to tell log-append times apart
        try:  # not _aiokafka_errors(): a context manager per record costs more than a try
            future = await self._producer.send(topic, value, key, partition, timestamp_ms, headers)
        except AioAccumError as exc:
            twin = aiokafka_error(exc, metadata_wait=True)
            if twin is exc:
                raise
            raise twin from exc.__cause__
        outcome: asyncio.Future[AIOKafkaRecordMetadata | None] = (
            asyncio.get_running_loop().create_future()
        )
        future.add_done_callback(functools.partial(self._settle, outcome, timestamp_ms))
        return outcome

    def _settle(
        self,
        outcome: asyncio.Future[AIOKafkaRecordMetadata | None],
        timestamp_ms: int,
        future: FutureRecordMetadata,
    ) -> None:
        if outcome.done():  # the caller cancelled it; the record went its way regardless
            return
        error = future.exception()  # a record future is never cancelled by the producer
        if error is not None:
            outcome.set_exception(aiokafka_error(error))
        else:
            outcome.set_result(self._metadata(future.result(), timestamp_ms))

    def _metadata(
        self, metadata: AioAccumRecordMetadata, sent_ms: int
    ) -> AIOKafkaRecordMetadata | None:
        if self._no_acks:
            return None  # as aiokafka's done_noack
        topic, partition, offset, timestamp = metadata[:4]
        return AIOKafkaRecordMetadata(
            topic, partition, TopicPartition(topic, partition), offset, timestamp,
            _CREATE_TIME if timestamp == sent_ms else _LOG_APPEND_TIME,
            None,  # log_start_offset: not read from the produce response
        )

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> AIOKafkaRecordMetadata | None:
        """Send one record and wait for its acknowledgement."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def create_batch(self) -> BatchBuilder:
        """An empty :class:`BatchBuilder` for :meth:`send_batch`, using this producer's
        serializers and ``max_batch_size``."""
        return BatchBuilder(self._batch_size, self._key_serializer, self._value_serializer)

    async def send_batch(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[AIOKafkaRecordMetadata | None]:
        """Send a batch's records to one partition; return a future of the batch's metadata.

        The future resolves to aiokafka's ``RecordMetadata`` of the batch: the offset of its
        first record, and as aiokafka's, timestamp -1 (type 0) unless the topic uses log-append
        time. The records join aioaccum's batch for the partition (in order, after what is
        already queued there), so they are not necessarily one batch on the wire.
        """
        records = batch.close_for_send(topic, partition)
        with _aiokafka_errors(metadata_wait=True):
            future = await self._producer.send_records(records)
        outcome: asyncio.Future[AIOKafkaRecordMetadata | None] = (
            asyncio.get_running_loop().create_future()
        )
        first_ms = records[0][4] if records else -1
        future.add_done_callback(functools.partial(self._settle_batch, outcome, first_ms))
        return outcome

    def _settle_batch(
        self,
        outcome: asyncio.Future[AIOKafkaRecordMetadata | None],
        first_ms: int,
        future: asyncio.Future[Sequence[AioAccumRecordMetadata]],
    ) -> None:
        if outcome.done():
            return
        error = future.exception()
        if error is not None:
            outcome.set_exception(aiokafka_error(error))
            return
        results = future.result()
        if self._no_acks or not results:
            outcome.set_result(None)
            return
        topic, partition, offset, timestamp = results[0][:4]
        log_append = timestamp != first_ms
        outcome.set_result(
            AIOKafkaRecordMetadata(
                topic, partition, TopicPartition(topic, partition), offset,
                timestamp if log_append else -1,
                _LOG_APPEND_TIME if log_append else _CREATE_TIME,
                None,
            )
        )

    # --- transactions

    async def begin_transaction(self) -> None:
        """Open a transaction (the producer id was fetched by :meth:`start`)."""
        with _aiokafka_errors():
            self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        """Flush, then commit the transaction."""
        with _aiokafka_errors():
            await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        """Drop what is queued and abort the transaction."""
        with _aiokafka_errors():
            await self._producer.abort_transaction()

    def transaction(self) -> TransactionContext:
        """``async with producer.transaction():`` commits at the end of the block, or aborts
        (and re-raises) when it raises."""
        return TransactionContext(self._producer)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group_id: str
    ) -> None:
        """Commit consumer offsets with the transaction. ``OffsetAndMetadata`` values are taken
        for their offset; their metadata string is not stored."""
        plain = {
            tp: offset.offset if isinstance(offset, OffsetAndMetadata) else offset
            for tp, offset in offsets.items()
        }
        with _aiokafka_errors():
            await self._producer.send_offsets_to_transaction(plain, group_id)

    def __repr__(self) -> str:
        return f"<aioaccum.compat.AIOKafkaProducer over {self._producer!r}>"


class TransactionContext:
    """What :meth:`AIOKafkaProducer.transaction` returns (aiokafka's class of the same name)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._block: contextlib.AbstractAsyncContextManager[Producer] | None = None

    async def __aenter__(self) -> Self:
        block = self._producer.transaction()
        with _aiokafka_errors():
            await block.__aenter__()
        self._block = block
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        block, self._block = self._block, None
        assert block is not None, "__aexit__ without __aenter__"
        with _aiokafka_errors():
            await block.__aexit__(exc_type, exc, tb)


class BatchBuilder:
    """aiokafka's ``BatchBuilder``: records gathered by the caller for one partition.

    :meth:`append` returns aiokafka's ``DefaultRecordMetadata`` (offset within the batch, an
    upper bound of the record's size, timestamp) or ``None`` once ``max_batch_size`` would be
    exceeded, as aiokafka's does; the first record always fits.
    """

    def __init__(
        self,
        batch_size: int,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
    ) -> None:
        self._batch_size = batch_size
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._records: list[tuple[bytes | None, bytes | None, int, list[Any]]] = []
        self._size = RECORD_BATCH_OVERHEAD
        self._closed = False

    def append(
        self,
        *,
        timestamp: int | None,
        key: Any,
        value: Any,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> Any:
        """Add a record (``timestamp`` in ms since the epoch; ``None`` for now).

        Returns:
            aiokafka's ``DefaultRecordMetadata``, or ``None`` when the batch is full or closed.
        """
        if self._closed:
            return None
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        key, value = as_bytes("key", key), as_bytes("value", value)
        header_list = validate_headers(headers)
        size = estimate_size_in_bytes_upper_bound(key, value, header_list) - RECORD_BATCH_OVERHEAD
        if self._records and self._size + size > self._batch_size:
            self._closed = True
            return None
        if timestamp is None:
            timestamp = _now_ms()
        offset = len(self._records)
        self._records.append((key, value, timestamp, header_list))
        self._size += size
        return DefaultRecordMetadata(offset, size, timestamp)

    def close(self) -> None:
        """Take no more records."""
        self._closed = True

    def size(self) -> int:
        """An upper bound of the batch's size in bytes."""
        return self._size

    def record_count(self) -> int:
        """How many records the batch holds."""
        return len(self._records)

    def close_for_send(self, topic: str, partition: int) -> list[tuple[Any, ...]]:
        """Close the batch and return its records for ``send_records``."""
        self._closed = True
        return [
            (topic, value, key, partition, timestamp, headers or None)
            for key, value, timestamp, headers in self._records
        ]
