"""The compiled MemoryRecordsBuilder against the pure-Python reference, call for call.

Each test drives two builders, one of each implementation, each over its own copy of the same
(dirty) pooled buffer, with the same calls. After every call the two must agree on everything
a caller can see: the return value or the exception (type and message), every property,
``repr``, ``iter_records()``, ``build()``'s bytes and which buffer they live in, the pooled
buffer's bytes, and whether the builder still pins the pooled buffer's size.

Both builders are imported by name, whichever one the package uses, so these tests run (and
need the compiled module) in both modes; so do the tests of :mod:`aioaccum._speedups` itself.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioaccum import _speedups
from aioaccum._core._crecords import MemoryRecordsBuilder as CMemoryRecordsBuilder
from aioaccum._core.codecs import CompressionType
from aioaccum._core.records import PyMemoryRecordsBuilder, record_size_in_bytes

TS = 1_700_000_000_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

PROPERTIES = (
    "buffer",
    "compression",
    "write_limit",
    "num_records",
    "base_timestamp",
    "max_timestamp",
    "uncompressed_size",
    "estimated_size_in_bytes",
    "compression_ratio",
    "is_full",
    "is_closed",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "is_transactional",
    "chunks",
)

# ------------------------------------------------------------------------------ the harness


def outcome(call: Callable[[], object]) -> tuple[str, object]:
    """What a call did, in a form two implementations can be compared on."""
    try:
        return ("returned", call())
    except Exception as exc:  # any exception is a result here, compared like a value
        return ("raised", (type(exc), str(exc)))


def pins(buffer: bytearray) -> bool:
    """Whether something holds an export of ``buffer`` (so its size cannot change)."""
    try:
        buffer.append(0)
    except BufferError:
        return True
    del buffer[-1]
    return False


def plain(value: object, pooled: bytearray) -> object:
    """Replace what differs only by identity (views, the pooled buffer) with its contents."""
    if isinstance(value, memoryview):
        return ("view", bytes(value), value.obj is pooled, len(value.obj))  # type: ignore[arg-type]
    if value is pooled:
        return ("pooled",)
    if isinstance(value, list):
        return [plain(item, pooled) for item in value]
    if type(value).__name__ == "MemoryRecordsBuilder":  # a constructor's result
        return ("builder",)
    return value


def read(builder: Any, name: str, pooled: bytearray) -> object:
    return plain(getattr(builder, name), pooled)


@dataclass
class Twin:
    """A pure-Python and a compiled builder, each over its own copy of one pooled buffer."""

    buffer_size: int
    fill: int
    kwargs: dict[str, Any]
    chunk_size: int = 0
    """Above 0: incremental allocation, each builder with its own pool of dirty chunks."""
    refuse_every: int = 0
    """With chunks: the pool refuses every n-th chunk (0: never)."""
    py_pooled: bytearray = field(init=False)
    c_pooled: bytearray = field(init=False)
    py: Any = field(init=False, default=None)
    c: Any = field(init=False, default=None)

    py_pool: ChunkPool = field(init=False)
    c_pool: ChunkPool = field(init=False)

    def __post_init__(self) -> None:
        self.py_pooled = bytearray([self.fill]) * self.buffer_size
        self.c_pooled = bytearray([self.fill]) * self.buffer_size
        self.py_pool = ChunkPool(self.fill, self.refuse_every)
        self.c_pool = ChunkPool(self.fill, self.refuse_every)
        py_kwargs, c_kwargs = dict(self.kwargs), dict(self.kwargs)
        if self.chunk_size:
            for kwargs, pool in ((py_kwargs, self.py_pool), (c_kwargs, self.c_pool)):
                kwargs.update(
                    chunk_size=self.chunk_size, chunk_source=pool.take, chunk_sink=pool.give
                )
        made = self.both(
            lambda: PyMemoryRecordsBuilder(self.py_pooled, **py_kwargs),
            lambda: CMemoryRecordsBuilder(self.c_pooled, **c_kwargs),
        )
        if made[0][0] == "returned":
            self.py, self.c = made[0][1], made[1][1]
            self.check()

    @property
    def built(self) -> bool:
        return self.py is not None

    def both(
        self, py_call: Callable[[], object], c_call: Callable[[], object]
    ) -> tuple[tuple[str, object], tuple[str, object]]:
        py, c = outcome(py_call), outcome(c_call)
        if py[0] == c[0] == "returned":
            assert plain(c[1], self.c_pooled) == plain(py[1], self.py_pooled)
        else:
            assert c == py
        return py, c

    def call(self, name: str, *args: Callable[[], object]) -> object:
        """Call ``name`` on both, each with freshly made arguments; compare; return py's result."""
        py, _ = self.both(
            lambda: getattr(self.py, name)(*(make() for make in args)),
            lambda: getattr(self.c, name)(*(make() for make in args)),
        )
        self.check()
        return py[1]

    def snapshot(self, builder: Any, pooled: bytearray) -> dict[str, object]:
        state: dict[str, object] = {
            name: outcome(partial(read, builder, name, pooled)) for name in PROPERTIES
        }
        state["repr"] = outcome(lambda: repr(builder))
        state["records"] = outcome(lambda: list(builder.iter_records()))
        state["pooled bytes"] = bytes(pooled)
        state["pins pooled"] = pins(pooled)
        return state

    def check(self) -> None:
        assert self.snapshot(self.c, self.c_pooled) == self.snapshot(self.py, self.py_pooled)
        assert self.c_pool.log == self.py_pool.log


class ChunkPool:
    """A stand-in for the BufferPool's chunk calls: dirty chunks, refusals, a log of both."""

    def __init__(self, fill: int, refuse_every: int) -> None:
        self.fill = fill
        self.refuse_every = refuse_every
        self.log: list[tuple[str, int]] = []
        self.out = 0

    def take(self, size: int) -> bytearray | None:
        self.log.append(("take", size))
        if self.refuse_every and len(self.log) % self.refuse_every == 0:
            return None
        self.out += size
        return bytearray([self.fill]) * size

    def give(self, chunk: bytearray) -> None:
        self.log.append(("give", len(chunk)))
        self.out -= len(chunk)


# ------------------------------------------------------------------------------- strategies
# Arguments are drawn as recipes (zero-argument functions) so that each builder gets its own
# objects: a generator of headers is consumed by whichever builder reads it first.

Recipe = Callable[[], object]


def fixed(value: object) -> Recipe:
    return lambda: value


class Name(str):
    """A str subclass: valid as a header name, but not the exact type the C encoder takes."""


big = st.sampled_from([b"z" * 5000, bytes(range(256)) * 12])  # larger than most buffers
blobs = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.integers(0, 600).map(lambda n: b"ab" * n),  # compresses well
    st.binary(min_size=200, max_size=1500),  # does not
    big,
)
odd_blobs = st.one_of(
    st.binary(max_size=30).map(bytearray),
    st.binary(max_size=30).map(lambda raw: memoryview(raw)),
    st.sampled_from(["text", 7, 1.5, [1, 2]]),
)
blob_recipes = st.one_of(blobs.map(fixed), blobs.map(fixed), odd_blobs.map(fixed))

names = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["trace-id", "ключ", "𝄞", "é" * 40]),
)
odd_names = st.sampled_from([Name("sub"), "\ud800", b"bytes-name", None, 3])
header_values = st.one_of(st.none(), st.binary(max_size=24), st.sampled_from([b"", b"v" * 200]))
odd_header_values = st.sampled_from([bytearray(b"ba"), "text", 0])
headers_lists = st.lists(st.tuples(names, header_values), max_size=4)


@st.composite
def header_recipes(draw: st.DrawFn) -> Recipe:
    items: list[tuple[object, object]] = list(draw(headers_lists))
    if items and draw(st.integers(0, 5)) == 0:  # now and then one odd pair
        i = draw(st.integers(0, len(items) - 1))
        items[i] = (
            draw(st.one_of(names, odd_names)),
            draw(st.one_of(header_values, odd_header_values)),
        )
    shape = draw(
        st.sampled_from(["list"] * 4 + ["tuple"] * 2 + ["none", "lists", "dict", "generator"])
    )
    if shape == "list":
        return lambda: list(items)
    if shape == "tuple":
        return lambda: tuple(items)
    if shape == "none":
        return fixed(None)
    if shape == "lists":
        return lambda: [list(pair) for pair in items]
    if shape == "dict":
        return lambda: dict(items)
    return lambda: (pair for pair in items)


timestamps = st.one_of(
    st.integers(TS - 10**6, TS + 10**6),  # around the first: deltas of both signs
    st.integers(0, 2**62),
    st.sampled_from([0, 1, -1, TS, INT64_MAX, INT64_MIN]),  # deltas that overflow int64
)
ratios = st.one_of(
    st.sampled_from([1.0, 0.5, 0.05, 0.0, 1.5]),
    st.floats(0.0, 3.0),
    st.sampled_from([float("nan"), float("inf"), -1.0, 1e300, 4]),
)

record_args = st.tuples(timestamps.map(fixed), blob_recipes, blob_recipes, header_recipes())
producer_states = st.tuples(
    st.sampled_from([-1, 0, 5, INT64_MAX, 2**63]),
    st.sampled_from([-1, 0, 7, 32767, 32768]),
    st.sampled_from([-1, 0, 41, 2**31 - 1, 2**31]),
    st.booleans(),
)
operations = st.one_of(
    st.tuples(st.just("try_append"), record_args),
    st.tuples(st.just("try_append"), record_args),
    st.tuples(st.just("try_append"), record_args),
    st.tuples(st.just("append"), record_args),
    st.tuples(st.just("has_room_for"), record_args),
    st.tuples(st.just("close_for_record_appends"), st.just(())),
    st.tuples(st.just("close"), st.just(())),
    st.tuples(st.just("build"), st.just(())),
    st.tuples(st.just("build_parts"), st.just(())),
    st.tuples(st.just("set_producer_state"), producer_states.map(lambda s: tuple(map(fixed, s)))),
    st.tuples(st.just("set_estimated_compression_ratio"), ratios.map(lambda r: (fixed(r),))),
)
configs = st.fixed_dictionaries(
    {
        "compression": st.sampled_from(list(CompressionType)),
        "write_limit": st.sampled_from([-1, 0, 50, 100, 200, 1000, 16384, 1 << 20, INT64_MAX]),
        "estimated_ratio": ratios,
    },
    optional={
        "base_timestamp": st.one_of(timestamps, st.none()),
        "compression_level": st.sampled_from([None, 1, 3, 9, 0, 23]),
    },
)
buffer_sizes = st.sampled_from([0, 10, 61, 62, 100, 300, 1024, 4096])


# ------------------------------------------------------------------------------------ tests


# 0: one buffer (full allocation); else incremental, with chunks of that size.
chunk_sizes = st.sampled_from([0, 0, 64, 100, 2048])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=configs,
    buffer_size=buffer_sizes,
    fill=st.sampled_from([0, 0xA5, 0xFF]),
    ops=st.lists(operations, max_size=30),
    chunk_size=chunk_sizes,
    refuse_every=st.sampled_from([0, 0, 2, 5]),
)
def test_random_call_sequences_agree(
    config: dict[str, Any],
    buffer_size: int,
    fill: int,
    ops: list[tuple[str, tuple[Recipe, ...]]],
    chunk_size: int,
    refuse_every: int,
) -> None:
    twin = Twin(buffer_size, fill, config, chunk_size, refuse_every)
    if not twin.built:
        return
    for name, args in ops:
        twin.call(name, *args)
    twin.call("build")
    twin.call("close")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(list(CompressionType)),
    buffer_size=buffer_sizes,
    write_limit=st.sampled_from([100, 1000, 16384]),
    ratio=st.sampled_from([1.0, 0.5, 0.05]),
    records=st.lists(st.tuples(timestamps, blobs, blobs, headers_lists), min_size=1, max_size=60),
    chunk_size=chunk_sizes,
)
def test_filling_batches_agree(
    codec: CompressionType,
    buffer_size: int,
    write_limit: int,
    ratio: float,
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    chunk_size: int,
) -> None:
    """The accumulator's loop: try_append until full, then close, read back, set state, re-read."""
    twin = Twin(
        buffer_size,
        0xEE,
        {"compression": codec, "write_limit": write_limit, "estimated_ratio": ratio},
        chunk_size,
    )
    for ts, key, value, headers in records:
        if twin.call("try_append", fixed(ts), fixed(key), fixed(value), fixed(headers)) == -1:
            break
    twin.call("close")
    twin.call("set_producer_state", fixed(1234), fixed(5), fixed(99), fixed(True))
    twin.call("build")


STRATEGIES = pytest.mark.parametrize(
    "chunk_size", [0, 64, 2048], ids=["full", "incremental-64", "incremental-2048"]
)


@STRATEGIES
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
def test_records_larger_than_the_buffer_spill_alike(
    codec: CompressionType, chunk_size: int
) -> None:
    twin = Twin(
        100, 0x11, {"compression": codec, "write_limit": 1 << 20, "estimated_ratio": 0.1},
        chunk_size,
    )
    for i in range(12):
        value = (b"%d" % i) * (150 * i)
        twin.call("try_append", fixed(TS + i), fixed(b"k"), fixed(value), fixed([("h", b"v")]))
    twin.call("append", fixed(TS), fixed(None), fixed(b"q" * 70_000), fixed(()))
    twin.call("build")


@pytest.mark.parametrize("builder", [PyMemoryRecordsBuilder, CMemoryRecordsBuilder],
                         ids=["python", "compiled"])
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("chunk_size", [64, 97, 2048])
def test_incremental_builds_the_bytes_of_full(
    builder: Any, codec: CompressionType, chunk_size: int
) -> None:
    """Same records, same batch: bytes, CRC and records read back, whichever the strategy; and
    every byte of a chunked batch lies in its chunks (one view per chunk), records straddling
    their boundaries, with the chunks the bytes do not fill back in the pool."""
    values = [(b"%03d" % i) * (i % 40) for i in range(120)]
    full = builder(bytearray(16384), compression=codec, write_limit=16384)
    pool = ChunkPool(0xEE, 0)
    chunked = builder(
        bytearray([0xEE]) * chunk_size, compression=codec, write_limit=16384,
        chunk_size=chunk_size, chunk_source=pool.take, chunk_sink=pool.give,
    )
    for i, value in enumerate(values):
        key = None if i % 3 else b"key-%d" % i
        headers = [("h", b"x" * (i % 5))] if i % 2 else []
        assert full.try_append(TS + i, key, value, headers) == chunked.try_append(
            TS + i, key, value, headers
        )
    for b in (full, chunked):
        b.set_producer_state(77, 3, 1000, True)
    parts = chunked.build_parts()
    expected = bytes(full.build())
    assert b"".join(parts) == expected
    assert bytes(chunked.build()) == expected
    assert list(chunked.iter_records()) == list(full.iter_records())
    assert [part.obj for part in parts if len(part)][: len(chunked.chunks)] == chunked.chunks
    # One view per chunk held (plus compressed bytes no chunk could hold, if any).
    assert len(parts) - len(chunked.chunks) in (0, 1)
    # What the pool handed out and did not get back is what the batch holds, to the byte.
    assert pool.out == sum(len(c) for c in chunked.chunks) - chunk_size
    # No chunk's tail is left empty: records straddle (a record larger than a chunk makes the
    # pool give one chunk of its size).
    assert all(len(part) == len(part.obj) for part in parts[:-1])
    # A new sequence after close rewrites header and CRC across the chunks alike.
    for b in (full, chunked):
        b.set_producer_state(77, 4, 2000, True)
    assert b"".join(chunked.build_parts()) == bytes(full.build())


@pytest.mark.parametrize("builder", [PyMemoryRecordsBuilder, CMemoryRecordsBuilder],
                         ids=["python", "compiled"])
def test_a_refused_chunk_refuses_the_record_and_changes_nothing(builder: Any) -> None:
    pool = ChunkPool(0, 2)  # the second chunk asked for is refused
    b = builder(bytearray(100), write_limit=16384, chunk_size=100,
                chunk_source=pool.take, chunk_sink=pool.give)
    assert b.try_append(TS, None, b"a" * 20, []) == 0
    before = (b.num_records, b.max_timestamp, b.uncompressed_size)
    assert b.try_append(TS + 5, None, b"b" * 150, []) == 1  # one chunk taken: fits
    assert b.try_append(TS + 9, None, b"c" * 150, []) == -1  # the next one refused
    assert (b.num_records, b.max_timestamp) == (2, TS + 5)
    assert before[0] == 1
    assert b.try_append(TS + 9, None, b"c" * 150, []) == 2  # the pool gives again
    assert [r.value for r in b.iter_records()] == [b"a" * 20, b"b" * 150, b"c" * 150]


EDGE_CODECS = pytest.mark.parametrize(
    "codec", [CompressionType.NONE, CompressionType.LZ4], ids=lambda c: c.kafka_name
)


@EDGE_CODECS
@pytest.mark.parametrize("slack", [-1, 0, 1])
def test_room_rules_agree_at_the_exact_limit(codec: CompressionType, slack: int) -> None:
    """Random sizes seldom land on the limit itself, where ``>`` and ``>=`` part ways."""
    first, second = b"a" * 37, b"b" * 50
    probe = PyMemoryRecordsBuilder(bytearray(1000), compression=codec, write_limit=1 << 20)
    probe.append(TS, None, first, [])
    limit = probe.estimated_size_in_bytes + record_size_in_bytes(1, 0, None, second, []) + slack
    twin = Twin(1000, 0, {"compression": codec, "write_limit": limit})
    twin.call("try_append", fixed(TS), fixed(None), fixed(first), fixed([]))
    twin.call("has_room_for", fixed(TS), fixed(None), fixed(second), fixed([]))
    assert twin.call("try_append", fixed(TS), fixed(None), fixed(second), fixed([])) == (
        -1 if slack < 0 else 1
    )
    twin.call("try_append", fixed(TS), fixed(None), fixed(b""), fixed([]))


@EDGE_CODECS
@pytest.mark.parametrize("slack", [-1, 0, 1])
def test_is_full_agrees_at_the_exact_limit(codec: CompressionType, slack: int) -> None:
    records = [(fixed(TS), fixed(None), fixed(b"a" * 37), fixed([])) for _ in range(3)]
    probe = PyMemoryRecordsBuilder(bytearray(1000), compression=codec, write_limit=1 << 20)
    for _ in records:
        probe.append(TS, None, b"a" * 37, [])
    limit = probe.estimated_size_in_bytes + slack
    twin = Twin(1000, 0, {"compression": codec, "write_limit": limit})
    for record in records:
        twin.call("append", *record)  # the snapshot after each compares is_full
    assert twin.py.is_full is (slack <= 0)


def test_append_after_close_and_bad_producer_state_raise_alike() -> None:
    twin = Twin(200, 0, {"write_limit": 200})
    for state in [(-1, -1, -1, True), (5, -1, 0, False), (5, 0, -1, False)]:
        twin.call("set_producer_state", *map(fixed, state))
    twin.call("append", fixed(TS), fixed(None), fixed(b"x"), fixed([]))
    twin.call("close_for_record_appends")
    twin.call("append", fixed(TS), fixed(None), fixed(b"x"), fixed([]))
    twin.call("try_append", fixed(TS), fixed(None), fixed(b"x"), fixed([]))
    twin.call("set_producer_state", fixed(7), fixed(32768), fixed(0))  # struct.error, at close
    twin.call("close")
    twin.call("set_producer_state", fixed(7), fixed(1), fixed(0))
    twin.call("build")


def test_iter_records_reads_the_builder_when_first_advanced() -> None:
    py = PyMemoryRecordsBuilder(bytearray(500), write_limit=500)
    c = CMemoryRecordsBuilder(bytearray(500), write_limit=500)
    lazy: list[Iterator[object]] = []
    for builder in (py, c):
        builder.append(TS, None, b"a", [])
        lazy.append(builder.iter_records())
        builder.append(TS + 1, b"k", b"b", [("h", None)])
    assert list(lazy[1]) == list(lazy[0])
    assert len(list(py.iter_records())) == 2


def test_the_public_api_is_the_same() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    assert public(CMemoryRecordsBuilder) == public(PyMemoryRecordsBuilder)
    for name in public(PyMemoryRecordsBuilder):
        py_member = getattr(PyMemoryRecordsBuilder, name)
        c_member = getattr(CMemoryRecordsBuilder, name)
        # Cython's properties are getset descriptors: both kinds are read-only attributes.
        assert isinstance(py_member, property) == inspect.isgetsetdescriptor(c_member), name
        if callable(py_member):
            py_params = inspect.signature(py_member).parameters.values()
            c_params = inspect.signature(c_member).parameters.values()
            assert [(p.name, p.kind, p.default) for p in c_params] == [
                (p.name, p.kind, p.default) for p in py_params
            ], name


@pytest.mark.parametrize(
    "kwargs",
    [
        {"write_limit": 10, "compression": 9},
        {"write_limit": 10, "compression": CompressionType.LZ4, "compression_level": 0},
        {"write_limit": 10, "compression": CompressionType.SNAPPY, "compression_level": 1},
        {"write_limit": 10, "compression": "gzip"},
        {"compression": CompressionType.GZIP},
        {"write_limit": 10, "estimated_ratio": "high"},
    ],
)
def test_bad_construction_raises_alike(kwargs: dict[str, Any]) -> None:
    py, c = (
        outcome(lambda: PyMemoryRecordsBuilder(bytearray(10), **kwargs)),
        outcome(lambda: CMemoryRecordsBuilder(bytearray(10), **kwargs)),
    )
    assert py[0] == c[0] == "raised"
    assert c[1][0] is py[1][0]  # type: ignore[index]
    if py[1][0] is not TypeError:  # type: ignore[index]
        assert c == py  # argument-binding TypeErrors are worded by Python and by Cython


def test_a_buffer_that_cannot_be_written_fails_alike() -> None:
    twin = Twin(0, 0, {"write_limit": 100})  # spills at once, so writes go to a bytearray
    twin.call("append", fixed(TS), fixed(None), fixed(b"x"), fixed([]))
    py = PyMemoryRecordsBuilder(bytes(100), write_limit=100)  # type: ignore[arg-type]
    c = CMemoryRecordsBuilder(bytes(100), write_limit=100)  # type: ignore[arg-type]
    assert outcome(lambda: c.try_append(TS, None, b"x", [])) == outcome(
        lambda: py.try_append(TS, None, b"x", [])
    )
    assert (c.num_records, c.max_timestamp) == (py.num_records, py.max_timestamp)


@pytest.mark.parametrize("timestamp", [2**63, -(2**63) - 1, 1.5, "1"])
def test_compiled_timestamps_are_int64_and_checked_at_the_call(timestamp: object) -> None:
    """The one deliberate difference: Python would fail only at close (struct.error)."""
    builder = CMemoryRecordsBuilder(bytearray(100), write_limit=100)
    with pytest.raises((OverflowError, TypeError)):
        builder.try_append(timestamp, None, b"x", [])  # type: ignore[arg-type]
    assert (builder.num_records, builder.max_timestamp, builder.uncompressed_size) == (0, -1, 61)


def test_records_exports_the_builder_the_environment_chose() -> None:
    from aioaccum._core import records

    exported: object = records.MemoryRecordsBuilder
    if _speedups.EXTENSIONS:
        assert exported is CMemoryRecordsBuilder
        assert _speedups.describe() == "compiled (Cython)"
    else:
        assert exported is PyMemoryRecordsBuilder
        assert _speedups.describe().startswith("pure Python")


# ------------------------------------------------------------------------ aioaccum._speedups


def load_speedups(monkeypatch: pytest.MonkeyPatch, setting: str | None) -> Any:
    """Run a fresh copy of aioaccum/_speedups.py under ``setting``, leaving the real one alone."""
    # Whatever import hooks the copy installs are undone with the test.
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    if setting is None:
        monkeypatch.delenv(_speedups.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(_speedups.ENV_VAR, setting)
    path = Path(_speedups.__file__)
    spec = importlib.util.spec_from_file_location("speedups_probe", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("setting", "extensions", "description"),
    [
        (None, True, "compiled (Cython)"),
        ("", True, "compiled (Cython)"),
        ("0", True, "compiled (Cython)"),
        ("1", False, "pure Python (AIOACCUM_NO_EXTENSIONS=1)"),
        ("yes", False, "pure Python (AIOACCUM_NO_EXTENSIONS=yes)"),
    ],
)
def test_the_environment_chooses_the_implementation(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, extensions: bool, description: str
) -> None:
    probe = load_speedups(monkeypatch, setting)
    assert probe.EXTENSIONS is extensions
    assert probe.describe() == description


def test_a_missing_compiled_module_is_an_error_that_names_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aioaccum._core._crecords", None)  # as if never built
    with pytest.raises(ImportError, match=r"aioaccum\._core\._crecords") as raised:
        load_speedups(monkeypatch, None)
    message = str(raised.value)
    assert "pip install -e ." in message
    assert "AIOACCUM_NO_EXTENSIONS=1" in message

    assert load_speedups(monkeypatch, "1").EXTENSIONS is False  # the way out it names works
