"""SASL OAUTHBEARER without a broker: tokens, the token cache, the exchange and when
connections re-authenticate (KIP-368).

The exchange and the client run against a stand-in connection that answers SaslHandshake and
SaslAuthenticate as a broker with the unsecured validator would; clocks are fakes, so nothing
waits. tests/integration/test_oauth.py runs the same against the real listener.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from aioaccum import AuthenticationError, ConfigError, OAuthToken, ProducerConfig
from aioaccum._kafka.errors import authentication_error
from aioaccum._kafka.oauth import (
    OAuthBearerFailed,
    OAuthClient,
    TokenCache,
    authenticate,
    check_token,
    client_first_message,
)
from aioaccum.oauth import unsecured_token

NOW_MS = 1_800_000_000_000
SECRET = "eyJhbGciOiJub25lIn0.c2VjcmV0LXRva2Vu."  # a token no message may show


class WallClock:
    def __init__(self, ms: int = NOW_MS) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


class Provider:
    """An async token provider whose tokens live ``lifetime_ms`` from ``clock``."""

    def __init__(self, clock: WallClock, lifetime_ms: int = 60_000) -> None:
        self.clock = clock
        self.lifetime_ms = lifetime_ms
        self.calls = 0
        self.error: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def __call__(self) -> OAuthToken:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return OAuthToken(f"token-{self.calls}", self.clock.ms + self.lifetime_ms)


def decode(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


# --- tokens ---------------------------------------------------------------------------------


def test_an_unsecured_token_is_an_unsigned_jwt_with_sub_iat_and_exp() -> None:
    token = unsecured_token("alice", lifetime_ms=90_500, now_ms=NOW_MS, claims={"scope": "k"})
    header, payload, signature = token.token.split(".")
    assert "=" not in token.token
    assert decode(header) == {"alg": "none"}
    assert decode(payload) == {
        "scope": "k", "sub": "alice", "iat": NOW_MS // 1000, "exp": (NOW_MS + 90_500) // 1000
    }
    assert signature == ""
    assert token.expires_at_ms == decode(payload)["exp"] * 1000
    assert check_token(token, NOW_MS) is token


def test_a_token_never_shows_in_its_repr() -> None:
    token = OAuthToken(SECRET, NOW_MS, {"logicalCluster": "lkc-1"})
    assert SECRET not in repr(token)
    assert "logicalCluster" in repr(token)
    assert "lkc-1" not in repr(token)


def test_a_tuple_is_a_token() -> None:
    assert check_token((SECRET, NOW_MS + 1), NOW_MS) == OAuthToken(SECRET, NOW_MS + 1)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (SECRET, "returned a str; return OAuthToken(token, expires_at_ms) or a"),
        ((SECRET, NOW_MS + 1, {}), "returned a tuple"),
        (OAuthToken("", NOW_MS + 1), "empty token"),
        (OAuthToken(SECRET + " x", NOW_MS + 1), "characters a bearer token cannot hold"),
        (OAuthToken(SECRET + "\x01", NOW_MS + 1), "characters a bearer token cannot hold"),
        (OAuthToken(SECRET, "soon"), "expires_at_ms='soon'; it must be an int"),  # type: ignore[arg-type]
        (OAuthToken(SECRET, NOW_MS // 1000 + 60), "reads as seconds since the epoch"),
        (OAuthToken(SECRET, NOW_MS - 1500), "expired 1500 ms ago"),
        (OAuthToken(SECRET, NOW_MS + 1, {"auth": "x"}), "'auth' is reserved"),
        (OAuthToken(SECRET, NOW_MS + 1, {"a-b": "x"}), "keys are letters only"),
        (OAuthToken(SECRET, NOW_MS + 1, {"ok": "\x01"}), "not printable"),
    ],
)
def test_an_unusable_answer_says_what_is_wrong_without_the_token(
    answer: object, says: str
) -> None:
    with pytest.raises(ValueError, match="returned") as caught:
        check_token(answer, NOW_MS)
    assert says in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_client_first_message_is_rfc_7628s() -> None:
    token = OAuthToken("abc.def.", NOW_MS, {"logicalCluster": "lkc-1", "pool": "p"})
    assert client_first_message(token) == (
        b"n,,\x01auth=Bearer abc.def.\x01logicalCluster=lkc-1\x01pool=p\x01\x01"
    )


# --- the token cache ------------------------------------------------------------------------


async def test_a_token_is_reused_until_80_percent_of_its_lifetime_then_refreshed() -> None:
    clock = WallClock()
    provider = Provider(clock, lifetime_ms=100_000)
    cache = TokenCache(provider, clock=clock)
    first = await cache.current()
    clock.ms += 79_999
    assert await cache.current() is first
    assert provider.calls == 1
    clock.ms += 5_001  # past 85%: the jitter's end
    second = await cache.current()
    assert second.token == "token-2"
    assert second.expires_at_ms == clock.ms + 100_000
    assert provider.calls == 2


async def test_a_provider_that_never_answers_fails_within_the_timeout() -> None:
    """A hung provider fails the authentication after the timeout (request_timeout_ms)
    rather than hold every connection's requests for ever."""
    clock = WallClock()
    provider = Provider(clock)
    provider.gate = asyncio.Event()  # never set
    cache = TokenCache(provider, timeout=0.05, clock=clock)
    with pytest.raises(OAuthBearerFailed, match="did not answer within 50 ms"):
        await cache.current()


async def test_authentications_at_the_same_moment_share_one_call() -> None:
    clock = WallClock()
    provider = Provider(clock)
    provider.gate = asyncio.Event()
    cache = TokenCache(provider, clock=clock)
    waiting = [asyncio.ensure_future(cache.current()) for _ in range(5)]
    await asyncio.sleep(0)
    provider.gate.set()
    tokens = await asyncio.gather(*waiting)
    assert provider.calls == 1
    assert {t.token for t in tokens} == {"token-1"}


async def test_a_cancelled_waiter_leaves_the_call_to_the_others() -> None:
    clock = WallClock()
    provider = Provider(clock)
    provider.gate = asyncio.Event()
    cache = TokenCache(provider, clock=clock)
    first = asyncio.ensure_future(cache.current())
    second = asyncio.ensure_future(cache.current())
    await asyncio.sleep(0)
    first.cancel()
    provider.gate.set()
    assert (await second).token == "token-1"
    assert provider.calls == 1


async def test_a_provider_that_raises_fails_with_its_error_as_the_cause() -> None:
    clock = WallClock()
    provider = Provider(clock)
    provider.error = RuntimeError("identity provider unreachable")
    cache = TokenCache(provider, clock=clock)
    with pytest.raises(OAuthBearerFailed) as caught:
        await cache.current()
    assert str(caught.value) == (
        "sasl_oauth_token_provider raised RuntimeError: identity provider unreachable; no "
        "token for SASL OAUTHBEARER"
    )
    assert caught.value.__cause__ is provider.error
    auth = authentication_error(caught.value, "the broker")
    assert isinstance(auth, AuthenticationError)
    assert str(auth) == str(caught.value)


async def test_a_failed_refresh_keeps_the_valid_token_and_asks_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = WallClock()
    provider = Provider(clock, lifetime_ms=100_000)
    cache = TokenCache(provider, clock=clock)
    first = await cache.current()
    clock.ms += 90_000
    provider.error = RuntimeError("down")
    with caplog.at_level(logging.WARNING, logger="aioaccum._kafka.oauth"):
        assert await cache.current() is first
    assert "valid for 10000 ms more" in caplog.text
    assert provider.calls == 2
    assert await cache.current() is first  # not asked on every authentication
    assert provider.calls == 2
    clock.ms += 5_000
    assert await cache.current() is first
    assert provider.calls == 3
    clock.ms += 5_000  # expired: nothing left to fall back on
    with pytest.raises(OAuthBearerFailed, match="raised RuntimeError: down"):
        await cache.current()


async def test_a_provider_that_is_not_async_is_told_so() -> None:
    cache = TokenCache(lambda: (SECRET, NOW_MS + 1), clock=WallClock())  # type: ignore[arg-type, return-value]
    with pytest.raises(OAuthBearerFailed, match=r"must be an async callable \(async def\): it "
                       r"returned a tuple, not an awaitable"):
        await cache.current()


async def test_a_bad_answer_fails_without_quoting_the_token() -> None:
    async def provider() -> Any:
        return OAuthToken(SECRET, NOW_MS - 1)

    with pytest.raises(OAuthBearerFailed) as caught:
        await TokenCache(provider, clock=WallClock()).current()
    assert str(caught.value).startswith("sasl_oauth_token_provider returned a token that expired")
    assert SECRET not in str(caught.value)


async def test_an_aiokafka_token_provider_is_asked_at_every_authentication() -> None:
    from aiokafka.abc import AbstractTokenProvider

    class Legacy(AbstractTokenProvider):  # type: ignore[misc]
        calls = 0

        async def token(self) -> str:
            self.calls += 1
            return SECRET

        def extensions(self) -> dict[str, str]:
            return {"traceId": "t1"}

    legacy = Legacy()
    cache = TokenCache(legacy, clock=WallClock())
    token = await cache.current()
    assert (token.token, dict(token.extensions)) == (SECRET, {"traceId": "t1"})
    await cache.current()
    assert legacy.calls == 2
    assert ProducerConfig(
        security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=legacy
    ).sasl_oauth_token_provider is legacy


# --- the exchange ---------------------------------------------------------------------------


class Response:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class StubConnection:
    """Answers SASL requests as a broker with Kafka's unsecured validator would.

    ``accept``: which tokens are valid; ``lifetime_ms``: the session lifetime it gives.
    """

    host, port = "127.0.0.1", 9999

    def __init__(self, lifetime_ms: int = 10_000, accept: Callable[[str], bool] = bool) -> None:
        self.lifetime_ms = lifetime_ms
        self.accept = accept
        self.mechanisms = ["OAUTHBEARER"]
        self.sent: list[Any] = []
        self.tokens: list[str] = []
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None
        self.closed = False

    def connected(self) -> bool:
        return not self.closed

    def close(self, reason: object = None, exc: object = None) -> asyncio.Future[None]:
        self.closed = True
        closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        closed.set_result(None)
        return closed  # as aiokafka's: the client's close() awaits it

    async def send(self, request: Any) -> Response:
        self.sent.append(request)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        name = type(request).__name__
        if name == "SaslHandShakeRequest":
            ok = request._mechanism in self.mechanisms
            return Response(error_code=0 if ok else 33, enabled_mechanisms=self.mechanisms)
        assert name == "SaslAuthenticateRequest", name
        payload: bytes = request._payload
        if payload == b"\x01":
            return Response(error_code=58, error_message='{"status":"invalid_token"}')
        token = payload.decode().split("auth=Bearer ")[1].split("\x01")[0]
        self.tokens.append(token)
        if not self.accept(token):
            return Response(error_code=0, sasl_auth_bytes=b'{"status":"invalid_token"}')
        return Response(error_code=0, sasl_auth_bytes=b"", session_lifetime_ms=self.lifetime_ms)


def token_cache(lifetime_ms: int = 60_000) -> tuple[TokenCache, Provider, WallClock]:
    clock = WallClock()
    provider = Provider(clock, lifetime_ms)
    return TokenCache(provider, clock=clock), provider, clock


async def test_the_exchange_returns_the_session_lifetime() -> None:
    cache, _, _ = token_cache()
    conn = StubConnection(lifetime_ms=12_345)
    assert await authenticate(conn, cache) == 12_345
    assert [type(r).__name__ for r in conn.sent] == [
        "SaslHandShakeRequest", "SaslAuthenticateRequest"
    ]
    assert conn.tokens == ["token-1"]


async def test_a_refused_token_is_answered_and_fails_with_the_brokers_status() -> None:
    cache, _, _ = token_cache()
    conn = StubConnection(accept=lambda token: False)
    with pytest.raises(OAuthBearerFailed) as caught:
        await authenticate(conn, cache)
    # RFC 7628: the error challenge is acknowledged with %x01 before the server fails.
    assert conn.sent[-1]._payload == b"\x01"
    assert str(caught.value).startswith(
        'SASL OAUTHBEARER authentication with 127.0.0.1:9999 failed: the broker refused the '
        'token ({"status":"invalid_token"}); check the token sasl_oauth_token_provider returns'
    )
    assert "token-1" not in str(caught.value)


async def test_a_listener_without_oauthbearer_says_what_it_accepts() -> None:
    cache, provider, _ = token_cache()
    conn = StubConnection()
    conn.mechanisms = ["SCRAM-SHA-512", "PLAIN"]
    with pytest.raises(OAuthBearerFailed, match=r"does not accept SASL OAUTHBEARER \(error code "
                       r"33; it accepts: SCRAM-SHA-512, PLAIN\)"):
        await authenticate(conn, cache)
    assert provider.calls == 0


# --- re-authentication ----------------------------------------------------------------------


class Monotonic:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


class StubOAuthClient(OAuthClient):
    """The real OAuthClient whose connection to node 1 is ``conn``."""

    def __init__(self, conn: StubConnection, tokens: TokenCache, clock: Monotonic) -> None:
        super().__init__(tokens=tokens, clock=clock, bootstrap_servers="127.0.0.1:9092")
        self._conns[(1, 0)] = conn


async def test_a_connection_authenticates_once_then_again_at_85_to_95_percent_of_its_session(
) -> None:
    cache, _, _ = token_cache()
    conn = StubConnection(lifetime_ms=10_000)
    clock = Monotonic()
    client = StubOAuthClient(conn, cache, clock)
    assert await client._get_conn(1) is conn
    assert len(conn.tokens) == 1
    clock.s += 8.49
    assert await client._get_conn(1) is conn
    assert len(conn.tokens) == 1
    clock.s += 1.02  # 9.51 s: past 95%
    assert await client._get_conn(1) is conn
    assert len(conn.tokens) == 2
    assert client.authentications == 2
    await client.close()


async def test_requests_during_an_exchange_wait_for_the_same_one() -> None:
    cache, _, _ = token_cache()
    conn = StubConnection()
    conn.gate = asyncio.Event()
    client = StubOAuthClient(conn, cache, Monotonic())
    waiting = [asyncio.ensure_future(client._get_conn(1)) for _ in range(4)]
    await asyncio.sleep(0)
    assert not any(task.done() for task in waiting)
    conn.gate.set()
    assert await asyncio.gather(*waiting) == [conn] * 4
    assert len(conn.sent) == 2
    await client.close()


async def test_a_cancelled_caller_does_not_cut_the_exchange_short() -> None:
    cache, _, _ = token_cache()
    conn = StubConnection()
    conn.gate = asyncio.Event()
    client = StubOAuthClient(conn, cache, Monotonic())
    first = asyncio.ensure_future(client._get_conn(1))
    await asyncio.sleep(0)
    first.cancel()
    conn.gate.set()
    assert await client._get_conn(1) is conn
    assert not conn.closed
    assert client.authentications == 1
    await client.close()


async def test_a_session_without_a_lifetime_never_reauthenticates() -> None:
    cache, _, _ = token_cache()
    conn = StubConnection(lifetime_ms=0)
    clock = Monotonic()
    client = StubOAuthClient(conn, cache, clock)
    await client._get_conn(1)
    clock.s += 10**9
    await client._get_conn(1)
    assert client.authentications == 1
    await client.close()


async def test_a_refused_reauthentication_closes_the_connection_and_raises() -> None:
    cache, _, wall = token_cache(lifetime_ms=20_000)
    accepted = {"token-1"}
    conn = StubConnection(lifetime_ms=10_000, accept=accepted.__contains__)
    clock = Monotonic()
    client = StubOAuthClient(conn, cache, clock)
    await client._get_conn(1)
    clock.s += 10
    wall.ms += 17_000  # the token is due for refresh: token-2, which the broker refuses
    with pytest.raises(OAuthBearerFailed, match="the broker refused the token"):
        await client._get_conn(1)
    assert conn.closed
    await client.close()


async def test_a_connection_lost_during_the_exchange_is_no_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache, _, _ = token_cache()
    conn = StubConnection()
    conn.fail = KafkaConnectionError("Connection at 127.0.0.1:9999 closed")
    client = StubOAuthClient(conn, cache, Monotonic())
    with caplog.at_level(logging.DEBUG, logger="aioaccum._kafka.oauth"):
        assert await client._get_conn(1) is None
    assert conn.closed
    assert "SASL OAUTHBEARER with node 1 failed" in caplog.text
    await client.close()


# --- settings -------------------------------------------------------------------------------


async def _provider() -> OAuthToken:
    return OAuthToken(SECRET, NOW_MS)


def oauth(**settings: Any) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": _provider,
        **settings,
    }


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (oauth(sasl_oauth_token_provider=None),
         "sasl_mechanism='OAUTHBEARER' needs sasl_oauth_token_provider: an async callable"),
        (oauth(sasl_mechanism="SCRAM-SHA-512"),
         "sasl_oauth_token_provider is only used with sasl_mechanism='OAUTHBEARER', not "
         "'SCRAM-SHA-512'"),
        (oauth(sasl_plain_username="u", sasl_plain_password="p"),
         "sasl_plain_username and sasl_plain_password not used with sasl_mechanism="
         "'OAUTHBEARER' (sasl_oauth_token_provider's token authenticates); remove them"),
        (oauth(security_protocol="SSL"),
         "SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL"),
        (oauth(sasl_oauth_token_provider=SECRET),
         "sasl_oauth_token_provider must be an async callable returning OAuthToken(token, "
         "expires_at_ms) or (token, expires_at_ms), or an aiokafka AbstractTokenProvider; got "
         "an object of type str"),
    ],
)
def test_oauthbearer_settings_are_checked(settings: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ProducerConfig(**settings)
    assert says in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_provider_never_shows_in_the_configs_repr() -> None:
    assert "sasl_oauth_token_provider='***'" in repr(ProducerConfig(**oauth()))


def test_oauthbearer_from_properties_takes_the_provider_among_them() -> None:
    config = ProducerConfig.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
         "sasl_oauth_token_provider": _provider}
    )
    assert config.sasl_oauth_token_provider is _provider
    jaas = {"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            "OAuthBearerLoginModule required;"}
    with pytest.raises(ConfigError, match=re.escape(
        "uses OAuthBearerLoginModule: drop sasl.jaas.config and pass sasl_oauth_token_provider"
    )):
        ProducerConfig.from_properties(jaas)
    with pytest.raises(ConfigError, match="OAUTHBEARER, with a Python callable as "
                       "sasl_oauth_token_provider"):
        ProducerConfig.from_properties({"sasl.login.callback.handler.class": "x.Y"})


def test_oauthbearer_over_plaintext_warns_that_the_token_is_readable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="aioaccum.config.producer_config"):
        ProducerConfig(**oauth(security_protocol="SASL_PLAINTEXT",
                               bootstrap_servers="oauth-warning-test:9092"))
    assert "the bearer token crosses the network to oauth-warning-test:9092" in caplog.text
