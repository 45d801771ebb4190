"""The HTTP service's settings (``aioaccum serve``): rows of the same kind as the producer's.

Each row gives a setting's Python name (the field of :class:`ServeSettings`, and the flag with
dashes: ``--max-body-bytes``), its key in the ``--config`` file (``max.body.bytes``), its kind,
default and doc; the checks, the flags and their help, and the suggestions for misspelt keys
are derived from them.

Precedence: the defaults, then ``--config FILE`` (a Java ``.properties`` file, read by the same
reader as ``--producer.config``), then the command-line flags. The producer's own settings come
apart, as in Kafka's tools: ``--producer.config FILE``, then ``--producer-props KEY=VALUE``,
then ``--bootstrap-server``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from aioaccum.config.kinds import Address, Bool, Choice, File, Int, Str
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.config.properties import producer_properties, read_properties_file, read_values
from aioaccum.config.settings import PRODUCER
from aioaccum.config.table import Setting, Table
from aioaccum.errors import ConfigError

__all__ = ["DEFAULT_PORT", "SERVE", "SETTINGS", "ServeSettings"]

DEFAULT_PORT = 8082  # REST Proxy's

_POSITIVE = Int(1)
_FILE = File()


class _Url(Str):
    metavar = "URL"

    def check(self, value: object, label: str) -> object:
        checked = super().check(value, label)
        if isinstance(checked, str) and not checked.startswith(("http://", "https://")):
            raise ConfigError(f"{label} must be an http:// or https:// URL")
        return checked


_URL = _Url(optional=True)

SETTINGS: tuple[Setting, ...] = (
    Setting("listen", "listen", Address(f"127.0.0.1:{DEFAULT_PORT}"), f"127.0.0.1:{DEFAULT_PORT}",
            "address to serve on; only loopback unless told otherwise"),
    Setting("workers", "workers", _POSITIVE, 1,
            "worker processes sharing the listening socket, each with its own producer"),
    Setting("tls_cert", "tls.cert", _FILE, None, "PEM certificate chain: serve HTTPS"),
    Setting("tls_key", "tls.key", _FILE, None, "PEM private key of --tls-cert"),
    Setting("auth_file", "auth.file", _FILE, None,
            "credentials and the topics each may write (format below); with it, every request "
            "but /healthz and /readyz must authenticate"),
    Setting("buffer_wait_ms", "buffer.wait.ms", _POSITIVE, 200,
            "how long a record may wait for producer buffer memory before the answer is 429"),
    Setting("max_body_bytes", "max.body.bytes", _POSITIVE, 8 * 1024 * 1024,
            "largest v2 request body, and largest single record object of a v3 stream (413)"),
    Setting("body_budget_bytes", "body.budget.bytes", _POSITIVE, 64 * 1024 * 1024,
            "request bytes all requests together may hold before they reach the producer "
            "(429 beyond); at least max.body.bytes"),
    Setting("read_timeout_ms", "read.timeout.ms", _POSITIVE, 30_000,
            "longest wait for more of a request body, or for the next record of a v3 stream "
            "(408)"),
    Setting("write_timeout_ms", "write.timeout.ms", _POSITIVE, 30_000,
            "longest wait for a client to take (part of) an answer, or for a closing connection "
            "to finish; then the connection is aborted, its queued answer dropped"),
    Setting("max_records_per_request", "max.records.per.request", _POSITIVE, 10_000,
            "most records in one v2 request (413 above it)"),
    Setting("stream_max_duration_ms", "stream.max.duration.ms", _POSITIVE, 600_000,
            "longest a v3 stream is read; then it answers what it read, adds one 408, and "
            "ends"),
    Setting("max_connections", "max.connections", _POSITIVE, 1000,
            "connections and requests served at once per worker; more are answered 503"),
    Setting("shutdown_grace_ms", "shutdown.grace.ms", _POSITIVE, 10_000,
            "after SIGTERM, how long requests in flight may wait for acknowledgements before "
            "their unacknowledged records are answered 503"),
    Setting("close_timeout_ms", "close.timeout.ms", _POSITIVE, 15_000,
            "after the last request, how long the producer may take to flush and close"),
    Setting("readiness_timeout_ms", "readiness.timeout.ms", _POSITIVE, 2_000,
            "how long /readyz waits for a broker to answer"),
    Setting("access_log", "access.log", Bool(), False, "log one line per request"),
    # The connection's own deadlines and the bounds of a request's head, enforced in front of
    # the application (serve/_connections.py): a client that holds a connection without
    # completing a request loses it, and no head is buffered beyond its bound.
    Setting("header_timeout_ms", "header.timeout.ms", Int(100, 120_000), 10_000,
            "longest a connection may take for its TLS handshake, and then for a request's line "
            "and headers, in total (from the connection's start, or a request's first byte); "
            "then it is closed (408 when the request had begun)"),
    Setting("idle_timeout_ms", "idle.timeout.ms", Int(100, 3_600_000), 30_000,
            "longest a kept-alive connection may stay idle between requests"),
    Setting("max_request_line_bytes", "max.request.line.bytes", Int(256, 1024 * 1024), 8192,
            "longest request target (the path and query); 414 above it"),
    Setting("max_header_bytes", "max.header.bytes", Int(256, 1024 * 1024), 8192,
            "largest single header, name and value; 431 above it"),
    Setting("max_headers", "max.headers", Int(8, 10_000), 100,
            "most headers in one request; 431 above it"),
    Setting("max_head_bytes", "max.head.bytes", Int(1024, 16 * 1024 * 1024), 64 * 1024,
            "largest request head (request line and every header); 431 above it, and no more "
            "of it is held"),
    # The schema registry behind the Avro, Protobuf and JSON Schema formats (serve/_schemas.py):
    # REST Proxy's own keys, so that its config file's lines carry over.
    Setting("schema_registry_url", "schema.registry.url", _URL, None,
            "Confluent-compatible schema registry (e.g. http://registry:8081): enables the Avro, "
            "Protobuf and JSON Schema formats, which are 415 (v2) and 422 (v3) without it"),
    Setting("schema_registry_basic_auth_credentials_source",
            "schema.registry.basic.auth.credentials.source",
            Choice(("USER_INFO", "URL"), upper=True, optional=True), None,
            "where the registry's basic-auth credentials come from: USER_INFO (the next "
            "setting) or URL (user:password@ in schema.registry.url)"),
    Setting("schema_registry_basic_auth_user_info", "schema.registry.basic.auth.user.info",
            Str(optional=True), None,
            "USER:PASSWORD for the registry's basic auth; put it in --config, not on the "
            "command line", secret=True),
    Setting("schema_registry_timeout_ms", "schema.registry.timeout.ms", Int(100, 600_000),
            5_000,
            "longest one registry question may take, retries included; then the request is "
            "answered 503"),
)  # fmt: skip  (a table: one row per setting)

SERVE = Table(SETTINGS)
"""The service's table: lookups, name checks and suggestions derived from :data:`SETTINGS`."""


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Everything one ``aioaccum serve`` needs; plain values, so it can go to worker processes.

    Build it with :meth:`create` (Python values) or :meth:`from_arguments` (the command line),
    which check each value by its row in :data:`SETTINGS`.

    Attributes:
        producer_properties: The producer's settings as Java properties (strings), from
            which each worker builds its own producer.
    """

    # Never printed: it may hold sasl.jaas.config or ssl passwords.
    producer_properties: Mapping[str, str] = field(repr=False)
    # Typed here for mypy and readers only: defaults and checks come from SETTINGS, and the
    # import fails if the two disagree.
    listen: str
    workers: int
    tls_cert: str | None
    tls_key: str | None
    auth_file: str | None
    buffer_wait_ms: int
    max_body_bytes: int
    body_budget_bytes: int
    read_timeout_ms: int
    write_timeout_ms: int
    max_records_per_request: int
    stream_max_duration_ms: int
    max_connections: int
    shutdown_grace_ms: int
    close_timeout_ms: int
    readiness_timeout_ms: int
    access_log: bool
    header_timeout_ms: int
    idle_timeout_ms: int
    max_request_line_bytes: int
    max_header_bytes: int
    max_headers: int
    max_head_bytes: int
    schema_registry_url: str | None = field(repr=False)  # may hold user:password@
    schema_registry_basic_auth_credentials_source: str | None
    schema_registry_basic_auth_user_info: str | None = field(repr=False)
    schema_registry_timeout_ms: int
    producer_config: ProducerConfig = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The rules between settings, after each value passed its own row's check.
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("give both tls.cert and tls.key (PEM files) to serve HTTPS")
        props = self.producer_properties
        if "bootstrap.servers" not in props and "bootstrap_servers" not in props:
            raise ConfigError(
                "no Kafka cluster to produce to: give --bootstrap-server HOST:PORT, or "
                "bootstrap.servers in --producer.config"
            )
        if self.body_budget_bytes < self.max_body_bytes:
            # A body the budget can never hold would be refused 429, "retry", for ever.
            raise ConfigError(
                f"body.budget.bytes={self.body_budget_bytes} is less than max.body.bytes="
                f"{self.max_body_bytes}: raise the budget or lower the largest body"
            )
        source = self.schema_registry_basic_auth_credentials_source
        if source == "USER_INFO" and self.schema_registry_basic_auth_user_info is None:
            raise ConfigError(
                "schema.registry.basic.auth.credentials.source=USER_INFO needs "
                "schema.registry.basic.auth.user.info=USER:PASSWORD"
            )
        if self.schema_registry_basic_auth_user_info is not None and (
            ":" not in self.schema_registry_basic_auth_user_info
        ):
            raise ConfigError("schema.registry.basic.auth.user.info must be USER:PASSWORD")
        object.__setattr__(self, "producer_config", ProducerConfig.from_properties(props))

    def __getstate__(self) -> dict[str, Any]:
        # The built config may hold an SSL context, which cannot cross to a worker process;
        # each worker builds it again from the properties.
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @classmethod
    def create(cls, producer_properties: Mapping[str, str], **settings: Any) -> ServeSettings:
        """Settings from Python values: the defaults of :data:`SETTINGS` with ``settings`` set.

        Raises:
            ConfigError: A name is not a setting (the message suggests the closest one), a
                value is invalid, or the producer's properties are.
        """
        for name in settings:
            SERVE.check_name(name)
        return cls._checked(producer_properties, settings, {})

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> ServeSettings:
        """The settings of ``aioaccum serve``: defaults, then ``--config``, then the flags.

        Raises:
            ConfigError: A file cannot be read, a key is unknown, or a value is invalid; the
                message names where the value came from.
        """
        values: dict[str, Any] = {}
        labels: dict[str, str] = {}
        if args.config is not None:
            where = f"--config {args.config}"
            given = read_properties_file(args.config, "--config")
            for key in given:
                if SERVE.name_of(key) is None and PRODUCER.name_of(key) is not None:
                    raise ConfigError(
                        f"{where}: {key!r} is a producer setting; put it in --producer.config"
                    )
            values, labels = read_values(SERVE, given, where)
        for row in SERVE.rows:
            flag = getattr(args, row.name)
            if flag is not None:
                values[row.name] = SERVE.parse(row.name, str(flag).strip(), row.flag)
                labels[row.name] = row.flag
        props = producer_properties(
            args.producer_config, args.producer_props or [], args.bootstrap_server
        )
        return cls._checked(props, values, labels)

    @classmethod
    def _checked(
        cls,
        producer_properties: Mapping[str, str],
        values: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> ServeSettings:
        checked: dict[str, Any] = SERVE.check(values, labels)
        return cls(producer_properties=dict(producer_properties), **checked)


def _check_fields() -> None:
    declared = [(f.name, f.type) for f in fields(ServeSettings) if f.name in SERVE.by_name]
    expected = [(row.name, row.kind.annotation) for row in SETTINGS]
    if declared != expected:
        raise TypeError(f"ServeSettings' fields and SETTINGS disagree: {declared} != {expected}")


_check_fields()
