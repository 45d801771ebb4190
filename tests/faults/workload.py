"""A producing workload that accounts for every record, and the check that reads them all back.

Each record's value starts with its id, a counter in send order. The :class:`Ledger` notes what
became of every record: acknowledged (with partition and offset), failed with a typed aioaccum
error (counted by type), failed with anything else (an "untyped" error, always a bug), or still
pending. A typed failure is *definite* (the record is not in the log) unless the error says it
was ``possibly_written`` (sent without a definite answer): those are *indeterminate*, and are
reported apart. :func:`read_back` consumes the whole topic with confluent-kafka (librdkafka, so
independent of both aioaccum and the aiokafka it is built on) and checks every acknowledged
record is there exactly once, at the offset its acknowledgement named, that ids rise within
each partition, and that no record that failed definitely is in the log.
"""

from __future__ import annotations

import asyncio
import functools
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from aioaccum import AioAccumError, FutureRecordMetadata, Producer

__all__ = [
    "OUTCOME_HEADER",
    "Ledger",
    "ReadBack",
    "outcome_row",
    "read_back",
    "record_value",
    "wait_until",
]

OUTCOME_HEADER = (
    "offered | acknowledged | found | duplicated | lost | failed (definite) | indeterminate "
    "| faults"
)

ID_DIGITS = 12
PENDING, ACKED, FAILED, NOT_SENT, INDETERMINATE = 0, 1, 2, 3, 4
SAMPLES_PER_TYPE = 3


async def wait_until(condition: Callable[[], bool], *, timeout: float, poll: float = 0.02) -> None:
    """Poll ``condition`` until it holds; ``TimeoutError`` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(poll)


def record_value(record_id: int, size: int) -> bytes:
    """The value of record ``record_id``: its id in ASCII, padded to ``size`` bytes."""
    head = b"%0*d|" % (ID_DIGITS, record_id)
    return head + b"x" * max(size - len(head), 0)


def record_id(value: bytes | None) -> int | None:
    if value is None or len(value) <= ID_DIGITS or value[ID_DIGITS] != ord("|"):
        return None
    digits = value[:ID_DIGITS]
    return int(digits) if digits.isdigit() else None


@dataclass
class Ledger:
    """What happened to each record a :class:`Producer` was offered.

    ``send_errors`` counts exceptions raised by ``send()`` itself (the record never got a
    future); ``errors`` counts futures that failed with a typed aioaccum error; ``untyped``
    counts everything else (other exception types, cancelled futures), by type name.
    """

    value_size: int = 100
    states: bytearray = field(default_factory=bytearray)
    partitions: array[int] = field(default_factory=lambda: array("i"))
    offsets: array[int] = field(default_factory=lambda: array("q"))
    errors: Counter[str] = field(default_factory=Counter)
    send_errors: Counter[str] = field(default_factory=Counter)
    untyped: Counter[str] = field(default_factory=Counter)
    samples: dict[str, list[str]] = field(default_factory=dict)
    _pending: dict[int, FutureRecordMetadata] = field(default_factory=dict)

    @property
    def offered(self) -> int:
        return len(self.states)

    @property
    def acked(self) -> int:
        return self.states.count(ACKED)

    @property
    def failed(self) -> int:
        """Records that failed definitely: they must not be in the log."""
        return self.states.count(FAILED)

    @property
    def indeterminate(self) -> int:
        """Records that failed after being sent without a definite answer."""
        return self.states.count(INDETERMINATE)

    @property
    def not_sent(self) -> int:
        return self.states.count(NOT_SENT)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def send(
        self,
        producer: Producer,
        topic: str,
        *,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Offer the next record (with ``key``, to ``partition``); note its fate when it has
        one."""
        rid = len(self.states)
        self.states.append(PENDING)
        self.partitions.append(-1)
        self.offsets.append(-1)
        try:
            fut = await producer.send(
                topic, record_value(rid, self.value_size), key=key, partition=partition
            )
        except AioAccumError as exc:
            self.states[rid] = NOT_SENT
            self._note(self.send_errors, exc)
            return
        except Exception as exc:
            self.states[rid] = NOT_SENT
            self._note(self.untyped, exc, prefix="send: ")
            return
        if fut.done():
            self._done(rid, fut)
        else:
            self._pending[rid] = fut
            fut.add_done_callback(functools.partial(self._done, rid))

    def _done(self, rid: int, fut: FutureRecordMetadata) -> None:
        if self._pending.pop(rid, None) is None and self.states[rid] != PENDING:
            return  # already noted
        if fut.cancelled():
            self.states[rid] = FAILED
            self.untyped["CancelledError"] += 1
            return
        exc = fut.exception()
        if exc is None:
            md = fut.result()
            self.states[rid] = ACKED
            self.partitions[rid] = md.partition
            self.offsets[rid] = md.offset
        elif isinstance(exc, AioAccumError):
            self.states[rid] = INDETERMINATE if exc.possibly_written else FAILED
            self._note(self.errors, exc)
        else:
            self.states[rid] = FAILED
            self._note(self.untyped, exc)

    def _note(self, counter: Counter[str], exc: BaseException, prefix: str = "") -> None:
        name = prefix + type(exc).__name__
        counter[name] += 1
        kept = self.samples.setdefault(name, [])
        if len(kept) < SAMPLES_PER_TYPE:
            kept.append(str(exc))

    async def settle(self) -> int:
        """After ``close()``: note futures that ended but whose callbacks have not run yet.

        Returns how many futures are still not done (a bug: close must end every record).
        """
        await asyncio.sleep(0)
        for rid, fut in list(self._pending.items()):
            if fut.done():
                self._done(rid, fut)
        return len(self._pending)

    async def produce(
        self,
        producer: Producer,
        topic: str,
        *,
        rate: float,
        stop: Callable[[], bool],
        limit: int | None = None,
        tick: float = 0.01,
    ) -> None:
        """Offer records at about ``rate`` per second until ``stop()`` or ``limit`` records.

        ``rate <= 0`` means as fast as the producer takes them.
        """
        started = time.monotonic()
        while not stop() and (limit is None or self.offered < limit):
            if rate > 0:
                due = int((time.monotonic() - started) * rate) - self.offered
                if limit is not None:
                    due = min(due, limit - self.offered)
                if due <= 0:
                    await asyncio.sleep(tick)
                    continue
            else:
                due = 1000 if limit is None else min(1000, limit - self.offered)
            for _ in range(due):
                await self.send(producer, topic)
            # A send that never waits never yields: let the faults and the sender run.
            await asyncio.sleep(0)

    def check_ack_order(self) -> int:
        """Pairs of acknowledged records whose offsets run against their ids in a partition."""
        last: dict[int, int] = {}
        violations = 0
        for rid, state in enumerate(self.states):
            if state != ACKED:
                continue
            partition, offset = self.partitions[rid], self.offsets[rid]
            if offset <= last.get(partition, -1):
                violations += 1
            last[partition] = offset
        return violations


@dataclass
class ReadBack:
    """What consuming the topic found, compared with the ledger."""

    consumed: int = 0
    found: int = 0
    duplicated: int = 0
    duplicated_acked: int = 0
    lost: int = 0
    found_unacked: int = 0
    found_indeterminate: int = 0
    found_failed: int = 0
    """Records that failed definitely and are in the log anyway: the error lied."""
    misplaced: int = 0
    order_violations: int = 0
    foreign: int = 0
    lost_samples: list[int] = field(default_factory=list)
    duplicate_samples: list[int] = field(default_factory=list)
    found_failed_samples: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        """Nothing acknowledged lost, doubled, moved or reordered; no definite failure found."""
        return not (
            self.lost or self.duplicated_acked or self.misplaced or self.order_violations
            or self.foreign or self.found_failed
        )


async def read_back(
    bootstrap: str,
    topic: str,
    ledger: Ledger,
    *,
    timeout: float = 300.0,
    consumer_config: dict[str, str] | None = None,
) -> ReadBack:
    """Consume ``topic`` to its end offsets with confluent-kafka and hold it against ``ledger``.

    ``consumer_config`` adds librdkafka settings (security, for a SASL_SSL cluster).
    """
    started = time.monotonic()
    seen = bytearray(ledger.offered)
    out = ReadBack()
    settings: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"aioaccum-read-back-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.max.bytes": 16 * 1024 * 1024,
        **(consumer_config or {}),
    }
    await asyncio.to_thread(_consume, settings, topic, timeout, ledger, seen, out)
    for rid, state in enumerate(ledger.states):
        count = seen[rid]
        if count:
            out.found += 1
            if count > 1:
                out.duplicated += count - 1
                if state == ACKED:
                    out.duplicated_acked += count - 1
                if len(out.duplicate_samples) < 10:
                    out.duplicate_samples.append(rid)
            if state != ACKED:
                out.found_unacked += 1
            if state == INDETERMINATE:
                out.found_indeterminate += 1
            elif state == FAILED:
                out.found_failed += 1
                if len(out.found_failed_samples) < 10:
                    out.found_failed_samples.append(rid)
        elif state == ACKED:
            out.lost += 1
            if len(out.lost_samples) < 10:
                out.lost_samples.append(rid)
    out.seconds = time.monotonic() - started
    return out


def outcome_row(ledger: Ledger, found: ReadBack, faults: str) -> str:
    """One line of the table every fault run reports (see :data:`OUTCOME_HEADER`)."""
    return (
        f"{ledger.offered} | {ledger.acked} | {found.found} | {found.duplicated} | {found.lost} "
        f"| {ledger.failed} | {ledger.indeterminate} ({found.found_indeterminate} found) "
        f"| {faults}"
    )


def _consume(
    settings: dict[str, str | int | bool],
    topic: str,
    timeout: float,
    ledger: Ledger,
    seen: bytearray,
    out: ReadBack,
) -> None:
    consumer = Consumer(settings)
    deadline = time.monotonic() + timeout
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        ends: dict[int, int] = {}
        for partition in partitions:
            _, high = consumer.get_watermark_offsets(
                ConfluentTopicPartition(topic, partition), timeout=30
            )
            ends[partition] = high
        remaining = {p for p in partitions if ends[p] > 0}
        consumer.assign(
            [ConfluentTopicPartition(topic, p, 0) for p in partitions if p in remaining]
        )
        last_id = dict.fromkeys(partitions, -1)
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {topic} back took over {timeout:.0f} s; partitions left "
                    f"{sorted(remaining)}"
                )
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                elif partition is not None:
                    offset = message.offset()
                    assert offset is not None
                    _check_record(message.value(), partition, offset, ledger, seen, last_id, out)
                    if offset + 1 >= ends[partition]:
                        remaining.discard(partition)
                if error is not None and partition is not None:
                    position = consumer.position([ConfluentTopicPartition(topic, partition)])
                    if position[0].offset >= ends[partition]:
                        remaining.discard(partition)
    finally:
        consumer.close()


def _check_record(
    value: bytes | None,
    partition: int,
    offset: int,
    ledger: Ledger,
    seen: bytearray,
    last_id: dict[int, int],
    out: ReadBack,
) -> None:
    out.consumed += 1
    rid = record_id(value)
    if rid is None or rid >= len(seen):
        out.foreign += 1
        return
    if seen[rid] < 255:
        seen[rid] += 1
    if rid <= last_id[partition]:
        out.order_violations += 1
    last_id[partition] = rid
    if ledger.states[rid] == ACKED and (
        ledger.partitions[rid] != partition or ledger.offsets[rid] != offset
    ):
        out.misplaced += 1
