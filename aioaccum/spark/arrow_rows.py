"""Arrow rows to Kafka records: the one place where a Spark task's rows meet the producer.

:func:`produce_arrow` is the whole per-task encoding of ``format("aioaccum")``. Its body goes
through the producer's public bulk send path today (``send_many`` / ``send_records``, which
make a Python object per row); a compiled encoder that reads the Arrow buffers directly will
replace the body, so its contract is kept narrow: columns in, one future per call out, errors
typed. Nothing else in the sink looks at rows.

:func:`content_digest` fingerprints a partition's rows so that a replayed micro-batch can be
told apart from a different one (see :mod:`aioaccum.spark.markers`).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aioaccum.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

    from aioaccum._core.batch import RecordMetadata
    from aioaccum.producer import Producer

__all__ = ["ArrowColumnError", "content_digest", "produce_arrow"]


class ArrowColumnError(ConfigError):
    """A row cannot become a record: a missing or mistyped column, or a null topic."""


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
    rows = batch.num_rows
    names = batch.schema.names
    values = _bytes_column(batch, "value", required=True)
    assert values is not None
    keys = _bytes_column(batch, "key", required=False)
    headers = _headers(batch) if "headers" in names else None
    partitions = _partitions(batch) if "partition" in names else None
    if default_topic is None:
        topics = _topics(batch)
        single_topic = topics[0] if rows and all(t == topics[0] for t in topics) else None
    else:
        topics, single_topic = [], default_topic
    if rows == 0:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sequence[RecordMetadata]] = loop.create_future()
        future.set_result([])
        return future
    if single_topic is not None and (partitions is None or all(p is None for p in partitions)):
        return await producer.send_many(
            single_topic, values, keys=keys, record_headers=headers
        )
    records: list[tuple[Any, ...]] = [
        (
            single_topic if single_topic is not None else topics[i],
            values[i],
            None if keys is None else keys[i],
            None if partitions is None else partitions[i],
            None,
            None if headers is None else headers[i],
        )
        for i in range(rows)
    ]
    return await producer.send_records(records)


def _bytes_column(batch: pa.RecordBatch, name: str, *, required: bool) -> list[Any] | None:
    import pyarrow as pa

    index = batch.schema.get_field_index(name)
    if index < 0:
        if required:
            raise ArrowColumnError(
                f"the rows have no {name!r} column (their columns: {batch.schema.names})"
            )
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())  # the same buffers, read as bytes
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise ArrowColumnError(f"column {name!r} is {column.type}; it must be binary or string")
    values: list[Any] = column.to_pylist()
    return values


def _headers(batch: pa.RecordBatch) -> list[list[tuple[str, bytes | None]] | None]:
    column = batch.column(batch.schema.get_field_index("headers"))
    out: list[list[tuple[str, bytes | None]] | None] = []
    try:
        for entry in column.to_pylist():
            if entry is None:
                out.append(None)
                continue
            out.append(
                [
                    (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                    for h in entry
                ]
            )
    except (TypeError, KeyError, AttributeError) as exc:
        raise ArrowColumnError(
            f"column 'headers' is {column.type}; it must be "
            "list<struct<key: string, value: binary>>"
        ) from exc
    return out


def _partitions(batch: pa.RecordBatch) -> list[int | None]:
    import pyarrow as pa

    column = batch.column(batch.schema.get_field_index("partition"))
    if not pa.types.is_integer(column.type):
        raise ArrowColumnError(f"column 'partition' is {column.type}; it must be int32")
    partitions: list[int | None] = column.to_pylist()
    return partitions


def _topics(batch: pa.RecordBatch) -> list[str]:
    import pyarrow as pa

    index = batch.schema.get_field_index("topic")
    if index < 0:
        raise ArrowColumnError(
            "the rows have no 'topic' column and no default topic: pass the 'topic' option"
        )
    column = batch.column(index)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise ArrowColumnError(f"column 'topic' is {column.type}; it must be string")
    if column.null_count:
        raise ArrowColumnError(
            f"{column.null_count} row(s) have a null topic; give every row a topic, or set "
            "the 'topic' option (which every row then goes to)"
        )
    topics: list[str] = column.to_pylist()
    return topics


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
