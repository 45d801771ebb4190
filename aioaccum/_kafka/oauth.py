"""SASL OAUTHBEARER on aiokafka's connections, re-authenticated before sessions end (KIP-368).

Theory of operation. aiokafka can send an OAUTHBEARER token when it connects, but it reads
nothing back from the broker's answer: neither the error challenge a refused token gets
(RFC 7628 section 3.2.2; aiokafka takes it for success, and its next request ends the
connection) nor the session lifetime of SaslAuthenticate v1 (KIP-368), after which a broker with
``connections.max.reauth.ms`` set (or a token that expires) closes the connection on the next
request. So aiokafka opens connections without SASL here (its ``security_protocol`` is PLAINTEXT
or SSL) and :class:`OAuthClient` runs the exchange itself, as Java's
``SaslClientAuthenticator`` does:

* Every connection aiokafka hands out passes ``_get_conn`` (``client.send``: produce,
  metadata, coordinator requests). One that is not authenticated yet, or whose session has
  reached its re-authentication time (85% to 95% of the lifetime the broker gave, Java's
  ``ReauthInfo`` window and jitter), is authenticated there before anything more is sent on
  it: SaslHandshake, then SaslAuthenticate, on the same connection. Requests sent before are
  answered first (a broker reads a connection's requests one at a time, in order, and aiokafka
  matches answers in order); callers arriving meanwhile wait for the same exchange, which runs
  in a task of its own so that a cancelled caller never leaves it half done. A connection idle
  past its session re-authenticates on its next use: a broker accepts a SaslHandshake on an
  expired session and closes the connection only for other requests.
* :meth:`OAuthClient.bootstrap` is aiokafka's, with the exchange on each bootstrap connection
  before its metadata request.
* :class:`TokenCache` asks the provider for a token on first need, and again on the first
  authentication after 80% to 85% of the token's lifetime (Java's
  ``sasl.login.refresh.window.factor`` and jitter); one call at a time, shared by every
  connection. A failed refresh keeps the current token while it is valid.

A refused token, a provider that raises or returns no token, and a listener without OAUTHBEARER
raise :class:`OAuthBearerFailed`, an aiokafka error (the client's own callers catch those),
which :mod:`aioaccum._kafka.adapter` turns into
:class:`~aioaccum.errors.AuthenticationError`. A lost
connection or a timeout during the exchange is what it would be during any request: the
connection is closed and the caller sees a node that is not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import random
import re
import time
import weakref
from collections.abc import Callable
from typing import Any

import aiokafka.errors as kerr
from aiokafka.client import ConnectionGroup
from aiokafka.conn import CloseReason, create_conn
from aiokafka.protocol.admin import SaslAuthenticateRequest, SaslHandShakeRequest
from aiokafka.protocol.metadata import MetadataRequest

from aioaccum._kafka.metadata import MetadataClient
from aioaccum.oauth import OAuthToken, TokenProvider

__all__ = [
    "MECHANISM",
    "OAuthBearerFailed",
    "OAuthClient",
    "TokenCache",
    "authenticate",
    "challenge_status",
    "check_token",
    "client_first_message",
    "token_refused",
]

MECHANISM = "OAUTHBEARER"
# Java's sasl.login.refresh.window.factor and .jitter: a token is refreshed once 80% to 85% of
# its lifetime has passed.
REFRESH_FACTOR = 0.8
REFRESH_JITTER = 0.05
# Java's SaslClientAuthenticator: re-authenticate at 85% to 95% of the session lifetime, for
# network latency and clock drift, spread so that connections do not all go at once.
REAUTH_FACTOR = 0.85
REAUTH_JITTER = 0.10
# After a failed refresh while the current token is still valid: ask again after this long at
# most (Java's sasl.login.retry.backoff.max.ms), or half the token's remaining life if sooner.
REFRESH_RETRY_MAX_S = 10.0

# RFC 6750's b64token: the characters a bearer token may have (RFC 7628's client message puts
# it between separators that must not appear in it).
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 7628 section 3.1: extension keys are letters, values printable ASCII and white space.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_KVSEP = b"\x01"
_NO_EXPIRY = 2**63 - 1
_BOOTSTRAP = ("bootstrap", ConnectionGroup.DEFAULT)
_ADVICE = (
    "check the token sasl_oauth_token_provider returns (its expiry, and the issuer, audience "
    "and scope the listener's validator expects)"
)

log = logging.getLogger(__name__)


class OAuthBearerFailed(kerr.KafkaError):  # type: ignore[misc]  # aiokafka is untyped here
    """SASL OAUTHBEARER failed; the message says why and never holds the token."""

    retriable = False

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__


# --- tokens


def check_token(answer: object, now_ms: int) -> OAuthToken:
    """What a provider returned, as an :class:`OAuthToken`.

    Raises:
        ValueError: It is not a usable token; the message (which never quotes the token)
            continues "sasl_oauth_token_provider ...".
    """
    if isinstance(answer, OAuthToken):
        token = answer
    elif isinstance(answer, tuple) and len(answer) == 2:
        token = OAuthToken(answer[0], answer[1])
    else:
        raise ValueError(
            f"returned a {type(answer).__name__}; return OAuthToken(token, expires_at_ms) or a "
            "(token, expires_at_ms) tuple"
        )
    if not isinstance(token.token, str) or not token.token:
        raise ValueError("returned an empty token, or one that is not a str")
    if not _BEARER_TOKEN.fullmatch(token.token):
        raise ValueError(
            "returned a token with characters a bearer token cannot hold (RFC 6750: letters, "
            "digits and -._~+/, then '=' padding)"
        )
    expires = token.expires_at_ms
    if isinstance(expires, bool) or not isinstance(expires, int):
        raise ValueError(
            f"returned expires_at_ms={expires!r}; it must be an int, in milliseconds since the "
            "epoch"
        )
    if expires < 10**11 < now_ms:
        raise ValueError(
            f"returned expires_at_ms={expires}, which reads as seconds since the epoch; "
            "multiply it by 1000 (a JWT's exp claim is in seconds)"
        )
    if expires <= now_ms:
        raise ValueError(
            f"returned a token that expired {now_ms - expires} ms ago (expires_at_ms="
            f"{expires}); return a fresh one"
        )
    for key, value in token.extensions.items():
        if not isinstance(key, str) or not _EXTENSION_KEY.fullmatch(key) or key == "auth":
            raise ValueError(
                f"returned the extension key {key!r}: keys are letters only, and 'auth' is "
                "reserved"
            )
        if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f"returned a value for extension {key!r} that is not printable")
    return token


def client_first_message(token: OAuthToken) -> bytes:
    """RFC 7628's initial client response: ``n,,``, then ``auth=Bearer <token>`` and each
    extension, each followed by ``%x01``, then a final ``%x01``."""
    parts = [f"auth=Bearer {token.token}"]
    parts += [f"{key}={value}" for key, value in token.extensions.items()]
    return ("n,,\x01" + "".join(part + "\x01" for part in parts) + "\x01").encode()


class TokenCache:
    """The provider's current token, shared by every connection of one producer.

    Args:
        provider: ``sasl_oauth_token_provider``.
        timeout: Seconds a provider call may take before it counts as failed.
        clock: Seconds since the epoch (token expiries are wall-clock times).
    """

    def __init__(
        self,
        provider: TokenProvider,
        *,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._provider = provider
        self._timeout = timeout
        # aiokafka's AbstractTokenProvider: token() alone, asked at every authentication.
        self._aiokafka_style = not callable(provider)
        self._clock = clock
        self._token: OAuthToken | None = None
        self._refresh_at_ms = 0.0
        self._fetch: asyncio.Task[OAuthToken] | None = None
        self.calls = 0
        """How many times the provider was called."""

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def current(self) -> OAuthToken:
        """A token valid now: the cached one, or a fresh one once it is due for refresh.

        Raises:
            OAuthBearerFailed: No valid token: the provider raised or returned no usable
                token, and the cached one (if any) has expired.
        """
        token = self._token
        if token is not None and self._now_ms() < self._refresh_at_ms:
            return token
        fetch = self._fetch
        if fetch is None:
            fetch = self._fetch = asyncio.ensure_future(self._call_provider())
            fetch.add_done_callback(self._fetched)
        try:
            # Shielded: a caller cancelled while waiting leaves the call to the others. The
            # call itself is bounded (request_timeout_ms), so no authentication waits longer.
            return await asyncio.shield(fetch)
        except OAuthBearerFailed as exc:
            now_ms = self._now_ms()
            if token is None or now_ms >= token.expires_at_ms:
                raise
            left_ms = token.expires_at_ms - now_ms
            retry_ms = min(REFRESH_RETRY_MAX_S * 1000, left_ms / 2)
            self._refresh_at_ms = max(self._refresh_at_ms, now_ms + retry_ms)
            log.warning(
                "could not refresh the OAUTHBEARER token (%s); the current one is valid for "
                "%d ms more and stays in use, asking again in %d ms",
                exc, left_ms, retry_ms,
            )
            return token

    def _fetched(self, fetch: asyncio.Task[OAuthToken]) -> None:
        if self._fetch is fetch:
            self._fetch = None
        if not fetch.cancelled():
            fetch.exception()  # retrieved: every waiter may have been cancelled

    async def _call_provider(self) -> OAuthToken:
        self.calls += 1
        name = "sasl_oauth_token_provider"
        provider: Any = self._provider
        try:
            answer: Any = provider.token() if self._aiokafka_style else provider()
            if not inspect.isawaitable(answer):
                call = "token()" if self._aiokafka_style else "an async callable (async def)"
                raise OAuthBearerFailed(
                    f"{name} must be {call}: it returned a {type(answer).__name__}, not an "
                    "awaitable"
                )
            try:
                async with asyncio.timeout(self._timeout):
                    answer = await answer
            except TimeoutError:
                raise OAuthBearerFailed(
                    f"{name} did not answer within {self._timeout * 1000:.0f} ms "
                    "(request_timeout_ms)"
                ) from None
            if self._aiokafka_style:
                extensions = getattr(provider, "extensions", None)
                found = extensions() if callable(extensions) else {}
                answer = OAuthToken(answer, _NO_EXPIRY, dict(found))
        except OAuthBearerFailed:
            raise
        except Exception as exc:
            raise OAuthBearerFailed(
                f"{name} raised {type(exc).__name__}: {exc}; no token for SASL OAUTHBEARER"
            ) from exc
        now_ms = self._now_ms()
        try:
            token = check_token(answer, now_ms)
        except ValueError as exc:
            raise OAuthBearerFailed(f"{name} {exc}") from None
        if self._aiokafka_style:
            return token  # not kept: its provider keeps it, and knows when it expires
        lifetime_ms = token.expires_at_ms - now_ms
        factor = REFRESH_FACTOR + REFRESH_JITTER * random.random()
        self._token = token
        self._refresh_at_ms = now_ms + lifetime_ms * factor
        log.debug("new OAUTHBEARER token, valid for %d ms", lifetime_ms)
        return token

    async def close(self) -> None:
        fetch, self._fetch = self._fetch, None
        if fetch is not None:
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)


# --- the exchange


async def authenticate(conn: Any, tokens: TokenCache) -> int:
    """SASL OAUTHBEARER on an open connection, first or again (KIP-368).

    Returns:
        The session lifetime the broker gave in milliseconds; 0 if it set none.

    Raises:
        OAuthBearerFailed: The listener does not take OAUTHBEARER, no token could be had, or
            the broker refused the token.
        aiokafka.errors.KafkaConnectionError, TimeoutError: The connection failed meanwhile.
    """
    where = f"{conn.host}:{conn.port}"
    handshake = await conn.send(SaslHandShakeRequest(MECHANISM))
    if handshake.error_code:
        enabled = ", ".join(handshake.enabled_mechanisms) or "none"
        raise OAuthBearerFailed(
            f"the listener at {where} does not accept SASL {MECHANISM} (error code "
            f"{handshake.error_code}; it accepts: {enabled}); connect to a listener that has "
            f"{MECHANISM} in sasl.enabled.mechanisms, or change sasl_mechanism"
        )
    token = await tokens.current()
    # aiokafka's DEBUG request log would show the token: _kafka.py redacts SaslAuthenticate.
    response = await conn.send(SaslAuthenticateRequest(client_first_message(token)))
    if response.error_code:
        raise token_refused(where, response.error_message)
    if response.sasl_auth_bytes:
        # RFC 7628 section 3.2.2: a refusal is a challenge holding a JSON status; the client
        # answers %x01 and the server then fails the exchange with the same status.
        status = challenge_status(response.sasl_auth_bytes)
        with contextlib.suppress(kerr.KafkaError, TimeoutError, OSError):
            final = await conn.send(SaslAuthenticateRequest(_KVSEP))
            status = final.error_message or status
        raise token_refused(where, status)
    return int(getattr(response, "session_lifetime_ms", 0))


def challenge_status(challenge: bytes) -> str:
    """What a broker's error challenge says, for a message (it is JSON when well formed)."""
    try:
        found = json.loads(challenge)
    except ValueError:
        return "an error challenge that is not JSON"
    return json.dumps(found) if isinstance(found, dict) else "an error challenge"


def token_refused(where: str, message: str | None) -> OAuthBearerFailed:
    """The error for a token the broker refused, with what to check."""
    return OAuthBearerFailed(
        f"SASL {MECHANISM} authentication with {where} failed: the broker refused the token "
        f"({message or 'no reason given'}); {_ADVICE}"
    )


# --- the client


class OAuthClient(MetadataClient):
    """The metadata client, with SASL OAUTHBEARER run and re-run here (see the module)."""

    def __init__(
        self,
        *,
        tokens: TokenCache,
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> None:
        super().__init__(**settings)
        self._tokens = tokens
        self._auth_clock = clock
        # Connection -> when to re-authenticate it (clock seconds; inf: never).
        self._sessions: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._exchanges: dict[Any, asyncio.Task[None]] = {}
        self.authentications = 0
        """Exchanges that succeeded, first ones and re-authentications."""
        self.reauthentications = 0
        """Exchanges that succeeded on a connection authenticated before (KIP-368)."""

    async def close(self) -> None:
        exchanges = list(self._exchanges.values())
        for task in exchanges:
            task.cancel()
        await asyncio.gather(*exchanges, return_exceptions=True)
        await self._tokens.close()
        await super().close()

    async def bootstrap(self) -> None:
        """aiokafka's bootstrap, authenticating each bootstrap connection before its metadata
        request. A refused token ends it at once, as it would on every other server too."""
        for host, port, _ in self.hosts:
            log.debug("bootstrap: trying %s:%s", host, port)
            try:
                conn = await create_conn(
                    host,
                    port,
                    client_id=self._client_id,
                    request_timeout_ms=self._request_timeout_ms,
                    ssl_context=self._ssl_context,
                    security_protocol=self._security_protocol,
                    max_idle_ms=self._connections_max_idle_ms,
                )
            except (OSError, kerr.KafkaError, TimeoutError) as err:
                # DEBUG, as aioaccum makes aiokafka's: a failed start says why (_kafka.py).
                log.debug("bootstrap: no connection to %s:%s (%s)", host, port, err)
                continue
            try:
                await asyncio.shield(self._exchange(conn))
                metadata = await conn.send(MetadataRequest([]))
            except OAuthBearerFailed:
                raise
            except (kerr.KafkaError, TimeoutError, OSError) as err:
                log.debug("bootstrap: %s:%s gave no metadata (%s)", host, port, err)
                conn.close()
                continue
            except BaseException:
                conn.close()  # cancelled: the connection is no one's to close later
                raise
            self.cluster.update_metadata(metadata)
            # As aiokafka: a cluster listing no brokers yet keeps the bootstrap connection.
            if not self.cluster.brokers():
                self._conns[_BOOTSTRAP] = conn
            else:
                conn.close()
            break
        else:
            raise kerr.KafkaConnectionError(f"no bootstrap server answered (tried {self.hosts})")
        if getattr(self, "_sync_task", None) is None:  # aiokafka's metadata refresh task
            self._sync_task = asyncio.create_task(self._md_synchronizer())

    async def _get_conn(self, node_id: Any, **kwargs: Any) -> Any:
        conn = await super()._get_conn(node_id, **kwargs)
        if conn is None:
            return None
        reauth_at = self._sessions.get(conn)
        if reauth_at is not None and self._auth_clock() < reauth_at:
            return conn  # the path of nearly every request: one dict lookup and a clock read
        try:
            await asyncio.shield(self._exchange(conn))
        except OAuthBearerFailed:
            raise
        except (kerr.KafkaError, TimeoutError, OSError) as exc:
            # As aiokafka does when a connection cannot be made: no connection this time (and a
            # DEBUG line, as aioaccum makes aiokafka's; the request's failure is logged above).
            log.debug("SASL %s with node %s failed: %r", MECHANISM, node_id, exc)
            self.force_metadata_update()
            return None
        return conn

    def _exchange(self, conn: Any) -> asyncio.Task[None]:
        """The exchange running on ``conn``, started if none is."""
        task = self._exchanges.get(conn)
        if task is None:
            task = self._exchanges[conn] = asyncio.create_task(self._authenticate(conn))
            task.add_done_callback(lambda done: self._exchange_done(conn, done))
        return task

    def _exchange_done(self, conn: Any, task: asyncio.Task[None]) -> None:
        if self._exchanges.get(conn) is task:
            del self._exchanges[conn]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have been cancelled

    async def _authenticate(self, conn: Any) -> None:
        again = conn in self._sessions
        started = self._auth_clock()
        try:
            lifetime_ms = await authenticate(conn, self._tokens)
        except OAuthBearerFailed as exc:
            self._sessions.pop(conn, None)
            conn.close(reason=CloseReason.AUTH_FAILURE, exc=exc)
            raise
        except BaseException:
            # Half an exchange leaves the connection in a state no request can follow.
            self._sessions.pop(conn, None)
            conn.close()
            raise
        self.authentications += 1
        self.reauthentications += again
        if lifetime_ms > 0:
            factor = REAUTH_FACTOR + REAUTH_JITTER * random.random()
            # From before the request went out: the broker's clock started later.
            self._sessions[conn] = started + lifetime_ms / 1000 * factor
        else:
            self._sessions[conn] = float("inf")
        log.debug(
            "%s %s:%s with SASL %s; session lifetime %d ms",
            "re-authenticated with" if again else "authenticated to",
            conn.host, conn.port, MECHANISM, lifetime_ms,
        )
