"""Producer settings: Pythonic names, the Java client's defaults, and loud validation.

:class:`ProducerConfig` holds every setting the producer reads. Names are the Java client's with
dots turned into underscores (``linger.ms`` → ``linger_ms``) and defaults are Kafka 4.x's, so a
tuned Java producer carries over as it is: :meth:`ProducerConfig.from_properties` takes the dotted
names and the string values of a ``.properties`` file.

Each setting is written once, as a row of :data:`SETTINGS` in :mod:`aioaccum.config.settings`
(Kafka's ``ConfigDef.define``): its names, type, default, limits and doc. The dataclass
defaults, the parsing of property strings (:mod:`aioaccum.config.properties`), the checks, the
name tables, the suggestions for misspelt names and ``docs/configuration.md``
(``scripts/gen_config_docs.py``) all come from those rows; this module adds the rules between
settings.

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

import importlib.util
import logging
import os
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from aioaccum._core.chunks import chunk_size_for
from aioaccum._core.codecs import CompressionType, ensure_codec_available
from aioaccum._core.partitioner import Partitioner
from aioaccum.config.properties import producer_values
from aioaccum.config.settings import (
    FIELDS,
    INT_MAX,
    JAVA_TO_PYTHON,
    JOURNAL_SEGMENT_OVERHEAD,
    LEVELS,
    MAX_IN_FLIGHT_FOR_IDEMPOTENCE,
    PRODUCER,
    PYTHON_TO_JAVA,
    ROWS,
    SASL_MECHANISMS,
    SETTINGS,
)
from aioaccum.config.table import NoJavaName, Setting
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

JAVA_BATCH_SIZE = 16384


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
    client_rack: str = _ROW_DEFAULT
    acks: int = _ROW_DEFAULT
    enable_idempotence: bool = _ROW_DEFAULT
    transactional_id: str | None = _ROW_DEFAULT
    transaction_timeout_ms: int = _ROW_DEFAULT
    retries: int = _ROW_DEFAULT
    batch_size: int = _ROW_DEFAULT
    linger_ms: int = _ROW_DEFAULT
    buffer_memory: int = _ROW_DEFAULT
    buffer_memory_allocation_strategy: str = _ROW_DEFAULT
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
    metadata_cluster_check_enable: bool = _ROW_DEFAULT
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
    partitioner_rack_aware: bool = _ROW_DEFAULT
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
    journal_dir: str | os.PathLike[str] | None = _ROW_DEFAULT  # kept as a str
    journal_sync: str = _ROW_DEFAULT
    journal_sync_ms: int = _ROW_DEFAULT
    journal_spill_after_ms: int = _ROW_DEFAULT
    journal_max_bytes: int = _ROW_DEFAULT
    journal_segment_bytes: int = _ROW_DEFAULT
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
            PRODUCER.check_name(name)
        return cls(**kwargs)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, Any], *, java_defaults: bool = True
    ) -> ProducerConfig:
        """Build a config from Java producer properties, e.g. ``{"linger.ms": "10"}``.

        Values may be strings as read from a ``.properties`` file (``"true"``, ``"65536"``) or
        Python values, and the Pythonic names are accepted too. A setting the properties leave
        out takes the Java client's default where ours differs (``batch.size`` and
        ``buffer.memory.allocation.strategy``; see the configuration docs), so that a Java
        file configures the producer the Java client would run; ``java_defaults=False`` gives
        them ours instead (for options that only borrow Java's names, such as the Spark sink's
        ``kafka.*``). ``sasl.jaas.config`` with
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
        kwargs, labels = producer_values(properties)
        # Not through __init__, which has no room for the labels the messages need.
        config = cls.__new__(cls)
        for row in SETTINGS:
            # Where our default is not Java's, a file that leaves the setting out gets Java's:
            # the same file means the same producer in both clients.
            default = row.java_default if java_defaults and row.differs_from_java else row.default
            object.__setattr__(config, row.name, kwargs.get(row.name, _Default(default)))
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
            PRODUCER.check_name(name)
        kwargs = {name: getattr(self, name) for name in self._explicit}
        kwargs.update(changes)
        return type(self)(**kwargs)

    @staticmethod
    def java_name(name: str) -> str:
        """The Java client's property for a field: ``java_name("linger_ms") == "linger.ms"``.

        Raises:
            ConfigError: ``name`` is not a field, or has no single Java property.
        """
        PRODUCER.check_name(name)
        java = ROWS[name].java
        if isinstance(java, NoJavaName):
            raise ConfigError(f"{name} has no single Java property: {java.why}")
        return java

    @property
    def sticky_partition_bytes(self) -> int:
        """Bytes keyless records send to one partition before the partitioner moves on.

        Java's rule is ``batch_size``. Left at our 1 MiB default that would keep a low-rate
        stream on one partition for minutes, so then it is Java's default batch size (16384)
        instead: records spread as they do in Java, while a busy partition's batch still
        grows past it within one linger, as records come back to it.
        """
        if "batch_size" in self._explicit:
            return self.batch_size
        return min(self.batch_size, JAVA_BATCH_SIZE)

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
        self.partitioning(v)
        n = self.name
        # With 'full' a batch takes batch_size bytes at once; with 'incremental' it grows in
        # chunks, and only the first chunk must fit: a batch stops growing when the pool runs
        # dry, so batch_size may exceed buffer_memory.
        first = v["batch_size"]
        if v["buffer_memory_allocation_strategy"] == "incremental":
            first = chunk_size_for(first)
        if first > v["buffer_memory"]:
            raise ConfigError(
                f"{n('batch_size')}={v['batch_size']} needs {first} bytes per new batch, more "
                f"than {n('buffer_memory')}={v['buffer_memory']}, so no batch could ever be "
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
        if v["journal_dir"] is not None:
            self.journal(v)

    def journal(self, v: dict[str, Any]) -> None:
        n = self.name
        if not v["enable_idempotence"]:
            # Outcomes must come in acceptance order per partition, and a restart re-sends
            # sealed batches under their sequence numbers: both need the idempotent producer.
            raise ConfigError(
                f"{n('journal_dir')} needs {n('enable_idempotence')}=True (the journal relies "
                "on in-order outcomes and sequence numbers per partition), which also needs "
                "acks='all' and retries > 0; fix those, or set journal_dir=None"
            )
        if v["transactional_id"] is not None:
            raise ConfigError(
                f"{n('journal_dir')} does not work with {n('transactional_id')}: a restart "
                "cannot resume an open transaction; use one or the other"
            )
        needed = v["max_request_size"] + JOURNAL_SEGMENT_OVERHEAD
        if v["journal_segment_bytes"] <= needed:
            raise ConfigError(
                f"{n('journal_segment_bytes')}={v['journal_segment_bytes']} must exceed "
                f"{n('max_request_size')} + {JOURNAL_SEGMENT_OVERHEAD} = {needed}, so that a "
                f"record of the largest size fits in a segment; raise it above {needed}"
            )
        if v["journal_max_bytes"] < 2 * v["journal_segment_bytes"]:
            raise ConfigError(
                f"{n('journal_max_bytes')}={v['journal_max_bytes']} must be at least two "
                f"segments, 2 x {n('journal_segment_bytes')} = "
                f"{2 * v['journal_segment_bytes']}; raise it or lower journal_segment_bytes"
            )

    def partitioning(self, v: dict[str, Any]) -> None:
        # Java's rule (RecordAccumulator.PartitionerConfig): rack awareness without a rack
        # would silently mean nothing.
        if v["partitioner_rack_aware"] and not v["client_rack"].strip():
            n = self.name
            raise ConfigError(
                f"{n('partitioner_rack_aware')} needs {n('client_rack')}: set client_rack to "
                "the rack (broker.rack) this client runs in, or turn partitioner_rack_aware off"
            )

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


# Built once the rules exist: also proves at import that every row's default passes its checks.
_DEFAULTS: Mapping[str, Any] = {name: getattr(ProducerConfig(), name) for name in FIELDS}
