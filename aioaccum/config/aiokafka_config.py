"""aiokafka's producer arguments as a :class:`~aioaccum.config.ProducerConfig`.

:func:`config_from_aiokafka` is the mapping :class:`aioaccum.compat.AIOKafkaProducer` applies,
with aiokafka's defaults kept (``docs/migrating-from-aiokafka.md`` has the table). aiokafka's
arguments are rows of the same kind as the producer's (:data:`ARGUMENTS`, in aiokafka's order):
each row's key is the producer setting the argument sets (checked against the producer's rows
when this module is imported), its kind translates aiokafka's value into that setting's, and
its default is aiokafka's. Rules between arguments then derive a few settings so that the
producer behaves as aiokafka's (``max_block_ms``, ``delivery_timeout_ms``,
``retry_backoff_max_ms``, ``max_in_flight_requests_per_connection``), and the arguments with no
meaning here (GSSAPI) are refused with a :class:`~aioaccum.errors.ConfigError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from aiokafka.partitioner import DefaultPartitioner

from aioaccum.config.kinds import Kind
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.config.settings import ALIASES, COMPRESSION_TYPES, INT_MAX, PRODUCER
from aioaccum.config.table import NoJavaName, Setting, Table
from aioaccum.errors import ConfigError

__all__ = [
    "AIOKAFKA_DEFAULTS",
    "ARGUMENTS",
    "DERIVED",
    "MISSING",
    "RENAMED",
    "config_from_aiokafka",
]


class _Missing:
    def __repr__(self) -> str:
        return "<aiokafka's default>"


MISSING: Final[Any] = _Missing()  # acks left out: 1, or 'all' with idempotence, as aiokafka
DEFAULT_PARTITIONER = DefaultPartitioner()
_DEFAULT_PORT = 9092
_COMPRESSION = tuple(codec for codec in COMPRESSION_TYPES if codec != "none")
_OMIT: Final[Any] = object()  # what a kind returns for "leave the setting at its default"


# --- kinds: aiokafka's value, as the value of the setting it sets


class _Same(Kind):
    """The value as it is; the producer's row checks it."""

    annotation = shown = "object"


class _UnlessNone(_Same):
    """None leaves the setting at aioaccum's default."""

    def check(self, value: object, label: str) -> object:
        return _OMIT if value is None else value


class _WithPort(_Same):
    """aiokafka's bootstrap servers, with its default port where none is given."""

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str):
            value = [s.strip() for s in value.split(",")]
        if not isinstance(value, Sequence):
            return value  # ProducerConfig says what is wrong with it
        return [
            f"{s}:{_DEFAULT_PORT}"
            if isinstance(s, str) and s and (":" not in s or s.endswith("]"))
            else s
            for s in value
        ]


class _Compression(_Same):
    def check(self, value: object, label: str) -> object:
        if value is None:
            return "none"
        if value not in _COMPRESSION:
            raise ConfigError(
                f"{label} must be one of {', '.join(_COMPRESSION)} or None, got {value!r}"
            )
        return value


class _Acks(_Same):
    """Only the values aiokafka takes; the rule between acks and idempotence comes after."""

    def check(self, value: object, label: str) -> object:
        if value is not MISSING and value not in (0, 1, -1, "all"):
            raise ConfigError(f"{label} must be 0, 1, -1 or 'all', got {value!r}")
        return value


class _Partitioner(_Same):
    def check(self, value: object, label: str) -> object:
        if isinstance(value, DefaultPartitioner):
            return None  # the same murmur2 for keys; keyless records are sticky (see the guide)
        if not callable(value):
            raise ConfigError(
                f"{label} must be a callable partitioner(key_bytes, all_partitions, "
                f"available_partitions), got {value!r}"
            )
        return _AIOKafkaPartitioner(value)


class _IdleMs(_Same):
    def check(self, value: object, label: str) -> object:
        return INT_MAX if value is None else value  # None: no idle check


class _AIOKafkaPartitioner:
    """aiokafka's partitioner signature, called as aioaccum's ``Partitioner``."""

    __slots__ = ("_partition",)

    def __init__(self, partition: Callable[[bytes | None, list[int], list[int]], int]) -> None:
        self._partition = partition

    def __call__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        return self._partition(key, list(all_partitions), list(available_partitions))


# --- the rows: aiokafka 0.14's constructor arguments, in its order, with its defaults

_SAME, _UNLESS_NONE = _Same(), _UnlessNone()
_IGNORED = NoJavaName("ignored, with aiokafka's own deprecation warning")
_KERBEROS = NoJavaName("SASL GSSAPI (Kerberos) is not supported: refused unless left default")
_DROP_IN = NoJavaName("the drop-in applies it to each record itself")

ARGUMENTS: tuple[Setting, ...] = (
    Setting("loop", _IGNORED, _SAME, None, "The producer runs on the loop that starts it"),
    Setting("bootstrap_servers", "bootstrap_servers", _WithPort(), "localhost",
            "aiokafka's port 9092 is added where none is given"),
    Setting("client_id", "client_id", _UNLESS_NONE, None, "None keeps aioaccum's client id"),
    Setting("metadata_max_age_ms", "metadata_max_age_ms", _SAME, 300000, "As it is"),
    Setting("request_timeout_ms", "request_timeout_ms", _SAME, 40000,
            "Also max_block_ms, and delivery_timeout_ms without idempotence"),
    Setting("api_version", _IGNORED, _SAME, None, "Each request's version is agreed"),
    Setting("acks", "acks", _Acks(), MISSING,
            "Left out: 1, or 'all' with idempotence; with idempotence only 'all'"),
    Setting("key_serializer", _DROP_IN, _SAME, None, "Applied by the drop-in"),
    Setting("value_serializer", _DROP_IN, _SAME, None, "Applied by the drop-in"),
    Setting("compression_type", "compression_type", _Compression(), None, "None: 'none'"),
    Setting("max_batch_size", "batch_size", _SAME, 16384, "Renamed"),
    Setting("partitioner", "partitioner", _Partitioner(), DEFAULT_PARTITIONER,
            "aiokafka's default is Kafka's; another is called with aiokafka's arguments"),
    Setting("max_request_size", "max_request_size", _SAME, 1048576, "As it is"),
    Setting("linger_ms", "linger_ms", _SAME, 0, "As it is"),
    Setting("retry_backoff_ms", "retry_backoff_ms", _SAME, 100,
            "Also retry_backoff_max_ms: aiokafka's wait does not grow"),
    Setting("security_protocol", "security_protocol", _SAME, "PLAINTEXT", "As it is"),
    Setting("ssl_context", "ssl_context", _SAME, None, "As it is"),
    Setting("connections_max_idle_ms", "connections_max_idle_ms", _IdleMs(), 540000,
            "None: no idle check"),
    Setting("enable_idempotence", "enable_idempotence", _SAME, False,
            "Turned on by transactional_id too"),
    Setting("transactional_id", "transactional_id", _UNLESS_NONE, None, "As it is"),
    Setting("transaction_timeout_ms", "transaction_timeout_ms", _SAME, 60000,
            "Only with transactional_id"),
    Setting("sasl_mechanism", "sasl_mechanism", _SAME, "PLAIN",
            "Only with a SASL security_protocol"),
    Setting("sasl_plain_password", "sasl_plain_password", _UNLESS_NONE, None, "As it is",
            secret=True),
    Setting("sasl_plain_username", "sasl_plain_username", _UNLESS_NONE, None, "As it is"),
    Setting("sasl_kerberos_service_name", _KERBEROS, _SAME, "kafka", "Refused"),
    Setting("sasl_kerberos_domain_name", _KERBEROS, _SAME, None, "Refused"),
    Setting("sasl_oauth_token_provider", "sasl_oauth_token_provider", _UNLESS_NONE, None,
            "aiokafka's AbstractTokenProvider is one of aioaccum's as it is", secret=True),
)  # fmt: skip  (a table: one row per argument)
_TABLE = Table(ARGUMENTS)

AIOKAFKA_DEFAULTS: Mapping[str, Any] = {row.name: row.default for row in ARGUMENTS}
"""aiokafka 0.14's constructor arguments and their defaults (a unit test compares them)."""

# aiokafka's names whose meaning carries over under another name.
RENAMED: Mapping[str, str] = {
    row.name: row.key for row in ARGUMENTS if isinstance(row.key, str) and row.key != row.name
}
# aioaccum settings the rules derive from aiokafka's arguments, which a keyword argument
# overrides.
DERIVED = frozenset(
    {"max_block_ms", "delivery_timeout_ms", "retry_backoff_max_ms",
     "max_in_flight_requests_per_connection"}
)  # fmt: skip


def _check_rows() -> None:
    """Every argument sets a producer setting, under its name or a known alias of it."""
    for row in ARGUMENTS:
        if isinstance(row.key, str) and (
            row.key not in PRODUCER.by_name
            or (row.key != row.name and ALIASES.get(row.name) != row.key)
        ):
            raise TypeError(f"aiokafka's {row.name} sets no producer setting {row.key!r}")
    if not set(PRODUCER.names) >= DERIVED:
        raise TypeError(f"not producer settings: {sorted(DERIVED - set(PRODUCER.names))}")


_check_rows()


def config_from_aiokafka(
    arguments: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> ProducerConfig:
    """The :class:`ProducerConfig` that behaves as an aiokafka producer with ``arguments``.

    Args:
        arguments: aiokafka's constructor arguments; missing ones take aiokafka's defaults.
        settings: aioaccum settings on top (``buffer_memory``, ``delivery_timeout_ms``, ...),
            by :class:`ProducerConfig`'s names; they win over what the mapping derives.

    Raises:
        ConfigError: An argument is invalid, has no meaning in aioaccum, or conflicts.
    """
    unknown = set(arguments) - set(_TABLE.names)
    if unknown:
        raise ConfigError(f"not aiokafka producer arguments: {', '.join(sorted(unknown))}")
    a = {**AIOKAFKA_DEFAULTS, **arguments}
    if a["loop"] is not None:
        warnings.warn(
            "loop= is ignored: the producer runs on the event loop that starts it (aiokafka "
            "itself stopped using this argument in 0.7.1)",
            DeprecationWarning,
            stacklevel=3,
        )
    if a["api_version"] not in (None, "auto"):
        warnings.warn(
            "api_version= is ignored: each request's version is agreed with the broker "
            "(aiokafka itself stopped using this argument in 0.13.0)",
            DeprecationWarning,
            stacklevel=3,
        )
    kw: dict[str, Any] = {}
    for row in ARGUMENTS:
        if isinstance(row.key, str):
            value = row.kind.check(a[row.name], row.name)
            if value is not _OMIT:
                kw[row.key] = value
    # Rules between arguments, as aiokafka applies them.
    idempotent = bool(a["enable_idempotence"]) or a["transactional_id"] is not None
    kw["enable_idempotence"] = idempotent
    kw["acks"] = _acks(a["acks"], idempotent)
    _refuse_kerberos(a)
    # aiokafka's send() waits up to request_timeout_ms for metadata and for room.
    kw["max_block_ms"] = a["request_timeout_ms"]
    # aiokafka waits retry_backoff_ms between retries, without growing it.
    kw["retry_backoff_max_ms"] = a["retry_backoff_ms"]
    if a["transactional_id"] is None:
        del kw["transaction_timeout_ms"]
    if not idempotent:
        # aiokafka fails a batch once request_timeout_ms passed since it was queued, and sends
        # one batch per partition at a time, which keeps retried records in order.
        linger, timeout = a["linger_ms"], a["request_timeout_ms"]
        if isinstance(linger, int) and isinstance(timeout, int):
            kw["delivery_timeout_ms"] = min(linger + timeout, INT_MAX)
        kw["max_in_flight_requests_per_connection"] = 1
    protocol = a["security_protocol"]
    if not (isinstance(protocol, str) and protocol.strip().upper().startswith("SASL")):
        del kw["sasl_mechanism"]  # aiokafka's default PLAIN only counts with SASL
    for name, value in (settings or {}).items():
        if name in AIOKAFKA_DEFAULTS:
            raise ConfigError(f"{name} is an aiokafka argument; pass it as one")
        renamed = next((old for old, new in RENAMED.items() if new == name), None)
        if renamed is not None and arguments.get(renamed, AIOKAFKA_DEFAULTS[renamed]) != (
            AIOKAFKA_DEFAULTS[renamed]
        ):
            raise ConfigError(f"{renamed} and {name} set the same thing; keep {renamed}")
        kw[name] = value
    try:
        return ProducerConfig.from_kwargs(**kw)
    except ConfigError as exc:
        exc.add_note(
            "aioaccum.compat passes aiokafka's max_batch_size as batch_size and "
            "request_timeout_ms as max_block_ms too (see docs/migrating-from-aiokafka.md)"
        )
        raise


def _acks(acks: Any, idempotent: bool) -> Any:
    if idempotent:
        if acks is MISSING:
            return "all"
        if acks not in ("all", -1):
            raise ConfigError(
                f"acks={acks!r} is not supported with enable_idempotence=True (nor by "
                "aiokafka): leave acks out, or set it to 'all'"
            )
    return 1 if acks is MISSING else acks


def _refuse_kerberos(a: Mapping[str, Any]) -> None:
    if a["sasl_mechanism"] == "GSSAPI" or any(
        a[row.name] != row.default for row in ARGUMENTS if row.key is _KERBEROS
    ):
        raise ConfigError(
            "SASL GSSAPI (Kerberos) is not supported by aioaccum, so sasl_mechanism='GSSAPI' "
            "and the sasl_kerberos_* arguments are refused; use PLAIN or SCRAM-SHA-256/512, "
            "or keep aiokafka for a Kerberos cluster"
        )
