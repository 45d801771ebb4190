"""Bad input against a real cluster: typed errors, bounded waits, and no accepted record lost.

Only what needs a broker is here (the rest is in ``tests/unit/test_bad_input_unit.py``): a
missing topic with auto-creation off, and a burst of refused records between good ones on the
real network adapter, whose good records must all be read back.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from aioaccum import ConfigError, ProducerTimeoutError
from aioaccum.errors import RecordTooLargeError, SerializationError
from aioaccum.producer import Producer

from .test_cancellation_storm import read_topic

pytestmark = pytest.mark.kafka

MAX_BLOCK_MS = 1500
# Generous: a loaded CI machine may be slow to notice the deadline, never much faster.
SLACK_S = 2.0


async def test_missing_topic_fails_within_max_block_ms(
    kafka_bootstrap: str, new_topic: str
) -> None:
    good = [b"before-%d" % i for i in range(20)]
    async with Producer(kafka_bootstrap, max_block_ms=MAX_BLOCK_MS, linger_ms=50) as producer:
        futures = [await producer.send(new_topic, value) for value in good]
        start = time.monotonic()
        with pytest.raises(ProducerTimeoutError) as caught:
            await producer.send("aioaccum-no-such-topic-for-bad-input", b"lost?")
        elapsed = time.monotonic() - start
        for future in futures:
            assert (await future).offset >= 0
    assert MAX_BLOCK_MS / 1000 - 0.05 <= elapsed < MAX_BLOCK_MS / 1000 + SLACK_S
    assert str(caught.value) == (
        f"topic 'aioaccum-no-such-topic-for-bad-input' not present in metadata after "
        f"{MAX_BLOCK_MS} ms; create the topic (auto-creation may be off) or raise max_block_ms"
    )
    assert sorted(value for _, _, value in await read_topic(kafka_bootstrap, new_topic)) == sorted(
        good
    )


BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"value": "text"}, SerializationError),
    ({"value": b"v", "key": 1}, SerializationError),
    ({"value": b"x" * 2_000_000}, RecordTooLargeError),
    ({"value": b"v", "topic": "bad topic"}, ConfigError),
    ({"value": b"v", "topic": ".."}, ConfigError),
    ({"value": b"v", "topic": "x" * 250}, ConfigError),
    ({"value": b"v", "timestamp_ms": -5}, ConfigError),
    ({"value": b"v", "headers": [("k", "v")]}, SerializationError),
    ({"value": b"v", "headers": {"k": b"v"}}, SerializationError),
    ({"value": b"v", "partition": 99}, ConfigError),
]


async def test_refused_records_between_good_ones_lose_nothing(
    kafka_bootstrap: str, new_topic: str
) -> None:
    good: list[bytes] = []
    async with Producer(kafka_bootstrap, linger_ms=20) as producer:
        pool = producer.pool
        assert pool is not None
        futures = []
        for round_ in range(3):
            for send, error in BAD:
                value = b"good-%d-%d" % (round_, len(good))
                good.append(value)
                futures.append(await producer.send(new_topic, value))
                before = pool.statistics()
                with pytest.raises(error):
                    await producer.send(**{"topic": new_topic, **send})
                after = pool.statistics()
                # The sender may free memory meanwhile; nothing may have been taken from it.
                assert (after.allocations, after.queued_allocations) == (
                    before.allocations,
                    before.queued_allocations,
                )
                assert after.allocated <= before.allocated
        for future in futures:
            assert (await future).topic == new_topic
    assert sorted(value for _, _, value in await read_topic(kafka_bootstrap, new_topic)) == sorted(
        good
    )
