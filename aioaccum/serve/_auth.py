"""Who may call the gateway, and which topics each caller may write.

The auth file (``--auth-file``) has one credential per line, ``NAME:SECRET:TOPICS``::

    # name      secret                      topics
    web-front:  7bX0c1...:                  clicks,pageviews
    etl:sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08:orders.*
    admin:another-long-secret:*

Blank lines and lines starting with ``#`` are skipped. ``TOPICS`` is a comma-separated list of
topic names, ``prefix*`` patterns and ``*`` for every topic. ``SECRET`` is the secret itself
or, to keep it out of the file, ``sha256:`` and the hex SHA-256 of it. Names and secrets are
unique (a secret alone says who calls). A caller presents it as

* HTTP basic auth: ``Authorization: Basic base64(NAME:SECRET)``, or
* an API key: ``X-API-Key: SECRET`` or ``Authorization: Bearer SECRET``.

Once the file is given, everything but ``/healthz`` and ``/readyz`` needs credentials (401 with
``WWW-Authenticate`` without them), and a caller writes only the topics listed for it (403);
``GET /topics`` lists only those. Secrets are compared in constant time, as SHA-256 digests, and
are never logged or put in a message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aioaccum.errors import ConfigError

from ._errors import ErrorCode, RestError

__all__ = ["AuthFile", "Principal"]

CHALLENGE = 'Basic realm="aioaccum serve", charset="UTF-8"'
_SHA256 = "sha256:"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller and the topics it may write."""

    name: str
    topics: frozenset[str]
    prefixes: tuple[str, ...]

    def may_write(self, topic: str) -> bool:
        return topic in self.topics or any(topic.startswith(p) for p in self.prefixes)

    def forbidden(self, topic: str) -> RestError:
        return RestError(
            403,
            ErrorCode.KAFKA_AUTHORIZATION,
            f"{self.name!r} may not write topic {topic!r}: add it to that credential's topics "
            "in the auth file",
        )


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    digest: bytes


class AuthFile:
    """The credentials of an auth file (see the module's docstring for its format)."""

    def __init__(self, entries: Iterable[_Entry]) -> None:
        self._entries = tuple(entries)
        self._by_name = {entry.principal.name: entry for entry in self._entries}

    @classmethod
    def load(cls, path: str) -> AuthFile:
        """Read an auth file.

        Raises:
            ConfigError: It cannot be read, or a line is malformed; messages name the line,
                never a secret.
        """
        try:
            with open(path, encoding="utf-8") as file:
                lines = file.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--auth-file {path}: cannot read it as UTF-8 text ({exc})") from exc
        entries: list[_Entry] = []
        names: set[str] = set()
        digests: set[bytes] = set()
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            where = f"--auth-file {path}, line {number}"
            name, sep, rest = text.partition(":")
            secret, sep2, topics = rest.rpartition(":")
            name, secret = name.strip(), secret.strip()
            if not sep or not sep2 or not name or not secret:
                raise ConfigError(f"{where}: write NAME:SECRET:TOPICS (topics may be '*')")
            if name in names:
                raise ConfigError(f"{where}: the name {name!r} is given twice")
            digest = _stored_digest(secret, where)
            if digest in digests:
                raise ConfigError(
                    f"{where}: this secret is also another name's; give each name its own, so "
                    "that an API key says who calls"
                )
            names.add(name)
            digests.add(digest)
            exact, prefixes = _topic_patterns(topics, where)
            entries.append(_Entry(Principal(name, exact, prefixes), digest))
        if not entries:
            raise ConfigError(
                f"--auth-file {path}: no credentials in it; every request would be refused"
            )
        return cls(entries)

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller named by a request's ``Authorization`` or ``X-API-Key`` header.

        Exactly one credential is read: both headers, or either one twice, is 400 unless they
        say the same; values are trimmed of surrounding spaces alike.

        Raises:
            RestError: 401, with ``WWW-Authenticate``, when none is given or it is not valid;
                400 for two different credentials.
        """
        api_keys = _values(headers, "x-api-key")
        authorizations = _values(headers, "authorization")
        given = {("key", key) for key in api_keys}
        for authorization in authorizations:
            scheme, _, credentials = authorization.partition(" ")
            scheme = scheme.lower()
            given.add(
                ("key", credentials.strip())
                if scheme == "bearer"
                else (scheme, credentials.strip())
            )
        if len(given) > 1:
            raise RestError(
                400,
                ErrorCode.BAD_REQUEST,
                "the request carries more than one credential (X-API-Key, Authorization); "
                "send exactly one",
            )
        api_key: str | None = None
        if given:
            [(kind, credentials)] = given
            if kind == "basic":
                return self._basic(credentials)
            if kind == "key":
                api_key = credentials
        if api_key is None:
            raise _unauthorized(
                "credentials required: use HTTP basic auth, or an API key in X-API-Key or "
                "'Authorization: Bearer'"
            )
        return self._by_key(api_key)

    def _basic(self, credentials: str) -> Principal:
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise _unauthorized("malformed basic credentials: not base64 of NAME:SECRET") from None
        name, sep, secret = decoded.partition(":")
        entry = self._by_name.get(name)
        # Compare even for an unknown name, so the time taken does not tell names apart.
        stored = entry.digest if entry is not None else b"\0" * 32
        matches = hmac.compare_digest(hashlib.sha256(secret.encode()).digest(), stored)
        if entry is None or not sep or not matches:
            raise _unauthorized("wrong name or secret")
        return entry.principal

    def _by_key(self, key: str) -> Principal:
        given = hashlib.sha256(key.encode()).digest()
        found: Principal | None = None
        # Every entry is compared: the time taken says nothing about which one matched.
        for entry in self._entries:
            if hmac.compare_digest(given, entry.digest):
                found = entry.principal
        if found is None:
            raise _unauthorized("unknown API key")
        return found


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name``, trimmed (a request may repeat a header)."""
    getlist = getattr(headers, "getlist", None)
    values: list[str] = (
        getlist(name) if getlist is not None else ([headers[name]] if name in headers else [])
    )
    return [value.strip() for value in values]


def _unauthorized(why: str) -> RestError:
    return RestError(
        401, ErrorCode.UNAUTHORIZED, f"unauthorized: {why}", headers={"WWW-Authenticate": CHALLENGE}
    )


def _stored_digest(secret: str, where: str) -> bytes:
    if secret.startswith(_SHA256):
        hex_digest = secret[len(_SHA256) :]
        try:
            digest = bytes.fromhex(hex_digest)
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ConfigError(f"{where}: after 'sha256:' give the 64 hex digits of a SHA-256")
        return digest
    return hashlib.sha256(secret.encode()).digest()


def _topic_patterns(text: str, where: str) -> tuple[frozenset[str], tuple[str, ...]]:
    exact: set[str] = set()
    prefixes: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item.endswith("*"):
            prefixes.append(item[:-1])  # "*" alone: the empty prefix, every topic
        elif "*" in item:
            raise ConfigError(f"{where}: '*' may only end a topic pattern, as in 'orders.*'")
        else:
            exact.add(item)
    if not exact and not prefixes:
        raise ConfigError(f"{where}: no topics after the last ':'; write '*' for every topic")
    return frozenset(exact), tuple(prefixes)
