"""The compiled ArrowRows against the pure-Python reference, and both against try_append.

For random Arrow columns (binary, string and large columns, nulls, headers, per-row topics,
explicit partitions, sliced batches), both implementations must give the same plan, the same
records per position, sizes and metadata sizes, and fill builders (small batches, pooled chunks)
with exactly the bytes, and stop at exactly the records, that ``try_append`` of the same records
gives. Both are imported by name, so this runs (and needs the compiled module) in both modes.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioaccum._core._carrow import ArrowRows as CArrowRows
from aioaccum._core._crecords import MemoryRecordsBuilder as CBuilder
from aioaccum._core.arrow import PyArrowRows, arrow_columns
from aioaccum._core.partitioner import murmur2, to_positive
from aioaccum._core.records import PyMemoryRecordsBuilder
from aioaccum.errors import ConfigError

TS = 1_700_000_000_000
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
IMPLEMENTATIONS: list[Any] = [CArrowRows, PyArrowRows]

blobs = st.one_of(st.none(), st.binary(max_size=300))
names = st.text(alphabet="abcé", min_size=0, max_size=4)
header_lists = st.one_of(st.none(), st.lists(st.tuples(names, blobs), max_size=3))


@st.composite
def batches(draw: st.DrawFn) -> tuple[pa.RecordBatch, str | None]:
    rows = draw(st.integers(0, 60))
    columns: dict[str, Any] = {}
    values = draw(st.lists(blobs, min_size=rows, max_size=rows))
    if draw(st.booleans()):
        columns["value"] = pa.array(
            values, type=draw(st.sampled_from([pa.binary(), pa.large_binary()]))
        )
    else:
        text = [None if v is None else v.hex() for v in values]
        columns["value"] = pa.array(
            text, type=draw(st.sampled_from([pa.string(), pa.large_string()]))
        )
    if draw(st.booleans()):
        columns["key"] = pa.array(draw(st.lists(blobs, min_size=rows, max_size=rows)), pa.binary())
    if draw(st.booleans()):
        lists = draw(st.lists(header_lists, min_size=rows, max_size=rows))
        columns["headers"] = pa.array(
            [None if h is None else [{"key": k, "value": v} for k, v in h] for h in lists],
            type=HEADERS,
        )
    if draw(st.booleans()):
        columns["partition"] = pa.array(
            draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=rows, max_size=rows)),
            pa.int32(),
        )
    topic: str | None = "t"
    if draw(st.booleans()):
        columns["topic"] = pa.array(
            draw(st.lists(st.sampled_from(["t", "u", "w"]), min_size=rows, max_size=rows)),
            pa.string(),
        )
        topic = None
    batch = pa.record_batch(columns)
    if rows and draw(st.booleans()):
        start = draw(st.integers(0, rows))
        batch = batch.slice(start, draw(st.integers(0, rows - start)))
    return batch, topic


def fill(rows: Any, builder_type: type, groups: list[tuple[int, int, int, int]]) -> list[Any]:
    """Each group into builders of 700 bytes in 128-byte pooled chunks, as batches fill."""
    out = []
    for _, _, start, stop in groups:
        position = start
        while position < stop:
            builder = builder_type(
                bytearray(128),
                write_limit=700,
                chunk_size=128,
                chunk_source=lambda n: bytearray(max(n, 128)),
                chunk_sink=lambda b: None,
            )
            appended = rows.append_to(builder, TS, position, stop)
            if not appended:  # the first record of a batch always fits a fresh builder
                key, value, headers = rows.record(position)
                builder.append(TS, key, value, headers)
                appended = 1
            out.append((position, appended, bytes(builder.build())))
            position += appended
    return out


def by_try_append(rows: Any, groups: list[tuple[int, int, int, int]]) -> list[Any]:
    """The same as fill(), one try_append per record of the reference builder."""
    out = []
    for _, _, start, stop in groups:
        position = start
        while position < stop:
            builder = PyMemoryRecordsBuilder(
                bytearray(128),
                write_limit=700,
                chunk_size=128,
                chunk_source=lambda n: bytearray(max(n, 128)),
                chunk_sink=lambda b: None,
            )
            first = position
            while position < stop:
                key, value, headers = rows.record(position)
                if builder.try_append(TS, key, value, headers) < 0:
                    if position == first:
                        builder.append(TS, key, value, headers)
                        position += 1
                    break
                position += 1
            out.append((first, position - first, bytes(builder.build())))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.booleans())
def test_both_implementations_plan_encode_and_fill_alike(
    case: tuple[pa.RecordBatch, str | None], ignore_keys: bool
) -> None:
    batch, topic = case
    results = []
    implementation: Any
    for implementation, builder_type in zip(
        IMPLEMENTATIONS, [CBuilder, PyMemoryRecordsBuilder], strict=True
    ):
        rows = implementation(arrow_columns(batch, topic))
        counts = [4] * len(rows.topics)
        groups = rows.plan(counts, ignore_keys)
        count = len(rows)
        results.append(
            (
                rows.topics,
                groups,
                [rows.record(p) for p in range(count)],
                [rows.position_of(r) for r in range(count)],
                [(rows.key_size(r), rows.value_size(r)) for r in range(count)],
                rows.size_of(0, count),
                rows.first_too_large(200),
                rows.records(),
                fill(rows, builder_type, groups),
            )
        )
        assert fill(rows, builder_type, groups) == by_try_append(rows, groups)
    assert results[0] == results[1]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_keys_choose_partitions_as_murmur2_and_explicit_ones_win(implementation: type) -> None:
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde" * 7, None, b"\xff\xfe\x80"]
    batch = pa.record_batch(
        {
            "value": pa.array([b"v"] * 9, pa.binary()),
            "key": pa.array([*keys, b"k"], pa.binary()),
            "partition": pa.array([None] * 8 + [5], pa.int32()),
        }
    )
    rows = implementation(arrow_columns(batch, "t"))
    groups = rows.plan([7], False)
    chosen = {}
    for _, choice, start, stop in groups:
        for position in range(start, stop):
            chosen[position] = choice
    by_row = {row: chosen[rows.position_of(row)] for row in range(9)}
    expected = [-1 if k is None else to_positive(murmur2(k)) % 7 for k in keys] + [5]
    assert [by_row[row] for row in range(9)] == expected
    # Ignored keys: every row without a partition goes to the sticky partitioner.
    rows = implementation(arrow_columns(batch, "t"))
    assert {choice for _, choice, _, _ in rows.plan([7], True)} == {-1, 5}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_partition_out_of_range_is_refused_with_send_s_message(implementation: type) -> None:
    batch = pa.record_batch({"value": [b"a", b"b"], "partition": pa.array([1, -1], pa.int32())})
    rows = implementation(arrow_columns(batch, "t"))
    with pytest.raises(
        ConfigError,
        match=r"partition -1 is not a partition of topic 't', which has partitions 0\.\.2",
    ):
        rows.plan([3], False)
