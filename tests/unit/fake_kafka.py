"""A fake broker adapter implementing the ``KafkaAdapter`` protocol, for sender tests.

It keeps a log per partition, decodes every batch it is sent with aiokafka's reader (so the tests
also check the bytes), and answers according to a script of errors the test sets up.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiokafka.record.default_records import DefaultRecordBatch

from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.adapter import PartitionResponse, ProduceDone, TaskProduce
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum.errors import AioAccumError, ProducerTimeoutError


@dataclass
class StoredRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int
    producer_id: int
    base_sequence: int


@dataclass
class Request:
    node: int
    acks: int
    partitions: list[TopicPartition]
    record_counts: list[int]


# A scripted answer: an exception for the whole request, or error codes per partition.
Answer = AioAccumError | dict[TopicPartition, int]


@dataclass
class FakeKafka:
    cluster: StaticCluster
    requests: list[Request] = field(default_factory=list)
    log: dict[TopicPartition, list[StoredRecord]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    script: collections.deque[Answer] = field(default_factory=collections.deque)
    # Called with each request before it is answered; may await (to hold requests in flight).
    gate: Callable[[Request], asyncio.Future[None] | None] | None = None
    metadata_requests: int = 0
    # The topic's max.message.bytes: a larger batch is answered MESSAGE_TOO_LARGE.
    max_batch_bytes: int | None = None
    in_flight: int = 0
    max_in_flight_seen: int = 0
    started: bool = False
    closed: bool = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def leader_for(self, tp: TopicPartition) -> int | None:
        return self.cluster.leader_for(tp)

    def partitions_for_node(self, node: int) -> Sequence[TopicPartition]:
        return self.cluster.partitions_for_node(node)

    def rack_of(self, node: int) -> str | None:
        return self.cluster.rack_of(node)

    @property
    def client_rack(self) -> str | None:
        return self.cluster.client_rack

    @property
    def metadata_version(self) -> int:
        return self.cluster.metadata_version

    def partitions_for_topic(self, topic: str) -> Sequence[int] | None:
        return self.cluster.partitions_for_topic(topic)

    def available_partitions_for_topic(self, topic: str) -> Sequence[int]:
        return self.cluster.available_partitions_for_topic(topic)

    def request_metadata_update(self, topics: Sequence[str] = ()) -> None:
        self.metadata_requests += 1

    async def wait_for_topic(self, topic: str, timeout: float) -> Sequence[int]:
        parts = self.cluster.partitions_for_topic(topic)
        if parts:
            return parts
        await asyncio.sleep(timeout)
        raise ProducerTimeoutError(f"topic {topic!r} not present in metadata")

    async def init_producer_id(self) -> tuple[int, int]:
        return 4242, 0

    def send_produce(
        self,
        node: int,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, Sequence[memoryview]]],
        done: ProduceDone,
    ) -> TaskProduce:
        # Each request a task awaiting produce() below, which tests override to script answers.
        return TaskProduce(self.produce, node, acks, timeout_ms, batches, done)

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        decoded = [(tp, DefaultRecordBatch(bytes(data))) for tp, data in batches]
        for _, batch in decoded:
            assert batch.validate_crc(), "the batch's CRC-32C does not match its bytes"
        request = Request(
            node,
            acks,
            [tp for tp, _ in decoded],
            [sum(1 for _ in DefaultRecordBatch(bytes(data))) for _, data in batches],
        )
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight)
        try:
            if self.gate is not None:
                waiter = self.gate(request)
                if waiter is not None:
                    await waiter
            answer: Answer = self.script.popleft() if self.script else {}
            if isinstance(answer, AioAccumError):
                raise answer
            out: dict[TopicPartition, PartitionResponse] = {}
            sizes = {tp: len(data) for tp, data in batches}
            for tp, batch in decoded:
                code = answer.get(tp, 0)
                if not code and self.max_batch_bytes is not None:
                    code = Errors.MESSAGE_TOO_LARGE if sizes[tp] > self.max_batch_bytes else 0
                if code:
                    out[tp] = PartitionResponse(broker_error_for_code(code), -1, -1)
                    continue
                log = self.log[tp]
                base = len(log)
                for record in batch:
                    log.append(
                        StoredRecord(
                            len(log),
                            record.key,
                            record.value,
                            list(record.headers),
                            record.timestamp,
                            batch.producer_id,
                            batch.base_sequence,
                        )
                    )
                out[tp] = PartitionResponse(None, -1 if acks == 0 else base, -1)
            return out
        finally:
            self.in_flight -= 1




@dataclass
class SequencedFakeKafka(FakeKafka):
    """A fake that also enforces the broker's idempotence rules per partition and producer id.

    A batch is written only if its first sequence follows the last one written for its producer
    id (else OUT_OF_ORDER_SEQUENCE_NUMBER); a batch seen before is answered
    DUPLICATE_SEQUENCE_NUMBER.
    """

    # (producer id, partition) -> (epoch, last sequence written under it)
    last_sequence: dict[tuple[int, TopicPartition], tuple[int, int]] = field(
        default_factory=dict
    )
    written: set[tuple[int, int, TopicPartition, int, int]] = field(default_factory=set)
    out_of_order: int = 0
    fenced: int = 0
    producer_ids_issued: int = 0

    async def produce(
        self,
        node: int,
        *,
        acks: int,
        timeout_ms: int,
        batches: Sequence[tuple[TopicPartition, memoryview]],
    ) -> dict[TopicPartition, PartitionResponse]:
        scripted = self.script.popleft() if self.script else {}
        if isinstance(scripted, AioAccumError):
            self.script.appendleft(scripted)
            return await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)
        answer = dict(scripted)
        ranges: dict[TopicPartition, tuple[int, int, TopicPartition, int, int]] = {}
        for tp, data in batches:
            batch = DefaultRecordBatch(bytes(data))
            count = sum(1 for _ in DefaultRecordBatch(bytes(data)))
            pid, epoch, first = batch.producer_id, batch.producer_epoch, batch.base_sequence
            key = (pid, epoch, tp, first, first + count - 1)
            ranges[tp] = key
            if tp in answer or pid < 0:
                continue
            known_epoch, last = self.last_sequence.get((pid, tp), (epoch, -1))
            if key in self.written:
                answer[tp] = Errors.DUPLICATE_SEQUENCE_NUMBER
            elif epoch < known_epoch:
                # A request from before an epoch bump: the broker fences it.
                answer[tp] = Errors.INVALID_PRODUCER_EPOCH
                self.fenced += 1
            elif first != (last + 1 if epoch == known_epoch else 0):
                answer[tp] = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                self.out_of_order += 1
        self.script.appendleft(answer)
        out = await super().produce(node, acks=acks, timeout_ms=timeout_ms, batches=batches)
        for tp, response in out.items():
            if response.error is None:
                producer_id, epoch, _, _, last = ranges[tp]
                self.last_sequence[(producer_id, tp)] = (epoch, last)
                self.written.add(ranges[tp])
        return out

    async def init_producer_id(self) -> tuple[int, int]:
        self.producer_ids_issued += 1
        return 4242 + self.producer_ids_issued, 0
