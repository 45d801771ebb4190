"""The flexible-format pieces written by hand (aioaccum._kafka.wire, produce v12), read back with
Kafka's rules spelled out here: unsigned varint lengths plus one, tagged-field counts."""

from __future__ import annotations

import struct

import pytest

from aioaccum._kafka.produce import produce_v12
from aioaccum._kafka.wire import Reader, compact_array, compact_str, uvarint


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1])
def test_unsigned_varints_read_back(value: int) -> None:
    raw = uvarint(value)
    reader = Reader(raw + b"\x7f")
    assert reader.uvarint() == value
    assert reader.pos == len(raw)


def test_compact_strings_and_arrays_carry_their_length_plus_one() -> None:
    assert compact_str(None) == b"\x00"
    assert compact_str("ab") == b"\x03ab"
    assert compact_array([b"x", b"y"]) == b"\x03xy"
    reader = Reader(compact_str("tx-é") + compact_str(None))
    assert (reader.compact_str(), reader.compact_str()) == ("tx-é", None)


def test_produce_v12_body_names_the_transaction_and_each_partitions_records() -> None:
    records = memoryview(b"RECORDS!")
    call = produce_v12("tx-1", -1, 30000, {"t": [(0, records), (5, memoryview(b"xy"))]})
    call.prepare({0: (3, 13)})
    assert call.API_VERSION == 12
    r = Reader(call.encode())
    assert r.compact_str() == "tx-1"
    assert (r.int16(), r.int32()) == (-1, 30000)
    assert r.compact_count() == 1
    assert r.compact_str() == "t"
    found = []
    for _ in range(r.compact_count()):
        partition = r.int32()
        size = r.uvarint() - 1
        found.append((partition, r.data[r.pos : r.pos + size]))
        r.pos += size
        assert r.tags() == {}
    assert found == [(0, b"RECORDS!"), (5, b"xy")]
    assert r.tags() == {}
    assert r.tags() == {}
    assert r.pos == len(r.data)


def test_produce_v12_answer_keeps_offsets_and_the_error_message() -> None:
    body = (
        b"\x02" + compact_str("t")  # one topic
        + b"\x03"  # two partitions
        + struct.pack(">ihqqq", 0, 0, 41, -1, 0) + b"\x01" + compact_str(None) + b"\x00"
        + struct.pack(">ihqqq", 5, 87, -1, -1, 0)
        + b"\x02" + struct.pack(">i", 0) + compact_str("bad record") + b"\x00"  # record errors
        + compact_str("INVALID_RECORD") + b"\x01\x00\x02xx"  # a tagged field to skip
        + b"\x00"  # topic tags
        + struct.pack(">i", 7) + b"\x00"  # throttle, tags
    )
    call = produce_v12(None, -1, 1000, {})
    call.prepare({0: (3, 13)})
    assert call.RESPONSE_TYPE is not None
    response = call.RESPONSE_TYPE.decode(body)
    assert response.throttle_time_ms == 7
    (topic, partitions), = response.topics
    assert topic == "t"
    assert [p[:4] for p in partitions] == [(0, 0, 41, -1), (5, 87, -1, -1)]
    assert partitions[1][6] == "INVALID_RECORD"


def test_a_broker_without_the_version_is_told_by_name() -> None:
    call = produce_v12(None, -1, 1000, {})
    with pytest.raises(Exception, match=r"versions 3\.\.11; aioaccum needs one of \[12\]"):
        call.prepare({0: (3, 11)})
