"""What the sender is told about one produce request: an answer per partition.

Its own module so that both readers of a produce response, the pure-Python one in
:mod:`aioaccum._kafka.produce` and the compiled one in ``_cproduce.pyx``, build the same types
without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from aioaccum._core.cluster import TopicPartition
from aioaccum.errors import BrokerError

__all__ = ["PartitionResponse", "ProduceAnswers", "batch_bytes_of"]


class PartitionResponse(NamedTuple):
    """One partition's answer in a produce response (one per batch: a tuple, the cheapest
    object to make)."""

    error: BrokerError | None
    base_offset: int
    log_append_time: int


class ProduceAnswers(dict):  # type: ignore[type-arg]  # dict[TopicPartition, PartitionResponse]
    """The partitions' answers to one produce request, and how long the broker throttled it
    (``throttle_time_ms``, for the ``produce-throttle-time`` metrics)."""

    throttle_time_ms = 0


def batch_bytes_of(
    batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]], topic: str, partition: int
) -> int | None:
    """Bytes of the batch sent to one partition, for an error's message (errors are rare: a
    search, not a map built for every request)."""
    for tp, chunks in batches:
        if tp[1] == partition and tp[0] == topic:
            return sum(len(chunk) for chunk in chunks)
    return None
