"""An async client of Confluent's Schema Registry API.

It speaks the REST API that Confluent Schema Registry, Apicurio Registry (under
``/apis/ccompat/v7``), Karapace and Redpanda serve: register a schema under a subject, look one
up by id, by subject and version, or by its text, read a subject's latest version, and test a
schema's compatibility.

Theory of operation
    Registry calls are rare: a serializer makes one or two per subject, the first time it is
    prepared, and then frames every record from what it keeps. So the client caches every
    answer that cannot change (a schema id's text, a subject's numbered version, the id a
    schema was registered or found under) and coalesces concurrent first uses: callers asking
    the same question while it is in flight wait for that one request. A caller that is
    cancelled leaves the request running for the others; an error is not cached, so the next
    call asks again. "latest" is never cached: asking for it means asking the registry.

    Each request opens its own aiohttp session, so the client belongs to no event loop: the
    same client serves a producer's loop and a thread's ``asyncio.run`` (the serializers'
    ``prepare_blocking``), and there is nothing to close. A request is retried on connection
    failures, 429 and 5xx with a doubling backoff, all within one deadline of ``timeout``
    seconds; past it, :class:`RegistryTimeoutError`.

aiohttp is the HTTP client because the project already depends on it (the ``web`` extra, for
the aiohttp integration): it is asyncio-native, takes an ``ssl.SSLContext`` and basic auth, and
bounds every phase of a request with one ``ClientTimeout``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import aiohttp

from aioaccum.errors import ConfigError
from aioaccum.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthenticationError,
    RegistryTimeoutError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRegistryError,
)

__all__ = ["RegisteredSchema", "Schema", "SchemaReference", "SchemaRegistryClient"]

_T = TypeVar("_T")

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
SCHEMA_TYPES: Final = ("AVRO", "PROTOBUF", "JSON")
_RETRY_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})
_FIRST_BACKOFF_S: Final = 0.05
_MAX_BACKOFF_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A schema this one imports: its ``name`` in the importing schema (a Protobuf file name,
    an Avro full name), and the subject and version it is registered under."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema's text with its type (``AVRO``, ``PROTOBUF`` or ``JSON``) and references."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def payload(self) -> dict[str, Any]:
        """The request body that registers or looks up this schema."""
        body: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":  # Confluent's default: left out, as its clients do
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [
                {"name": ref.name, "subject": ref.subject, "version": ref.version}
                for ref in self.references
            ]
        return body


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """A schema as registered under a subject: its global id and the subject's version."""

    schema_id: int
    subject: str
    version: int
    schema: Schema = field(compare=False)


def _schema_from(answer: Mapping[str, Any]) -> Schema:
    references = tuple(
        SchemaReference(str(ref["name"]), str(ref["subject"]), int(ref["version"]))
        for ref in answer.get("references") or ()
    )
    return Schema(str(answer["schema"]), str(answer.get("schemaType") or "AVRO"), references)


class SchemaRegistryClient:
    """A client of one schema registry (Confluent's REST API).

    Args:
        url: The registry's base URL, e.g. ``https://registry:8081`` or, for Apicurio,
            ``http://127.0.0.1:18081/apis/ccompat/v7``. Credentials in the URL
            (``https://user:secret@host``) are taken as basic auth and removed from it.
        basic_auth: ``(user, password)`` for HTTP basic auth (Confluent's
            ``basic.auth.user.info``).
        ssl_context: Verifies the registry's certificate (and may carry a client
            certificate); by default the system's CAs verify ``https`` URLs.
        timeout: Seconds one call may take in all, retries included.

    Raises:
        ConfigError: The URL is not http(s), or the timeout is not positive.
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"schema registry URL must be http:// or https://, not {url!r}")
        if not timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
        if parts.username is not None:
            if basic_auth is None:
                basic_auth = (
                    urllib.parse.unquote(parts.username),
                    urllib.parse.unquote(parts.password or ""),
                )
            netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
            parts = parts._replace(netloc=netloc)
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.timeout = timeout
        # The header itself: aiohttp's BasicAuth helper is deprecated as of aiohttp 3.14.
        self._auth = None if basic_auth is None else _basic_auth_header(*basic_auth)
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        # Answers that never change, and the requests in flight for them (see the docstring).
        self._cache: dict[tuple[Any, ...], Any] = {}
        self._inflight: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        self.requests_sent = 0  # HTTP requests made, retries included (tests and docs read it)

    def __repr__(self) -> str:
        auth = " basic-auth" if self._auth is not None else ""
        return f"<SchemaRegistryClient {self.url}{auth} cached={len(self._cache)}>"

    # --- the API

    async def register(
        self, subject: str, schema: Schema, *, normalize: bool = False
    ) -> RegisteredSchema:
        """Register ``schema`` under ``subject`` (or find it there); its id and version.

        Raises:
            IncompatibleSchemaError: The subject's compatibility rule refused it.
            InvalidSchemaError: The registry could not parse it.
            SchemaRegistryError: Any other refusal, or no answer (see the error tree).
        """
        async def fetch() -> RegisteredSchema:
            answer = await self._request(
                "POST", f"/subjects/{_quote(subject)}/versions",
                subject=subject, body=schema.payload(), query=_normalize(normalize),
            )
            # Older registries answer with the id alone; the version is then -1 (a serializer
            # needs only the id; lookup() gives both).
            version = int(answer.get("version") or -1)
            return RegisteredSchema(int(answer["id"]), subject, version, schema)

        return await self._once(("register", subject, schema, normalize), fetch)

    async def lookup(
        self, subject: str, schema: Schema, *, normalize: bool = False
    ) -> RegisteredSchema:
        """The id and version ``schema`` is registered under in ``subject``.

        Raises:
            SchemaNotFoundError: The subject does not exist or does not hold the schema.
        """
        async def fetch() -> RegisteredSchema:
            answer = await self._request(
                "POST", f"/subjects/{_quote(subject)}",
                subject=subject, body=schema.payload(), query=_normalize(normalize),
            )
            return RegisteredSchema(int(answer["id"]), subject, int(answer["version"]), schema)

        return await self._once(("lookup", subject, schema, normalize), fetch)

    async def get_schema(self, schema_id: int) -> Schema:
        """The schema with global id ``schema_id``.

        Raises:
            SchemaNotFoundError: No schema has that id.
        """
        async def fetch() -> Schema:
            return _schema_from(await self._request("GET", f"/schemas/ids/{int(schema_id)}"))

        return await self._once(("id", schema_id), fetch)

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """Version ``version`` of ``subject``.

        Raises:
            SchemaNotFoundError: No such subject or version.
        """
        return await self._once(
            ("version", subject, version), lambda: self._fetch_version(subject, str(version))
        )

    async def get_latest_version(self, subject: str) -> RegisteredSchema:
        """The newest version of ``subject``, asked of the registry on every call (concurrent
        calls share one request).

        Raises:
            SchemaNotFoundError: The subject does not exist.
        """
        return await self._once(
            ("latest", subject), lambda: self._fetch_version(subject, "latest"), keep=False
        )

    async def test_compatibility(
        self, subject: str, schema: Schema, version: int | str = "latest"
    ) -> bool:
        """Whether ``schema`` may be registered after ``version`` of ``subject`` under the
        subject's compatibility rule.

        Raises:
            SchemaNotFoundError: The subject (or the version) does not exist.
        """
        answer = await self._request(
            "POST", f"/compatibility/subjects/{_quote(subject)}/versions/{_quote(str(version))}",
            subject=subject, body=schema.payload(),
        )
        return bool(answer.get("is_compatible"))

    async def get_subjects(self) -> list[str]:
        """Every subject the registry holds."""
        return [str(name) for name in await self._request("GET", "/subjects")]

    async def set_compatibility(self, subject: str, level: str) -> str:
        """Set ``subject``'s compatibility rule (``BACKWARD``, ``FULL``, ``NONE``, ...)."""
        answer = await self._request(
            "PUT", f"/config/{_quote(subject)}", subject=subject, body={"compatibility": level}
        )
        return str(answer.get("compatibility") or answer.get("compatibilityLevel") or level)

    async def _fetch_version(self, subject: str, version: str) -> RegisteredSchema:
        answer = await self._request(
            "GET", f"/subjects/{_quote(subject)}/versions/{version}", subject=subject
        )
        return RegisteredSchema(
            int(answer["id"]), str(answer.get("subject", subject)), int(answer["version"]),
            _schema_from(answer),
        )

    # --- caching and coalescing

    async def _once(
        self, key: tuple[Any, ...], fetch: Callable[[], Awaitable[_T]], *, keep: bool = True
    ) -> _T:
        """``fetch()``'s answer for ``key``: cached, or shared with a caller already asking."""
        if key in self._cache:
            return self._cache[key]  # type: ignore[no-any-return]
        loop = asyncio.get_running_loop()
        task = self._inflight.get(key)
        if task is None or task.get_loop() is not loop:
            # A request in flight on another thread's loop cannot be awaited here: ask again.
            task = loop.create_task(self._run(key, fetch, keep))
            # Read its outcome even when every caller was cancelled, so a failure is not
            # reported as "never retrieved".
            task.add_done_callback(_consume)
            self._inflight[key] = task
        # shield: a cancelled caller must not cancel the request the others wait for.
        return await asyncio.shield(task)

    async def _run(
        self, key: tuple[Any, ...], fetch: Callable[[], Awaitable[_T]], keep: bool
    ) -> _T:
        try:
            value = await fetch()
        finally:
            if self._inflight.get(key) is asyncio.current_task():
                del self._inflight[key]
        if keep:
            self._cache[key] = value
        return value

    # --- HTTP

    async def _request(
        self,
        method: str,
        path: str,
        *,
        subject: str | None = None,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Any:
        """One call's answer (parsed JSON), retried within one deadline; typed errors."""
        what = f"{method} {path}" + (f" for subject {subject!r}" if subject is not None else "")
        deadline = time.monotonic() + self.timeout
        backoff = _FIRST_BACKOFF_S
        while True:
            try:
                async with asyncio.timeout_at(
                    asyncio.get_running_loop().time() + max(deadline - time.monotonic(), 0)
                ):
                    status, text = await self._send(method, path, body, query)
            except TimeoutError:
                raise RegistryTimeoutError(
                    f"the schema registry at {self.url} did not answer {what} within "
                    f"{self.timeout:g}s",
                    subject=subject,
                    registry_message="timed out",
                ) from None
            except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
                # A certificate that does not verify, or a server that does not speak TLS:
                # asking again cannot help (Kafka's side calls this an AuthenticationError).
                raise RegistryAuthenticationError(
                    f"the TLS handshake with the schema registry at {self.url} failed for "
                    f"{what}: {exc}",
                    subject=subject, registry_message=str(exc),
                ) from exc
            except (aiohttp.ClientError, OSError) as exc:
                status, text = None, f"{type(exc).__name__}: {exc}"
            if status is not None and status < 300:
                try:
                    return json.loads(text) if text else {}
                except ValueError:
                    raise SchemaRegistryError(
                        f"the schema registry at {self.url} answered {what} with {status} and "
                        f"a body that is not JSON: {text[:200]!r}",
                        subject=subject, status=status, registry_message=text[:200],
                    ) from None
            if status is not None and status not in _RETRY_STATUSES:
                raise self._error(status, text, what, subject)
            if time.monotonic() + backoff > deadline:
                if status is None:
                    raise RegistryUnavailableError(
                        f"the schema registry at {self.url} could not be reached for {what} "
                        f"within {self.timeout:g}s: {text}",
                        subject=subject, registry_message=text,
                    )
                raise self._error(status, text, what, subject)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    async def _send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        query: Mapping[str, str] | None,
    ) -> tuple[int, str]:
        self.requests_sent += 1
        headers = {"Accept": CONTENT_TYPE}
        if self._auth is not None:
            headers["Authorization"] = self._auth
        data = None
        if body is not None:
            headers["Content-Type"] = CONTENT_TYPE
            data = json.dumps(body).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.url + path, params=query, data=data, headers=headers, ssl=self._ssl
            ) as response,
        ):
            return response.status, await response.text()

    def _error(self, status: int, text: str, what: str, subject: str | None) -> SchemaRegistryError:
        error_code: int | None = None
        message = text.strip()[:500]
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            raw_code = answer.get("error_code")
            error_code = raw_code if isinstance(raw_code, int) else None
            message = str(answer.get("message", message))
        if status in (401, 403):
            kind: type[SchemaRegistryError] = RegistryAuthenticationError
        elif status == 404:
            kind = SchemaNotFoundError
        elif status == 409:
            kind = IncompatibleSchemaError
        elif status == 422:
            kind = InvalidSchemaError
        elif status >= 500 or status in _RETRY_STATUSES:
            kind = RegistryUnavailableError
        else:
            kind = SchemaRegistryError
        code = f"error {error_code}: " if error_code is not None else ""
        return kind(
            f"the schema registry at {self.url} answered {what} with {status} ({code}{message})",
            subject=subject, status=status, error_code=error_code, registry_message=message,
        )


def _basic_auth_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _normalize(normalize: bool) -> dict[str, str] | None:
    return {"normalize": "true"} if normalize else None
