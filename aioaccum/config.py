"""Producer settings: Pythonic names, the Java client's defaults, and loud validation.

:class:`ProducerConfig` holds every setting the producer reads. Names are the Java client's with
dots turned into underscores (``linger.ms`` → ``linger_ms``) and defaults are Kafka 4.x's, so a
tuned Java producer can be carried over as it is: :meth:`ProducerConfig.from_properties` takes the
dotted names and the string values of a ``.properties`` file.

Two settings behave as in Java when they are left at their default: ``enable_idempotence`` is
quietly turned off when ``acks`` is not ``all`` or ``retries`` is 0, and ``delivery_timeout_ms``
is raised to ``linger_ms + request_timeout_ms`` when that sum is larger. Set explicitly, the same
conflicts are errors.

Custom partitioners are plain callables (see :data:`Partitioner`)::

    def partitioner(topic: str, key: bytes | None, value: bytes | None,
                    all_partitions: Sequence[int], available_partitions: Sequence[int]) -> int
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import logging
import re
import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

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
"""Turns a key or value into bytes (``None`` stays a null key/value)."""

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

ACKS_CHOICES = ("all", "-1", "0", "1")
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Java's per-codec level bounds, and the value each codec treats as "its default".
_LEVELS: dict[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}

_SECRET_FIELDS = frozenset({"sasl_plain_password"})


class _Default:
    """Default of a setting that Java adjusts when the user did not choose it."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


_IDEMPOTENCE_DEFAULT: Any = _Default(True)
_DELIVERY_TIMEOUT_DEFAULT: Any = _Default(120_000)


@dataclass(frozen=True, repr=False)
class ProducerConfig:
    """Every setting of the producer, validated, with Kafka 4.x defaults.

    Build one with keyword arguments (``ProducerConfig(linger_ms=10)``),
    :meth:`from_kwargs` (same, with a suggestion for misspelt names) or
    :meth:`from_properties` (Java's dotted names and string values).

    Attributes:
        bootstrap_servers: ``"host:port"`` strings; a comma-separated string is split. Stored as
            a tuple.
        client_id: Sent to brokers to name this client in their logs and quotas.
        acks: Acknowledgements a write needs: ``"all"``/``-1``, ``1`` or ``0``. Stored as an int.
        enable_idempotence: Exactly-once writes per partition (needs ``acks="all"``).
        retries: Retries of a failed batch; ``delivery_timeout_ms`` usually bounds them first.
        batch_size: Bytes per batch, and the size of pooled buffers.
        linger_ms: How long a batch waits for more records before it is sent.
        buffer_memory: Total bytes of records waiting to be sent.
        max_block_ms: How long ``send()`` may wait for buffer memory or metadata.
        max_request_size: Largest produce request (and record) in bytes.
        compression_type: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``.
        compression_level: Codec level (gzip 1..9, lz4 1..17, zstd -131072..22); ``None`` for
            the codec's default.
        retry_backoff_ms: First wait before a retry; it doubles per attempt, with jitter.
        retry_backoff_max_ms: Cap of that wait (raised to ``retry_backoff_ms`` if lower).
        request_timeout_ms: How long to wait for a broker's response.
        delivery_timeout_ms: Upper bound from ``send()`` to success or failure; at least
            ``linger_ms + request_timeout_ms``.
        max_in_flight_requests_per_connection: Unanswered produce requests per broker.
        metadata_max_age_ms: Refresh metadata at least this often.
        metadata_max_idle_ms: Forget a topic not produced to for this long.
        connections_max_idle_ms: Close connections idle for this long.
        send_buffer_bytes: Socket send buffer size, ``None`` for the OS default.
        receive_buffer_bytes: Socket receive buffer size, ``None`` for the OS default.
        partitioner: A custom partitioner (see :data:`Partitioner`), ``None`` for Kafka's.
        partitioner_ignore_keys: Spread keyed records like keyless ones, ignoring the key.
        partitioner_adaptive_partitioning_enable: Send more to brokers that drain faster.
        partitioner_availability_timeout_ms: Avoid partitions whose leader has not accepted a
            request for this long (0: never).
        key_serializer: Callable turning keys into bytes; ``None`` means keys are bytes already.
        value_serializer: Callable turning values into bytes; ``None`` likewise.
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: The ``ssl.SSLContext`` for ``SSL``/``SASL_SSL``; ``None`` leaves it to the
            connection layer's default.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (SASL protocols only).
        sasl_plain_username: The SASL user name.
        sasl_plain_password: The SASL password; never shown by ``repr()`` or in errors.
    """

    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092"
    client_id: str = "aioaccum"
    acks: int | str = "all"
    enable_idempotence: bool = _IDEMPOTENCE_DEFAULT
    retries: int = _INT_MAX
    batch_size: int = 16384
    linger_ms: int = 5
    buffer_memory: int = 33554432
    max_block_ms: int = 60000
    max_request_size: int = 1048576
    compression_type: str = "none"
    compression_level: int | None = None
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = _DELIVERY_TIMEOUT_DEFAULT
    max_in_flight_requests_per_connection: int = 5
    metadata_max_age_ms: int = 300000
    metadata_max_idle_ms: int = 300000
    connections_max_idle_ms: int = 540000
    send_buffer_bytes: int | None = None
    receive_buffer_bytes: int | None = None
    partitioner: Partitioner | None = None
    partitioner_ignore_keys: bool = False
    partitioner_adaptive_partitioning_enable: bool = True
    partitioner_availability_timeout_ms: int = 0
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    # Settings the user chose, as opposed to defaults: Java treats some conflicts differently.
    _explicit: frozenset[str] = field(
        default=frozenset(), init=False, repr=False, compare=False, hash=False
    )

    _java_names: ClassVar[Mapping[str, str]]

    def __post_init__(self) -> None:
        from aioaccum._config_rules import resolve

        explicit = {
            f.name
            for f in dataclasses.fields(self)
            if f.init and not isinstance(getattr(self, f.name), _Default)
        }
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        for name, value in values.items():
            if isinstance(value, _Default):
                values[name] = value.value
        resolved = resolve(values, explicit, _LABELS.get())
        for name, value in resolved.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_explicit", frozenset(explicit))

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ProducerConfig:
        """Build a config from Pythonic keyword arguments.

        Raises:
            ConfigError: A name is unknown (with the closest valid name, if any) or unsupported,
                or a value is invalid.
        """
        from aioaccum._config_rules import check_name

        for name in kwargs:
            check_name(name, dotted=False)
        return cls(**kwargs)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ProducerConfig:
        """Build a config from Java producer properties (``{"linger.ms": "10", ...}``).

        Values may be strings as read from a ``.properties`` file (``"true"``, ``"65536"``) or
        Python values. Pythonic names are accepted too. ``sasl.jaas.config`` with Kafka's
        ``PlainLoginModule`` or ``ScramLoginModule`` sets the user name and password, and
        ``compression.<codec>.level`` sets ``compression_level`` for the chosen codec.

        Raises:
            ConfigError: A name is unknown or unsupported, or a value is invalid. The message
                uses the name as written in ``properties``.
        """
        from aioaccum._config_rules import convert_properties

        kwargs, labels = convert_properties(properties)
        with _labelled(labels):
            return cls(**kwargs)

    def replace(self, **changes: Any) -> ProducerConfig:
        """A copy with ``changes`` applied, re-validated.

        Unlike :func:`dataclasses.replace`, settings the user never chose stay "defaulted", so
        ``cfg.replace(acks=1)`` turns the default idempotence off as a fresh config would.
        """
        from aioaccum._config_rules import check_name

        for name in changes:
            check_name(name, dotted=False)
        kwargs: dict[str, Any] = {name: getattr(self, name) for name in self._explicit}
        kwargs.update(changes)
        return type(self)(**kwargs)

    # -- names ----------------------------------------------------------------------------

    @staticmethod
    def java_name(name: str) -> str:
        """The Java client's property name for a field (``"linger_ms"`` → ``"linger.ms"``).

        Raises:
            ConfigError: The field does not exist, or has no single Java property.
        """
        from aioaccum._config_rules import NO_JAVA_NAME, check_name

        if name in PYTHON_TO_JAVA:
            return PYTHON_TO_JAVA[name]
        if name in NO_JAVA_NAME:
            raise ConfigError(f"{name} has no single Java property: {NO_JAVA_NAME[name]}")
        check_name(name, dotted=False)
        raise AssertionError(name)  # pragma: no cover  (check_name raised)

    @property
    def idempotent(self) -> bool:
        """Whether the producer runs idempotently (after Java's defaulting rules)."""
        return self.enable_idempotence

    @property
    def explicit_settings(self) -> frozenset[str]:
        """The fields the user set, as opposed to those left at their defaults."""
        return self._explicit

    def __repr__(self) -> str:
        defaults = _defaults()
        shown = []
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if f.name in _SECRET_FIELDS:
                if value is not None:
                    shown.append(f"{f.name}='***'")
                continue
            if value != defaults.get(f.name):
                shown.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


PYTHON_TO_JAVA: Mapping[str, str] = {
    "bootstrap_servers": "bootstrap.servers",
    "client_id": "client.id",
    "acks": "acks",
    "enable_idempotence": "enable.idempotence",
    "retries": "retries",
    "batch_size": "batch.size",
    "linger_ms": "linger.ms",
    "buffer_memory": "buffer.memory",
    "max_block_ms": "max.block.ms",
    "max_request_size": "max.request.size",
    "compression_type": "compression.type",
    "retry_backoff_ms": "retry.backoff.ms",
    "retry_backoff_max_ms": "retry.backoff.max.ms",
    "request_timeout_ms": "request.timeout.ms",
    "delivery_timeout_ms": "delivery.timeout.ms",
    "max_in_flight_requests_per_connection": "max.in.flight.requests.per.connection",
    "metadata_max_age_ms": "metadata.max.age.ms",
    "metadata_max_idle_ms": "metadata.max.idle.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "send_buffer_bytes": "send.buffer.bytes",
    "receive_buffer_bytes": "receive.buffer.bytes",
    "partitioner": "partitioner.class",
    "partitioner_ignore_keys": "partitioner.ignore.keys",
    "partitioner_adaptive_partitioning_enable": "partitioner.adaptive.partitioning.enable",
    "partitioner_availability_timeout_ms": "partitioner.availability.timeout.ms",
    "key_serializer": "key.serializer",
    "value_serializer": "value.serializer",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
}
"""Field name → Java property name, for the fields that have exactly one."""

JAVA_TO_PYTHON: Mapping[str, str] = {
    **{java: py for py, java in PYTHON_TO_JAVA.items()},
    "compression.gzip.level": "compression_level",
    "compression.lz4.level": "compression_level",
    "compression.zstd.level": "compression_level",
    "sasl.jaas.config": "sasl_plain_username",
}
"""Java property name → the field it sets (``sasl.jaas.config`` also sets the password)."""


_LABELS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "aioaccum_config_labels", default={}
)


@contextmanager
def _labelled(labels: Mapping[str, str]) -> Iterator[None]:
    # Lets validation name settings as the user wrote them ("linger.ms") without threading the
    # names through the dataclass constructor.
    token = _LABELS.set(labels)
    try:
        yield
    finally:
        _LABELS.reset(token)


_DEFAULTS: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _DEFAULTS:
        base = ProducerConfig()
        _DEFAULTS.update({f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    return _DEFAULTS


def _jaas_pattern() -> re.Pattern[str]:  # pragma: no cover  (kept for API symmetry)
    return re.compile(r"")
