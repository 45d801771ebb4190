"""Which micro-batch each Spark partition last committed: the exactly-once streaming markers.

Spark may run a micro-batch again after a failure (its checkpoint did not record it as done)
and may call the sink's ``commit`` twice for it; the driver may die after our Kafka commits
and before Spark's checkpoint, or half-way through committing the batch's transactions. A
replayed batch must then write nothing for the Spark partitions already committed, and write
the others again.

So every transaction of Spark partition ``i`` also commits an offset for a consumer group of
the sink's own, ``aioaccum-spark-sink.<prefix>-<i>``, on partition 0 of the marker topic: the
offset is ``batch_id << 32 | digest``, where the digest is a CRC-32 of the partition's key and
value bytes (:func:`~aioaccum.spark.arrow_rows.content_digest`). Committed in the same
transaction as the rows, the marker is visible exactly when they are (the group coordinator
answers OffsetFetch with ``require_stable`` only once the transaction completed). A task reads
it after its producer started, so that the earlier attempts of its transactional id are fenced
first and nothing older can be committed behind its back.

The assumption: a replayed micro-batch puts the same rows, in the same order, into the same
Spark partition (a deterministic plan over a replayable source). A replay whose rows differ
from the committed ones (the digest), or a marker from a later batch than the one running
(another query's checkpoint with the same prefix), is refused with :class:`SparkReplayError`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from aioaccum._runtime.transactions import fetch_committed_offsets
from aioaccum.errors import AioAccumError

__all__ = ["Marker", "SparkReplayError", "group_of", "read_marker"]

_DIGEST_BITS = 32
_MAX_BATCH_ID = (1 << (63 - _DIGEST_BITS)) - 1


class SparkReplayError(AioAccumError):
    """A micro-batch cannot be written exactly once: Spark replayed it with other rows than
    the committed ones, or the prefix's markers belong to a query that got further."""


class Marker(NamedTuple):
    """The last micro-batch a Spark partition committed, and the digest of its rows."""

    batch_id: int
    digest: int

    def offset(self) -> int:
        if not 0 <= self.batch_id <= _MAX_BATCH_ID:
            raise SparkReplayError(
                f"micro-batch id {self.batch_id} is beyond what the markers hold "
                f"(0..{_MAX_BATCH_ID})"
            )
        return (self.batch_id << _DIGEST_BITS) | (self.digest & 0xFFFFFFFF)

    @classmethod
    def of_offset(cls, offset: int) -> Marker | None:
        if offset < 0:
            return None
        return cls(offset >> _DIGEST_BITS, offset & 0xFFFFFFFF)


def group_of(transactional_id: str) -> str:
    """The consumer group that holds the marker of ``transactional_id``'s Spark partition."""
    return f"aioaccum-spark-sink.{transactional_id}"


async def read_marker(
    transactional_id: str, marker_topic: str, settings: dict[str, Any]
) -> Marker | None:
    """The committed marker of ``transactional_id``'s partition, ``None`` before its first."""
    found = await fetch_committed_offsets(
        group_of(transactional_id), [(marker_topic, 0)], **settings
    )
    return Marker.of_offset(found.get((marker_topic, 0), -1))


def must_write(marker: Marker | None, batch_id: int, transactional_id: str) -> bool:
    """Whether micro-batch ``batch_id`` still has to be written for this partition.

    Raises:
        SparkReplayError: The marker is of a later batch: this prefix was used by a query
            (a checkpoint) that got further than this one.
    """
    if marker is None or marker.batch_id < batch_id:
        return True
    if marker.batch_id > batch_id:
        raise SparkReplayError(
            f"{transactional_id!r} already committed micro-batch {marker.batch_id}, and Spark "
            f"now runs batch {batch_id}: transactional.id.prefix belongs to a query that got "
            "further, with another checkpoint. Give each checkpoint its own "
            "transactional.id.prefix (and keep it across restarts)"
        )
    return False


def check_replay(marker: Marker, digest: int, rows: int, transactional_id: str) -> None:
    """A replay of an already committed batch: its rows must be the committed ones.

    Raises:
        SparkReplayError: They differ (the plan broke the assumption).
    """
    if marker.digest != digest & 0xFFFFFFFF:
        raise SparkReplayError(
            f"Spark replayed micro-batch {marker.batch_id}, which {transactional_id!r} already "
            f"committed, with other rows in this Spark partition ({rows} row(s), digest "
            f"{digest & 0xFFFFFFFF:#010x}, committed {marker.digest:#010x}). Exactly-once needs "
            "a replay to put the same rows in the same order into the same partition: a "
            "replayable source and a deterministic plan (no repartition() without columns, no "
            "rand(), no current_timestamp() in the rows). The committed rows stay; nothing of "
            "the replay was written"
        )
