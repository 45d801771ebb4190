"""Codecs: names, level ranges, round trips, cross-decoding with aiokafka, the ratio estimator."""

from __future__ import annotations

import os
import re
import sys
import zlib

import pytest
import zstandard
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from aioaccum._core import codecs
from aioaccum._core.codecs import (
    CompressionRatioEstimator,
    CompressionType,
    compress,
    decompress,
    ensure_codec_available,
    validate_compression_level,
)
from aioaccum.errors import ConfigError

CODECS = [c for c in CompressionType if c is not CompressionType.NONE]
SAMPLES = [
    b"",
    b"x",
    b"kafka " * 1000,
    os.urandom(3000),  # incompressible: lz4 stores such blocks raw
    (b"0123456789abcdef" * 4096) + os.urandom(70_000),  # > 64 KiB lz4 block, > 32 KiB snappy block
]


# ------------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), (" LZ4 ", 3)],
)
def test_from_name(name: str, codec: int) -> None:
    assert CompressionType.from_name(name) == codec


def test_from_name_rejects_unknown_names_listing_the_choices() -> None:
    choices = "'none', 'gzip', 'snappy', 'lz4', 'zstd'"
    with pytest.raises(ConfigError, match=f"'brotli' is not one of: {choices}"):
        CompressionType.from_name("brotli")


def test_kafka_name() -> None:
    assert [c.kafka_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]


# ----------------------------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("codec", "good", "bad", "message"),
    [
        (CompressionType.GZIP, [1, 9, -1], [0, 10, -2], "between 1 and 9 or -1"),
        (CompressionType.LZ4, [1, 9, 17], [0, 18], "between 1 and 17"),
        (CompressionType.ZSTD, [-131072, 0, 3, 22], [-131073, 23], "between -131072 and 22"),
    ],
)
def test_level_ranges(
    codec: CompressionType, good: list[int], bad: list[int], message: str
) -> None:
    for level in good:
        assert validate_compression_level(codec, level) == level
        assert decompress(codec, compress(codec, b"abc" * 100, level)) == b"abc" * 100
    for level in bad:
        with pytest.raises(ConfigError, match=message):
            validate_compression_level(codec, level)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_codecs_without_levels_refuse_one(codec: CompressionType) -> None:
    assert validate_compression_level(codec, None) is None
    with pytest.raises(ConfigError, match="has no compression level"):
        validate_compression_level(codec, 1)


@pytest.mark.parametrize("level", [True, 1.5, "3"])
def test_level_must_be_an_int(level: object) -> None:
    with pytest.raises(ConfigError, match="must be an int"):
        validate_compression_level(CompressionType.GZIP, level)  # type: ignore[arg-type]


def test_gzip_level_changes_the_output() -> None:
    data = b"".join(b"record %d of topic t, " % (i % 977) for i in range(5_000))
    fast = compress(CompressionType.GZIP, data, 1)
    best = compress(CompressionType.GZIP, data, 9)
    # The gzip header's XFL byte records the level class: 4 = fastest, 2 = best.
    assert (fast[8], best[8]) == (4, 2)
    assert fast != best
    assert decompress(CompressionType.GZIP, fast) == decompress(CompressionType.GZIP, best) == data


def test_lz4_default_level_is_the_fast_compressor() -> None:
    data = b"".join(str(i).encode() for i in range(20_000))
    assert compress(CompressionType.LZ4, data) == compress(CompressionType.LZ4, data, 9)
    assert len(compress(CompressionType.LZ4, data, 12)) < len(compress(CompressionType.LZ4, data))


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: str(len(d)))
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    packed = compress(codec, memoryview(bytearray(data)))
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(CODECS))
def test_round_trip_property(data: bytes, codec: CompressionType) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: str(len(d)))
def test_aiokafka_decodes_ours_and_we_decode_aiokafkas(data: bytes) -> None:
    pairs = [
        (CompressionType.GZIP, aiokafka_codec.gzip_encode, aiokafka_codec.gzip_decode),
        (CompressionType.SNAPPY, aiokafka_codec.snappy_encode, aiokafka_codec.snappy_decode),
        (CompressionType.LZ4, aiokafka_codec.lz4_encode, aiokafka_codec.lz4_decode),
        (CompressionType.ZSTD, aiokafka_codec.zstd_encode, aiokafka_codec.zstd_decode),
    ]
    for codec, their_encode, their_decode in pairs:
        if codec is CompressionType.SNAPPY and not data:
            # A bare xerial header (what xerial writes for no input) is mistaken for raw snappy
            # by aiokafka; a batch always has records, so this never reaches a consumer.
            assert decompress(codec, compress(codec, data)) == b""
            continue
        assert bytes(their_decode(compress(codec, data))) == data, codec
        assert decompress(codec, their_encode(data)) == data, codec


def test_snappy_blocks_hold_at_most_32_kib_of_input() -> None:
    data = os.urandom(80_000)
    packed = compress(CompressionType.SNAPPY, data)
    pos, blocks = 16, 0
    while pos < len(packed):
        length = int.from_bytes(packed[pos : pos + 4], "big")
        pos += 4 + length
        blocks += 1
    assert pos == len(packed)
    assert blocks == 3  # 32 KiB + 32 KiB + the rest


def test_snappy_reads_a_bare_raw_block() -> None:
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(b"raw" * 99))
    assert decompress(CompressionType.SNAPPY, raw) == b"raw" * 99


def test_snappy_rejects_a_truncated_block() -> None:
    packed = compress(CompressionType.SNAPPY, b"abc" * 1000)
    with pytest.raises(ValueError, match="truncated"):
        decompress(CompressionType.SNAPPY, packed[:-3])


def test_zstd_reads_streamed_frames_without_content_size() -> None:
    # Java's zstd-jni output stream does not record the content size in the frame.
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = compressor.compress(b"stream" * 500) + compressor.flush()
    assert decompress(CompressionType.ZSTD, streamed) == b"stream" * 500


def test_gzip_is_one_member_with_zero_mtime() -> None:
    packed = compress(CompressionType.GZIP, b"abc")
    assert packed[:8] == bytes.fromhex("1f8b080000000000")
    assert zlib.decompress(packed, 31) == b"abc"


def test_none_has_no_codec() -> None:
    with pytest.raises(ValueError, match="no compressor"):
        compress(CompressionType.NONE, b"x")
    with pytest.raises(ValueError, match="no decompressor"):
        decompress(CompressionType.NONE, b"x")


# --------------------------------------------------------------------------- missing extras


@pytest.mark.parametrize(
    ("codec", "module", "hint"),
    [
        (CompressionType.ZSTD, "zstandard", "pip install 'aioaccum[zstd]'"),
        (CompressionType.SNAPPY, "cramjam", "pip install 'aioaccum[snappy]'"),
        (CompressionType.LZ4, "lz4.frame", "pip install lz4"),
    ],
)
def test_missing_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, codec: CompressionType, module: str, hint: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(ConfigError, match=f"needs the .* package: {re.escape(hint)}"):
        ensure_codec_available(codec)
    with pytest.raises(ConfigError, match="pip install"):
        compress(codec, b"x")


def test_available_libraries_pass_the_check() -> None:
    for codec in CompressionType:
        ensure_codec_available(codec)


def test_zstd_compressors_are_cached_per_thread_and_level() -> None:
    compress(CompressionType.ZSTD, b"a", 5)
    cache = codecs._zstd_local.compressors
    first = cache[5]
    compress(CompressionType.ZSTD, b"b", 5)
    assert cache[5] is first


# ---------------------------------------------------------------------------- the estimator


def test_estimator_starts_at_one_per_topic_and_codec() -> None:
    estimator = CompressionRatioEstimator()
    assert estimator.estimation("t", CompressionType.LZ4) == 1.0


def test_estimator_improves_slowly_and_deteriorates_fast() -> None:
    estimator = CompressionRatioEstimator()
    lz4 = CompressionType.LZ4

    assert estimator.update_estimation("t", lz4, 0.3) == pytest.approx(0.995)
    for _ in range(9):
        estimator.update_estimation("t", lz4, 0.3)
    assert estimator.estimation("t", lz4) == pytest.approx(0.95)
    # Worse than expected: at least +0.05 at once, or straight to the observed ratio.
    assert estimator.update_estimation("t", lz4, 0.96) == pytest.approx(1.0)
    assert estimator.update_estimation("t", lz4, 1.4) == pytest.approx(1.4)
    assert estimator.update_estimation("t", lz4, 1.4) == pytest.approx(1.4)  # equal: unchanged


def test_estimator_never_steps_below_the_observed_ratio() -> None:
    estimator = CompressionRatioEstimator()
    estimator.set_estimation("t", CompressionType.GZIP, 0.502)
    assert estimator.update_estimation("t", CompressionType.GZIP, 0.5) == pytest.approx(0.5)


def test_estimator_keeps_topics_and_codecs_apart_and_resets() -> None:
    estimator = CompressionRatioEstimator()
    estimator.update_estimation("a", CompressionType.LZ4, 0.1)
    estimator.update_estimation("b", CompressionType.GZIP, 2.0)

    assert estimator.estimation("a", CompressionType.GZIP) == 1.0
    assert estimator.estimation("b", CompressionType.LZ4) == 1.0
    assert estimator.estimation("b", CompressionType.GZIP) == 2.0

    estimator.reset_estimation("a")
    assert estimator.estimation("a", CompressionType.LZ4) == 1.0
    assert estimator.estimation("b", CompressionType.GZIP) == 2.0
