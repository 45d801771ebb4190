"""Producer.send_arrow against send() for the same rows, on a fake broker and a fast clock.

For the same rows, one call of send_arrow and a send() per row must put the same record batch
bytes on the wire (same create time, same batches), the same records in the same partitions,
give the same metadata, and refuse the same bad input.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from aioaccum import ArrowColumnError, ConfigError, RecordTooLargeError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum.producer import Producer

from .fake_kafka import FakeKafka

pytestmark = pytest.mark.looptime

TS = 1_700_000_000_000
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class RecordingKafka(FakeKafka):
    """Keeps each produced batch's bytes, per partition, in order."""

    def __init__(self, cluster: StaticCluster) -> None:
        super().__init__(cluster)
        self.wire: dict[TopicPartition, list[bytes]] = defaultdict(list)

    async def produce(self, node: int, *, acks: int, timeout_ms: int, batches: Any) -> Any:
        for tp, data in batches:
            self.wire[tp].append(bytes(data))
        return await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)


def make(**settings: Any) -> tuple[Producer, RecordingKafka]:
    fake = RecordingKafka(StaticCluster.uniform({"t": 5, "u": 3}, nodes=3))
    # A long linger: only full batches leave before flush(), so where batches end depends on
    # the room rule alone, not on when the sender ran.
    settings.setdefault("linger_ms", 10_000)
    # One batch per partition unless a test says otherwise: with smaller batches, when one
    # fills, the sender drains the node's other partitions too, and where their batches end
    # then depends on when it ran (tests/core/test_arrow_rows.py holds batch ends to send's).
    settings.setdefault("batch_size", 1 << 20)
    producer = Producer("fake:9092", kafka=fake, **settings)
    producer._partitioner._rng = random.Random(7)  # the same sticky draws for both paths
    return producer, fake


def rows_of(batch: pa.RecordBatch, topic: str | None) -> list[tuple[Any, ...]]:
    """The batch's rows as send() arguments: (topic, value, key, partition, headers)."""
    out = []
    for row in batch.to_pylist():
        value = row.get("value")
        key = row.get("key")
        headers = [
            (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
            for h in row.get("headers") or []
        ]
        out.append(
            (
                topic or row["topic"],
                value.encode() if isinstance(value, str) else value,
                key.encode() if isinstance(key, str) else key,
                row.get("partition"),
                headers or None,
            )
        )
    return out


async def through_send(
    batch: pa.RecordBatch, topic: str | None
) -> tuple[list[Any], RecordingKafka]:
    producer, fake = make()
    async with producer:
        futures = [
            await producer.send(t, v, key=k, partition=p, timestamp_ms=TS, headers=h)
            for t, v, k, p, h in rows_of(batch, topic)
        ]
        await producer.flush()
    return [f.result() for f in futures], fake


async def through_arrow(
    batch: pa.RecordBatch, topic: str | None, monkeypatch: pytest.MonkeyPatch, **settings: Any
) -> tuple[Sequence[Any], RecordingKafka]:
    import aioaccum._producer.send_arrow as module

    monkeypatch.setattr(module, "checked_timestamp", lambda _: TS)
    producer, fake = make(**settings)
    async with producer:
        future = await producer.send_arrow(batch, topic=topic)
        await producer.flush()
    return future.result(), fake


def mixed_batch(rows: int = 600, *, keyless: bool = True) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array(
                [None if keyless and i % 5 == 0 else f"key-{i % 37}" for i in range(rows)]
            ),
            "value": pa.array(
                [None if i % 11 == 0 else b"v" * (i % 90) + b"%d" % i for i in range(rows)],
                type=pa.binary(),
            ),
            "headers": pa.array(
                [
                    None
                    if i % 3
                    else [{"key": "h", "value": b"%d" % i}, {"key": "z", "value": None}]
                    for i in range(rows)
                ],
                type=HEADERS,
            ),
        }
    )


async def assert_same(
    batch: pa.RecordBatch, topic: str | None, monkeypatch: pytest.MonkeyPatch
) -> Sequence[Any]:
    expected, by_send = await through_send(batch, topic)
    got, by_arrow = await through_arrow(batch, topic, monkeypatch)
    assert list(got) == expected
    assert len(got) == batch.num_rows
    assert dict(by_arrow.wire) == dict(by_send.wire)
    assert by_arrow.log == by_send.log
    return got


async def test_keyed_rows_give_the_bytes_partitions_and_metadata_of_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = pa.record_batch(
        {
            "key": pa.array([f"key-{i % 37}" for i in range(900)]),
            "value": pa.array([b"x" * (i % 120) for i in range(900)], type=pa.binary()),
            "headers": pa.array(
                [[{"key": "n", "value": b"%d" % i}] if i % 2 else [] for i in range(900)],
                type=HEADERS,
            ),
        }
    )
    got = await assert_same(batch, "t", monkeypatch)
    assert len({m.partition for m in got}) == 5


async def test_explicit_partitions_and_string_columns_match_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = pa.record_batch(
        {
            "value": pa.array([f"value {i} é" for i in range(400)]),  # string: sent as UTF-8
            "key": pa.array([f"k{i}" for i in range(400)], type=pa.large_string()),
            "partition": pa.array([i % 3 for i in range(400)], type=pa.int64()),
        }
    )
    got = await assert_same(batch, "t", monkeypatch)
    assert [m.partition for m in got] == [i % 3 for i in range(400)]


async def test_per_row_topics_and_tombstones_match_send(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["t" if i % 4 else "u" for i in range(300)]),
            "key": pa.array([f"k{i % 9}".encode() for i in range(300)], type=pa.large_binary()),
            "value": pa.array([None if i % 7 == 0 else b"%d" % i for i in range(300)]),
        }
    )
    got = await assert_same(batch, None, monkeypatch)
    assert {m.topic for m in got} == {"t", "u"}
    assert [m.serialized_value_size for m in got][:8] == [-1, 1, 1, 1, 1, 1, 1, -1]


async def test_a_sliced_batch_reads_its_own_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keyed rows only: keyless rows of a call go after the keyed ones of their partition.
    whole = mixed_batch(700, keyless=False)
    await assert_same(whole.slice(123, 400), "t", monkeypatch)


async def test_keyless_rows_match_send_many(monkeypatch: pytest.MonkeyPatch) -> None:
    import aioaccum._producer.send_many as bulk

    values = [b"%d" % i * (1 + i % 40) for i in range(3000)]
    monkeypatch.setattr(bulk, "checked_timestamp", lambda _: TS)
    producer, by_many = make(batch_size=2048)
    async with producer:
        many = await (await producer.send_many("t", values))
    got, by_arrow = await through_arrow(
        pa.record_batch({"value": values}), "t", monkeypatch, batch_size=2048
    )
    assert list(got) == list(many)
    assert dict(by_arrow.wire) == dict(by_many.wire)
    assert len(by_arrow.wire) > 1, "the sticky partitioner moved on"


async def test_mixed_keyed_and_keyless_rows_are_all_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = mixed_batch()
    got, fake = await through_arrow(batch, "t", monkeypatch)
    expected = rows_of(batch, "t")
    for metadata, (_, value, key, _, headers) in zip(got, expected, strict=True):
        stored = fake.log[TopicPartition("t", metadata.partition)][metadata.offset]
        assert (stored.key, stored.value, stored.headers) == (key, value, headers or [])


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"key": pa.array([b"k"])}, "no 'value' column"),
        ({"value": pa.array([1])}, "column 'value' is int64; it must be binary or string"),
        ({"value": pa.array([b"v"]), "key": pa.array([1.5])}, "column 'key' is double"),
        ({"value": pa.array([b"v"]), "partition": pa.array(["0"])}, "column 'partition' is string"),
        ({"value": pa.array([b"v"]), "headers": pa.array([["a"]])}, "column 'headers' is list<"),
        (
            {
                "value": pa.array([b"v"]),
                "headers": pa.array([[{"key": None, "value": b"x"}]], type=HEADERS),
            },
            "1 header(s) without a name",
        ),
    ],
)
async def test_bad_columns_are_refused_before_anything_is_buffered(
    columns: dict[str, Any], message: str
) -> None:
    producer, fake = make()
    async with producer:
        with pytest.raises(ArrowColumnError, match=message.replace("(", r"\(").replace(")", r"\)")):
            await producer.send_arrow(pa.record_batch(columns), topic="t")
        assert producer.pending_records() == 0
    assert not fake.requests


async def test_topics_missing_or_null_are_refused() -> None:
    producer, _ = make()
    async with producer:
        with pytest.raises(ArrowColumnError, match="no 'topic' column and no default topic"):
            await producer.send_arrow(pa.record_batch({"value": [b"v"]}))
        with pytest.raises(ArrowColumnError, match="1 row\\(s\\) have a null topic"):
            await producer.send_arrow(
                pa.record_batch({"value": [b"v"], "topic": pa.array([None], pa.string())})
            )


async def test_a_partition_out_of_range_is_refused_as_send_refuses_it() -> None:
    producer, _ = make()
    async with producer:
        with pytest.raises(ConfigError) as by_send:
            await producer.send("t", b"v", partition=7)
        with pytest.raises(ConfigError) as by_arrow:
            await producer.send_arrow(
                pa.record_batch({"value": [b"a", b"b"], "partition": [0, 7]}), topic="t"
            )
        assert str(by_arrow.value) == str(by_send.value)
        assert producer.pending_records() == 0


async def test_a_record_too_large_is_refused_as_send_refuses_it() -> None:
    producer, _ = make(max_request_size=1000)
    async with producer:
        big = b"x" * 2000
        with pytest.raises(RecordTooLargeError) as by_send:
            await producer.send("t", big, headers=[("h", b"y")])
        with pytest.raises(RecordTooLargeError) as by_arrow:
            await producer.send_arrow(
                pa.record_batch(
                    {
                        "value": [b"small", big],
                        "headers": pa.array([[], [{"key": "h", "value": b"y"}]], type=HEADERS),
                    }
                ),
                topic="t",
            )
        assert str(by_arrow.value) == str(by_send.value)
        assert producer.pending_records() == 0


async def test_an_empty_batch_gives_an_empty_result() -> None:
    producer, fake = make()
    async with producer:
        future = await producer.send_arrow(
            pa.record_batch({"value": pa.array([], pa.binary())}), "t"
        )
        assert list(await future) == []
    assert not fake.requests


async def test_interceptors_see_every_row() -> None:
    seen: list[bytes | None] = []

    class Count:
        def on_send(self, record: Any) -> Any:
            seen.append(record.value)
            return record

        def on_acknowledgement(self, metadata: Any, error: Any) -> None:
            pass

        def close(self) -> None:
            pass

    producer, _ = make(interceptors=[Count()])
    async with producer:
        batch = pa.record_batch({"value": [b"a", None, b"c"], "key": ["x", "y", None]})
        got = await (await producer.send_arrow(batch, "t"))
    assert seen == [b"a", None, b"c"]
    assert [m.serialized_key_size for m in got] == [1, 1, -1]
