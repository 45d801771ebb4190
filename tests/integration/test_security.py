"""The producer over the test cluster's SASL_SSL listener (see `scripts/kafka security`).

What must hold: the right credentials work with SCRAM-SHA-512 and PLAIN; a refused password, an
untrusted or misnamed certificate and a plaintext client on the TLS port each end the start-up
at once with :class:`AuthenticationError` (no hang, no reconnect loop); TLS verifies by default;
and no password shows in a repr, a log line or an exception chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import SaslAuthenticationFailed

from aioaccum import AuthenticationError, ProducerConfig
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

REPO_ROOT = Path(__file__).resolve().parents[2]
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")
# Far above what any failure below may take: a failure that arrives well before this came
# from the server's refusal, not from a timeout, and a hang would show as a test timeout.
PATIENCE_MS = 60_000
# "Well before": a refusal is answered within milliseconds; this allows a loaded machine.
REFUSAL_BOUND_S = 10.0
WRONG_PASSWORD = "wrong-pw-Z9tY4q"
RECORDS = 20


# --- the listener --------------------------------------------------------------------------


def trusted_context(listener: dict[str, Any]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=listener["ca_file"])


def settings(listener: dict[str, Any], mechanism: str, **overrides: Any) -> dict[str, Any]:
    user = listener["users"][mechanism]
    base: dict[str, Any] = {
        "bootstrap_servers": listener["bootstrap"],
        "security_protocol": "SASL_SSL",
        "ssl_context": trusted_context(listener),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user["username"],
        "sasl_plain_password": user["password"],
        "request_timeout_ms": PATIENCE_MS,
        "max_block_ms": PATIENCE_MS,
        "linger_ms": 1,
    }
    base.update(overrides)
    return base


def first_node(listener: dict[str, Any]) -> tuple[str, int]:
    host, _, port = listener["nodes"]["1"].rpartition(":")
    return host, int(port)


async def failed_start(**config: Any) -> tuple[AuthenticationError, float]:
    """Starts a producer that must fail; returns its error and how long the failure took."""
    producer = Producer(**config)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        await producer.start()
    elapsed = time.monotonic() - started
    await producer.close()
    return caught.value, elapsed


def chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it was raised from or during, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]


def other_ca(directory: Path) -> Path:
    """A CA that signed nothing the cluster uses."""
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"]
    command += ["ec_paramgen_curve:P-256", "-nodes", "-keyout", str(directory / "other.key")]
    command += ["-out", str(directory / "other.pem"), "-days", "1", "-subj", "/CN=other CA"]
    subprocess.run(command, capture_output=True, check=True, timeout=60)
    return directory / "other.pem"


class CountingProxy:
    """Forwards TCP connections to one broker and counts them (TLS passes through untouched)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        # Closing both ends of every pipe ends its pumps; cancelling would log from asyncio.
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._pipes)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.add(up_writer)
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
                self._writers.discard(up_writer)
        finally:
            writer.close()
            self._writers.discard(writer)
            self._pipes.discard(task)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        # Either side may vanish at any moment: a failed pump just ends its half of the pipe.
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError):
            if not sink.is_closing() and sink.can_write_eof():
                sink.write_eof()


# --- the right credentials ------------------------------------------------------------------


async def read_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [r.value for r in records if r.value is not None]
        return values
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_right_credentials_produce_records_that_are_read_back(
    listener: dict[str, Any], topic_factory: TopicFactory, kafka_bootstrap: str, mechanism: str
) -> None:
    topic = await topic_factory(partitions=1)
    sent = [f"{mechanism}-{i}".encode() for i in range(RECORDS)]
    async with Producer(**settings(listener, mechanism)) as producer:
        futures = [await producer.send(topic, value) for value in sent]
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(RECORDS))
    assert await read_values(kafka_bootstrap, topic, RECORDS) == sent


async def test_a_host_name_the_certificate_lists_is_accepted(
    listener: dict[str, Any], topic_factory: TopicFactory
) -> None:
    # The control for the mismatch test below: the same CA, a name in the SAN.
    topic = await topic_factory(partitions=1)
    _, port = first_node(listener)
    config = settings(listener, "SCRAM-SHA-512", bootstrap_servers=f"localhost:{port}")
    async with Producer(**config) as producer:
        metadata = await (await producer.send(topic, b"by name"))
    assert metadata.offset == 0


def java_properties(listener: dict[str, Any], bootstrap: str, **extra: str) -> dict[str, str]:
    user = listener["users"]["SCRAM-SHA-512"]
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user["username"]}" password="{user["password"]}";'
    )
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": listener["ca_file"],
        **extra,
    }


async def test_java_truststore_properties_connect(
    listener: dict[str, Any], topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    config = ProducerConfig.from_properties(java_properties(listener, listener["bootstrap"]))
    async with Producer(config=config) as producer:
        metadata = await (await producer.send(topic, b"from properties"))
    assert metadata.offset == 0


async def test_empty_endpoint_identification_algorithm_skips_the_host_name_check(
    listener: dict[str, Any], topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    _, port = first_node(listener)
    unlisted = f"127.1:{port}"  # see the host name mismatch test below
    checked = ProducerConfig.from_properties(java_properties(listener, unlisted))
    with pytest.raises(AuthenticationError, match="Hostname mismatch"):
        await Producer(config=checked).start()
    unchecked = ProducerConfig.from_properties(
        java_properties(listener, unlisted, **{"ssl.endpoint.identification.algorithm": ""})
    )
    async with Producer(config=unchecked) as producer:
        metadata = await (await producer.send(topic, b"unchecked name"))
    assert metadata.offset == 0


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_wrong_password_fails_at_once_without_reconnecting(
    listener: dict[str, Any], mechanism: str
) -> None:
    async with CountingProxy(first_node(listener)) as proxy:
        config = settings(
            listener,
            mechanism,
            bootstrap_servers=proxy.address,
            sasl_plain_password=WRONG_PASSWORD,
        )
        error, elapsed = await failed_start(**config)
    assert elapsed < REFUSAL_BOUND_S, f"{elapsed:.1f}s: waited for a timeout, not the refusal"
    user = listener["users"][mechanism]["username"]
    assert f"SASL {mechanism} authentication as {user!r}" in str(error)
    assert isinstance(error.__cause__, SaslAuthenticationFailed)
    # One bootstrap attempt, and one more connection that learns why it failed.
    assert 1 <= proxy.connections <= 2, proxy.connections


async def test_tls_verifies_against_the_system_cas_by_default(
    listener: dict[str, Any],
) -> None:
    config = settings(listener, "SCRAM-SHA-512", ssl_context=None)
    error, elapsed = await failed_start(**config)
    assert elapsed < REFUSAL_BOUND_S
    assert isinstance(error.__cause__, ssl.SSLCertVerificationError)
    assert "certificate" in str(error)


async def test_a_certificate_from_another_ca_is_rejected(
    listener: dict[str, Any], tmp_path: Path
) -> None:
    wrong = ssl.create_default_context(cafile=str(other_ca(tmp_path)))
    error, elapsed = await failed_start(**settings(listener, "PLAIN", ssl_context=wrong))
    assert elapsed < REFUSAL_BOUND_S
    cause = error.__cause__
    assert isinstance(cause, ssl.SSLCertVerificationError)
    assert cause.verify_message in str(error)


async def test_a_host_name_the_certificate_does_not_list_is_rejected(
    listener: dict[str, Any],
) -> None:
    # "127.1" reaches 127.0.0.1 but is not an IP address to TLS: the name must be in the SAN
    # (IP 127.0.0.1, DNS localhost), and it is not.
    _, port = first_node(listener)
    config = settings(listener, "SCRAM-SHA-512", bootstrap_servers=f"127.1:{port}")
    error, elapsed = await failed_start(**config)
    assert elapsed < REFUSAL_BOUND_S
    assert isinstance(error.__cause__, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in str(error)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
async def test_plaintext_to_the_tls_port_fails_clearly(
    listener: dict[str, Any], protocol: str
) -> None:
    config = settings(listener, "PLAIN", security_protocol=protocol, ssl_context=None)
    if protocol == "PLAINTEXT":
        for key in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password"):
            del config[key]
    error, elapsed = await failed_start(**config)
    assert elapsed < REFUSAL_BOUND_S
    assert "TLS listener" in str(error)
    assert "security_protocol='SSL' or 'SASL_SSL'" in str(error)


# --- secrets --------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_passwords_never_show(
    listener: dict[str, Any],
    topic_factory: TopicFactory,
    caplog: pytest.LogCaptureFixture,
    mechanism: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = await topic_factory(partitions=1)
    password = listener["users"][mechanism]["password"]
    secrets = (password, WRONG_PASSWORD)
    shown: list[str] = []

    wrong = settings(listener, mechanism, sasl_plain_password=WRONG_PASSWORD)
    shown += [repr(ProducerConfig(**wrong)), repr(Producer(**wrong))]
    error, _ = await failed_start(**wrong)
    shown += [text for exc in chain(error) for text in (str(exc), repr(exc))]

    right = settings(listener, mechanism)
    shown.append(repr(ProducerConfig(**right)))
    async with Producer(**right) as producer:
        shown.append(repr(producer))
        await (await producer.send(topic, b"secretless"))

    records = caplog.records
    assert any("SaslAuthenticate" in record.getMessage() for record in records), (
        "no DEBUG request log was captured, so the check below would prove nothing"
    )
    shown += [caplog.text, *(record.getMessage() for record in records)]
    leaks = [text for text in shown for secret in secrets if secret in text]
    assert not leaks
