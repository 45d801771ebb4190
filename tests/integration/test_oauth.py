"""The producer over the test cluster's OAUTHBEARER listener (``scripts/kafka security``, under
"oauthbearer"): SASL_PLAINTEXT, Kafka's unsecured JWT validator, sessions of at most
``connections.max.reauth.ms`` (10 s) after which the broker closes a connection that did not
re-authenticate (KIP-368).

What must hold: a token provider's tokens let records through; the provider is asked again
before its token expires; a producer sending steadily across several session lifetimes
re-authenticates its connection in place, so no request is refused, retried or sent twice, and
every record is in the log once (read back with confluent-kafka); a provider that raises, an
expired token and a garbage one end the start-up with :class:`AuthenticationError` naming the
cause; and no token shows in a log line, a repr or an exception chain.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from faults.cluster import ClusterControlError, security_listener

from aioaccum import AuthenticationError, OAuthToken
from aioaccum._kafka.connections import ProduceConnections
from aioaccum._kafka.oauth import OAuthBearerFailed, OAuthClient
from aioaccum.oauth import unsecured_token
from aioaccum.producer import Producer

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = pytest.mark.kafka

PRINCIPAL = "aioaccum-oauth-test"
# Far above what any failure below may take: a refusal comes within milliseconds.
PATIENCE_MS = 60_000
REFUSAL_BOUND_S = 10.0


@pytest.fixture(scope="module")
def oauth_listener(kafka_bootstrap: str) -> dict[str, Any]:
    """The "oauthbearer" part of ``scripts/kafka security``: bootstrap, session limit."""
    try:
        info: dict[str, Any] = security_listener()["oauthbearer"]
    except (ClusterControlError, KeyError) as exc:
        pytest.fail(f"no OAUTHBEARER listener: {exc!r}", pytrace=False)
    return info


class Tokens:
    """A token provider that records when it was called and what it handed out."""

    def __init__(self, lifetime_ms: int) -> None:
        self.lifetime_ms = lifetime_ms
        self.issued: list[tuple[int, OAuthToken]] = []  # (called at ms, token)

    async def __call__(self) -> OAuthToken:
        now_ms = int(time.time() * 1000)
        token = unsecured_token(PRINCIPAL, lifetime_ms=self.lifetime_ms, now_ms=now_ms)
        self.issued.append((now_ms, token))
        return token


def settings(listener: dict[str, Any], provider: Any, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bootstrap_servers": listener["bootstrap"],
        "security_protocol": listener["security_protocol"],
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
        "request_timeout_ms": PATIENCE_MS,
        "max_block_ms": PATIENCE_MS,
        "linger_ms": 1,
    }
    base.update(overrides)
    return base


def oauth_client(producer: Producer) -> OAuthClient:
    client = getattr(producer._kafka, "client", None)
    assert isinstance(client, OAuthClient)
    return client


def exchanges(producer: Producer) -> tuple[int, int]:
    """SASL exchanges that succeeded, all and re-authentications only: on aiokafka's
    connections (metadata) and on the producer's own (produce requests)."""
    client = oauth_client(producer)
    conns = getattr(producer._kafka, "produce_connections", None)
    assert isinstance(conns, ProduceConnections)
    return (
        client.authentications + conns.authentications,
        client.reauthentications + conns.reauthentications,
    )


def read_values(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    """Partition 0 of ``topic`` from its start, over PLAINTEXT, with confluent-kafka."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if len(values) >= expected:
                    break  # and nothing more came for half a second
                continue
            assert message.error() is None, message.error()
            values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


async def failed_start(**config: Any) -> tuple[AuthenticationError, float]:
    producer = Producer(**config)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        await producer.start()
    elapsed = time.monotonic() - started
    await producer.close()
    return caught.value, elapsed


def chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) not in seen:
            seen.add(id(current))
            yield current
            todo += [e for e in (current.__cause__, current.__context__) if e is not None]


# --- tokens that work -----------------------------------------------------------------------


async def test_a_token_providers_tokens_produce_records_that_are_read_back(
    oauth_listener: dict[str, Any], topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    topic = await topic_factory(partitions=1)
    tokens = Tokens(lifetime_ms=3_600_000)
    sent = [f"oauth-{i}".encode() for i in range(20)]
    async with Producer(**settings(oauth_listener, tokens)) as producer:
        futures = [await producer.send(topic, value) for value in sent]
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(len(sent)))
    assert len(tokens.issued) == 1  # one token for every connection while it is fresh
    assert await asyncio.to_thread(read_values, kafka_bootstrap, topic, len(sent)) == sent


async def test_records_flow_across_reauthentications_each_written_once(
    oauth_listener: dict[str, Any], topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    # Sessions last min(10 s, the token's remaining life): tokens of 14 s are refreshed after
    # 80-85% of it (11-12 s), each before it expires; the connection re-authenticates every
    # 8.5-9.5 s or sooner. 26 s of steady sending spans at least two such periods.
    reauth_ms = oauth_listener["connections_max_reauth_ms"]
    assert reauth_ms == 10_000
    topic = await topic_factory(partitions=1)
    tokens = Tokens(lifetime_ms=14_000)
    sent: list[bytes] = []
    futures = []
    async with Producer(**settings(oauth_listener, tokens)) as producer:
        sent.append(b"r0")
        futures.append(await producer.send(topic, b"r0"))
        await futures[0]
        # Every connection the run needs is open now: none may close and open again.
        done, again = exchanges(producer)
        connections = done - again
        started = time.monotonic()
        while time.monotonic() - started < 2.6 * reauth_ms / 1000:
            value = f"r{len(sent)}".encode()
            sent.append(value)
            futures.append(await producer.send(topic, value))
            await asyncio.sleep(0.02)
        offsets = [(await future).offset for future in futures]
        retries = producer.metrics().get("record-retry-total", 0)
        done, reauthentications = exchanges(producer)
        reopened = done - reauthentications - connections
    assert offsets == list(range(len(sent))), "an acknowledged record was not written once"
    assert retries == 0, f"{retries} records were sent again: a session was let expire"
    assert reauthentications >= 2, reauthentications
    assert reopened == 0, f"{reopened} connection(s) closed and opened again"
    # The provider was asked again, each time before the token it had given expired.
    assert len(tokens.issued) >= 2
    for (_, before), (called_ms, _) in zip(tokens.issued, tokens.issued[1:], strict=False):
        assert called_ms < before.expires_at_ms
    values = await asyncio.to_thread(read_values, kafka_bootstrap, topic, len(sent))
    assert values == sent


async def test_an_idle_connection_past_its_session_reauthenticates_on_next_use(
    oauth_listener: dict[str, Any], topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    tokens = Tokens(lifetime_ms=3_600_000)
    async with Producer(**settings(oauth_listener, tokens)) as producer:
        assert (await (await producer.send(topic, b"before"))).offset == 0
        before = exchanges(producer)[1]
        # Past the broker's 10 s session: its next non-SASL request would close the
        # connection; the handshake that comes first re-opens the session instead.
        await asyncio.sleep(oauth_listener["connections_max_reauth_ms"] / 1000 + 1)
        assert (await (await producer.send(topic, b"after"))).offset == 1
        assert exchanges(producer)[1] > before
        assert producer.metrics().get("record-retry-total", 0) == 0


# --- refusals -------------------------------------------------------------------------------


async def test_a_provider_that_raises_fails_the_start_with_its_error(
    oauth_listener: dict[str, Any],
) -> None:
    async def provider() -> OAuthToken:
        raise RuntimeError("identity provider unreachable")

    error, elapsed = await failed_start(**settings(oauth_listener, provider))
    assert elapsed < REFUSAL_BOUND_S
    assert "sasl_oauth_token_provider raised RuntimeError: identity provider unreachable" in str(
        error
    )
    assert isinstance(error.__cause__, OAuthBearerFailed)
    assert isinstance(error.__cause__.__cause__, RuntimeError)


@pytest.mark.parametrize("kind", ["expired", "garbage"])
async def test_a_token_the_broker_refuses_fails_the_start(
    oauth_listener: dict[str, Any], kind: str
) -> None:
    async def provider() -> OAuthToken:
        now_ms = int(time.time() * 1000)
        if kind == "expired":
            # The JWT's exp is a minute ago; the provider claims otherwise.
            stale = unsecured_token(PRINCIPAL, lifetime_ms=-60_000, now_ms=now_ms)
            return OAuthToken(stale.token, now_ms + 60_000)
        return OAuthToken("not-a-jwt", now_ms + 60_000)

    error, elapsed = await failed_start(**settings(oauth_listener, provider))
    assert elapsed < REFUSAL_BOUND_S
    assert "the broker refused the token" in str(error)
    assert "invalid_token" in str(error)
    assert isinstance(error.__cause__, OAuthBearerFailed)


async def test_a_token_that_expired_is_refused_before_it_is_sent(
    oauth_listener: dict[str, Any],
) -> None:
    async def provider() -> tuple[str, int]:
        token = unsecured_token(PRINCIPAL, lifetime_ms=-5_000)
        return token.token, token.expires_at_ms

    error, _ = await failed_start(**settings(oauth_listener, provider))
    assert "sasl_oauth_token_provider returned a token that expired" in str(error)


# --- secrets --------------------------------------------------------------------------------


async def test_tokens_never_show(
    oauth_listener: dict[str, Any],
    topic_factory: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = await topic_factory(partitions=1)
    tokens = Tokens(lifetime_ms=3_600_000)
    shown: list[str] = []
    async with Producer(**settings(oauth_listener, tokens)) as producer:
        shown.append(repr(producer))
        await (await producer.send(topic, b"tokenless"))

    garbage = "garbage.token.value"

    async def refused() -> OAuthToken:
        return OAuthToken(garbage, int(time.time() * 1000) + 60_000)

    error, _ = await failed_start(**settings(oauth_listener, refused))
    shown += [text for exc in chain(error) for text in (str(exc), repr(exc))]
    records = caplog.records
    assert any("SaslAuthenticate" in record.getMessage() for record in records), (
        "no DEBUG request log was captured, so the check below would prove nothing"
    )
    shown += [caplog.text, *(record.getMessage() for record in records)]
    secrets = [token.token for _, token in tokens.issued] + [garbage]
    leaks = [secret for text in shown for secret in secrets if secret in text]
    assert not leaks
