"""The first send to each of many new topics: how long metadata keeps the sender waiting.

Creates N topics (1 partition each) on a running cluster, then, for each client and each way
of sending, starts a fresh producer (to which every topic is new) and times
``await producer.send(topic_i, b"x")`` over all N topics:

* ``one``: a single coroutine, one topic after the other;
* ``100``: 100 coroutines at once, each taking the next topic not yet sent to.

Prints the time until every send returned (total and per topic), the time until every record
was acknowledged, and the metadata requests the client sent (how many, and how many topics they
named in all). Clients: aioaccum's Producer and aiokafka's AIOKafkaProducer.

    .venv/bin/python scripts/bench_metadata.py --bootstrap 127.0.0.1:19092 [--topics N]

The topics are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.metadata import MetadataRequest

from aioaccum import Producer
from aioaccum._speedups import describe

CREATE_BATCH = 200
READY_TIMEOUT_S = 120.0
CONCURRENCY = 100


@dataclass
class MetadataCount:
    """Metadata requests seen on every connection of this process."""

    requests: int = 0
    topics: int = 0


COUNT = MetadataCount()


@contextlib.contextmanager
def counting_metadata_requests() -> Iterator[None]:
    """Counts every MetadataRequest any aiokafka connection sends (both clients use them)."""
    original = AIOKafkaConnection.send

    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(request, MetadataRequest):
            COUNT.requests += 1
            COUNT.topics += len(request._topics or ())
        return original(self, request, *args, **kwargs)

    AIOKafkaConnection.send = send
    try:
        yield
    finally:
        AIOKafkaConnection.send = original


async def create_topics(bootstrap: str, names: list[str], replication: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    await admin.start()
    try:
        for start in range(0, len(names), CREATE_BATCH):
            batch = names[start : start + CREATE_BATCH]
            response = await admin.create_topics([NewTopic(n, 1, replication) for n in batch])
            for result in response.to_object()["topic_errors"]:
                if result["error_code"] != 0:
                    raise SystemExit(f"creating {result['topic']}: error {result['error_code']}")
    finally:
        await admin.close()
    await wait_for_leaders(bootstrap, names)


async def wait_for_leaders(bootstrap: str, names: list[str]) -> None:
    """Until every broker knows a leader for every topic, so no run pays for their creation."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for broker in client.cluster.brokers():
            while True:
                response = await client.send(broker.nodeId, MetadataRequest(names))
                ready = sum(
                    1
                    for error, *_, partitions in response.topics
                    if error == 0 and partitions and all(p[2] >= 0 for p in partitions)
                )
                if ready == len(names):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"broker {broker.nodeId}: {ready}/{len(names)} topics ready")
                await asyncio.sleep(0.5)
    finally:
        await client.close()


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    await admin.start()
    try:
        for start in range(0, len(names), CREATE_BATCH):
            await admin.delete_topics(names[start : start + CREATE_BATCH])
    finally:
        await admin.close()


Send = Callable[[str], Awaitable[Any]]


async def send_all(send: Send, topics: list[str], concurrency: int) -> list[Any]:
    """The futures of one send per topic, from ``concurrency`` coroutines."""
    futures: list[Any] = []
    if concurrency == 1:
        for topic in topics:
            futures.append(await send(topic))
        return futures
    pending = iter(topics)

    async def worker() -> None:
        for topic in pending:
            futures.append(await send(topic))

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return futures


@dataclass
class Result:
    sent_s: float
    acked_s: float
    requests: int
    topics_asked: int


async def timed(send: Send, topics: list[str], concurrency: int) -> Result:
    """Send one record per topic, then wait for every acknowledgement, counting metadata."""
    before = MetadataCount(COUNT.requests, COUNT.topics)
    start = time.perf_counter()
    futures = await send_all(send, topics, concurrency)
    sent = time.perf_counter() - start
    await asyncio.gather(*futures)
    acked = time.perf_counter() - start
    return Result(sent, acked, COUNT.requests - before.requests, COUNT.topics - before.topics)


async def run_aioaccum(bootstrap: str, topics: list[str], concurrency: int) -> Result:
    async with Producer(bootstrap, linger_ms=5) as producer:
        return await timed(lambda t: producer.send(t, b"x"), topics, concurrency)


async def run_aiokafka(bootstrap: str, topics: list[str], concurrency: int) -> Result:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        return await timed(lambda t: producer.send(t, b"x"), topics, concurrency)
    finally:
        await producer.stop()


CLIENTS = {"aioaccum": run_aioaccum, "aiokafka": run_aiokafka}


async def main_async(args: argparse.Namespace) -> None:
    names = [f"bench-meta-{uuid.uuid4().hex[:8]}-{i:05d}" for i in range(args.topics)]
    start = time.perf_counter()
    await create_topics(args.bootstrap, names, args.replication_factor)
    print(f"created {len(names)} topics in {time.perf_counter() - start:.1f} s")
    print(f"hot path: {describe()}")
    try:
        with counting_metadata_requests():
            for client in args.clients:
                for concurrency in (1, args.concurrency):
                    result = await CLIENTS[client](args.bootstrap, names, concurrency)
                    label = "one" if concurrency == 1 else str(concurrency)
                    print(
                        f"{client:>8} {label:>4} coroutine(s): sends {result.sent_s:7.2f} s "
                        f"({result.sent_s / len(names) * 1000:6.2f} ms/topic), all acked "
                        f"{result.acked_s:7.2f} s; {result.requests} metadata requests "
                        f"naming {result.topics_asked} topics",
                        flush=True,
                    )
    finally:
        if not args.keep:
            await delete_topics(args.bootstrap, names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--clients", nargs="*", choices=list(CLIENTS), default=list(CLIENTS))
    parser.add_argument("--keep", action="store_true", help="do not delete the topics")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
