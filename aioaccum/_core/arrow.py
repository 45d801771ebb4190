"""Arrow rows as Kafka records: columns checked once, rows planned onto partitions, appended.

Theory of operation
-------------------
:func:`arrow_columns` checks a ``pyarrow.RecordBatch`` (or a mapping of column name to array)
against the columns of Spark's Kafka sink and normalizes them without copying the bytes:
strings are read as binary (the same buffers), topics are dictionary-encoded (a few distinct
names, an int32 index per row), partitions are int32. Every error a column can cause is raised
here, before anything is buffered, and is the same for both implementations below.

:class:`ArrowRows` then does three things with the rows:

* :meth:`~ArrowRows.plan` gives each row its partition choice, as ``send()`` would: the
  ``partition`` column when not null; else murmur2 of the key bytes over all the topic's
  partitions (unless keys are ignored); else the sticky partitioner (-1). It sorts the rows by
  (topic, choice), keeping their order within a group, and returns the groups as ranges of
  *positions* in that order. Positions are the index space of the bulk call
  (:class:`~aioaccum._runtime.many.ManyResult` counts them); :meth:`~ArrowRows.position_of`
  maps a row back.
* :meth:`~ArrowRows.append_to` appends the rows at positions ``[start, stop)`` to a builder
  until it is full, as ``send_many``'s runs do.
* :meth:`~ArrowRows.record` makes one position's key, value and headers Python objects, for the
  one record per batch that opens it through ``RecordAccumulator.append``.

This module is the reference: it turns the columns into Python lists and appends through the
builder's ``try_append``. The compiled twin (``_carrow.pyx``) reads the Arrow buffers through
pointers and appends through the builder's ``try_append_raw``: no Python object per row, the
same bytes, partitions and errors (``tests/core/test_arrow_rows.py`` holds them to it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aioaccum._core.partitioner import checked_partition, murmur2, to_positive
from aioaccum._core.records import (
    MAX_RECORD_OVERHEAD,
    Header,
    estimate_size_in_bytes_upper_bound,
)
from aioaccum.errors import ArrowColumnError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]

    from aioaccum._core.records import MemoryRecordsBuilder

__all__ = ["RUN_RECORD_BOUND", "ArrowColumns", "ArrowRows", "arrow_columns"]

RUN_RECORD_BOUND = MAX_RECORD_OVERHEAD + 10
"""Per record of a run, what counts towards stickiness besides key and value (as append_run)."""


class ArrowColumns:
    """The checked, normalized columns of one call (see :func:`arrow_columns`)."""

    __slots__ = (
        "header_keys",
        "header_offsets",
        "header_values",
        "headers",
        "key",
        "num_rows",
        "partition",
        "topic_ids",
        "topics",
        "value",
    )

    def __init__(self) -> None:
        self.num_rows = 0
        self.value: Any = None  # binary or large_binary
        self.key: Any = None  # binary or large_binary, or None
        self.headers: Any = None  # the list array (its validity), or None
        self.header_offsets: Any = None  # int32/int64 list offsets, one per row and one more
        self.header_keys: Any = None  # binary: every header's name, flattened
        self.header_values: Any = None  # binary: every header's value, flattened
        self.topic_ids: Any = None  # int32 index into topics per row, or None (all topics[0])
        self.topics: list[str] = []
        self.partition: Any = None  # int32, or None


def arrow_columns(data: Any, default_topic: str | None) -> ArrowColumns:
    """Check and normalize the columns of ``data`` (see ``Producer.send_arrow``).

    Raises:
        ArrowColumnError: A missing ``value`` column (or ``topic``, without a default topic), a
            column of another type, a null topic, or a null header name.
    """
    import pyarrow as pa

    if isinstance(data, Mapping):
        data = pa.record_batch(dict(data))
    if not isinstance(data, pa.RecordBatch):
        raise ArrowColumnError(
            f"send_arrow takes a pyarrow.RecordBatch or a mapping of column name to array; "
            f"got {type(data).__name__} (for a pyarrow.Table, send each of table.to_batches())"
        )
    columns = ArrowColumns()
    columns.num_rows = data.num_rows
    columns.value = _binary(data, "value", required=True)
    columns.key = _binary(data, "key", required=False)
    if data.schema.get_field_index("headers") >= 0:
        _headers(columns, data.column(data.schema.get_field_index("headers")))
    index = data.schema.get_field_index("partition")
    if index >= 0:
        column = data.column(index)
        if not pa.types.is_integer(column.type):
            raise ArrowColumnError(f"column 'partition' is {column.type}; it must be int32")
        try:
            columns.partition = column.cast(pa.int32())
        except pa.ArrowInvalid as exc:
            raise ArrowColumnError(
                f"column 'partition' has a value out of int32's range: {exc}"
            ) from None
    if default_topic is not None:
        columns.topics = [default_topic]
    else:
        _topics(columns, data)
    return columns


def _binary(data: pa.RecordBatch, name: str, *, required: bool) -> Any:

    index = data.schema.get_field_index(name)
    if index < 0:
        if required:
            raise ArrowColumnError(
                f"the rows have no {name!r} column (their columns: {data.schema.names})"
            )
        return None
    return _as_binary(data.column(index), name)


def _as_binary(column: Any, name: str) -> Any:
    import pyarrow as pa

    kind = column.type
    if pa.types.is_string(kind):
        return column.cast(pa.binary())  # the same buffers, read as bytes
    if pa.types.is_large_string(kind):
        return column.cast(pa.large_binary())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column
    raise ArrowColumnError(f"column {name!r} is {kind}; it must be binary or string")


_HEADERS_TYPE = "list<struct<key: string, value: binary>>"


def _headers(columns: ArrowColumns, column: Any) -> None:
    import pyarrow as pa

    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(
        kind.value_type
    ):
        raise ArrowColumnError(f"column 'headers' is {kind}; it must be {_HEADERS_TYPE}")
    struct = kind.value_type
    names = [struct.field(i).name for i in range(struct.num_fields)]
    if "key" not in names or "value" not in names:
        raise ArrowColumnError(
            f"column 'headers' is {kind}; its structs need fields 'key' and 'value' "
            f"({_HEADERS_TYPE})"
        )
    if not pa.types.is_string(struct.field("key").type):
        raise ArrowColumnError(
            f"column 'headers' has header names of type {struct.field('key').type}; they must "
            f"be string ({_HEADERS_TYPE})"
        )
    # flatten() applies the struct's own offset and nulls to its fields; the list offsets index
    # into them.
    fields = dict(zip(names, column.values.flatten(), strict=True))
    keys = fields["key"].cast(pa.binary())
    offsets = column.offsets
    first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    used = keys.slice(first, last - first)
    if used.null_count:
        raise ArrowColumnError(
            f"column 'headers' has {used.null_count} header(s) without a name (a null key or "
            "a null struct); every header needs a string name"
        )
    columns.headers = column
    columns.header_offsets = offsets
    columns.header_keys = keys
    columns.header_values = _as_binary(fields["value"], "headers.value")


def _topics(columns: ArrowColumns, data: pa.RecordBatch) -> None:
    import pyarrow as pa

    index = data.schema.get_field_index("topic")
    if index < 0:
        raise ArrowColumnError(
            "the rows have no 'topic' column and no default topic: pass topic=..., or add a "
            "'topic' column"
        )
    column = data.column(index)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise ArrowColumnError(f"column 'topic' is {column.type}; it must be string")
    if column.null_count:
        raise ArrowColumnError(
            f"{column.null_count} row(s) have a null topic; give every row a topic, or pass "
            "topic=... (which every row then goes to)"
        )
    encoded = column.dictionary_encode()
    columns.topic_ids = encoded.indices.cast(pa.int32())
    columns.topics = [str(t) for t in encoded.dictionary.to_pylist()]


def bytes_size(item: bytes | None) -> int:
    return -1 if item is None else len(item)


class ArrowRows:
    """The rows of one call, planned onto partitions and appended by position.

    The reference implementation, over Python lists (see the module's docstring).
    """

    def __init__(self, columns: ArrowColumns) -> None:
        self.topics: list[str] = list(columns.topics)
        self._rows = columns.num_rows
        self._values: list[bytes | None] = columns.value.to_pylist()
        self._keys: list[bytes | None] = (
            [None] * self._rows if columns.key is None else columns.key.to_pylist()
        )
        self._headers: list[list[Header]] = [[] for _ in range(self._rows)]
        if columns.headers is not None:
            names = columns.header_keys.to_pylist()
            values = columns.header_values.to_pylist()
            offsets = columns.header_offsets.to_pylist()
            valid = columns.headers.is_valid().to_pylist()
            for row in range(self._rows):
                if valid[row]:
                    self._headers[row] = [
                        (names[j].decode(), values[j])
                        for j in range(offsets[row], offsets[row + 1])
                    ]
        self._topic_ids: list[int] = (
            [0] * self._rows if columns.topic_ids is None else columns.topic_ids.to_pylist()
        )
        self._partitions: list[int | None] = (
            [None] * self._rows if columns.partition is None else columns.partition.to_pylist()
        )
        self._order: list[int] = list(range(self._rows))
        self._position: list[int] = list(range(self._rows))

    def __len__(self) -> int:
        return self._rows

    def first_too_large(self, limit: int) -> int:
        """The upper-bound size of the first record over ``limit`` (as ``send()`` measures
        it), or -1 if none is."""
        for row in range(self._rows):
            size = estimate_size_in_bytes_upper_bound(
                self._keys[row], self._values[row], self._headers[row]
            )
            if size > limit:
                return size
        return -1

    def plan(
        self, partition_counts: Sequence[int], ignore_keys: bool
    ) -> list[tuple[int, int, int, int]]:
        """Give each row its partition choice and order the rows by it.

        Args:
            partition_counts: How many partitions each of :attr:`topics` has.
            ignore_keys: Keyed rows too go to the sticky partitioner.

        Returns:
            ``(topic index, partition or -1 for sticky, start, stop)`` per non-empty group, in
            (topic, partition) order; ``[start, stop)`` are positions.

        Raises:
            ConfigError: A row's partition is not one of its topic's partitions (the first
                such row; the message of ``send()``).
        """
        choices: list[tuple[int, int]] = []
        for row in range(self._rows):
            topic = self._topic_ids[row]
            count = partition_counts[topic]
            explicit = self._partitions[row]
            key = self._keys[row]
            if explicit is not None:
                if not 0 <= explicit < count:
                    checked_partition(self.topics[topic], explicit, range(count))
                choice = explicit
            elif key is not None and not ignore_keys:
                choice = to_positive(murmur2(key)) % count
            else:
                choice = -1
            choices.append((topic, choice))
        self._order = sorted(range(self._rows), key=choices.__getitem__)
        groups: list[tuple[int, int, int, int]] = []
        for position, row in enumerate(self._order):
            self._position[row] = position
            if groups and groups[-1][:2] == choices[row]:
                topic, choice, start, _ = groups[-1]
                groups[-1] = (topic, choice, start, position + 1)
            else:
                groups.append((*choices[row], position, position + 1))
        return groups

    def append_to(
        self, builder: MemoryRecordsBuilder, timestamp: int, start: int, stop: int
    ) -> int:
        """Append positions ``[start, stop)`` until the builder is full; how many went in."""
        position = start
        while position < stop:
            row = self._order[position]
            if (
                builder.try_append(
                    timestamp, self._keys[row], self._values[row], self._headers[row]
                )
                < 0
            ):
                break
            position += 1
        return position - start

    def size_of(self, start: int, stop: int) -> int:
        """What positions ``[start, stop)`` count towards stickiness (as ``append_run``)."""
        size = (stop - start) * RUN_RECORD_BOUND
        for position in range(start, stop):
            row = self._order[position]
            size += max(bytes_size(self._keys[row]), 0) + max(bytes_size(self._values[row]), 0)
        return size

    def record(self, position: int) -> tuple[bytes | None, bytes | None, list[Header]]:
        """One position's key, value and headers, as ``send()`` takes them."""
        row = self._order[position]
        return self._keys[row], self._values[row], list(self._headers[row])

    def position_of(self, row: int) -> int:
        return self._position[row]

    def key_size(self, row: int) -> int:
        return bytes_size(self._keys[row])

    def value_size(self, row: int) -> int:
        return bytes_size(self._values[row])

    def records(
        self,
    ) -> list[tuple[str, bytes | None, bytes | None, int | None, None, list[Header]]]:
        """Every row as a ``send_records`` tuple, in row order (for the per-record path)."""
        return [
            (
                self.topics[self._topic_ids[row]],
                self._values[row],
                self._keys[row],
                self._partitions[row],
                None,
                self._headers[row],
            )
            for row in range(self._rows)
        ]


# --------------------------------------------------------------------- which implementation
from aioaccum import _speedups  # noqa: E402  (must follow the reference class it aliases)

PyArrowRows = ArrowRows

if _speedups.EXTENSIONS:
    from aioaccum._core._carrow import ArrowRows  # type: ignore[assignment]
