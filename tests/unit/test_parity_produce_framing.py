"""The compiled produce framing (``_cproduce.pyx``) against the pure-Python reference.

Both are imported by name, whichever the package uses, so these tests run (and need the compiled
module) in both modes. A request must come out as the same buffers, byte for byte, with the
batches' own buffers passed through uncopied; an answer must read as the same answers (keys,
offsets, times, error types and messages, throttle time) or fail alike when cut short.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka import _cproduce
from aioaccum._kafka.answers import PartitionResponse, ProduceAnswers
from aioaccum._kafka.produce import py_read_answers, py_request_parts

topics = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=40
)
chunk: st.SearchStrategy[memoryview] = st.binary(max_size=64).map(lambda raw: memoryview(raw))
batch = st.tuples(st.integers(0, 2**31 - 1), st.lists(chunk, min_size=1, max_size=4))
by_topic_st = st.dictionaries(topics, st.lists(batch, min_size=1, max_size=5), max_size=4)


def flat(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([3, 5, 7, 12]),
    cid=st.integers(0, 2**31 - 1),
    client_id=st.binary(max_size=300),
    txn=st.none() | st.text(max_size=300),
    acks=st.sampled_from([-1, 0, 1]),
    timeout=st.integers(0, 2**31 - 1),
    by_topic=by_topic_st,
)
def test_a_request_is_the_same_buffers_byte_for_byte(
    version: int, cid: int, client_id: bytes, txn: str | None, acks: int, timeout: int,
    by_topic: dict[str, list[tuple[int, list[memoryview]]]],
) -> None:
    args = (version, cid, client_id, txn, acks, timeout, by_topic)
    py, c = py_request_parts(*args), _cproduce.request_parts(*args)
    assert [bytes(p) for p in c] == [bytes(p) for p in py]
    # The size prefix counts everything after it.
    assert struct.unpack_from(">i", flat(c))[0] == len(flat(c)) - 4
    # The batches' buffers go in as they are, never copied.
    given_chunks = [id(ch) for parts in by_topic.values() for _, chunks in parts for ch in chunks]
    assert [id(p) for p in c if isinstance(p, memoryview)] == given_chunks


def answer_body(version: int, topics_: list[tuple[str, list[tuple[int, int, int, int]]]],
                throttle: int) -> bytes:
    out = [struct.pack(">i", len(topics_))]
    for topic, partitions in topics_:
        raw = topic.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(partitions)))
        for partition, code, offset, ts in partitions:
            out.append(struct.pack(">ihqq", partition, code, offset, ts))
            if version >= 5:
                out.append(struct.pack(">q", 0))  # log start offset
    out.append(struct.pack(">i", throttle))
    return b"".join(out)


def outcome(read: Any, *args: Any) -> Any:
    try:
        answers = read(*args)
    except Exception:  # a cut answer: both must refuse it (their exception types differ)
        return "raised"
    assert type(answers) is ProduceAnswers
    rows = []
    for key, value in answers.items():
        assert type(key) is TopicPartition
        assert type(value) is PartitionResponse
        error = value.error
        rows.append((
            tuple(key), value.base_offset, value.log_append_time,
            None if error is None else (type(error).__name__, str(error)),
        ))
    return rows, answers.throttle_time_ms


partition_answer = st.tuples(
    st.integers(0, 2**31 - 1),
    st.sampled_from([0, 0, 0, 2, 6, 10, 19, 45, 87]),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([3, 4, 5, 6, 7]),
    answered=st.lists(st.tuples(topics, st.lists(partition_answer, max_size=5)), max_size=4),
    throttle=st.integers(0, 2**31 - 1),
    asked_in_order=st.booleans(),
    cut=st.none() | st.integers(0, 200),
)
def test_an_answer_reads_the_same(
    version: int, answered: list[tuple[str, list[tuple[int, int, int, int]]]], throttle: int,
    asked_in_order: bool, cut: int | None,
) -> None:
    body = answer_body(version, answered, throttle)
    if cut is not None:
        body = body[: min(cut, len(body))]
    # The request's batches: the answered partitions (in order, or reversed) with a chunk each.
    asked = [
        (TopicPartition(topic, p[0]), [memoryview(b"x" * (i + 1))])
        for topic, partitions in answered for i, p in enumerate(partitions)
    ]
    if not asked_in_order:
        asked.reverse()
    py = outcome(py_read_answers, version, body, asked)
    c = outcome(_cproduce.read_answers, version, body, asked)
    assert c == py


def test_answers_in_the_order_asked_are_keyed_by_the_requests_own_partitions() -> None:
    asked = [(TopicPartition("t", 0), [memoryview(b"ab")]), (TopicPartition("t", 3),
                                                             [memoryview(b"cde")])]
    body = answer_body(7, [("t", [(0, 0, 100, -1), (3, 0, 7, 5)])], 12)
    answers = _cproduce.read_answers(7, body, asked)
    keys = list(answers)
    assert keys[0] is asked[0][0]
    assert keys[1] is asked[1][0]
    assert answers[asked[1][0]] == PartitionResponse(None, 7, 5)
    assert answers.throttle_time_ms == 12


def test_an_error_names_the_batch_size_it_refused() -> None:
    asked = [(TopicPartition("t", 1), [memoryview(b"x" * 10), memoryview(b"y" * 5)])]
    body = answer_body(5, [("t", [(1, 10, -1, -1)])], 0)  # MESSAGE_TOO_LARGE
    py = py_read_answers(5, body, asked)[asked[0][0]].error
    c = _cproduce.read_answers(5, body, asked)[asked[0][0]].error
    assert type(c) is type(py)
    assert str(c) == str(py)
    assert "15" in str(c)


def test_a_cut_answer_is_an_error_naming_where() -> None:
    body = answer_body(7, [("t", [(0, 0, 1, 1)])], 0)[:-3]
    with pytest.raises(ValueError, match=r"cut short: 4 bytes wanted at byte \d+ of \d+"):
        _cproduce.read_answers(7, body, [])
