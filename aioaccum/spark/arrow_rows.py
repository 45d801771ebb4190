"""Arrow rows to Kafka records: the one place where a Spark task's rows meet the producer.

:func:`produce_arrow` is the whole per-task encoding of ``format("aioaccum")``: the producer's
:meth:`~aioaccum.Producer.send_arrow`, which encodes the rows into record batches from the Arrow
buffers in compiled code, with no Python object per row. Its contract is kept narrow: columns
in, one future per call out, errors typed. Nothing else in the sink looks at rows.

:func:`content_digest` fingerprints a partition's rows so that a replayed micro-batch can be
told apart from a different one (see :mod:`aioaccum.spark.markers`).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aioaccum.errors import ArrowColumnError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

    from aioaccum._core.batch import RecordMetadata
    from aioaccum.producer import Producer

__all__ = ["ArrowColumnError", "content_digest", "produce_arrow"]


async def produce_arrow(
    producer: Producer, batch: pa.RecordBatch, default_topic: str | None
) -> asyncio.Future[Sequence[RecordMetadata]]:
    """Buffer every row of ``batch`` as one Kafka record, in row order.

    Columns are found by name (other columns are ignored):

    - ``value`` (required): ``binary`` or ``string`` (sent as UTF-8); null is a tombstone.
    - ``key``: ``binary`` or ``string``; absent or null: no key (the partitioner chooses).
    - ``headers``: ``list<struct<key: string, value: binary|string>>``; null: none.
    - ``topic``: ``string``, read only when ``default_topic`` is ``None`` (the ``topic``
      option wins over the column, as in Spark's Kafka sink).
    - ``partition``: ``int32``; absent or null: the producer's partitioner chooses.

    Args:
        producer: A started producer; inside a transaction when it is transactional.
        batch: The rows.
        default_topic: Every row's topic, or ``None`` to read the ``topic`` column.

    Returns:
        A future of every record's metadata in row order, as
        :meth:`~aioaccum.Producer.send_many` returns: set once all are acknowledged, failed
        with the first record's error once all have ended.

    Raises:
        ArrowColumnError: No ``value`` column, a column of another type, or a null topic;
            nothing of the batch was buffered.
        The errors of :meth:`~aioaccum.Producer.send_many` (a record too large, a missing
        topic's metadata, memory not freed within ``max_block_ms``, a failed transaction).
    """
    return await producer.send_arrow(batch, default_topic)


def content_digest(batch: pa.RecordBatch, digest: int = 0) -> int:
    """A CRC-32 of the rows' key and value bytes, continued from ``digest``.

    Only the bytes count, not where Arrow cut its batches, so the same rows in the same order
    give the same digest however Spark slices them.
    """
    for name in ("key", "value"):
        index = batch.schema.get_field_index(name)
        if index >= 0:
            digest = _crc_of(batch.column(index), digest)
    return digest


def _crc_of(column: pa.Array, digest: int) -> int:
    import pyarrow as pa

    if len(column) == 0:
        return digest
    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        width = 4
    elif pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        width = 8
    else:
        return digest
    _, offsets, data = column.buffers()
    if data is None or offsets is None:
        return digest
    first = int.from_bytes(
        offsets[column.offset * width : (column.offset + 1) * width], "little", signed=True
    )
    end = column.offset + len(column)
    last = int.from_bytes(offsets[end * width : (end + 1) * width], "little", signed=True)
    return zlib.crc32(memoryview(data)[first:last], digest)
