"""Producer settings: Pythonic names, the Java client's defaults, and loud validation.

:class:`ProducerConfig` holds every setting the producer reads. Names are the Java client's with
dots turned into underscores (``linger.ms`` → ``linger_ms``) and defaults are Kafka 4.x's, so a
tuned Java producer carries over as it is: :meth:`ProducerConfig.from_properties` takes the dotted
names and the string values of a ``.properties`` file.

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

import contextvars
import dataclasses
import difflib
import logging
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

from aioaccum._core.partitioner import Partitioner
from aioaccum.errors import ConfigError

__all__ = [
    "JAVA_TO_PYTHON",
    "PYTHON_TO_JAVA",
    "Partitioner",
    "ProducerConfig",
    "Serializer",
]

log = logging.getLogger(__name__)

Serializer: TypeAlias = Callable[[Any], bytes | None]
"""Turns a key or value into bytes; returning ``None`` sends a null key or value."""

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Java's bounds per codec, and the extra value each accepts as "the codec's own default".
_LEVELS: dict[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}


class _Default:
    """A default value, as opposed to the same value chosen by the user."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _d(value: object) -> Any:
    # Every default is wrapped so that __post_init__ can tell what the user chose: Java
    # resolves some conflicts differently for defaults (ProducerConfig.originals()).
    return _Default(value)


_NONE: Any = _Default(None)


@dataclass(frozen=True, repr=False)
class ProducerConfig:
    """Every setting of the producer, validated, with Kafka 4.x defaults.

    Build one with keyword arguments (``ProducerConfig(linger_ms=10)``), :meth:`from_kwargs`
    (the same, with a suggestion for misspelt names) or :meth:`from_properties` (Java's dotted
    names and string values). Invalid settings raise :class:`~aioaccum.errors.ConfigError`.

    Attributes:
        bootstrap_servers: ``"host:port"`` strings; a comma-separated string is split. Stored
            as a tuple.
        client_id: Names this client in broker logs and quotas.
        acks: Acknowledgements a write needs: ``"all"`` (or ``-1``), ``1`` or ``0``. Strings are
            accepted; the stored value is the int ``-1``, ``0`` or ``1``.
        enable_idempotence: Exactly-once, in-order writes per partition (needs ``acks="all"``).
        retries: Retries of a failed batch; ``delivery_timeout_ms`` usually bounds them first.
        batch_size: Bytes per batch, and the size of pooled buffers.
        linger_ms: How long a batch waits for more records before it is sent.
        buffer_memory: Total bytes of records waiting to be sent.
        max_block_ms: How long ``send()`` may wait for buffer memory or metadata.
        max_request_size: Largest produce request (and record) in bytes.
        compression_type: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``.
        compression_level: Codec level (gzip 1..9, lz4 1..17, zstd -131072..22); ``None`` for
            the codec's default.
        retry_backoff_ms: First wait before a retry; it grows exponentially per attempt.
        retry_backoff_max_ms: Cap of that wait (raised to ``retry_backoff_ms`` if lower, as
            Java does).
        request_timeout_ms: How long to wait for a broker's response.
        delivery_timeout_ms: Bound on the time from ``send()`` to success or failure; at least
            ``linger_ms + request_timeout_ms``.
        max_in_flight_requests_per_connection: Unanswered produce requests per broker.
        metadata_max_age_ms: Refresh metadata at least this often.
        metadata_max_idle_ms: Forget a topic not produced to for this long.
        connections_max_idle_ms: Close connections idle for this long.
        send_buffer_bytes: Socket send buffer size; ``None`` (or ``-1``) for the OS default.
        receive_buffer_bytes: Socket receive buffer size; ``None`` (or ``-1``) for the OS default.
        partitioner: A custom partitioner (:data:`Partitioner`); ``None`` for Kafka's.
        partitioner_ignore_keys: Spread keyed records like keyless ones, ignoring the key.
        partitioner_adaptive_partitioning_enable: Send more to partitions that drain faster.
        partitioner_availability_timeout_ms: Avoid partitions whose leader has not accepted a
            request for this long (0: never).
        key_serializer: Turns keys into bytes; ``None`` means keys are bytes already.
        value_serializer: Turns values into bytes; ``None`` likewise.
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: The ``ssl.SSLContext`` for ``SSL``/``SASL_SSL``; ``None`` leaves the choice
            to the connection layer.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; SASL protocols only.
        sasl_plain_username: The SASL user name.
        sasl_plain_password: The SASL password; never shown by ``repr()`` nor in errors.
    """

    bootstrap_servers: str | Sequence[str] = _d("127.0.0.1:9092")
    client_id: str = _d("aioaccum")
    acks: int = _d(-1)
    enable_idempotence: bool = _d(True)
    retries: int = _d(_INT_MAX)
    batch_size: int = _d(16384)
    linger_ms: int = _d(5)
    buffer_memory: int = _d(33554432)
    max_block_ms: int = _d(60000)
    max_request_size: int = _d(1048576)
    compression_type: str = _d("none")
    compression_level: int | None = _NONE
    retry_backoff_ms: int = _d(100)
    retry_backoff_max_ms: int = _d(1000)
    request_timeout_ms: int = _d(30000)
    delivery_timeout_ms: int = _d(120000)
    max_in_flight_requests_per_connection: int = _d(5)
    metadata_max_age_ms: int = _d(300000)
    metadata_max_idle_ms: int = _d(300000)
    connections_max_idle_ms: int = _d(540000)
    send_buffer_bytes: int | None = _NONE
    receive_buffer_bytes: int | None = _NONE
    partitioner: Partitioner | None = _NONE
    partitioner_ignore_keys: bool = _d(False)
    partitioner_adaptive_partitioning_enable: bool = _d(True)
    partitioner_availability_timeout_ms: int = _d(0)
    key_serializer: Serializer | None = _NONE
    value_serializer: Serializer | None = _NONE
    security_protocol: str = _d("PLAINTEXT")
    ssl_context: ssl.SSLContext | None = _NONE
    sasl_mechanism: str | None = _NONE
    sasl_plain_username: str | None = _NONE
    sasl_plain_password: str | None = field(default=_NONE, repr=False)
    _explicit: frozenset[str] = field(
        default=frozenset(), init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        values: dict[str, Any] = {}
        explicit: set[str] = set()
        for name in _FIELDS:
            value = getattr(self, name)
            if isinstance(value, _Default):
                value = value.value
            else:
                explicit.add(name)
            values[name] = value
        _Validator(_LABELS.get()).resolve(values, explicit)
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
        token = _LABELS.set(labels)
        try:
            return cls(**kwargs)
        finally:
            _LABELS.reset(token)

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
        if name in PYTHON_TO_JAVA:
            return PYTHON_TO_JAVA[name]
        if name in _NO_JAVA_NAME:
            raise ConfigError(f"{name} has no single Java property: {_NO_JAVA_NAME[name]}")
        _check_name(name)
        raise ConfigError(f"{name} has no Java property")  # pragma: no cover

    @property
    def explicit_settings(self) -> frozenset[str]:
        """The fields the user set, as opposed to those left at their defaults."""
        return self._explicit

    def __repr__(self) -> str:
        # Only what differs from the defaults, so the interesting part stays readable.
        defaults = _defaults()
        shown = []
        for name in _FIELDS:
            value = getattr(self, name)
            if name in _SECRETS:
                if value is not None:
                    shown.append(f"{name}='***'")
            elif value != defaults[name]:
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ProducerConfig) if f.init)
_SECRETS = frozenset({"sasl_plain_password"})

PYTHON_TO_JAVA: Mapping[str, str] = {
    name: name.replace("_", ".")
    for name in _FIELDS
    if name
    not in {
        "compression_level",
        "partitioner",
        "ssl_context",
        "sasl_plain_username",
        "sasl_plain_password",
    }
} | {"partitioner": "partitioner.class"}
"""Field → Java property, for every field that has exactly one."""

JAVA_TO_PYTHON: Mapping[str, str] = {java: py for py, java in PYTHON_TO_JAVA.items()} | {
    "compression.gzip.level": "compression_level",
    "compression.lz4.level": "compression_level",
    "compression.zstd.level": "compression_level",
    "sasl.jaas.config": "sasl_plain_username",
}
"""Java property → field (``sasl.jaas.config`` sets the password as well)."""

_NO_JAVA_NAME = {
    "compression_level": "Java has compression.gzip.level, compression.lz4.level and "
    "compression.zstd.level",
    "ssl_context": "Java configures TLS with ssl.* keystore properties",
    "sasl_plain_username": "Java passes it inside sasl.jaas.config",
    "sasl_plain_password": "Java passes it inside sasl.jaas.config",
}

_TRANSACTIONS = "transactions are not supported (the producer is idempotent, not transactional)"
_CONNECTIONS = "connection set-up is left to the connection layer and not configurable"
_UNSUPPORTED = {
    "transactional.id": _TRANSACTIONS,
    "transaction.timeout.ms": _TRANSACTIONS,
    "transaction.two.phase.commit.enable": _TRANSACTIONS,
    "interceptor.classes": "interceptors are not supported; wrap send() instead",
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
        "sasl_plain_username/sasl_plain_password, is supported",
    ),
    ("metric", "Java metrics settings don't apply; the producer keeps its own metrics"),
)
# Names other Python clients use for the same thing.
_ALIASES = {"max_batch_size": "batch_size"}


def _check_name(name: str, *, dotted: bool = False) -> None:
    if name in _FIELDS:
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
    raise ConfigError(f"unknown setting {name!r}; valid settings are {', '.join(_FIELDS)}")


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _close_match(name: str) -> str | None:
    """The setting ``name`` most likely meant, in the spelling ``name`` uses (dotted or not)."""
    # Case, camelCase, dashes, dots and Java's constant names (LINGER_MS_CONFIG) all fold to
    # the Pythonic spelling first, so only real misspellings are left to the fuzzy match.
    norm = _CAMEL_HUMP.sub("_", name).lower().replace("-", "_").replace(".", "_")
    norm = norm.removesuffix("_config")
    match = _ALIASES.get(norm) or (norm if norm in _FIELDS else None)
    if match is None:
        # A truncated name ("max_in_flight") that starts exactly one setting.
        longer = [f for f in _FIELDS if f.startswith(norm + "_")]
        match = longer[0] if len(longer) == 1 else None
    if match is None:
        match = next(iter(difflib.get_close_matches(norm, _FIELDS, n=1, cutoff=0.6)), None)
    if match is not None and "." in name:
        return PYTHON_TO_JAVA.get(match, match)
    return match


_INT_RANGES: dict[str, tuple[int, int]] = {
    "retries": (0, _INT_MAX),
    "batch_size": (0, _INT_MAX),
    "linger_ms": (0, _LONG_MAX),
    "buffer_memory": (1, _LONG_MAX),
    "max_block_ms": (0, _LONG_MAX),
    "max_request_size": (1, _INT_MAX),
    "retry_backoff_ms": (0, _LONG_MAX),
    "retry_backoff_max_ms": (0, _LONG_MAX),
    "request_timeout_ms": (0, _INT_MAX),
    "delivery_timeout_ms": (0, _INT_MAX),
    "max_in_flight_requests_per_connection": (1, _INT_MAX),
    "metadata_max_age_ms": (0, _LONG_MAX),
    "metadata_max_idle_ms": (5000, _LONG_MAX),
    "connections_max_idle_ms": (0, _LONG_MAX),
    "partitioner_availability_timeout_ms": (0, _LONG_MAX),
}
_OPTIONAL_INTS = ("compression_level", "send_buffer_bytes", "receive_buffer_bytes")
_BOOLS = (
    "enable_idempotence",
    "partitioner_ignore_keys",
    "partitioner_adaptive_partitioning_enable",
)
_CALLABLES = ("partitioner", "key_serializer", "value_serializer")


class _Validator:
    """Checks and normalises the raw field values; messages name settings as the user did."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = labels

    def name(self, field_name: str) -> str:
        return self._labels.get(field_name, field_name)

    def int_in(self, name: str, value: object, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"{self.name(name)} must be an int, got {value!r} ({type(value).__name__})"
            )
        if value < lo:
            raise ConfigError(f"{self.name(name)} must be >= {lo}, got {value}")
        if value > hi:
            raise ConfigError(f"{self.name(name)} must be <= {hi}, got {value}")
        return value

    def choice(self, name: str, value: object, choices: Sequence[str], *, upper: bool) -> str:
        if not isinstance(value, str):
            raise ConfigError(
                f"{self.name(name)} must be one of {', '.join(choices)}; got {value!r}"
            )
        norm = value.strip().upper() if upper else value.strip().lower()
        if norm not in choices:
            raise ConfigError(
                f"{self.name(name)} must be one of {', '.join(choices)}; got {value!r}"
            )
        return norm

    def resolve(self, v: dict[str, Any], explicit: set[str]) -> None:
        v["bootstrap_servers"] = self.servers(v["bootstrap_servers"])
        if not isinstance(v["client_id"], str):
            raise ConfigError(f"{self.name('client_id')} must be a str, got {v['client_id']!r}")
        v["acks"] = self.acks(v["acks"])
        for name, (lo, hi) in _INT_RANGES.items():
            v[name] = self.int_in(name, v[name], lo, hi)
        for name in _BOOLS:
            if not isinstance(v[name], bool):
                raise ConfigError(f"{self.name(name)} must be True or False, got {v[name]!r}")
        for name in _OPTIONAL_INTS:
            if v[name] is not None:
                self.int_in(name, v[name], -_LONG_MAX, _LONG_MAX)
        for name in ("send_buffer_bytes", "receive_buffer_bytes"):
            if v[name] == -1:
                v[name] = None  # Java's "OS default"
            elif v[name] is not None:
                self.int_in(name, v[name], 1, _INT_MAX)
        for name in _CALLABLES:
            if v[name] is not None and not callable(v[name]):
                raise ConfigError(f"{self.name(name)} must be a callable or None, got {v[name]!r}")
        v["compression_type"] = self.choice(
            "compression_type", v["compression_type"], COMPRESSION_TYPES, upper=False
        )
        self.compression_level(v["compression_type"], v["compression_level"])
        self.security(v)
        self.combinations(v, explicit)

    def servers(self, value: object) -> tuple[str, ...]:
        items: list[object]
        if isinstance(value, str):
            items = [s.strip() for s in value.split(",")]
        elif isinstance(value, Sequence):
            items = [s.strip() if isinstance(s, str) else s for s in value]
        else:
            items = [value]
        bad = [s for s in items if not isinstance(s, str) or not s or any(c.isspace() for c in s)]
        if not items or bad:
            raise ConfigError(
                f"{self.name('bootstrap_servers')} must be 'host:port' strings (or one "
                f"comma-separated string), got {value!r}"
            )
        return tuple(str(s) for s in items)

    def acks(self, value: object) -> int:
        if isinstance(value, str) and value.strip().lower() == "all":
            return -1
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value in (-1, 0, 1):
            return value
        raise ConfigError(
            f"{self.name('acks')} must be one of 'all', -1, 0, 1 (or those as strings), "
            f"got {value!r}"
        )

    def compression_level(self, codec: str, level: int | None) -> None:
        if level is None:
            return
        if codec not in _LEVELS:
            raise ConfigError(
                f"{self.name('compression_level')}={level} has no effect with "
                f"compression_type={codec!r}; remove it, or use gzip, lz4 or zstd"
            )
        lo, hi, default = _LEVELS[codec]
        if not (lo <= level <= hi or level == default):
            raise ConfigError(
                f"{self.name('compression_level')} for {codec} must be between {lo} and {hi}, "
                f"got {level}"
            )

    def security(self, v: dict[str, Any]) -> None:
        protocol = self.choice(
            "security_protocol", v["security_protocol"], SECURITY_PROTOCOLS, upper=True
        )
        v["security_protocol"] = protocol
        ctx = v["ssl_context"]
        if ctx is not None:
            if not isinstance(ctx, ssl.SSLContext):
                raise ConfigError(
                    f"{self.name('ssl_context')} must be an ssl.SSLContext, got {ctx!r}"
                )
            if "SSL" not in protocol:
                raise ConfigError(
                    f"{self.name('ssl_context')} is only used with security_protocol SSL or "
                    f"SASL_SSL, not {protocol}; set security_protocol='SSL' or drop ssl_context"
                )
        for name in ("sasl_plain_username", "sasl_plain_password"):
            if v[name] is not None and not isinstance(v[name], str):
                raise ConfigError(
                    f"{self.name(name)} must be a str or None, got a {type(v[name]).__name__}"
                )
        sasl = protocol.startswith("SASL")
        mechanism = v["sasl_mechanism"]
        if mechanism is not None:
            mechanism = v["sasl_mechanism"] = self.choice(
                "sasl_mechanism", mechanism, SASL_MECHANISMS, upper=True
            )
        has_credentials = v["sasl_plain_username"] is not None or (
            v["sasl_plain_password"] is not None
        )
        if not sasl:
            if mechanism is not None or has_credentials:
                raise ConfigError(
                    f"SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL, but "
                    f"{self.name('security_protocol')} is {protocol!r}"
                )
            return
        if mechanism is None:
            raise ConfigError(
                f"security_protocol={protocol!r} needs {self.name('sasl_mechanism')}: one of "
                f"{', '.join(SASL_MECHANISMS)}"
            )
        missing = [n for n in ("sasl_plain_username", "sasl_plain_password") if v[n] is None]
        if missing:
            raise ConfigError(
                f"sasl_mechanism={mechanism!r} needs {' and '.join(map(self.name, missing))}"
            )

    def combinations(self, v: dict[str, Any], explicit: set[str]) -> None:
        n = self.name
        if v["batch_size"] > v["buffer_memory"]:
            raise ConfigError(
                f"{n('batch_size')}={v['batch_size']} is larger than "
                f"{n('buffer_memory')}={v['buffer_memory']}, so no batch could ever be "
                f"allocated; lower batch_size or raise buffer_memory"
            )
        if v["retry_backoff_ms"] > v["retry_backoff_max_ms"]:
            v["retry_backoff_max_ms"] = v["retry_backoff_ms"]
        floor = min(v["linger_ms"] + v["request_timeout_ms"], _INT_MAX)
        if v["delivery_timeout_ms"] < floor:
            if "delivery_timeout_ms" in explicit:
                raise ConfigError(
                    f"{n('delivery_timeout_ms')}={v['delivery_timeout_ms']} must be >= "
                    f"{n('linger_ms')} + {n('request_timeout_ms')} = {v['linger_ms']} + "
                    f"{v['request_timeout_ms']} = {floor}; set delivery_timeout_ms to at least "
                    f"{floor}, or lower linger_ms or request_timeout_ms"
                )
            v["delivery_timeout_ms"] = floor
        if v["enable_idempotence"]:
            self.idempotence(v, "enable_idempotence" in explicit)

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
        if in_flight > _MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            raise ConfigError(
                f"{n('max_in_flight_requests_per_connection')}={in_flight} is more than "
                f"{_MAX_IN_FLIGHT_FOR_IDEMPOTENCE}, the most the idempotent producer keeps in "
                f"order; set it to {_MAX_IN_FLIGHT_FOR_IDEMPOTENCE} or less, or set "
                f"enable_idempotence=False"
            )


_LABELS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "aioaccum_config_labels", default=MappingProxyType({})
)

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_LEVEL_KEY = re.compile(r"compression\.(gzip|lz4|zstd)\.level")
_JAAS = re.compile(
    r"\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)(?P<options>[^;]*);?\s*",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def _from_text(name: str, value: object, label: str) -> object:
    """Turn a ``.properties`` string into the field's Python type; other values pass through."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name in _INT_RANGES or name in _OPTIONAL_INTS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{label} must be an integer, got {value!r}") from None
    if name in _BOOLS:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{label} must be true or false, got {value!r}")
    if name in _CALLABLES:
        raise ConfigError(
            f"{label}={value!r}: Java class names can't be loaded; pass a Python callable "
            f"as {name} instead"
        )
    if name == "ssl_context":
        raise ConfigError(f"{label} must be an ssl.SSLContext, not a string")
    return value


def _parse_jaas(value: object, label: str) -> tuple[str, str]:
    # The value holds the password, so no message here may quote it.
    match = _JAAS.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(
            f'{label} must look like \'<LoginModule> required username="..." password="...";\''
        )
    module = match["module"].rsplit(".", 1)[-1]
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
        level = _LEVEL_KEY.fullmatch(label)
        if level is not None:
            levels[level[1]] = (label, value)
        elif label in _SSL_PROPERTIES:
            ssl_props[label] = value
        elif label == "sasl.jaas.config":
            user, password = _parse_jaas(value, label)
            put("sasl_plain_username", user, label)
            put("sasl_plain_password", password, label)
        else:
            name = label if label in _FIELDS else JAVA_TO_PYTHON.get(label)
            if name is None:
                _check_name(label, dotted=True)
                raise AssertionError(label)  # pragma: no cover  (_check_name raised)
            put(name, _from_text(name, value, label), label)
    if ssl_props:
        put("ssl_context", _ssl_context_from(ssl_props), min(ssl_props))
    codec = kwargs.get("compression_type", "none")
    codec = codec.strip().lower() if isinstance(codec, str) else codec
    if codec in levels and "compression_level" not in kwargs:
        label, value = levels[codec]
        put("compression_level", _from_text("compression_level", value, label), label)
    return kwargs, labels


_DEFAULTS: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _DEFAULTS:
        base = ProducerConfig()
        _DEFAULTS.update({name: getattr(base, name) for name in _FIELDS})
    return _DEFAULTS
