"""MemoryRecordsBuilder: exact v2 bytes, room rules, spills, reuse, and three independent readers.

Expected bytes are assembled by hand here; aiokafka's reader (and, when a JDK and the Kafka jars
are present, the Java client itself) must decode what the builder writes.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioaccum._core import records
from aioaccum._core.codecs import CompressionType, decompress
from aioaccum._core.records import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Header,
    MemoryRecordsBuilder,
    SimpleRecord,
    estimate_size_in_bytes_upper_bound,
    record_size_in_bytes,
)
from aioaccum._core.varint import (
    VARINT_CACHE_SIZE,
    VARINTS,
    decode_varint,
    encode_varint,
    size_of_varint,
    zigzag,
)
from aioaccum.errors import ConfigError

Rec = tuple[int, bytes | None, bytes | None, list[Header]]
Decoded = list[tuple[int, int, object, object, list[Header]]]
TS = 1_700_000_000_000
ALL_CODECS = list(CompressionType)


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected 0x82F63B78), independent of the crc32c package."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def build(
    records: Sequence[Rec],
    compression: CompressionType = CompressionType.NONE,
    *,
    buffer: bytearray | None = None,
    write_limit: int = 1 << 20,
) -> tuple[MemoryRecordsBuilder, bytes]:
    builder = MemoryRecordsBuilder(
        bytearray(1 << 16) if buffer is None else buffer,
        compression=compression,
        write_limit=write_limit,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(ts, key, value, headers) == i
    return builder, bytes(builder.build())


def aiokafka_read(data: bytes) -> tuple[DefaultRecordBatch, Decoded]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def expected(records: Sequence[Rec]) -> Decoded:
    return [(i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records)]


SAMPLE: list[Rec] = [
    (TS, b"k", b"hello", []),
    (TS + 5, None, b"", [("h", b"\x01\x02"), ("n", None)]),
]


# ------------------------------------------------------------------------------------ golden


def test_none_batch_matches_hand_assembled_bytes() -> None:
    records = bytes.fromhex(
        # length 12, attrs, ts delta 0, offset delta 0, key len 1 "k", value len 5 "hello",
        # 0 headers
        "18 00 00 00 02 6b 0a 68656c6c6f 00"
        # length 14, attrs, ts delta 5, offset delta 1, null key, empty value, 2 headers:
        # "h" -> 0102, "n" -> null
        " 1c 00 0a 02 01 00 04 0268 04 0102 026e 01"
    )
    after_crc = (
        bytes.fromhex(
            "0000"  # attributes: no compression, create time, not transactional
            "00000001"  # last offset delta
            "0000018bcfe56800"  # base timestamp 1_700_000_000_000
            "0000018bcfe56805"  # max timestamp
            "ffffffffffffffff"  # producer id
            "ffff"  # producer epoch
            "ffffffff"  # base sequence
            "00000002"  # record count
        )
        + records
    )
    crc = crc32c_reference(after_crc)
    golden = (
        bytes.fromhex("0000000000000000 0000004d ffffffff 02")  # offset, length 77, epoch
        + struct.pack(">I", crc)
        + after_crc
    )
    assert len(golden) == 89

    _, out = build(SAMPLE)

    assert out.hex() == golden.hex()


def test_none_batch_is_byte_identical_to_aiokafkas_builder() -> None:
    records: list[Rec] = [
        (TS, b"key", b"v" * 300, [("a", b"1"), ("ключ", None)]),
        (TS - 7, None, None, []),
        (TS + 70_000, b"", b"x" * 20_000, [("", b"")]),
    ]
    theirs = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, (ts, key, value, headers) in enumerate(records):
        theirs.append(i, ts, key, value, headers)

    _, ours = build(records)

    assert ours == bytes(theirs.build())


@pytest.mark.parametrize("codec", ALL_CODECS[1:], ids=lambda c: c.kafka_name)
def test_compressed_batch_header_and_payload(codec: CompressionType) -> None:
    _, plain = build(SAMPLE)
    builder, out = build(SAMPLE, codec)

    # Same header fields as the uncompressed batch except length, crc and the codec bits.
    fields = struct.unpack(">qiibIhiqqqhii", out[:RECORD_BATCH_OVERHEAD])
    plain_fields = struct.unpack(">qiibIhiqqqhii", plain[:RECORD_BATCH_OVERHEAD])
    assert fields[1] == len(out) - 12
    assert fields[5] == codec.value
    unchanged = [0, 2, 3, *range(6, 13)]
    assert [fields[i] for i in unchanged] == [plain_fields[i] for i in unchanged]
    assert fields[4] == crc32c_reference(out[21:])
    # The payload is the uncompressed records section, compressed.
    assert decompress(codec, out[RECORD_BATCH_OVERHEAD:]) == plain[RECORD_BATCH_OVERHEAD:]
    assert builder.compression_ratio == (len(out) - 61) / (len(plain) - 61)
    _, decoded = aiokafka_read(out)
    assert decoded == expected(SAMPLE)


def test_gzip_payload_is_deterministic_with_zero_mtime() -> None:
    _, first = build(SAMPLE, CompressionType.GZIP)
    _, second = build(SAMPLE, CompressionType.GZIP)

    payload = first[RECORD_BATCH_OVERHEAD:]
    assert payload[:8] == bytes.fromhex("1f8b0800 00000000")  # gzip, deflate, no flags, mtime 0
    assert first == second


def test_lz4_payload_is_a_kafka_compatible_frame() -> None:
    _, out = build(SAMPLE, CompressionType.LZ4)

    payload = out[RECORD_BATCH_OVERHEAD:]
    # magic, FLG: version 1 + independent blocks (no checksums, no content size), BD: 64 KiB
    assert payload[:6] == bytes.fromhex("04224d18 60 40")
    assert payload[-4:] == b"\x00\x00\x00\x00"  # end mark and no content checksum after it


def test_snappy_payload_uses_xerial_framing() -> None:
    _, out = build(SAMPLE, CompressionType.SNAPPY)

    payload = out[RECORD_BATCH_OVERHEAD:]
    assert payload[:16] == b"\x82SNAPPY\x00" + bytes.fromhex("00000001 00000001")
    (block,) = struct.unpack(">i", payload[16:20])
    assert 20 + block == len(payload)


def test_zstd_payload_is_a_zstd_frame() -> None:
    _, out = build(SAMPLE, CompressionType.ZSTD)

    assert out[RECORD_BATCH_OVERHEAD : RECORD_BATCH_OVERHEAD + 4] == bytes.fromhex("28b52ffd")


# ---------------------------------------------------------------------------- round trips

header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.tuples(
    st.one_of(
        st.integers(min_value=0, max_value=2**62),
        st.sampled_from([0, 1, TS, 2**62, 2**63 - 1]),
    ),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300), st.sampled_from([b"", b"\x00" * 5000])),
    st.lists(header_st, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(ALL_CODECS),
    buffer_size=st.sampled_from([0, 61, 200, 4096]),
    write_limit=st.sampled_from([0, 100, 1000, 1 << 20]),
)
def test_round_trip_through_aiokafka(
    records: list[Rec], codec: CompressionType, buffer_size: int, write_limit: int
) -> None:
    pooled = bytearray(b"\xa5" * buffer_size)
    builder = MemoryRecordsBuilder(pooled, compression=codec, write_limit=write_limit)
    accepted: list[Rec] = []
    for ts, key, value, headers in records:
        room = builder.has_room_for(ts, key, value, headers)
        delta = builder.try_append(ts, key, value, headers)
        assert (delta >= 0) == room
        if delta < 0:
            break
        assert delta == len(accepted)
        accepted.append((ts, key, value, headers))

    assert list(builder.iter_records()) == [SimpleRecord(*r) for r in accepted]
    out = bytes(builder.build())

    batch, decoded = aiokafka_read(out)
    assert decoded == expected(accepted)
    assert batch.compression_type == codec
    assert batch.max_timestamp == max(r[0] for r in accepted)
    assert batch.first_timestamp == accepted[0][0]
    assert len(pooled) == buffer_size  # never resized
    assert list(builder.iter_records()) == [SimpleRecord(*r) for r in accepted]


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=6))
def test_sizes_agree_with_encoding(records: list[Rec]) -> None:
    builder = MemoryRecordsBuilder(bytearray(64), write_limit=1 << 30)
    base = records[0][0]
    for i, (ts, key, value, headers) in enumerate(records):
        before = builder.uncompressed_size
        builder.append(ts, key, value, headers)
        written = builder.uncompressed_size - before
        assert written == record_size_in_bytes(i, ts - base, key, value, headers)
        assert written <= estimate_size_in_bytes_upper_bound(key, value, headers) - 61
    single = MemoryRecordsBuilder(bytearray(0), write_limit=0)
    ts, key, value, headers = records[0]
    single.append(ts, key, value, headers)
    assert len(single.build()) <= estimate_size_in_bytes_upper_bound(key, value, headers)


def test_upper_bound_formula() -> None:
    headers: list[Header] = [("é", b"12"), ("x", None)]
    fields = 1 + (1 + 3) + 1 + (1 + 2 + 1 + 2) + (1 + 1 + 1)
    assert estimate_size_in_bytes_upper_bound(None, b"abc", headers) == 61 + 21 + fields
    assert MAX_RECORD_OVERHEAD == 21


# -------------------------------------------------------------------------------- room rules


def test_first_record_always_fits_even_above_limit_and_buffer() -> None:
    pooled = bytearray(100)
    builder = MemoryRecordsBuilder(pooled, write_limit=50)
    big = b"z" * 1000

    assert builder.has_room_for(TS, None, big, [])
    assert builder.try_append(TS, None, big, []) == 0
    assert builder.is_full
    assert not builder.has_room_for(TS, None, b"", [])
    assert builder.try_append(TS, None, b"", []) == -1

    out = bytes(builder.build())
    assert len(pooled) == 100
    assert builder.buffer is pooled
    assert aiokafka_read(out)[1] == [(0, TS, None, big, [])]


def test_append_that_exactly_reaches_the_limit_fits_and_one_more_byte_does_not() -> None:
    first = record_size_in_bytes(0, 0, None, b"a", [])
    second = record_size_in_bytes(1, 0, None, b"b" * 10, [])
    limit = RECORD_BATCH_OVERHEAD + first + second

    exact = MemoryRecordsBuilder(bytearray(limit), write_limit=limit)
    exact.try_append(TS, None, b"a", [])
    assert exact.has_room_for(TS, None, b"b" * 10, [])
    assert exact.try_append(TS, None, b"b" * 10, []) == 1
    assert exact.estimated_size_in_bytes == limit
    assert exact.is_full

    over = MemoryRecordsBuilder(bytearray(limit), write_limit=limit - 1)
    over.try_append(TS, None, b"a", [])
    assert not over.has_room_for(TS, None, b"b" * 10, [])
    assert over.try_append(TS, None, b"b" * 10, []) == -1
    assert over.num_records == 1
    assert not over.is_full


def test_rejected_append_leaves_the_batch_unchanged() -> None:
    builder = MemoryRecordsBuilder(bytearray(200), write_limit=120)
    builder.try_append(TS, None, b"a", [])
    before = (builder.uncompressed_size, builder.max_timestamp, builder.num_records)

    assert builder.try_append(TS + 99, None, b"b" * 100, []) == -1

    assert (builder.uncompressed_size, builder.max_timestamp, builder.num_records) == before


def test_compressed_room_check_uses_the_estimated_ratio_times_1_05() -> None:
    value = b"v" * 100
    size = record_size_in_bytes(1, 0, None, value, [])  # every record after the first
    builder = MemoryRecordsBuilder(
        bytearray(4096), compression=CompressionType.LZ4, write_limit=1000, estimated_ratio=0.5
    )
    n = 0
    while builder.try_append(TS, None, value, []) >= 0:
        n += 1
    # Java: accepted while 61 + int(uncompressed * 0.5 * 1.05) + record <= 1000
    uncompressed = builder.uncompressed_size - 61
    assert 61 + int(uncompressed * 0.525) + size > 1000
    assert 61 + int((uncompressed - size) * 0.525) + size <= 1000
    assert n == builder.num_records > 1000 // size  # more than would fit uncompressed
    assert builder.estimated_size_in_bytes == 61 + int(uncompressed * 0.525)

    builder.set_estimated_compression_ratio(1.0)
    assert builder.is_full


def test_compression_spills_uncompressed_records_then_lands_in_the_pooled_buffer() -> None:
    pooled = bytearray(b"\xee" * 1024)
    builder = MemoryRecordsBuilder(
        pooled, compression=CompressionType.LZ4, write_limit=1024, estimated_ratio=0.05
    )
    value = b"abcd" * 50
    while builder.try_append(TS, None, value, []) >= 0:
        pass
    assert builder.uncompressed_size > len(pooled)  # spilled

    out = builder.build()

    assert out.obj is pooled  # compressed result fits: back in the pooled buffer
    assert len(pooled) == 1024
    assert len(out) == builder.estimated_size_in_bytes < 1024
    _, decoded = aiokafka_read(bytes(out))
    assert [r[3] for r in decoded] == [value] * builder.num_records


def test_compressed_result_larger_than_the_buffer_goes_to_a_fresh_bytearray() -> None:
    pooled = bytearray(100)
    builder = MemoryRecordsBuilder(pooled, compression=CompressionType.GZIP, write_limit=100)
    noise = os.urandom(500)
    builder.try_append(TS, None, noise, [])

    out = builder.build()

    assert out.obj is not pooled
    assert aiokafka_read(bytes(out))[1] == [(0, TS, None, noise, [])]


def test_reused_dirty_buffer_yields_only_the_written_bytes() -> None:
    pooled = bytearray(4096)
    _, long_batch = build([(TS, b"k" * 50, b"v" * 1000, [])] * 3, buffer=pooled)
    pooled[len(long_batch) :] = b"\xff" * (4096 - len(long_batch))

    builder, reused = build(SAMPLE, buffer=pooled)
    _, fresh = build(SAMPLE)

    assert reused == fresh
    assert len(builder.build()) == len(fresh)
    assert aiokafka_read(reused)[1] == expected(SAMPLE)


# ------------------------------------------------------------------------ lifecycle, state


def test_set_producer_state_before_and_after_close() -> None:
    builder, _ = build(SAMPLE)
    builder.set_producer_state(4242, 7, 1000)
    batch, decoded = aiokafka_read(bytes(builder.build()))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 1000)
    assert not batch.is_transactional

    builder.set_producer_state(4242, 8, 5, is_transactional=True)
    batch, redecoded = aiokafka_read(bytes(builder.build()))  # CRC was rewritten
    assert (batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (8, 5, True)
    assert redecoded == decoded == expected(SAMPLE)


@pytest.mark.parametrize(
    ("pid", "epoch", "seq", "txn"),
    [(-1, -1, -1, True), (5, -1, 0, False), (5, 0, -1, False)],
)
def test_set_producer_state_rejects_what_kafka_rejects(
    pid: int, epoch: int, seq: int, txn: bool
) -> None:
    builder = MemoryRecordsBuilder(bytearray(100), write_limit=100)
    with pytest.raises(ValueError, match=r"producer|sequence"):
        builder.set_producer_state(pid, epoch, seq, txn)


def test_close_is_idempotent_and_ends_appends() -> None:
    builder, first = build(SAMPLE)
    assert builder.is_closed
    assert builder.is_full

    builder.close()
    assert bytes(builder.build()) == first
    assert builder.try_append(TS, None, b"x", []) == -1
    assert not builder.has_room_for(TS, None, b"x", [])
    with pytest.raises(RuntimeError, match="closed"):
        builder.append(TS, None, b"x", [])


def test_close_for_record_appends_refuses_even_a_first_record() -> None:
    builder = MemoryRecordsBuilder(bytearray(100), write_limit=100)
    builder.close_for_record_appends()

    assert builder.try_append(TS, None, b"x", []) == -1
    assert builder.is_full
    assert not builder.is_closed
    assert len(builder.build()) == 0  # an empty batch builds to nothing, like Java's EMPTY


def test_append_ignores_the_write_limit() -> None:
    builder = MemoryRecordsBuilder(bytearray(100), write_limit=0)
    builder.append(TS, None, b"a", [])
    assert not builder.has_room_for(TS, None, b"b", [])

    assert builder.append(TS, None, b"b", []) == 1
    assert builder.try_append(TS, None, b"c", []) == -1  # the limit is back for try_append


def test_given_base_timestamp_is_used_for_deltas() -> None:
    builder = MemoryRecordsBuilder(bytearray(200), write_limit=200, base_timestamp=TS - 10)
    builder.append(TS, None, b"a", [])
    builder.append(TS - 20, None, b"b", [])

    batch, decoded = aiokafka_read(bytes(builder.build()))

    assert batch.first_timestamp == TS - 10
    assert batch.max_timestamp == TS
    assert [r[1] for r in decoded] == [TS, TS - 20]


def test_properties_before_and_after_close() -> None:
    builder = MemoryRecordsBuilder(bytearray(1000), write_limit=1000)
    assert builder.num_records == 0
    assert builder.estimated_size_in_bytes == 61
    assert builder.max_timestamp == -1
    assert builder.compression_ratio == 1.0
    builder.append(TS, b"k", b"v", [])
    assert builder.base_timestamp == TS
    assert builder.uncompressed_size == builder.estimated_size_in_bytes == 61 + 9
    assert "open" in repr(builder)
    builder.close()
    assert builder.estimated_size_in_bytes == len(builder.build()) == 70
    assert "closed" in repr(builder)


def test_level_is_validated_at_construction() -> None:
    with pytest.raises(ConfigError, match="between 1 and 17"):
        MemoryRecordsBuilder(
            bytearray(10), compression=CompressionType.LZ4, compression_level=0, write_limit=10
        )


# --------------------------------------------------------------------------------- varints


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(n: int) -> None:
    raw = encode_varint(n)
    assert len(raw) == size_of_varint(n) <= 10
    assert decode_varint(raw + b"\xff", 0) == (n, len(raw))


def test_varint_known_encodings_and_table() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert all(VARINTS[i] == encode_varint(i) for i in range(0, VARINT_CACHE_SIZE, 97))
    assert VARINTS[-1] == encode_varint(VARINT_CACHE_SIZE - 1)
    with pytest.raises(ValueError, match="past the end"):
        decode_varint(b"\x80", 0)
    with pytest.raises(ValueError, match="ten bytes"):
        decode_varint(b"\x80" * 11, 0)


# ------------------------------------------------------------------ the Java client as judge

_M2 = Path.home() / ".m2" / "repository"
_JARS = {
    "kafka-clients": "org/apache/kafka/kafka-clients",
    "lz4-java": "at/yawk/lz4/lz4-java",
    "snappy-java": "org/xerial/snappy/snappy-java",
    "zstd-jni": "com/github/luben/zstd-jni",
    "slf4j-api": "org/slf4j/slf4j-api",
}


def _newest_jar(folder: str) -> Path | None:
    jars = sorted(
        (_M2 / folder).glob("*/*.jar"),
        key=lambda p: [
            int(x) if x.isdigit() else 0 for x in p.parent.name.replace("-", ".").split(".")
        ],
    )
    return jars[-1] if jars else None


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """Run the Java client's reader/builder on files; skipped where no JDK or jars exist."""
    jars = {name: _newest_jar(folder) for name, folder in _JARS.items()}
    missing = [name for name, jar in jars.items() if jar is None]
    if not shutil.which("javac") or missing:
        reason = f"needs javac and the Kafka client jars in ~/.m2 (missing: {missing})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI fetches them with scripts/kafka fetch")
        pytest.skip(reason)
    kafka = jars["kafka-clients"]
    assert kafka is not None
    if not kafka.parent.name.startswith("4."):
        pytest.fail(f"the checker is written against kafka-clients 4.x, found {kafka}")
    out = tmp_path_factory.mktemp("java")
    classpath = os.pathsep.join([str(out), *(str(j) for j in jars.values())])
    source = Path(__file__).parent / "golden" / "KafkaRecordsCheck.java"
    subprocess.run(["javac", "-d", str(out), "-cp", classpath, str(source)], check=True)

    def run(*args: str) -> str:
        done = subprocess.run(
            ["java", "-cp", classpath, "KafkaRecordsCheck", *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout

    return run


def _hex(b: bytes | None) -> str:
    return "-" if b is None else "." if not b else b.hex()


def _java_lines(records: Sequence[Rec]) -> list[str]:
    lines = []
    for i, (ts, key, value, headers) in enumerate(records):
        parts = [f"REC {i} {ts} {_hex(key)} {_hex(value)}"]
        parts += [f"{_hex(k.encode())} {_hex(v)}" for k, v in headers]
        lines.append(" ".join(parts))
    return lines


JAVA_RECORDS: list[Rec] = [
    (TS, b"k", b"hello" * 100, [("h", b"\x01\x02"), ("ü", None)]),
    (TS - 3, None, None, []),
    (TS + 86_400_000, b"", b"", [("e", b"")]),
    (0, b"\x00" * 40, os.urandom(70_000), []),  # more than one lz4 block and snappy block
    (2**62, b"key", b"value" * 30_000, []),
]


def test_java_reads_our_batches(java: Callable[..., str], tmp_path: Path) -> None:
    files = []
    for codec in ALL_CODECS:
        builder, _ = build(JAVA_RECORDS, codec, buffer=bytearray(1024))
        builder.set_producer_state(77, 3, 1_000_000)
        path = tmp_path / f"{codec.kafka_name}.bin"
        path.write_bytes(builder.build())
        files.append(str(path))

    lines = java("read", *files).splitlines()

    want_records = _java_lines(JAVA_RECORDS)
    per_batch = 1 + len(JAVA_RECORDS)
    assert len(lines) == per_batch * len(ALL_CODECS)
    for i, codec in enumerate(ALL_CODECS):
        head, *recs = lines[i * per_batch : (i + 1) * per_batch]
        _, magic, cid, count, last_offset, base_ts, max_ts, pid, epoch, seq, txn, _ = head.split()
        assert (magic, int(cid), int(count), int(last_offset)) == ("2", codec.value, 5, 4)
        assert (int(base_ts), int(max_ts)) == (TS, 2**62)
        assert (pid, epoch, seq, txn) == ("77", "3", "1000000", "false")
        assert recs == want_records


def test_java_builds_the_same_uncompressed_bytes_and_we_read_its_compressed_ones(
    java: Callable[..., str], tmp_path: Path
) -> None:
    listing = tmp_path / "records.txt"
    listing.write_text("\n".join(line.split(" ", 2)[2] for line in _java_lines(JAVA_RECORDS)))
    _, ours = build(JAVA_RECORDS)
    for codec in ALL_CODECS:
        out = tmp_path / f"java-{codec.kafka_name}.bin"
        java("build", codec.kafka_name, str(listing), str(out))
        theirs = out.read_bytes()
        if codec is CompressionType.NONE:
            assert theirs == ours
        else:
            assert decompress(codec, theirs[61:]) == ours[61:]
        assert aiokafka_read(theirs)[1] == expected(JAVA_RECORDS)


def test_producer_state_set_before_close_lands_in_the_header() -> None:
    builder = MemoryRecordsBuilder(bytearray(200), write_limit=200)
    builder.append(TS, None, b"a", [])
    builder.set_producer_state(9, 1, 41)
    assert (builder.producer_id, builder.producer_epoch, builder.base_sequence) == (9, 1, 41)
    assert not builder.is_transactional
    batch, _ = aiokafka_read(bytes(builder.build()))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 41)

    builder.set_producer_state(-1, -1, -1)  # back to no idempotence: allowed, header rewritten
    batch, _ = aiokafka_read(bytes(builder.build()))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)


def test_empty_batch_stays_empty_after_close() -> None:
    pooled = bytearray(b"\x11" * 100)
    builder = MemoryRecordsBuilder(pooled, write_limit=100, compression=CompressionType.GZIP)
    builder.close()
    builder.set_producer_state(1, 0, 0)

    assert len(builder.build()) == 0
    assert list(builder.iter_records()) == []
    assert pooled == b"\x11" * 100  # nothing written
    assert builder.compression is CompressionType.GZIP
    assert builder.write_limit == 100


def test_corrupt_record_length_is_detected_when_reading_back() -> None:
    builder = MemoryRecordsBuilder(bytearray(200), write_limit=200)
    builder.append(TS, None, b"abc", [])
    builder.buffer[RECORD_BATCH_OVERHEAD] += 2  # claim two more bytes than the fields hold

    with pytest.raises(ValueError, match="disagrees"):
        list(builder.iter_records())


def test_zigzag() -> None:
    assert [zigzag(n) for n in (0, -1, 1, -2, 2, 2**63 - 1, -(2**63))] == [
        0,
        1,
        2,
        3,
        4,
        2**64 - 2,
        2**64 - 1,
    ]


def test_header_key_cache_stays_bounded_and_correct() -> None:
    headers: list[Header] = [(f"key-{i}", str(i).encode()) for i in range(2500)]
    builder = MemoryRecordsBuilder(bytearray(100), write_limit=100)
    builder.append(TS, None, None, headers)
    builder.append(TS, None, None, headers[:3])

    assert len(records._HEADER_KEYS) <= 1024
    _, decoded = aiokafka_read(bytes(builder.build()))
    assert [r[4] for r in decoded] == [headers, headers[:3]]


@pytest.mark.parametrize("count", [0, 2])
def test_closed_builder_no_longer_pins_the_pooled_buffer(count: int) -> None:
    pooled = bytearray(512)
    builder = MemoryRecordsBuilder(pooled, write_limit=512)
    with pytest.raises(BufferError):
        pooled.append(0)  # while open, the builder's view fixes the size
    for _ in range(count):
        builder.append(TS, None, b"x", [])

    builder.close()

    pooled.append(0)  # no export left behind
    assert len(pooled) == 513


def test_java_reads_a_random_corpus(java: Callable[..., str], tmp_path: Path) -> None:
    rng = random.Random(20240601)

    def blob(limit: int) -> bytes | None:
        roll = rng.random()
        if roll < 0.15:
            return None
        if roll < 0.3:
            return b""
        return rng.randbytes(rng.randrange(limit))

    files, want = [], []
    for i in range(40):
        codec = ALL_CODECS[i % len(ALL_CODECS)]
        batch: list[Rec] = []
        for _ in range(rng.randrange(1, 30)):
            ts = rng.choice([0, TS, 2**62, TS + rng.randrange(-(10**9), 10**9)])
            headers = [
                ("".join(rng.choice("aé☃𝄞-") for _ in range(rng.randrange(6))), blob(20))
                for _ in range(rng.randrange(3))
            ]
            batch.append((ts, blob(50), blob(3000), headers))
        _, out = build(batch, codec, buffer=bytearray(rng.choice([0, 100, 4096])))
        path = tmp_path / f"{i}.bin"
        path.write_bytes(out)
        files.append(str(path))
        want.append(batch)

    lines = java("read", *files).splitlines()

    got = [line for line in lines if line.startswith("REC")]
    assert got == [line for batch in want for line in _java_lines(batch)]
    assert sum(line.startswith("BATCH") for line in lines) == 40
