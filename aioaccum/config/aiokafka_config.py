"""aiokafka's producer arguments as a :class:`~aioaccum.config.ProducerConfig`.

:func:`config_from_aiokafka` is the mapping :class:`aioaccum.compat.AIOKafkaProducer` applies,
with aiokafka's defaults kept (``docs/migrating-from-aiokafka.md`` has the table): each argument
goes to its setting, a few aioaccum settings are derived so that the producer behaves as
aiokafka's (``max_block_ms``, ``delivery_timeout_ms``, ``retry_backoff_max_ms``,
``max_in_flight_requests_per_connection``), and the arguments with no meaning here (GSSAPI)
are refused with a :class:`~aioaccum.errors.ConfigError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from aiokafka.partitioner import DefaultPartitioner

from aioaccum.config.producer_config import ProducerConfig
from aioaccum.config.settings import INT_MAX
from aioaccum.errors import ConfigError

__all__ = ["AIOKAFKA_DEFAULTS", "DERIVED", "MISSING", "RENAMED", "config_from_aiokafka"]


class _Missing:
    def __repr__(self) -> str:
        return "<aiokafka's default>"


MISSING: Final[Any] = _Missing()  # acks left out: 1, or 'all' with idempotence, as aiokafka
DEFAULT_PARTITIONER = DefaultPartitioner()
_DEFAULT_PORT = 9092
_COMPRESSION = ("gzip", "snappy", "lz4", "zstd")

AIOKAFKA_DEFAULTS: Mapping[str, Any] = {
    "loop": None,
    "bootstrap_servers": "localhost",
    "client_id": None,
    "metadata_max_age_ms": 300000,
    "request_timeout_ms": 40000,
    "api_version": None,
    "acks": MISSING,
    "key_serializer": None,
    "value_serializer": None,
    "compression_type": None,
    "max_batch_size": 16384,
    "partitioner": DEFAULT_PARTITIONER,
    "max_request_size": 1048576,
    "linger_ms": 0,
    "retry_backoff_ms": 100,
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "connections_max_idle_ms": 540000,
    "enable_idempotence": False,
    "transactional_id": None,
    "transaction_timeout_ms": 60000,
    "sasl_mechanism": "PLAIN",
    "sasl_plain_password": None,
    "sasl_plain_username": None,
    "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None,
    "sasl_oauth_token_provider": None,
}
"""aiokafka 0.14's constructor arguments and their defaults (a unit test compares them)."""

# aiokafka's names whose meaning carries over under another name.
RENAMED: Mapping[str, str] = {"max_batch_size": "batch_size"}
# aioaccum settings the mapping derives from aiokafka's, which a keyword argument overrides.
DERIVED = frozenset(
    {"max_block_ms", "delivery_timeout_ms", "retry_backoff_max_ms",
     "max_in_flight_requests_per_connection"}
)  # fmt: skip


def _with_port(servers: object) -> object:
    """aiokafka's bootstrap servers, with its default port where none is given."""
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",")]
    if not isinstance(servers, Sequence):
        return servers  # ProducerConfig says what is wrong with it
    return [
        f"{s}:{_DEFAULT_PORT}"
        if isinstance(s, str) and s and (":" not in s or s.endswith("]"))
        else s
        for s in servers
    ]


def _partitioner(partitioner: object) -> object:
    if isinstance(partitioner, DefaultPartitioner):
        return None  # the same murmur2 for keys; keyless records are sticky (see the guide)
    if not callable(partitioner):
        raise ConfigError(
            f"partitioner must be a callable partitioner(key_bytes, all_partitions, "
            f"available_partitions), got {partitioner!r}"
        )
    return _AIOKafkaPartitioner(partitioner)


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
    unknown = set(arguments) - set(AIOKAFKA_DEFAULTS)
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
    idempotent = bool(a["enable_idempotence"]) or a["transactional_id"] is not None
    kw: dict[str, Any] = {
        "bootstrap_servers": _with_port(a["bootstrap_servers"]),
        "metadata_max_age_ms": a["metadata_max_age_ms"],
        "request_timeout_ms": a["request_timeout_ms"],
        # aiokafka's send() waits up to request_timeout_ms for metadata and for room.
        "max_block_ms": a["request_timeout_ms"],
        "acks": _acks(a["acks"], idempotent),
        "enable_idempotence": idempotent,
        "compression_type": _compression(a["compression_type"]),
        "batch_size": a["max_batch_size"],
        "partitioner": _partitioner(a["partitioner"]),
        "max_request_size": a["max_request_size"],
        "linger_ms": a["linger_ms"],
        # aiokafka waits retry_backoff_ms between retries, without growing it.
        "retry_backoff_ms": a["retry_backoff_ms"],
        "retry_backoff_max_ms": a["retry_backoff_ms"],
        "security_protocol": a["security_protocol"],
        "ssl_context": a["ssl_context"],
        "connections_max_idle_ms": (
            INT_MAX if a["connections_max_idle_ms"] is None else a["connections_max_idle_ms"]
        ),
    }
    if a["client_id"] is not None:
        kw["client_id"] = a["client_id"]
    if a["transactional_id"] is not None:
        kw["transactional_id"] = a["transactional_id"]
        kw["transaction_timeout_ms"] = a["transaction_timeout_ms"]
    if not idempotent:
        # aiokafka fails a batch once request_timeout_ms passed since it was queued, and sends
        # one batch per partition at a time, which keeps retried records in order.
        linger, timeout = a["linger_ms"], a["request_timeout_ms"]
        if isinstance(linger, int) and isinstance(timeout, int):
            kw["delivery_timeout_ms"] = min(linger + timeout, INT_MAX)
        kw["max_in_flight_requests_per_connection"] = 1
    kw.update(_sasl(a))
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
            "aioaccum.compat.producer passes aiokafka's max_batch_size as batch_size and "
            "request_timeout_ms as max_block_ms too (see docs/migrating-from-aiokafka.md)"
        )
        raise


def _acks(acks: Any, idempotent: bool) -> Any:
    if acks is not MISSING and acks not in (0, 1, -1, "all"):
        raise ConfigError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
    if idempotent:
        if acks is MISSING:
            return "all"
        if acks not in ("all", -1):
            raise ConfigError(
                f"acks={acks!r} is not supported with enable_idempotence=True (nor by "
                "aiokafka): leave acks out, or set it to 'all'"
            )
    return 1 if acks is MISSING else acks


def _compression(codec: object) -> object:
    if codec is None:
        return "none"
    if codec not in _COMPRESSION:
        raise ConfigError(
            f"compression_type must be one of {', '.join(_COMPRESSION)} or None, got {codec!r}"
        )
    return codec


def _sasl(a: Mapping[str, Any]) -> dict[str, Any]:
    mechanism = a["sasl_mechanism"]
    if mechanism == "GSSAPI" or a["sasl_kerberos_domain_name"] is not None or (
        a["sasl_kerberos_service_name"] != AIOKAFKA_DEFAULTS["sasl_kerberos_service_name"]
    ):
        raise ConfigError(
            "SASL GSSAPI (Kerberos) is not supported by aioaccum, so sasl_mechanism='GSSAPI' "
            "and the sasl_kerberos_* arguments are refused; use PLAIN or SCRAM-SHA-256/512, "
            "or keep aiokafka for a Kerberos cluster"
        )
    out: dict[str, Any] = {}
    for name in ("sasl_plain_username", "sasl_plain_password"):
        if a[name] is not None:
            out[name] = a[name]
    protocol = a["security_protocol"]
    if isinstance(protocol, str) and protocol.strip().upper().startswith("SASL"):
        out["sasl_mechanism"] = mechanism  # aiokafka's default PLAIN only counts with SASL
    if a["sasl_oauth_token_provider"] is not None:
        # aiokafka's AbstractTokenProvider is a token provider of aioaccum's as it is.
        out["sasl_oauth_token_provider"] = a["sasl_oauth_token_provider"]
    return out
