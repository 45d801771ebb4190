"""The gateway's settings: one row per setting, from which the command line, the ``--config``
file and the help text are all derived.

Precedence: the defaults, then ``--config FILE`` (a Java ``.properties`` file, the same format
as ``--producer.config``), then the command-line flags. The producer's own settings come
apart, as in Kafka's tools: ``--producer.config FILE``, then ``--producer-props KEY=VALUE``,
then ``--bootstrap-server``.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from aioaccum.cli import producer_properties, read_properties_file
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.errors import ConfigError

__all__ = ["HELP_EPILOG", "SETTINGS", "ServeSettings", "add_arguments"]

DEFAULT_PORT = 8082  # REST Proxy's

HELP_EPILOG = """\
--config FILE holds the server's settings by the keys in brackets above, e.g.
    listen=0.0.0.0:8082
    workers=4
    tls.cert=/etc/aioaccum/cert.pem
    tls.key=/etc/aioaccum/key.pem
    auth.file=/etc/aioaccum/credentials

--auth-file FILE has one credential per line, NAME:SECRET:TOPICS, e.g.
    web-front:long-random-secret:clicks,pageviews
    etl:sha256:<hex SHA-256 of the secret>:orders.*
    admin:another-secret:*
TOPICS lists topic names, prefix* patterns, or * for all. Callers authenticate with HTTP
basic auth (NAME and SECRET) or an API key (X-API-Key: SECRET, or Authorization: Bearer
SECRET). With an auth file, every request but /healthz and /readyz must authenticate (401),
and may write only its topics (403).
"""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its field, its key in ``--config``, its flag, how to read it, its default."""

    name: str
    key: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    metavar: str = "N"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
    return text


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"{value} is not a positive number")
    return value


def _between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"{value} is not between {low} and {high}")
        return value

    return parse


def _path(text: str) -> str:
    if not os.path.isfile(text):
        raise ValueError(f"{text!r} is not a readable file")
    return text


def _bool(text: str) -> bool:
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.strip().lower() not in words:
        raise ValueError(f"{text!r} is not true or false")
    return words[text.strip().lower()]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen", "listen", _address, f"127.0.0.1:{DEFAULT_PORT}",
        "address to serve on; only loopback unless told otherwise", "HOST:PORT",
    ),
    Setting(
        "workers", "workers", _positive, 1,
        "worker processes sharing the listening socket, each with its own producer",
    ),
    Setting("tls_cert", "tls.cert", _path, None, "PEM certificate chain: serve HTTPS", "FILE"),
    Setting("tls_key", "tls.key", _path, None, "PEM private key of --tls-cert", "FILE"),
    Setting(
        "auth_file", "auth.file", _path, None,
        "credentials and the topics each may write (format below); with it, "
        "every request but /healthz and /readyz must authenticate",
        "FILE",
    ),
    Setting(
        "buffer_wait_ms", "buffer.wait.ms", _positive, 200,
        "how long a record may wait for producer buffer memory before the answer is 429",
    ),
    Setting(
        "max_body_bytes", "max.body.bytes", _positive, 8 * 1024 * 1024,
        "largest v2 request body, and largest single record object of a v3 stream (413)",
    ),
    Setting(
        "body_budget_bytes", "body.budget.bytes", _positive, 64 * 1024 * 1024,
        "request bytes all requests together may hold before they reach the producer (429)",
    ),
    Setting(
        "read_timeout_ms", "read.timeout.ms", _positive, 30_000,
        "longest wait for more of a request body, or for the next record of a v3 stream",
    ),
    Setting(
        "write_timeout_ms", "write.timeout.ms", _positive, 30_000,
        "longest wait for a client to take (part of) an answer; then the connection is closed",
    ),
    Setting(
        "max_records_per_request", "max.records.per.request", _positive, 10_000,
        "most records in one v2 request (413 above it)",
    ),
    Setting(
        "stream_max_duration_ms", "stream.max.duration.ms", _positive, 600_000,
        "longest a v3 stream is read; then it answers what it read and ends",
    ),
    Setting(
        "max_connections", "max.connections", _positive, 1000,
        "connections and requests served at once per worker; more are answered 503",
    ),
    Setting(
        "shutdown_grace_ms", "shutdown.grace.ms", _positive, 10_000,
        "after SIGTERM, how long requests in flight may wait for acknowledgements before "
        "their unacknowledged records are answered 503",
    ),
    Setting(
        "close_timeout_ms", "close.timeout.ms", _positive, 15_000,
        "after the last request, how long the producer may take to flush and close",
    ),
    Setting(
        "readiness_timeout_ms", "readiness.timeout.ms", _positive, 2_000,
        "how long /readyz waits for a broker to answer",
    ),
    Setting("access_log", "access.log", _bool, False, "log one line per request", "BOOL"),
)

# --- The connection's own deadlines and the bounds of a request's head, enforced in front of
# the application (serve/_connections.py): a client that holds a connection without completing
# a request loses it, and no head is buffered beyond its bound.
CONNECTION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "header_timeout_ms", "header.timeout.ms", _between(100, 120_000), 10_000,
        "longest a connection may take for its TLS handshake, and then for a request's line "
        "and headers, in total (from the connection's start, or a request's first byte); "
        "then it is closed (408 when the request had begun)",
    ),
    Setting(
        "idle_timeout_ms", "idle.timeout.ms", _between(100, 3_600_000), 30_000,
        "longest a kept-alive connection may stay idle between requests",
    ),
    Setting(
        "max_request_line_bytes", "max.request.line.bytes", _between(256, 1024 * 1024), 8192,
        "longest request target (the path and query); 414 above it",
    ),
    Setting(
        "max_header_bytes", "max.header.bytes", _between(256, 1024 * 1024), 8192,
        "largest single header, name and value; 431 above it",
    ),
    Setting(
        "max_headers", "max.headers", _between(8, 10_000), 100,
        "most headers in one request; 431 above it",
    ),
    Setting(
        "max_head_bytes", "max.head.bytes", _between(1024, 16 * 1024 * 1024), 64 * 1024,
        "largest request head (request line and every header); 431 above it, and no more "
        "of it is held",
    ),
)

SETTINGS = SETTINGS + CONNECTION_SETTINGS

_BY_KEY = {row.key: row for row in SETTINGS}


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Everything one ``aioaccum serve`` needs; plain values, so it can go to worker processes.

    Attributes:
        producer_properties: The producer's settings as Java properties (strings), from
            which each worker builds its own producer.
    """

    # Never printed: it may hold sasl.jaas.config or ssl passwords.
    producer_properties: Mapping[str, str] = field(repr=False)
    # Defaults live in SETTINGS; create() fills them in.
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
    # CONNECTION_SETTINGS
    header_timeout_ms: int
    idle_timeout_ms: int
    max_request_line_bytes: int
    max_header_bytes: int
    max_headers: int
    max_head_bytes: int
    producer_config: ProducerConfig = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
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
            ConfigError: A name is not a setting, or the producer's properties are invalid.
        """
        unknown = set(settings) - {row.name for row in SETTINGS}
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {sorted(unknown)}; settings: "
                f"{', '.join(row.name for row in SETTINGS)}"
            )
        values = {row.name: row.default for row in SETTINGS}
        values.update(settings)
        return cls(producer_properties=dict(producer_properties), **values)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> ServeSettings:
        """The settings of ``aioaccum serve``: defaults, then ``--config``, then the flags.

        Raises:
            ConfigError: A file cannot be read, a key is unknown, or a value is invalid; the
                message names where the value came from.
        """
        values: dict[str, Any] = {}
        if args.config is not None:
            for key, text in read_properties_file(args.config, "--config").items():
                row = _BY_KEY.get(key)
                if row is None:
                    near = difflib.get_close_matches(key, _BY_KEY, n=1)
                    hint = f"; did you mean {near[0]!r}?" if near else ""
                    raise ConfigError(
                        f"--config {args.config}: unknown setting {key!r}{hint} (settings: "
                        f"{', '.join(sorted(_BY_KEY))}; producer settings go in "
                        "--producer.config)"
                    )
                values[row.name] = _read(row, text, f"--config {args.config}: {key}")
        for row in SETTINGS:
            given = getattr(args, row.name)
            if given is not None:
                values[row.name] = _read(row, str(given), row.flag)
        props = producer_properties(
            args.producer_config, args.producer_props or [], args.bootstrap_server
        )
        return cls.create(props, **values)


def _read(row: Setting, text: str, where: str) -> Any:
    try:
        return row.parse(text.strip())
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's options."""
    parser.add_argument(
        "--bootstrap-server", metavar="HOST:PORT[,...]",
        help="the Kafka cluster (overrides bootstrap.servers of --producer.config)",
    )
    parser.add_argument(
        "--producer.config", dest="producer_config", metavar="FILE",
        help="a Java .properties file of producer settings (name=value lines); put "
        "credentials such as sasl.jaas.config here, not on the command line",
    )
    parser.add_argument(
        "--producer-props", nargs="*", metavar="KEY=VALUE",
        help="producer settings, Java (linger.ms) or Python (linger_ms) names; these override "
        "--producer.config",
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help="a .properties file of the server's own settings, by the keys in brackets below "
        "(e.g. 'workers=4'); flags override it",
    )
    for row in SETTINGS:
        default = "" if row.default is None else f"; default {row.default}"
        parser.add_argument(
            row.flag, metavar=row.metavar, default=None,
            help=f"{row.doc} [{row.key}{default}]",
        )
