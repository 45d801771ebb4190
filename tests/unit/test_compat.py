"""aioaccum.compat: aiokafka's arguments mapped to ProducerConfig, the refusals, the error twins
and the producer's aiokafka-shaped API against a fake broker adapter."""

from __future__ import annotations

import inspect
import pickle
import re
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.errors as kerr
import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import RecordMetadata as AIOKafkaRecordMetadata

import aioaccum.errors as ours
from aioaccum import compat
from aioaccum._core.cluster import StaticCluster, TopicPartition
from aioaccum._core.kafka_errors import Errors
from aioaccum._kafka.errors import broker_error_for_code
from aioaccum.compat.errors import aiokafka_error
from aioaccum.compat.producer import AIOKafkaProducer, config_from_aiokafka
from aioaccum.config.settings import INT_MAX

from .fake_kafka import FakeKafka

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-aiokafka.md"


def aiokafka_parameters() -> dict[str, inspect.Parameter]:
    signature = inspect.signature(aiokafka.AIOKafkaProducer.__init__)
    return {n: p for n, p in signature.parameters.items() if n != "self"}


# --- the arguments


def test_the_constructor_takes_aiokafkas_arguments_with_aiokafkas_defaults() -> None:
    theirs = aiokafka_parameters()
    mine = {
        n: p
        for n, p in inspect.signature(AIOKafkaProducer.__init__).parameters.items()
        if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }
    assert list(mine) == list(theirs) == list(compat.AIOKAFKA_DEFAULTS)
    for name, parameter in theirs.items():
        assert mine[name].kind is inspect.Parameter.KEYWORD_ONLY
        if name in ("acks", "partitioner"):  # sentinels: "left out" and the default instance
            continue
        assert mine[name].default == parameter.default == compat.AIOKAFKA_DEFAULTS[name], name


def test_the_guide_has_a_row_for_every_argument() -> None:
    text = GUIDE.read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.M))
    assert set(compat.AIOKAFKA_DEFAULTS) <= rows


def test_defaults_keep_aiokafkas_behaviour() -> None:
    config = config_from_aiokafka({})
    assert config.bootstrap_servers == ("localhost:9092",)
    assert config.acks == 1
    assert config.enable_idempotence is False
    assert config.linger_ms == 0
    assert config.batch_size == 16384
    assert config.request_timeout_ms == config.max_block_ms == 40000
    assert config.delivery_timeout_ms == 40000  # aiokafka expires a batch after the timeout
    assert config.max_in_flight_requests_per_connection == 1  # one batch per partition
    assert config.retry_backoff_ms == config.retry_backoff_max_ms == 100
    assert config.compression_type == "none"
    assert config.partitioner is None
    assert config.sasl_mechanism is None  # aiokafka's default PLAIN counts only with SASL
    assert config.connections_max_idle_ms == 540000


def test_idempotence_and_transactions_take_acks_all_and_javas_in_flight() -> None:
    config = config_from_aiokafka({"enable_idempotence": True, "linger_ms": 7})
    assert (config.acks, config.enable_idempotence) == (-1, True)
    assert config.max_in_flight_requests_per_connection == 5
    assert config.delivery_timeout_ms == 120000
    txn = config_from_aiokafka({"transactional_id": "t", "transaction_timeout_ms": 9000})
    assert (txn.enable_idempotence, txn.transactional_id, txn.transaction_timeout_ms) == (
        True, "t", 9000
    )
    assert config_from_aiokafka({"enable_idempotence": True, "acks": "all"}).acks == -1


def test_each_argument_reaches_its_setting() -> None:
    config = config_from_aiokafka(
        {
            "bootstrap_servers": ["h1", "h2:9093", "[::1]"],
            "client_id": "app",
            "metadata_max_age_ms": 1000,
            "request_timeout_ms": 5000,
            "acks": "all",
            "compression_type": "gzip",
            "max_batch_size": 1000,
            "max_request_size": 2000,
            "linger_ms": 3,
            "retry_backoff_ms": 50,
            "connections_max_idle_ms": None,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "u",
            "sasl_plain_password": "p",
        }
    )
    assert config.bootstrap_servers == ("h1:9092", "h2:9093", "[::1]:9092")
    assert (config.client_id, config.metadata_max_age_ms) == ("app", 1000)
    assert (config.request_timeout_ms, config.max_block_ms, config.delivery_timeout_ms) == (
        5000, 5000, 5003
    )
    assert (config.acks, config.compression_type, config.batch_size) == (-1, "gzip", 1000)
    assert (config.max_request_size, config.linger_ms, config.retry_backoff_max_ms) == (
        2000, 3, 50
    )
    assert config.connections_max_idle_ms == INT_MAX  # None: no idle check
    assert (config.sasl_mechanism, config.sasl_plain_username) == ("SCRAM-SHA-256", "u")


def test_aioaccum_settings_go_on_top() -> None:
    config = config_from_aiokafka(
        {}, {"buffer_memory": 1 << 20, "delivery_timeout_ms": 90000, "batch_size": 4096}
    )
    assert (config.buffer_memory, config.delivery_timeout_ms, config.batch_size) == (
        1 << 20, 90000, 4096
    )
    with pytest.raises(ours.ConfigError, match="max_batch_size and batch_size"):
        config_from_aiokafka({"max_batch_size": 1000}, {"batch_size": 4096})
    with pytest.raises(ours.ConfigError, match="is an aiokafka argument"):
        config_from_aiokafka({}, {"linger_ms": 5})
    with pytest.raises(ours.ConfigError, match="unknown setting 'bufer_memory'"):
        config_from_aiokafka({}, {"bufer_memory": 1})
    with pytest.raises(ours.ConfigError, match="not aiokafka producer arguments: nope"):
        config_from_aiokafka({"nope": 1})


def test_a_custom_partitioner_is_called_as_aiokafka_calls_it() -> None:
    calls: list[tuple[Any, ...]] = []

    def mine(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        calls.append((key, all_partitions, available))
        return all_partitions[-1]

    partitioner = config_from_aiokafka({"partitioner": mine}).partitioner
    assert partitioner is not None
    assert partitioner("t", b"k", b"v", (0, 1, 2), (0, 2)) == 2
    assert calls == [(b"k", [0, 1, 2], [0, 2])]
    assert config_from_aiokafka({"partitioner": DefaultPartitioner()}).partitioner is None
    with pytest.raises(ours.ConfigError, match="partitioner must be a callable"):
        config_from_aiokafka({"partitioner": 3})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"acks": 2}, "acks must be 0, 1, -1 or 'all'"),
        ({"enable_idempotence": True, "acks": 1}, "not supported with enable_idempotence"),
        ({"transactional_id": "t", "acks": 0}, "not supported with enable_idempotence"),
        ({"compression_type": "brotli"}, "compression_type must be one of"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}, "GSSAPI"),
        ({"sasl_kerberos_service_name": "other"}, "Kerberos"),
        ({"sasl_kerberos_domain_name": "example.com"}, "Kerberos"),
        ({"sasl_plain_username": "u", "sasl_plain_password": "p"}, "SASL settings need"),
        ({"ssl_context": __import__("ssl").create_default_context()}, "only used with"),
    ],
)
def test_refusals_are_config_errors_that_say_why(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ours.ConfigError, match=message):
        config_from_aiokafka(arguments)


def test_oauthbearer_takes_an_aiokafka_token_provider() -> None:
    class Provider(aiokafka.abc.AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return "token"

    provider = Provider()
    config = config_from_aiokafka(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": provider,
        }
    )
    assert config.sasl_mechanism == "OAUTHBEARER"
    assert config.sasl_oauth_token_provider is provider


def test_loop_and_api_version_are_ignored_with_aiokafkas_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="loop"):
        config_from_aiokafka({"loop": object()})
    with pytest.warns(DeprecationWarning, match="api_version"):
        config_from_aiokafka({"api_version": "2.0.0"})
    config_from_aiokafka({"api_version": "auto"})  # no warning: filterwarnings=error


# --- the errors

TWINS = [
    (compat.KafkaTimeoutError, ours.ProducerTimeoutError, kerr.KafkaTimeoutError),
    (compat.BufferExhaustedError, ours.BufferExhaustedError, kerr.KafkaTimeoutError),
    (compat.DeliveryTimeoutError, ours.DeliveryTimeoutError, kerr.KafkaTimeoutError),
    (
        compat.UnknownTopicOrPartitionError,
        ours.ProducerTimeoutError,
        kerr.UnknownTopicOrPartitionError,
    ),
    (compat.KafkaConnectionError, ours.BrokerError, kerr.KafkaConnectionError),
    (compat.MessageSizeTooLargeError, ours.RecordTooLargeError, kerr.MessageSizeTooLargeError),
    (compat.ProducerClosed, ours.ProducerClosedError, kerr.ProducerClosed),
    (compat.IllegalOperation, ours.InvalidTxnStateError, kerr.IllegalOperation),
    (compat.ProducerFenced, ours.ProducerFencedError, kerr.ProducerFenced),
    (compat.AuthenticationFailedError, ours.AuthenticationError, kerr.AuthenticationFailedError),
    (compat.UnsupportedVersionError, ours.BrokerError, kerr.UnsupportedVersionError),
]


@pytest.mark.parametrize(("twin", "mine", "theirs"), TWINS, ids=lambda c: c.__name__)
def test_each_twin_is_both_errors(twin: type, mine: type, theirs: type) -> None:
    assert issubclass(twin, mine)
    assert issubclass(twin, theirs)
    assert issubclass(twin, ours.AioAccumError)
    assert twin.__mro__.index(ours.AioAccumError) < twin.__mro__.index(Exception)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ours.BufferExhaustedError("m"), compat.BufferExhaustedError),
        (ours.DeliveryTimeoutError("m", possibly_written=True), compat.DeliveryTimeoutError),
        (ours.ProducerTimeoutError("m"), compat.KafkaTimeoutError),
        (ours.RecordTooLargeError("m"), compat.MessageSizeTooLargeError),
        (ours.ProducerClosedError("m"), compat.ProducerClosed),
        (ours.InvalidTxnStateError("m"), compat.IllegalOperation),
        (ours.ProducerFencedError("m", errno=90), compat.ProducerFenced),
        (ours.AuthenticationError("m"), compat.AuthenticationFailedError),
        (broker_error_for_code(Errors.UNSUPPORTED_VERSION), compat.UnsupportedVersionError),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.__name__,
)
def test_errors_become_their_twins_keeping_everything(
    error: ours.AioAccumError, expected: type
) -> None:
    error.add_note("a note")
    cause = OSError("underneath")
    error.__cause__ = cause
    twin = aiokafka_error(error)
    assert type(twin) is expected
    assert twin.args == error.args
    assert twin.__cause__ is cause
    assert twin.__notes__ == ["a note"]
    assert twin.possibly_written == error.possibly_written


@pytest.mark.parametrize(
    "code",
    [Errors.NOT_ENOUGH_REPLICAS, Errors.TOPIC_AUTHORIZATION_FAILED, Errors.POLICY_VIOLATION, -1],
)
def test_broker_errors_take_aiokafkas_class_for_their_code(code: int) -> None:
    error = broker_error_for_code(code)
    twin = aiokafka_error(error)
    assert isinstance(twin, kerr.for_code(code))
    assert isinstance(twin, type(error))  # TopicAuthorizationError stays one
    assert twin.errno == code
    assert twin.retriable == error.retriable
    assert type(aiokafka_error(broker_error_for_code(code))) is type(twin)  # made once


def test_a_lost_connection_is_aiokafkas_connection_error() -> None:
    try:
        try:
            raise kerr.KafkaConnectionError("Unable to bootstrap")
        except kerr.KafkaConnectionError as exc:
            raise ours.BrokerError("connection error", retriable=True) from exc
    except ours.BrokerError as error:
        twin = aiokafka_error(error)
    assert type(twin) is compat.KafkaConnectionError
    assert twin.retriable


def test_a_metadata_timeout_is_aiokafkas_unknown_topic() -> None:
    twin = aiokafka_error(ours.ProducerTimeoutError("topic 't' not present"), metadata_wait=True)
    assert type(twin) is compat.UnknownTopicOrPartitionError
    assert twin.errno == kerr.UnknownTopicOrPartitionError.errno
    assert isinstance(twin, TimeoutError)


def test_errors_without_a_twin_pass_through() -> None:
    for error in (ours.ConfigError("m"), ours.SerializationError("m"), ValueError("m")):
        assert aiokafka_error(error) is error
    twin = aiokafka_error(ours.BufferExhaustedError("m"))
    assert aiokafka_error(twin) is twin


def test_named_twins_pickle() -> None:
    error = aiokafka_error(ours.DeliveryTimeoutError("m", possibly_written=True))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is compat.DeliveryTimeoutError
    assert copy.possibly_written


# --- the producer, on a fake broker


def fake() -> FakeKafka:
    return FakeKafka(StaticCluster.uniform({"t": 3}, nodes=3))


@pytest.mark.looptime
async def test_send_returns_a_future_of_aiokafkas_metadata() -> None:
    kafka = fake()
    producer = AIOKafkaProducer(
        bootstrap_servers="fake", kafka=kafka, value_serializer=str.encode,
        key_serializer=str.encode,
    )
    async with producer:
        future = await producer.send("t", "value", key="key", headers=[("h", b"1")])
        metadata = await future
        by_wait = await producer.send_and_wait("t", "2", "k", partition=2, timestamp_ms=1000)
        await producer.flush()
        assert await producer.partitions_for("t") == {0, 1, 2}
    assert isinstance(metadata, AIOKafkaRecordMetadata)
    tp = TopicPartition("t", metadata.partition)
    assert metadata.topic_partition == (metadata.topic, metadata.partition)
    assert metadata.timestamp_type == 0
    record = kafka.log[tp][metadata.offset]
    assert (record.key, record.value, record.headers) == (b"key", b"value", [("h", b"1")])
    assert by_wait is not None
    assert (by_wait.partition, by_wait.timestamp) == (2, 1000)


@pytest.mark.looptime
async def test_acks_0_resolves_to_none_as_aiokafka_does() -> None:
    async with AIOKafkaProducer(bootstrap_servers="fake", kafka=fake(), acks=0) as producer:
        assert await producer.send_and_wait("t", b"v") is None


@pytest.mark.looptime
async def test_create_batch_and_send_batch() -> None:
    kafka = fake()
    async with AIOKafkaProducer(
        bootstrap_servers="fake", kafka=kafka, max_batch_size=1024, value_serializer=bytes
    ) as producer:
        batch = producer.create_batch()
        appended = 0
        while (metadata := batch.append(key=None, value=[appended % 256] * 50,
                                        timestamp=None)) is not None:
            assert metadata.offset == appended
            appended += 1
        assert 10 < appended == batch.record_count() < 20
        assert batch.size() <= 1024
        assert batch.append(key=None, value=b"more", timestamp=None) is None  # closed
        future = await producer.send_batch(batch, "t", partition=1)
        sent = await future
    assert sent is not None
    assert (sent.partition, sent.offset, sent.timestamp, sent.timestamp_type) == (1, 0, -1, 0)
    log = kafka.log[TopicPartition("t", 1)]
    assert [r.value for r in log] == [bytes([i % 256] * 50) for i in range(appended)]


@pytest.mark.looptime
async def test_errors_reach_the_caller_as_aiokafkas() -> None:
    kafka = fake()
    producer = AIOKafkaProducer(
        bootstrap_servers="fake", kafka=kafka, request_timeout_ms=2000, max_request_size=1000,
    )
    with pytest.raises(kerr.ProducerClosed):
        await producer.send("t", b"v")
    async with producer:
        with pytest.raises(kerr.UnknownTopicOrPartitionError, match="not present"):
            await producer.send("missing", b"v")
        with pytest.raises(kerr.MessageSizeTooLargeError):
            await producer.send("t", bytes(2000))
        with pytest.raises(kerr.IllegalOperation, match="no transactional_id"):
            await producer.begin_transaction()
        kafka.script.append({TopicPartition("t", 0): Errors.POLICY_VIOLATION})
        future = await producer.send("t", b"v", partition=0)
        with pytest.raises(kerr.PolicyViolationError) as caught:
            await future
        assert isinstance(caught.value, ours.BrokerError)
    with pytest.raises(kerr.ProducerClosed, match="closed"):
        await producer.send("t", b"v")


@pytest.mark.looptime
async def test_cancelling_the_returned_future_does_not_stop_the_record() -> None:
    kafka = fake()
    async with AIOKafkaProducer(bootstrap_servers="fake", kafka=kafka, linger_ms=50) as producer:
        future = await producer.send("t", b"v", partition=0)
        future.cancel()
    assert len(kafka.log[TopicPartition("t", 0)]) == 1
