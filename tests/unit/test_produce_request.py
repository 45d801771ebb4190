"""The one-pass produce request encoder and response reader agree with aiokafka's generic ones."""

from __future__ import annotations

import io
import random

import pytest
from aiokafka.protocol.produce import ProduceRequest

from aioaccum._kafka.produce import FAST_STRUCTS, FastProduceRequest

Topics = list[tuple[str, list[tuple[int, bytes]]]]


def random_topics(rng: random.Random) -> Topics:
    return [
        (
            f"topic-{i}" * rng.randint(1, 4),
            [
                (rng.randint(0, 999), rng.randbytes(rng.randint(0, 400)))
                for _ in range(rng.randint(0, 5))
            ],
        )
        for i in range(rng.randint(0, 3))
    ]


@pytest.mark.parametrize("newest", [3, 4, 5, 6, 7, 11])
def test_requests_encode_byte_for_byte_like_aiokafka(newest: int) -> None:
    rng = random.Random(newest)
    versions = {0: (3, newest)}
    for _ in range(100):
        topics = random_topics(rng)
        transactional_id = rng.choice([None, "", "tx-1", "tx-é"])
        acks, timeout = rng.choice([-1, 0, 1]), rng.randint(0, 2**31 - 1)
        ours = FastProduceRequest(transactional_id, acks, timeout, topics).prepare(versions)
        theirs = ProduceRequest(transactional_id, acks, timeout, topics).prepare(versions)
        assert type(ours).API_VERSION == type(theirs).API_VERSION == min(newest, 7)
        assert ours.encode() == theirs.encode()


@pytest.mark.parametrize("base", list(FAST_STRUCTS), ids=lambda cls: cls.__name__)
def test_responses_read_like_aiokafka(base: type) -> None:
    rng = random.Random(base.API_VERSION)  # type: ignore[attr-defined]
    response_type = base.RESPONSE_TYPE  # type: ignore[attr-defined]
    with_log_start = base.API_VERSION >= 5  # type: ignore[attr-defined]
    for _ in range(100):
        topics = [
            (
                f"t{i}" * rng.randint(1, 3),
                [
                    (
                        rng.randint(0, 999),
                        rng.choice([0, 6, 19, 87]),
                        rng.randint(-1, 2**50),
                        rng.randint(-1, 2**45),
                        *([rng.randint(-1, 9)] if with_log_start else []),
                    )
                    for _ in range(rng.randint(0, 4))
                ],
            )
            for i in range(rng.randint(0, 3))
        ]
        raw = response_type(topics, rng.randint(0, 5000)).encode()
        theirs = response_type.decode(io.BytesIO(raw))
        ours = FAST_STRUCTS[base].RESPONSE_TYPE.decode(io.BytesIO(raw))
        assert ours.throttle_time_ms == theirs.throttle_time_ms
        assert ours.topics == [(t, [tuple(p[:4]) for p in ps]) for t, ps in theirs.topics]
