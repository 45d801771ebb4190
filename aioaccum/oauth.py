"""SASL OAUTHBEARER: what a token provider returns, and unsecured tokens for test clusters.

A producer with ``sasl_mechanism="OAUTHBEARER"`` asks its ``sasl_oauth_token_provider`` for a
token whenever it needs one: an async callable taking no arguments and returning an
:class:`OAuthToken` or a ``(token, expires_at_ms)`` tuple::

    async def token_provider() -> OAuthToken:
        answer = await my_identity_provider.client_credentials_grant()
        return OAuthToken(answer.access_token, expires_at_ms=answer.expires_at_ms)

    Producer(bootstrap_servers=..., security_protocol="SASL_SSL",
             sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=token_provider)

The producer keeps the token until 80% of its lifetime has passed (Java's
``sasl.login.refresh.window.factor``) and then asks again on the next authentication; see the
README's "TLS and SASL" for re-authentication (KIP-368). An aiokafka ``AbstractTokenProvider``
is taken too (:class:`AiokafkaTokenProvider`). A provider that raises, or returns
something that is not a token, fails that authentication with
:class:`~aioaccum.errors.AuthenticationError`. Tokens never appear in ``repr()``, logs or error
messages.

:func:`unsecured_token` makes the unsigned JWTs that Kafka's default (unsecured) OAUTHBEARER
validator accepts: for development and test clusters only.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

__all__ = ["AiokafkaTokenProvider", "OAuthToken", "TokenProvider", "unsecured_token"]

@dataclass(frozen=True)
class OAuthToken:
    """A bearer token and when it expires.

    Attributes:
        token: The access token, as sent to the broker (for Kafka's default validator a JWT;
            see :func:`unsecured_token`). Never shown by ``repr()``.
        expires_at_ms: When the token expires, in milliseconds since the Unix epoch (a JWT's
            ``exp`` claim is in seconds: multiply it by 1000).
        extensions: SASL extensions sent with the token (RFC 7628), e.g. the ``logicalCluster``
            and ``identityPoolId`` some managed services ask for. Keys are letters only and
            ``auth`` is reserved.
    """

    token: str = field(repr=False)
    expires_at_ms: int
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        keys = f", extensions={sorted(self.extensions)}" if self.extensions else ""
        return f"OAuthToken(token='***', expires_at_ms={self.expires_at_ms}{keys})"


class AiokafkaTokenProvider(Protocol):
    """The shape of aiokafka's ``AbstractTokenProvider``, also taken as a token provider.

    ``await token()`` returns the token alone: such a provider keeps and refreshes its token
    itself, so it is asked at every authentication, as aiokafka does. ``extensions()``, if it
    is defined, returns the SASL extensions.
    """

    async def token(self) -> str: ...


TokenProvider: TypeAlias = (
    Callable[[], Awaitable[OAuthToken | tuple[str, int]]] | AiokafkaTokenProvider
)
"""``sasl_oauth_token_provider``: an async callable returning a token and its expiry (or an
aiokafka ``AbstractTokenProvider``)."""


def unsecured_token(
    sub: str,
    *,
    lifetime_ms: int = 3_600_000,
    now_ms: int | None = None,
    claims: Mapping[str, object] | None = None,
) -> OAuthToken:
    """An unsigned JWT (``{"alg":"none"}``) for Kafka's unsecured OAUTHBEARER validator.

    Kafka brokers accept these only when no real validator is configured for the listener
    (``OAuthBearerUnsecuredValidatorCallbackHandler``, Kafka's default): use them against test
    clusters, never in production. The claims are ``sub`` (the principal), ``iat`` and ``exp``
    in seconds, as Java's ``OAuthBearerUnsecuredLoginCallbackHandler`` makes them.

    Args:
        sub: The principal the broker will see (``User:<sub>``).
        lifetime_ms: How long the token is valid from ``now_ms``; a negative value makes an
            already expired token.
        now_ms: The issue time in milliseconds since the epoch; the current time if None.
        claims: Further claims (e.g. ``{"scope": "kafka"}``), added to the token as they are.

    Returns:
        The token, with ``expires_at_ms`` equal to its ``exp`` claim (whole seconds).
    """
    issued_ms = int(time.time() * 1000) if now_ms is None else now_ms
    issued = issued_ms // 1000
    expires = (issued_ms + lifetime_ms) // 1000
    payload = {**(claims or {}), "sub": sub, "iat": issued, "exp": expires}
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(payload, separators=(",", ":")).encode())
    return OAuthToken(f"{header}.{body}.", expires_at_ms=expires * 1000)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
