"""Refusals no retry gets past, without a broker: the typed error each code becomes, what its
message tells the user, and what the sender does with it (fails that batch in one attempt and
nothing else). tests/integration/test_broker_refusals.py has the real broker's side."""

from __future__ import annotations

import asyncio
import copy
import pickle
from collections.abc import AsyncIterator, Callable

import pytest

import aioaccum
from aioaccum import AioAccumError, BrokerError, TopicAuthorizationError
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors, advice
from aioaccum._kafka.adapter import AioKafkaAdapter
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.producer import Producer

from .fake_kafka import SequencedFakeKafka
from .test_kafka_metadata_new_topics import StubClient

pytestmark = pytest.mark.looptime

TOPIC = "orders"
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
CLUSTER = StaticCluster.uniform({"t": 2, "u": 1}, nodes=2)
RETRY_BACKOFF_MS = 100
# (code, phrases its message must hold: the setting to change and the way out)
REFUSALS = [
    (Errors.MESSAGE_TOO_LARGE, ["max.message.bytes", "cannot be split", "send smaller records"]),
    (Errors.RECORD_LIST_TOO_LARGE, ["segment.bytes", "send smaller records"]),
    (Errors.INVALID_RECORD, ["cleanup.policy=compact", "give every record a key"]),
    (
        Errors.INVALID_TIMESTAMP,
        ["message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "timestamp_ms"],
    ),
    (Errors.TOPIC_AUTHORIZATION_FAILED, ["not authorized to write to", "ACL"]),
]
CODES = [code for code, _ in REFUSALS]


# --- the errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "phrases"), REFUSALS, ids=[c.name for c in CODES])
def test_each_refusal_is_a_typed_final_error_saying_what_to_change(
    code: Errors, phrases: list[str]
) -> None:
    error = broker_error_for_code(code, topic=TOPIC, batch_bytes=5123)
    assert isinstance(error, AioAccumError)
    assert (error.errno, error.retriable, error.invalid_metadata) == (code, False, False)
    message = str(error)
    assert message.startswith(f"{code.name} (error code {int(code)}): ")
    assert f"topic {TOPIC!r}" in message
    for phrase in phrases:
        assert phrase in message


@pytest.mark.parametrize("code", [Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE])
def test_a_size_refusal_names_the_refused_batchs_size(code: Errors) -> None:
    assert "the batch of 5123 bytes" in str(broker_error_for_code(code, batch_bytes=5123))
    # Unknown (an error built without the request): the message still reads.
    assert "the batch is larger" in str(broker_error_for_code(code))


def test_the_brokers_own_text_comes_first_and_the_advice_after() -> None:
    error = broker_error_for_code(Errors.INVALID_RECORD, "Compacted topic cannot accept message")
    assert str(error).startswith(
        "INVALID_RECORD (error code 87): Compacted topic cannot accept message; the broker"
    )


def test_codes_without_advice_keep_a_bare_message() -> None:
    assert advice(Errors.NOT_LEADER_OR_FOLLOWER) is None
    assert str(broker_error_for_code(Errors.NOT_LEADER_OR_FOLLOWER)) == (
        "NOT_LEADER_OR_FOLLOWER (error code 6)"
    )


def test_topic_authorization_is_its_own_broker_error() -> None:
    error = broker_error_for_code(Errors.TOPIC_AUTHORIZATION_FAILED, topic=TOPIC)
    assert type(error) is TopicAuthorizationError
    assert isinstance(error, BrokerError)
    assert aioaccum.TopicAuthorizationError is TopicAuthorizationError
    assert "TopicAuthorizationError" in aioaccum.__all__
    # Every other refusal stays a plain BrokerError.
    others = [broker_error_for_code(c) for c in CODES if c != Errors.TOPIC_AUTHORIZATION_FAILED]
    assert {type(e) for e in others} == {BrokerError}


def test_topic_authorization_error_keeps_its_type_and_fields_when_copied() -> None:
    # Each record future gets a copy of its batch's error; the sync facade pickles them.
    error = broker_error_for_code(Errors.TOPIC_AUTHORIZATION_FAILED, topic=TOPIC)
    for clone in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert type(clone) is TopicAuthorizationError
        assert (clone.errno, clone.retriable, str(clone)) == (error.errno, False, str(error))
    assert TopicAuthorizationError("made by hand").errno == Errors.TOPIC_AUTHORIZATION_FAILED


# --- the sender ----------------------------------------------------------------------------


@pytest.fixture
async def producer_and_fake() -> AsyncIterator[tuple[Producer, SequencedFakeKafka]]:
    # Idempotent (the default), so a refusal must also leave the partition's sequence usable.
    fake = SequencedFakeKafka(CLUSTER)
    producer = Producer(
        "fake:9092",
        kafka=fake,
        linger_ms=0,
        retry_backoff_ms=RETRY_BACKOFF_MS,
        delivery_timeout_ms=120_000,
        request_timeout_ms=30_000,
    )
    async with producer:
        yield producer, fake


@pytest.mark.parametrize("code", CODES, ids=[c.name for c in CODES])
async def test_a_refused_batch_fails_in_one_attempt_and_nothing_else_does(
    producer_and_fake: tuple[Producer, SequencedFakeKafka], code: Errors
) -> None:
    producer, fake = producer_and_fake
    fake.script.append({TP0: code})
    loop = asyncio.get_running_loop()
    started = loop.time()
    refused = await producer.send("t", b"refused", partition=0)
    others = [await producer.send("t", b"p1", partition=1), await producer.send("u", b"u")]

    with pytest.raises(BrokerError) as caught:
        await refused
    # Sooner than the first retry could have gone out: the answer itself ended it.
    assert loop.time() - started < RETRY_BACKOFF_MS / 1000
    assert caught.value.errno == code
    denied = code == Errors.TOPIC_AUTHORIZATION_FAILED
    expected_type = TopicAuthorizationError if denied else BrokerError
    assert type(caught.value) is expected_type
    again = await producer.send("t", b"after", partition=0)
    await asyncio.gather(*others, again)

    sent_to_tp0 = [r for r in fake.requests if TP0 in r.partitions]
    assert len(sent_to_tp0) == 2  # the refused batch once, then the record sent after it
    assert [r.value for r in fake.log[TP0]] == [b"after"]
    assert [r.value for r in fake.log[TP1]] == [b"p1"]
    assert [r.value for r in fake.log[TopicPartition("u", 0)]] == [b"u"]
    metrics = producer.metrics()
    assert (metrics["record-retry-total"], metrics["record-error-total"]) == (0, 1)


# --- metadata ------------------------------------------------------------------------------


@pytest.fixture
async def adapter_over() -> AsyncIterator[Callable[..., AioKafkaAdapter]]:
    clients: list[StubClient] = []

    def build(existing: dict[str, int], unauthorized: set[str]) -> AioKafkaAdapter:
        client = StubClient(existing, unauthorized=unauthorized)
        adapter = AioKafkaAdapter(ProducerConfig(retry_backoff_ms=RETRY_BACKOFF_MS))
        # What AioKafkaAdapter.start() does with a real client.
        client.cluster.add_listener(adapter._on_metadata_update)
        adapter._client = client
        client.start()
        clients.append(client)
        return adapter

    yield build
    for client in clients:
        await client.close()


async def test_a_topic_whose_metadata_is_refused_raises_at_once_not_at_max_block(
    adapter_over: Callable[..., AioKafkaAdapter],
) -> None:
    adapter = adapter_over({"open": 1}, {"secret"})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TopicAuthorizationError) as caught:
        await adapter.wait_for_topic("secret", timeout=60)
    assert loop.time() - started < RETRY_BACKOFF_MS / 1000  # the first answer, no second round
    assert caught.value.errno == Errors.TOPIC_AUTHORIZATION_FAILED
    assert not caught.value.retriable
    assert "not authorized to write to topic 'secret'" in str(caught.value)
    # The refusal does not spoil the client for other topics.
    assert await adapter.wait_for_topic("open", timeout=60) == [0]


async def test_a_topic_refused_then_allowed_is_found_on_the_next_send(
    adapter_over: Callable[..., AioKafkaAdapter],
) -> None:
    adapter = adapter_over({"secret": 2}, {"secret"})
    with pytest.raises(TopicAuthorizationError):
        await adapter.wait_for_topic("secret", timeout=60)
    client = adapter.client
    assert isinstance(client, StubClient)
    client.unauthorized.clear()  # an ACL now allows it
    assert await adapter.wait_for_topic("secret", timeout=60) == [0, 1]
