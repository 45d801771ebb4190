"""Producer settings: Pythonic names, the Java client's defaults, and loud validation.

:class:`ProducerConfig` holds every setting the producer reads. Names are the Java client's with
dots turned into underscores (``linger.ms`` → ``linger_ms``) and defaults are Kafka 4.x's, so a
tuned Java producer carries over as it is: :meth:`ProducerConfig.from_properties` takes the dotted
names and the string values of a ``.properties`` file.

Each setting is written once, as a row of :data:`SETTINGS` in :mod:`aioaccum.config.settings`
(Kafka's ``ConfigDef.define``): its names, type, default, limits and doc. The dataclass
defaults, the parsing of property strings, the checks, the name tables, the suggestions for
misspelt names and ``docs/configuration.md`` (``scripts/gen_config_docs.py``) all come from
those rows.

Two settings behave as in Java when they are left at their default: ``enable_idempotence`` is
quietly turned off when ``acks`` is not ``all`` or ``retries`` is 0, and ``delivery_timeout_ms``
is raised to ``linger_ms + request_timeout_ms`` when that sum is larger. Set explicitly, the same
conflicts are errors.

Custom partitioners are plain callables (:data:`Partitioner`)::

    def partitioner(topic: str, key: bytes | None, value: bytes | None,
                    all_partitions: Sequence[int], available_partitions: Sequence[int]) -> int

It returns one of ``all_partitions``; ``key``/``value`` are the serialized bytes.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging
import re
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from aioaccum._core.codecs import CompressionType, ensure_codec_available
from aioaccum._core.partitioner import Partitioner
from aioaccum.config.settings import (
    FIELDS,
    INT_MAX,
    JAVA_TO_PYTHON,
    LEVEL_PROPERTIES,
    LEVELS,
    MAX_IN_FLIGHT_FOR_IDEMPOTENCE,
    PYTHON_TO_JAVA,
    ROWS,
    SASL_MECHANISMS,
    SETTINGS,
    NoJavaName,
    Setting,
)
from aioaccum.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from aioaccum._core.interceptor_api import ProducerInterceptor
    from aioaccum.oauth import TokenProvider

__all__ = [
    "JAVA_TO_PYTHON",
    "PYTHON_TO_JAVA",
    "SETTINGS",
    "NoJavaName",
    "Partitioner",
    "ProducerConfig",
    "Serializer",
    "Setting",
]

log = logging.getLogger(__name__)

Serializer: TypeAlias = Callable[[Any], bytes | None]
"""Turns a key or value into bytes; returning ``None`` sends a null key or value."""


# --- the dataclass


class _Default:
    """A default value, as opposed to the same value chosen by the user."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


# Stands for "the row's default" in ProducerConfig's body, where mypy needs a default to see.
_ROW_DEFAULT: Any = object()
_C = TypeVar("_C", bound=type)


def _defaults_from_rows(cls: _C) -> _C:
    """Puts each row's default in ``cls`` (wrapped: Java resolves some conflicts differently
    for defaults), after checking that ``cls`` declares the rows' fields, types and order."""
    annotations = cls.__annotations__.items()
    declared = [(n, t) for n, t in annotations if cls.__dict__.get(n) is _ROW_DEFAULT]
    expected = [(row.name, row.kind.annotation) for row in SETTINGS]
    if declared != expected:
        diff = set(declared) ^ set(expected)
        raise TypeError(f"{cls.__name__}'s fields and SETTINGS disagree: {sorted(diff)}")
    for row in SETTINGS:
        setattr(cls, row.name, _Default(row.default))
    return cls


@dataclass(frozen=True, repr=False)
@_defaults_from_rows
class ProducerConfig:
    """Every setting of the producer, validated, with Kafka 4.x defaults.

    Build one with keyword arguments (``ProducerConfig(linger_ms=10)``), :meth:`from_kwargs`
    (the same, with a suggestion for misspelt names) or :meth:`from_properties` (Java's dotted
    names and string values). Invalid settings raise :class:`~aioaccum.errors.ConfigError`.
    """

    # Typed here for mypy and readers only: defaults, checks and docs come from SETTINGS, and
    # the import fails if the two disagree.
    bootstrap_servers: str | Sequence[str] = _ROW_DEFAULT
    client_id: str = _ROW_DEFAULT
    acks: int = _ROW_DEFAULT
    enable_idempotence: bool = _ROW_DEFAULT
    transactional_id: str | None = _ROW_DEFAULT
    transaction_timeout_ms: int = _ROW_DEFAULT
    retries: int = _ROW_DEFAULT
    batch_size: int = _ROW_DEFAULT
    linger_ms: int = _ROW_DEFAULT
    buffer_memory: int = _ROW_DEFAULT
    max_block_ms: int = _ROW_DEFAULT
    max_request_size: int = _ROW_DEFAULT
    compression_type: str = _ROW_DEFAULT
    compression_level: int | None = _ROW_DEFAULT
    retry_backoff_ms: int = _ROW_DEFAULT
    retry_backoff_max_ms: int = _ROW_DEFAULT
    request_timeout_ms: int = _ROW_DEFAULT
    delivery_timeout_ms: int = _ROW_DEFAULT
    max_in_flight_requests_per_connection: int = _ROW_DEFAULT
    metadata_max_age_ms: int = _ROW_DEFAULT
    metadata_max_idle_ms: int = _ROW_DEFAULT
    connections_max_idle_ms: int = _ROW_DEFAULT
    metrics_sample_window_ms: int = _ROW_DEFAULT
    metrics_num_samples: int = _ROW_DEFAULT
    metrics_enabled: bool = _ROW_DEFAULT
    send_buffer_bytes: int | None = _ROW_DEFAULT
    receive_buffer_bytes: int | None = _ROW_DEFAULT
    partitioner: Partitioner | None = _ROW_DEFAULT
    partitioner_ignore_keys: bool = _ROW_DEFAULT
    partitioner_adaptive_partitioning_enable: bool = _ROW_DEFAULT
    partitioner_availability_timeout_ms: int = _ROW_DEFAULT
    key_serializer: Serializer | None = _ROW_DEFAULT
    value_serializer: Serializer | None = _ROW_DEFAULT
    interceptors: Sequence[ProducerInterceptor] = _ROW_DEFAULT
    tracing: bool = _ROW_DEFAULT
    tracer_provider: TracerProvider | None = _ROW_DEFAULT
    trace_context_headers: bool = _ROW_DEFAULT
    otel_metrics: bool = _ROW_DEFAULT
    meter_provider: MeterProvider | None = _ROW_DEFAULT
    security_protocol: str = _ROW_DEFAULT
    ssl_context: ssl.SSLContext | None = _ROW_DEFAULT
    sasl_mechanism: str | None = _ROW_DEFAULT
    sasl_plain_username: str | None = _ROW_DEFAULT
    sasl_plain_password: str | None = _ROW_DEFAULT
    sasl_oauth_token_provider: TokenProvider | None = _ROW_DEFAULT
    _explicit: frozenset[str] = field(
        default=frozenset(), init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        self._resolve({})

    def _resolve(self, labels: Mapping[str, str]) -> None:
        """Validates and normalises the fields in place; ``labels`` maps a field to the name
        the user wrote for it, which the messages use."""
        values: dict[str, Any] = {}
        explicit: set[str] = set()
        for row in SETTINGS:
            value = getattr(self, row.name)
            if isinstance(value, _Default):
                value = value.value
            else:
                explicit.add(row.name)
            values[row.name] = row.kind.check(value, labels.get(row.name, row.name))
        _Rules(labels).apply(values, explicit)
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_explicit", frozenset(explicit))

    @classmethod
    def from_arguments(
        cls,
        config: ProducerConfig | None,
        bootstrap_servers: str | Sequence[str] | None,
        settings: dict[str, Any],
    ) -> ProducerConfig:
        """What a producer's constructor was given: a ready ``config``, or keyword settings
        (``bootstrap_servers`` among them), never both.

        Raises:
            ConfigError: Both were given, or a setting is unknown or invalid.
        """
        if config is None:
            if bootstrap_servers is not None:
                settings = {**settings, "bootstrap_servers": bootstrap_servers}
            return cls.from_kwargs(**settings)
        if settings or bootstrap_servers is not None:
            raise ConfigError("pass either config= or keyword settings, not both")
        return config

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ProducerConfig:
        """Build a config from Pythonic keyword arguments.

        Raises:
            ConfigError: A name is unknown (the message suggests the closest valid one) or
                deliberately unsupported, or a value is invalid.
        """
        for name in kwargs:
            _check_name(name)
        return cls(**kwargs)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ProducerConfig:
        """Build a config from Java producer properties, e.g. ``{"linger.ms": "10"}``.

        Values may be strings as read from a ``.properties`` file (``"true"``, ``"65536"``) or
        Python values, and the Pythonic names are accepted too. ``sasl.jaas.config`` with
        Kafka's ``PlainLoginModule`` or ``ScramLoginModule`` sets the user name and password;
        ``compression.<codec>.level`` sets ``compression_level`` when ``<codec>`` is the chosen
        ``compression.type``. ``ssl.truststore.location`` (a PEM file; ``ssl.truststore.type``
        must be ``PEM`` if given) or ``ssl.truststore.certificates`` and
        ``ssl.endpoint.identification.algorithm`` (``""`` turns host name checks off) build
        ``ssl_context``.

        Raises:
            ConfigError: A name is unknown or unsupported, or a value is invalid; the message
                names the setting as written in ``properties``.
        """
        kwargs, labels = _convert_properties(properties)
        # Not through __init__, which has no room for the labels the messages need.
        config = cls.__new__(cls)
        for row in SETTINGS:
            object.__setattr__(config, row.name, kwargs.get(row.name, _Default(row.default)))
        config._resolve(labels)
        return config

    def replace(self, **changes: Any) -> ProducerConfig:
        """A copy with ``changes`` applied and validated.

        Unlike :func:`dataclasses.replace`, settings never chosen stay defaulted, so
        ``cfg.replace(acks=1)`` quietly turns the default idempotence off, as a fresh config
        would, instead of failing.

        Raises:
            ConfigError: As :meth:`from_kwargs`.
        """
        for name in changes:
            _check_name(name)
        kwargs = {name: getattr(self, name) for name in self._explicit}
        kwargs.update(changes)
        return type(self)(**kwargs)

    @staticmethod
    def java_name(name: str) -> str:
        """The Java client's property for a field: ``java_name("linger_ms") == "linger.ms"``.

        Raises:
            ConfigError: ``name`` is not a field, or has no single Java property.
        """
        _check_name(name)
        java = ROWS[name].java
        if isinstance(java, NoJavaName):
            raise ConfigError(f"{name} has no single Java property: {java.why}")
        return java

    @property
    def explicit_settings(self) -> frozenset[str]:
        """The fields the user set, as opposed to those left at their defaults."""
        return self._explicit

    def __repr__(self) -> str:
        # Only what differs from the defaults, so the interesting part stays readable.
        shown = []
        for row in SETTINGS:
            value = getattr(self, row.name)
            if row.secret:
                if value is not None:
                    shown.append(f"{row.name}='***'")
            elif value != _DEFAULTS[row.name]:
                shown.append(f"{row.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


if ProducerConfig.__doc__ is not None:  # None under python -OO
    ProducerConfig.__doc__ += "\n    Attributes:\n" + "".join(
        f"        {row.name}: {row.doc}.\n" for row in SETTINGS
    )


# --- rules between settings

# The bootstrap server sets already warned that SASL PLAIN sends the password in clear.
_PLAIN_IN_CLEAR_WARNED: set[frozenset[str]] = set()
_PLAIN_IN_CLEAR_LOCK = threading.Lock()  # producers are also configured on worker threads


class _Rules:
    """Checks that span settings, after each value passed its own row's check."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = labels

    def name(self, field_name: str) -> str:
        return self._labels.get(field_name, field_name)

    def apply(self, v: dict[str, Any], explicit: set[str]) -> None:
        self.compression_level(v["compression_type"], v["compression_level"])
        # Here, not when the first batch is drained: a missing codec library must stop the
        # producer from being made, not fail records (and the sender) later.
        ensure_codec_available(CompressionType.from_name(v["compression_type"]))
        self.security(v)
        self.opentelemetry(v, explicit)
        n = self.name
        if v["batch_size"] > v["buffer_memory"]:
            raise ConfigError(
                f"{n('batch_size')}={v['batch_size']} is larger than "
                f"{n('buffer_memory')}={v['buffer_memory']}, so no batch could ever be "
                f"allocated; lower batch_size or raise buffer_memory"
            )
        if v["retry_backoff_ms"] > v["retry_backoff_max_ms"]:
            v["retry_backoff_max_ms"] = v["retry_backoff_ms"]
        floor = min(v["linger_ms"] + v["request_timeout_ms"], INT_MAX)
        if v["delivery_timeout_ms"] < floor:
            if "delivery_timeout_ms" in explicit:
                raise ConfigError(
                    f"{n('delivery_timeout_ms')}={v['delivery_timeout_ms']} must be >= "
                    f"{n('linger_ms')} + {n('request_timeout_ms')} = {v['linger_ms']} + "
                    f"{v['request_timeout_ms']} = {floor}; set delivery_timeout_ms to at least "
                    f"{floor}, or lower linger_ms or request_timeout_ms"
                )
            v["delivery_timeout_ms"] = floor
        if v["transactional_id"] is not None:
            self.transactions(v)
        if v["enable_idempotence"]:
            # Java's rule: a transactional producer's idempotence must hold, so a conflicting
            # acks or retries is an error even when idempotence was left at its default.
            chosen = "enable_idempotence" in explicit or v["transactional_id"] is not None
            self.idempotence(v, chosen)

    def opentelemetry(self, v: dict[str, Any], explicit: set[str]) -> None:
        n = self.name
        for flag, provider in (("tracing", "tracer_provider"), ("otel_metrics", "meter_provider")):
            if v[provider] is None:
                continue
            if flag in explicit and not v[flag]:
                raise ConfigError(
                    f"{n(provider)} is set but {n(flag)}=False; drop one of them"
                )
            v[flag] = True
        if v["trace_context_headers"] and not v["tracing"]:
            raise ConfigError(
                f"{n('trace_context_headers')}=True puts the record's span in its headers, and "
                "needs tracing=True (or a tracer_provider)"
            )
        wanted = [flag for flag in ("tracing", "otel_metrics") if v[flag]]
        # Here, not at the first send: a missing library must stop the producer from being made.
        if wanted and not _has_opentelemetry():
            raise ConfigError(
                f"{n(wanted[0])}=True needs OpenTelemetry's API: pip install 'aioaccum[otel]'"
            )

    def transactions(self, v: dict[str, Any]) -> None:
        n = self.name
        transactional_id = v["transactional_id"]
        if not transactional_id:
            raise ConfigError(
                f"{n('transactional_id')} must be a non-empty string, got ''; leave it None "
                "for a producer without transactions"
            )
        if not v["enable_idempotence"]:
            raise ConfigError(
                f"{n('transactional_id')}={transactional_id!r} requires "
                f"{n('enable_idempotence')}=True (transactions are built on it); remove "
                "enable_idempotence=False"
            )

    def compression_level(self, codec: str, level: int | None) -> None:
        if level is None:
            return
        if codec not in LEVELS:
            raise ConfigError(
                f"{self.name('compression_level')}={level} has no effect with "
                f"compression_type={codec!r}; remove it, or use gzip, lz4 or zstd"
            )
        lo, hi, default = LEVELS[codec]
        if not (lo <= level <= hi or level == default):
            raise ConfigError(
                f"{self.name('compression_level')} for {codec} must be between {lo} and {hi}, "
                f"got {level}"
            )

    def security(self, v: dict[str, Any]) -> None:
        n = self.name
        protocol = v["security_protocol"]
        if v["ssl_context"] is not None and "SSL" not in protocol:
            raise ConfigError(
                f"{n('ssl_context')} is only used with security_protocol SSL or SASL_SSL, not "
                f"{protocol}; set security_protocol='SSL' or drop ssl_context"
            )
        mechanism = v["sasl_mechanism"]
        has_credentials = any(
            v[f] is not None
            for f in ("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider")
        )
        if not protocol.startswith("SASL"):
            if mechanism is not None or has_credentials:
                raise ConfigError(
                    f"SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL, but "
                    f"{n('security_protocol')} is {protocol!r}"
                )
            return
        if mechanism is None:
            raise ConfigError(
                f"security_protocol={protocol!r} needs {n('sasl_mechanism')}: one of "
                f"{', '.join(SASL_MECHANISMS)}"
            )
        if mechanism == "OAUTHBEARER":
            self.oauthbearer(v)
        elif v["sasl_oauth_token_provider"] is not None:
            raise ConfigError(
                f"{n('sasl_oauth_token_provider')} is only used with sasl_mechanism="
                f"'OAUTHBEARER', not {mechanism!r}; remove it, or set sasl_mechanism='OAUTHBEARER'"
            )
        else:
            missing = [f for f in ("sasl_plain_username", "sasl_plain_password") if v[f] is None]
            if missing:
                raise ConfigError(
                    f"sasl_mechanism={mechanism!r} needs {' and '.join(map(n, missing))}"
                )
        if protocol == "SASL_PLAINTEXT" and mechanism in ("PLAIN", "OAUTHBEARER"):
            self.plain_password_in_clear(v["bootstrap_servers"], mechanism)

    def oauthbearer(self, v: dict[str, Any]) -> None:
        n = self.name
        if v["sasl_oauth_token_provider"] is None:
            raise ConfigError(
                f"sasl_mechanism='OAUTHBEARER' needs {n('sasl_oauth_token_provider')}: an async "
                "callable returning aioaccum.oauth.OAuthToken(token, expires_at_ms) or a "
                "(token, expires_at_ms) tuple"
            )
        given = [f for f in ("sasl_plain_username", "sasl_plain_password") if v[f] is not None]
        if given:
            raise ConfigError(
                f"{' and '.join(map(n, given))} not used with sasl_mechanism='OAUTHBEARER' "
                f"(sasl_oauth_token_provider's token authenticates); remove "
                f"{'them' if len(given) > 1 else 'it'}"
            )

    def plain_password_in_clear(self, servers: tuple[str, ...], mechanism: str) -> None:
        # A warning, not an error: on a test cluster or a trusted network it is a fair choice.
        # Only PLAIN and OAUTHBEARER: SCRAM never sends the password itself. Once per
        # bootstrap, because producers are often made in a loop (one per Spark task, per
        # request).
        with _PLAIN_IN_CLEAR_LOCK:
            if frozenset(servers) in _PLAIN_IN_CLEAR_WARNED:
                return
            _PLAIN_IN_CLEAR_WARNED.add(frozenset(servers))
        n = self.name
        log.warning(
            "%s='SASL_PLAINTEXT' with %s=%r: %s crosses the network to %s unencrypted, "
            "readable by anyone on the path; set %s='SASL_SSL' to send it over TLS (logged "
            "once per bootstrap)",
            n("security_protocol"),
            n("sasl_mechanism"),
            mechanism,
            "the password" if mechanism == "PLAIN" else "the bearer token",
            ",".join(servers),
            n("security_protocol"),
        )

    def idempotence(self, v: dict[str, Any], chosen: bool) -> None:
        n = self.name
        conflicts = []
        if v["acks"] != -1:
            conflicts.append(f"{n('acks')}='all' (got {v['acks']})")
        if v["retries"] == 0:
            conflicts.append(f"{n('retries')} > 0 (got 0)")
        if conflicts and chosen:
            raise ConfigError(
                f"{n('enable_idempotence')}=True requires {' and '.join(conflicts)}; fix that, "
                f"or set enable_idempotence=False"
            )
        if conflicts:
            # Java's rule: a default that cannot hold is dropped, not an error.
            log.info("idempotence disabled: it requires %s", " and ".join(conflicts))
            v["enable_idempotence"] = False
            return
        in_flight = v["max_in_flight_requests_per_connection"]
        if in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            raise ConfigError(
                f"{n('max_in_flight_requests_per_connection')}={in_flight} is more than "
                f"{MAX_IN_FLIGHT_FOR_IDEMPOTENCE}, the most the idempotent producer keeps in "
                f"order; set it to {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} or less, or set "
                f"enable_idempotence=False"
            )


def _has_opentelemetry() -> bool:
    try:  # the API's trace and metrics modules; imports only the namespace package
        return all(
            importlib.util.find_spec(f"opentelemetry.{part}") is not None
            for part in ("trace", "metrics", "propagate")
        )
    except ModuleNotFoundError:
        return False


# --- names: unknown, misspelt, unsupported

_TWO_PHASE = (
    "KIP-939's broker-side two-phase commit is not used; aioaccum.transactions.commit_prepared "
    "commits a prepared transaction from another process"
)
_CONNECTIONS = "connection set-up is left to the connection layer and not configurable"
_UNSUPPORTED = {
    "transaction.two.phase.commit.enable": _TWO_PHASE,
    "interceptor.classes": (
        "Java class names can't be loaded; pass interceptor objects as interceptors=[...] "
        "(see aioaccum.interceptors.ProducerInterceptor)"
    ),
    "client.dns.lookup": "host names are resolved by asyncio",
    "reconnect.backoff.ms": _CONNECTIONS,
    "reconnect.backoff.max.ms": _CONNECTIONS,
    "socket.connection.setup.timeout.ms": _CONNECTIONS,
    "socket.connection.setup.timeout.max.ms": _CONNECTIONS,
    "metadata.recovery.strategy": "re-bootstrapping is not supported",
    "metadata.recovery.rebootstrap.trigger.ms": "re-bootstrapping is not supported",
    "config.providers": "Java config providers have no Python counterpart",
    "security.providers": "Java security providers have no Python counterpart",
    "enable.metrics.push": "client telemetry push is not supported",
    "api.version": "the protocol version is negotiated with the broker",
}
_UNSUPPORTED_PREFIXES = (
    (
        "ssl.",
        "of the ssl.* properties only ssl.truststore.location or ssl.truststore.certificates "
        "(type PEM) and ssl.endpoint.identification.algorithm are read; for anything else pass "
        "ssl_context=ssl.create_default_context(cafile=...) instead",
    ),
    (
        "sasl.",
        "only sasl.mechanism PLAIN/SCRAM-SHA-256/SCRAM-SHA-512, with sasl.jaas.config or "
        "sasl_plain_username/sasl_plain_password, and OAUTHBEARER, with a Python callable as "
        "sasl_oauth_token_provider, are supported",
    ),
    (
        "metric",
        "of Java's metrics settings only metrics.sample.window.ms and metrics.num.samples "
        "apply; the producer keeps its own metrics (see docs/observability.md)",
    ),
)
# Names other Python clients use for the same thing.
_ALIASES = {"max_batch_size": "batch_size"}


def _check_name(name: str, *, dotted: bool = False) -> None:
    if name in FIELDS:
        return
    if not dotted and name in JAVA_TO_PYTHON:
        raise ConfigError(
            f"unknown setting {name!r}; did you mean {JAVA_TO_PYTHON[name]!r}? "
            "(Java's dotted names go to ProducerConfig.from_properties)"
        )
    java_style = name.replace("_", ".")
    reason = _UNSUPPORTED.get(java_style)
    if reason is None:
        reason = next((why for p, why in _UNSUPPORTED_PREFIXES if java_style.startswith(p)), None)
    if reason is not None:
        raise ConfigError(f"setting {name!r} is not supported: {reason}")
    match = _close_match(name)
    if match is not None:
        raise ConfigError(f"unknown setting {name!r}; did you mean {match!r}?")
    raise ConfigError(f"unknown setting {name!r}; valid settings are {', '.join(FIELDS)}")


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _close_match(name: str) -> str | None:
    """The setting ``name`` most likely meant, in the spelling ``name`` uses (dotted or not)."""
    # Case, camelCase, dashes, dots and Java's constant names (LINGER_MS_CONFIG) all fold to
    # the Pythonic spelling first, so only real misspellings are left to the fuzzy match.
    norm = _CAMEL_HUMP.sub("_", name).lower().replace("-", "_").replace(".", "_")
    norm = norm.removesuffix("_config")
    match = _ALIASES.get(norm) or (norm if norm in FIELDS else None)
    if match is None:
        # A truncated name ("max_in_flight") that starts exactly one setting.
        longer = [f for f in FIELDS if f.startswith(norm + "_")]
        match = longer[0] if len(longer) == 1 else None
    if match is None:
        match = next(iter(difflib.get_close_matches(norm, FIELDS, n=1, cutoff=0.6)), None)
    if match is not None and "." in name:
        return PYTHON_TO_JAVA.get(match, match)
    return match


# --- Java properties

_JAAS = re.compile(
    r"\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)(?P<options>[^;]*);?\s*",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def _parse(name: str, value: object, label: str) -> object:
    """A ``.properties`` string as the row's type; other values pass through to the checks."""
    return ROWS[name].kind.parse(value, label, name) if isinstance(value, str) else value


def _parse_jaas(value: object, label: str) -> tuple[str, str]:
    # The value holds the password, so no message here may quote it.
    match = _JAAS.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(
            f'{label} must look like \'<LoginModule> required username="..." password="...";\''
        )
    module = match["module"].rsplit(".", 1)[-1]
    if module == "OAuthBearerLoginModule":
        raise ConfigError(
            f"{label} uses OAuthBearerLoginModule: drop {label} and pass "
            "sasl_oauth_token_provider, an async callable returning the token, among the "
            "properties (with sasl.mechanism=OAUTHBEARER)"
        )
    if module not in ("PlainLoginModule", "ScramLoginModule"):
        raise ConfigError(
            f"{label} uses {module}; only PlainLoginModule and ScramLoginModule are supported"
        )
    options = {
        m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
        for m in _JAAS_OPTION.finditer(match["options"])
    }
    if "username" not in options or "password" not in options:
        raise ConfigError(f"{label} must set both username and password")
    return options["username"], options["password"]


_SSL_PROPERTIES = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.truststore.type",
        "ssl.endpoint.identification.algorithm",
    }
)


def _ssl_context_from(props: Mapping[str, object]) -> ssl.SSLContext:
    """Java's PEM truststore properties as a verifying ``ssl.SSLContext``."""
    kind = props.get("ssl.truststore.type", "PEM")
    if not isinstance(kind, str) or kind.strip().upper() != "PEM":
        raise ConfigError(
            f"ssl.truststore.type={kind!r}: only PEM truststores can be read; export the CA "
            "as PEM (keytool -exportcert -rfc) or pass ssl_context"
        )
    location = props.get("ssl.truststore.location")
    certificates = props.get("ssl.truststore.certificates")
    if location is not None and certificates is not None:
        raise ConfigError(
            "ssl.truststore.location and ssl.truststore.certificates both set the trusted CAs; "
            "keep one"
        )
    try:
        context = ssl.create_default_context(
            cafile=str(location).strip() if location is not None else None,
            cadata=str(certificates) if certificates is not None else None,
        )
    except (OSError, ssl.SSLError) as exc:
        which = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
        raise ConfigError(
            f"{which} could not be read as PEM CA certificates ({exc}); fix it, or pass "
            "ssl_context=ssl.create_default_context(cafile=...) instead"
        ) from None
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https")
    algorithm = algorithm.strip().lower() if isinstance(algorithm, str) else algorithm
    if algorithm not in ("https", ""):
        raise ConfigError(
            f"ssl.endpoint.identification.algorithm must be 'https' or '' (no host name "
            f"check), got {algorithm!r}"
        )
    context.check_hostname = algorithm == "https"
    return context


def _convert_properties(
    properties: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    kwargs: dict[str, Any] = {}
    labels: dict[str, str] = {}
    levels: dict[str, tuple[str, object]] = {}
    ssl_props: dict[str, object] = {}

    def put(name: str, value: object, label: str) -> None:
        if name in kwargs:
            raise ConfigError(f"{labels[name]!r} and {label!r} both set {name}; keep one")
        kwargs[name] = value
        labels[name] = label

    if not isinstance(properties, Mapping):
        raise ConfigError(f"properties must be a mapping, got {type(properties).__name__}")
    for key, value in properties.items():
        if not isinstance(key, str):
            raise ConfigError(f"property names must be strings, got {key!r}")
        label = key.strip()
        if label in LEVEL_PROPERTIES:
            levels[LEVEL_PROPERTIES[label]] = (label, value)
        elif label in _SSL_PROPERTIES:
            ssl_props[label] = value
        elif label == "sasl.jaas.config":
            user, password = _parse_jaas(value, label)
            put("sasl_plain_username", user, label)
            put("sasl_plain_password", password, label)
        else:
            name = label if label in FIELDS else JAVA_TO_PYTHON.get(label)
            if name is None:
                _check_name(label, dotted=True)
                raise AssertionError(label)  # pragma: no cover  (_check_name raised)
            put(name, _parse(name, value, label), label)
    if ssl_props:
        put("ssl_context", _ssl_context_from(ssl_props), min(ssl_props))
    codec = kwargs.get("compression_type", "none")
    codec = codec.strip().lower() if isinstance(codec, str) else codec
    if codec in levels and "compression_level" not in kwargs:
        label, value = levels[codec]
        put("compression_level", _parse("compression_level", value, label), label)
    return kwargs, labels


# Built once the rules exist: also proves at import that every row's default passes its checks.
_DEFAULTS: Mapping[str, Any] = {name: getattr(ProducerConfig(), name) for name in FIELDS}
