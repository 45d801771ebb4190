"""One deterministic run of the producer, printed as JSON: what the parity test compares between
the compiled hot path and the pure-Python reference (run once under each, in child processes,
as ``python -m unit.parity_scenario`` from ``tests/``).

Every batch's bytes, every record's metadata and every error's type and message go into the
output, so any difference between the two implementations shows.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from aioaccum import Producer, wait_all
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import PartitionResponse
from aioaccum._speedups import describe
from aioaccum.errors import BrokerError

from .fake_kafka import FakeKafka

TS = 1_700_000_000_000


class RecordingKafka(FakeKafka):
    """The fake broker, keeping the exact bytes of every batch it was sent, in order."""

    sent: list[tuple[str, int, str]]

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        for tp, data in batches:
            self.sent.append((tp.topic, tp.partition, bytes(data).hex()))
        return await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)


def outcome(item: Any) -> Any:
    if isinstance(item, BaseException):
        return [type(item).__name__, str(item)]
    return list(item)


async def run(compression: str) -> dict[str, Any]:
    kafka = RecordingKafka(StaticCluster.uniform({"t": 3, "one": 1}, nodes=3))
    kafka.sent = []
    errors: list[list[str]] = []
    async with Producer(
        kafka=kafka, linger_ms=0, batch_size=1024, compression_type=compression,
        retry_backoff_ms=0, retry_backoff_max_ms=0,
    ) as producer:
        futures = []
        for i in range(300):
            key = None if i % 7 == 0 else f"key-{i % 13}".encode()
            headers = [("h", bytes([i % 256])), ("n", None)] if i % 5 == 0 else None
            topic = "one" if key is None else "t"
            value = None if i % 11 == 0 else b"v" * (i % 97)
            futures.append(
                await producer.send(topic, value, key=key, timestamp_ms=TS + i, headers=headers)
            )
        futures.append(await producer.send("t", b"fixed", partition=2, timestamp_ms=TS))
        for bad in (
            {"value": "text"},
            {"value": b"x", "partition": 9},
            {"value": b"x", "timestamp_ms": -1},
            {"value": b"x" * 2_000_000},
            {"value": b"x", "headers": [(b"k", b"v")]},
        ):
            try:
                await producer.send("t", **bad)
            except Exception as exc:
                errors.append([type(exc).__name__, str(exc)])
        first = [outcome(m) for m in await wait_all(futures, return_exceptions=True)]
        # A retriable error, a batch the broker finds too large (split), and a fatal error.
        tp0 = TopicPartition("t", 0)
        kafka.script.extend([{tp0: Errors.NOT_ENOUGH_REPLICAS}, {tp0: Errors.MESSAGE_TOO_LARGE}])
        again = [
            await producer.send("t", b"r" * 200, partition=0, timestamp_ms=TS + j)
            for j in range(12)
        ]
        second = [outcome(m) for m in await wait_all(again, return_exceptions=True)]
        kafka.script.append({tp0: Errors.INVALID_RECORD})
        failing = [await producer.send("t", b"f", partition=0, timestamp_ms=TS) for _ in range(3)]
        third = []
        for future in failing:
            try:
                await future
            except BrokerError as exc:
                third.append([type(exc).__name__, str(exc), exc.errno, exc.retriable])
        many = await producer.send_many(
            "t", [b"a", b"bb", None], keys=[b"k1", b"k2", b"k3"], timestamp_ms=TS,
            headers=[("all", b"1")], record_headers=[None, [("own", b"2")], None],
        )
        bulk = await producer.send_many("one", [b"x" * n for n in range(40)], timestamp_ms=TS)
        fourth = [outcome(m) for m in await many] + [outcome(m) for m in await bulk]
    return {
        "sent": kafka.sent,
        "metadata": [first, second, third, fourth],
        "errors": errors,
    }


def main() -> None:
    out = {codec: asyncio.run(run(codec)) for codec in ("none", "lz4", "gzip")}
    modules = {
        name: sys.modules[name].__file__
        for name in ("aioaccum._core.futures", "aioaccum._core.accumulator", "aioaccum.producer")
    }
    json.dump({"hot_path": describe(), "modules": modules, "runs": out}, sys.stdout)


if __name__ == "__main__":
    main()
