"""SASL on aioaccum's own produce connection: the mechanisms' messages, and the exchange.

Theory of operation. A connection that must authenticate sends SaslHandshake v1 naming the
mechanism, then as many SaslAuthenticate requests as the mechanism needs (KIP-152: the SASL
tokens travel inside Kafka requests, so a broker answers them in order with the connection's
other requests, which is what lets a connection re-authenticate while produce requests are in
flight, KIP-368). SaslAuthenticate v1's answer carries the session lifetime; the connection
re-authenticates at 85% to 95% of it (Java's ``SaslClientAuthenticator``, with its jitter).

The mechanisms are written here from their RFCs: PLAIN (RFC 4616), SCRAM-SHA-256 and -512
(RFC 5802/7677, no channel binding, as Kafka), OAUTHBEARER (RFC 7628; the token comes from
:class:`aioaccum._kafka.oauth.TokenCache`, shared with aiokafka's connections). Refusals raise
the aiokafka errors that :func:`aioaccum._kafka.errors.translate` turns into
:class:`~aioaccum.errors.AuthenticationError`, as the same refusal on aiokafka's connections.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import aiokafka.errors as kerr

from aioaccum._kafka.oauth import MECHANISM as OAUTHBEARER
from aioaccum._kafka.oauth import (
    TokenCache,
    challenge_status,
    client_first_message,
    token_refused,
)

__all__ = [
    "AUTHENTICATE",
    "HANDSHAKE",
    "AuthAnswer",
    "Credentials",
    "encode_auth",
    "encode_handshake",
    "read_auth",
    "read_handshake",
    "run_mechanism",
]

HANDSHAKE = 17
AUTHENTICATE = 36

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_KVSEP = b"\x01"


class Credentials(NamedTuple):
    """What a connection authenticates with."""

    mechanism: str
    username: str | None = None
    password: str | None = None
    tokens: TokenCache | None = None


class AuthAnswer(NamedTuple):
    """SaslAuthenticate's answer."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int


# --- the two requests (v1 each: not flexible)


def encode_handshake(mechanism: str) -> bytes:
    raw = mechanism.encode()
    return _INT16.pack(len(raw)) + raw


def read_handshake(body: bytes) -> tuple[int, list[str]]:
    """(error code, the mechanisms the listener enables)."""
    code = _INT16.unpack_from(body, 0)[0]
    count = _INT32.unpack_from(body, 2)[0]
    pos = 6
    names = []
    for _ in range(max(count, 0)):
        size = _INT16.unpack_from(body, pos)[0]
        names.append(body[pos + 2 : pos + 2 + size].decode())
        pos += 2 + size
    return code, names


def encode_auth(token: bytes) -> bytes:
    return _INT32.pack(len(token)) + token


def read_auth(version: int, body: bytes) -> AuthAnswer:
    code = _INT16.unpack_from(body, 0)[0]
    size = _INT16.unpack_from(body, 2)[0]
    pos = 4
    message = None
    if size >= 0:
        message = body[pos : pos + size].decode(errors="replace")
        pos += size
    length = _INT32.unpack_from(body, pos)[0]
    pos += 4
    token = b""
    if length > 0:
        token = bytes(body[pos : pos + length])
        pos += length
    lifetime = _INT64.unpack_from(body, pos)[0] if version >= 1 else 0
    return AuthAnswer(code, message, token, lifetime)


# --- the mechanisms

Exchange = Callable[[bytes], Awaitable[AuthAnswer]]


async def run_mechanism(credentials: Credentials, exchange: Exchange, where: str) -> int:
    """The mechanism's SaslAuthenticate rounds after a successful handshake.

    Returns:
        The session lifetime in milliseconds (0: none given).
    """
    mechanism = credentials.mechanism
    if mechanism == "PLAIN":
        user, password = credentials.username or "", credentials.password or ""
        answer = _checked(await exchange(f"\0{user}\0{password}".encode()), credentials, where)
        return answer.session_lifetime_ms
    if mechanism in _SCRAM_HASHES:
        return await _scram(credentials, exchange, where)
    if mechanism == OAUTHBEARER:
        return await _oauthbearer(credentials, exchange, where)
    raise kerr.UnsupportedSaslMechanismError(f"SASL mechanism {mechanism} is not supported")


def _checked(answer: AuthAnswer, credentials: Credentials, where: str) -> AuthAnswer:
    if answer.error_code:
        # The broker's message never repeats the password.
        raise kerr.SaslAuthenticationFailed(
            f"SASL {credentials.mechanism} as {credentials.username!r} refused by {where}: "
            f"{answer.error_message or 'no reason given'}"
        )
    return answer


def _escape(name: str) -> str:
    # RFC 5802 section 5.1: ',' and '=' in a user name.
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes) -> dict[str, str]:
    found = {}
    for item in message.decode().split(","):
        key, _, value = item.partition("=")
        found[key] = value
    return found


async def _scram(credentials: Credentials, exchange: Exchange, where: str) -> int:
    digest = _SCRAM_HASHES[credentials.mechanism]
    nonce = secrets.token_urlsafe(24)
    first_bare = f"n={_escape(credentials.username or '')},r={nonce}"
    server_first = _checked(
        await exchange(b"n,," + first_bare.encode()), credentials, where
    ).auth_bytes
    found = _attributes(server_first)
    combined = found.get("r", "")
    if "e" in found or not combined.startswith(nonce) or "s" not in found or "i" not in found:
        raise kerr.SaslAuthenticationFailed(
            f"SASL {credentials.mechanism} with {where}: the server's first message is not "
            f"valid ({found.get('e', 'bad nonce, salt or iteration count')})"
        )
    salted = hashlib.pbkdf2_hmac(
        digest,
        (credentials.password or "").encode(),
        base64.b64decode(found["s"]),
        int(found["i"]),
    )
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    final_bare = f"c=biws,r={combined}"
    auth_message = f"{first_bare},{server_first.decode()},{final_bare}".encode()
    signature = hmac.digest(stored_key, auth_message, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
    answer = _checked(await exchange(final), credentials, where)
    server_final = _attributes(answer.auth_bytes)
    server_key = hmac.digest(salted, b"Server Key", digest)
    expected = base64.b64encode(hmac.digest(server_key, auth_message, digest)).decode()
    if not hmac.compare_digest(server_final.get("v", ""), expected):
        raise kerr.SaslAuthenticationFailed(
            f"SASL {credentials.mechanism} with {where}: the server's signature does not "
            f"match ({server_final.get('e', 'wrong signature')}): is it the real broker?"
        )
    return answer.session_lifetime_ms


async def _oauthbearer(credentials: Credentials, exchange: Exchange, where: str) -> int:
    assert credentials.tokens is not None  # the adapter sets it for OAUTHBEARER
    token = await credentials.tokens.current()
    answer = await exchange(client_first_message(token))
    if answer.error_code:
        raise token_refused(where, answer.error_message)
    if answer.auth_bytes:
        # RFC 7628 section 3.2.2: a refusal is a challenge holding a JSON status; the client
        # answers %x01 and the server then fails the exchange.
        status = challenge_status(answer.auth_bytes)
        final = await exchange(_KVSEP)
        raise token_refused(where, final.error_message or status)
    return answer.session_lifetime_ms


