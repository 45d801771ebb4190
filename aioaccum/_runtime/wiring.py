"""The producer's machinery, built from its settings when it starts.

Java's ``KafkaProducer`` constructor in one function: the buffer pool, the accumulator over it,
the sender core deciding what to send, and the sender task's shell around it, wired to wake each
other. The producer keeps what this returns and starts the sender's task itself.
"""

from __future__ import annotations

import asyncio
import math
from typing import NamedTuple

from aioaccum._core.accumulator import RecordAccumulator
from aioaccum._core.chunks import chunk_size_for, largest_chunk_for
from aioaccum._core.codecs import CompressionType
from aioaccum._core.idempotence import TransactionManager
from aioaccum._core.metrics import ProducerMetrics
from aioaccum._core.partitioner import BuiltInPartitioner
from aioaccum._core.sender_core import SenderCore
from aioaccum._kafka.adapter import KafkaAdapter
from aioaccum._runtime.journaling import JournaledAccumulator, open_journal
from aioaccum._runtime.pool import BufferPool
from aioaccum._runtime.sender import TURN_BYTES, Sender
from aioaccum.config.producer_config import ProducerConfig

__all__ = ["Machinery", "build_machinery"]


class Machinery(NamedTuple):
    pool: BufferPool
    acc: RecordAccumulator
    sender: Sender
    txn: TransactionManager | None
    """The idempotent producer's sequence numbers (and transactional id), if idempotent."""


def build_machinery(
    cfg: ProducerConfig,
    kafka: KafkaAdapter,
    partitioner: BuiltInPartitioner,
    metrics: ProducerMetrics,
    loop: asyncio.AbstractEventLoop,
) -> Machinery:
    """Pool, accumulator and sender for ``cfg``, sending through ``kafka``, on ``loop``."""
    # Incremental allocation (KIP-1332): the pool's pooled buffers are the chunks batches grow by.
    chunk_size = (
        chunk_size_for(cfg.batch_size)
        if cfg.buffer_memory_allocation_strategy == "incremental"
        else 0
    )
    # A growing batch's chunks double (chunks.next_chunk_size): the pool keeps each size.
    pool = BufferPool(cfg.buffer_memory, chunk_size or cfg.batch_size,
                      largest_pooled=largest_chunk_for(chunk_size) if chunk_size else 0)
    metrics.bind(pool, loop.time)
    txn = TransactionManager(cfg.transactional_id) if cfg.enable_idempotence else None
    # With a journal, records wait for the cluster however long it takes: no delivery timeout.
    delivery_timeout = cfg.delivery_timeout_ms / 1000 if cfg.journal_dir is None else math.inf
    journal = {} if cfg.journal_dir is None else {"journal": open_journal(cfg)}
    acc = (RecordAccumulator if cfg.journal_dir is None else JournaledAccumulator)(
        pool,
        **journal,  # a Journal, keyword "journal"
        batch_size=cfg.batch_size,
        linger=cfg.linger_ms / 1000,
        delivery_timeout=delivery_timeout,
        compression=CompressionType.from_name(cfg.compression_type),
        compression_level=cfg.compression_level,
        transaction_manager=txn,
        partitioner=partitioner,
        custom_partitioner=cfg.partitioner,
        ignore_keys=cfg.partitioner_ignore_keys,
        loop=loop,
        clock=loop.time,
        availability_timeout=cfg.partitioner_availability_timeout_ms / 1000,
        chunk_size=chunk_size,
    )
    # Within a sixteenth of the pool: a small pool needs the sender's turns to free its memory.
    acc.batches_per_turn = max(1, min(TURN_BYTES, cfg.buffer_memory // 16) // cfg.batch_size)
    core = SenderCore(
        acc,
        max_request_size=cfg.max_request_size,
        max_in_flight=cfg.max_in_flight_requests_per_connection,
        delivery_timeout=delivery_timeout,
        retries=cfg.retries,
        retry_backoff=cfg.retry_backoff_ms / 1000,
        retry_backoff_max=cfg.retry_backoff_max_ms / 1000,
        transaction_manager=txn,
        metrics=metrics,
    )
    sender = Sender(core, kafka, acks=cfg.acks, request_timeout_ms=cfg.request_timeout_ms)
    acc.set_wakeup(
        sender.wakeup,
        sender.wakeup_threadsafe,
        wake_by=sender.wake_by,
        wake_by_threadsafe=sender.wake_by_threadsafe,
    )
    return Machinery(pool, acc, sender, txn)
