"""The table of producer settings: one row per setting, as Kafka's ``ConfigDef.define`` rows.

Each :class:`Setting` holds everything known about one setting: its Python name, its Java property
(or why there is none), its kind (type, limits, how a ``.properties`` string is read, how it is
shown in the docs), its default and a one-line doc. :mod:`aioaccum.config.producer_config` builds
:class:`~aioaccum.config.ProducerConfig`, its checks, the name tables and the suggestions from these
rows, and ``scripts/gen_config_docs.py`` writes ``docs/configuration.md`` from them.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aioaccum.errors import ConfigError

INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Java's bounds per codec, and the extra value each accepts as "the codec's own default".
LEVELS: dict[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}
LEVEL_PROPERTIES = {f"compression.{codec}.level": codec for codec in LEVELS}
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


# --- value types: Kafka's ConfigDef.Type and Validator in one


class _Kind:
    """How a setting's values look: read from a property string, checked and normalised, and
    shown in the docs. Messages name the setting by ``label``, as the user spelt it."""

    annotation = "str"  # ProducerConfig's annotation for the field; import checks they agree
    shown = "str"  # the docs' type column
    limits = ""  # the docs' range or choices column

    def parse(self, text: str, label: str, name: str) -> object:
        return text

    def check(self, value: object, label: str) -> object:
        return value


class _Int(_Kind):
    shown = "int"

    def __init__(
        self,
        lo: int,
        hi: int = _LONG_MAX,
        *,
        optional: bool = False,
        os_default: bool = False,
        limits: str = "",
    ) -> None:
        self.lo, self.hi = lo, hi
        self.os_default = os_default  # Java's -1 for "the OS default", stored as None
        self.optional = optional or os_default
        self.annotation = "int | None" if self.optional else "int"
        self.limits = limits or (f">= {lo}" if hi == _LONG_MAX else f"{lo} .. {hi}") + (
            "; -1 or None: the OS default" if os_default else ""
        )

    def parse(self, text: str, label: str, name: str) -> object:
        try:
            return int(text.strip())
        except ValueError:
            raise ConfigError(f"{label} must be an integer, got {text!r}") from None

    def check(self, value: object, label: str) -> object:
        if (value is None and self.optional) or (value == -1 and self.os_default):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label} must be an int, got {value!r} ({type(value).__name__})")
        if value < self.lo:
            raise ConfigError(f"{label} must be >= {self.lo}, got {value}")
        if value > self.hi:
            raise ConfigError(f"{label} must be <= {self.hi}, got {value}")
        return value


class _Bool(_Kind):
    annotation = shown = "bool"

    def parse(self, text: str, label: str, name: str) -> object:
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ConfigError(f"{label} must be true or false, got {text!r}")
        return word in _TRUE

    def check(self, value: object, label: str) -> object:
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be True or False, got {value!r}")
        return value


class _Str(_Kind):
    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self.annotation = "str | None" if optional else "str"

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str) or (value is None and self.optional):
            return value
        if self.optional:  # the optional strings are credentials: never echo one
            raise ConfigError(f"{label} must be a str or None, got a {type(value).__name__}")
        raise ConfigError(f"{label} must be a str, got {value!r}")


class _Choice(_Kind):
    def __init__(self, choices: Sequence[str], *, upper: bool, optional: bool = False) -> None:
        self.choices, self.upper, self.optional = choices, upper, optional
        self.annotation = "str | None" if optional else "str"
        self.limits = ", ".join(choices)

    def check(self, value: object, label: str) -> object:
        if value is None and self.optional:
            return None
        norm = value.strip() if isinstance(value, str) else None
        norm = norm and (norm.upper() if self.upper else norm.lower())
        if norm not in self.choices:
            raise ConfigError(f"{label} must be one of {self.limits}; got {value!r}")
        return norm


class _Acks(_Kind):
    annotation, shown, limits = "int", "int or str", "'all' (-1), 0, 1"

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str) and value.strip().lower() == "all":
            return -1
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value in (-1, 0, 1):
            return value
        raise ConfigError(
            f"{label} must be one of 'all', -1, 0, 1 (or those as strings), got {value!r}"
        )


class _Servers(_Kind):
    annotation, shown, limits = "str | Sequence[str]", "list of str", "'host:port' each"

    def check(self, value: object, label: str) -> object:
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
                f"{label} must be 'host:port' strings (or one comma-separated string), "
                f"got {value!r}"
            )
        return tuple(str(s) for s in items)


class _Callable(_Kind):
    shown = "callable"

    def __init__(self, annotation: str) -> None:
        self.annotation = annotation

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(
            f"{label}={text!r}: Java class names can't be loaded; pass a Python callable "
            f"as {name} instead"
        )

    def check(self, value: object, label: str) -> object:
        if value is not None and not callable(value):
            raise ConfigError(f"{label} must be a callable or None, got {value!r}")
        return value


class _TokenProvider(_Callable):
    def check(self, value: object, label: str) -> object:
        if value is None or callable(value) or callable(getattr(value, "token", None)):
            return value
        # Not echoed: an object holding credentials may show them in its repr.
        raise ConfigError(
            f"{label} must be an async callable returning OAuthToken(token, expires_at_ms) or "
            f"(token, expires_at_ms), or an aiokafka AbstractTokenProvider; got an object of "
            f"type {type(value).__name__}"
        )


class _SslContext(_Kind):
    annotation, shown = "ssl.SSLContext | None", "ssl.SSLContext"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(f"{label} must be an ssl.SSLContext, not a string")

    def check(self, value: object, label: str) -> object:
        if value is not None and not isinstance(value, ssl.SSLContext):
            raise ConfigError(f"{label} must be an ssl.SSLContext, got {value!r}")
        return value


class _Interceptors(_Kind):
    """Objects with ``on_send`` and/or ``on_acknowledgement`` (Java's ProducerInterceptor)."""

    annotation, shown = "Sequence[ProducerInterceptor]", "list of objects"
    limits = "each with on_send and/or on_acknowledgement"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(
            f"{label}={text!r}: Java class names can't be loaded; pass interceptor objects "
            f"as {name}=[...] instead (see aioaccum.interceptors.ProducerInterceptor)"
        )

    def check(self, value: object, label: str) -> object:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(
                f"{label} must be a list of interceptor objects (see "
                f"aioaccum.interceptors.ProducerInterceptor), got {value!r}"
            )
        for i, item in enumerate(value):
            if isinstance(item, type):
                raise ConfigError(
                    f"{label}[{i}] is the class {item.__name__}; pass an instance, "
                    f"{item.__name__}()"
                )
            if not any(callable(getattr(item, m, None)) for m in _INTERCEPTOR_METHODS):
                raise ConfigError(
                    f"{label}[{i}] ({item!r}) has neither on_send nor on_acknowledgement; see "
                    "aioaccum.interceptors.ProducerInterceptor"
                )
        return tuple(value)


_INTERCEPTOR_METHODS = ("on_send", "on_acknowledgement")


class _Provider(_Kind):
    """An OpenTelemetry provider object (``TracerProvider``, ``MeterProvider``) or None."""

    def __init__(self, kind: str, method: str) -> None:
        self.annotation, self.shown, self.method = f"{kind} | None", kind, method
        self.limits = f"None: OpenTelemetry's global {kind}"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(f"{label} must be an OpenTelemetry {self.shown} object, not a string")

    def check(self, value: object, label: str) -> object:
        if value is not None and not callable(getattr(value, self.method, None)):
            raise ConfigError(
                f"{label} must be an OpenTelemetry {self.shown} (with {self.method}()) or "
                f"None, got {value!r}"
            )
        return value


# --- the rows


@dataclass(frozen=True)
class NoJavaName:
    """In :attr:`Setting.java`: the Java client has no single property for the setting."""

    why: str
    read_from: tuple[str, ...] = ()
    """Java properties :meth:`ProducerConfig.from_properties` takes the value from."""


@dataclass(frozen=True)
class Setting:
    """One producer setting, and the only place its facts are written."""

    name: str
    java: str | NoJavaName
    kind: _Kind
    default: object
    doc: str
    secret: bool = False  # never shown by repr() nor in errors


_BOOL = _Bool()
_INT = _Int(0, INT_MAX)
_LONG = _Int(0)
_LEVEL_LIMITS = ", ".join(f"{c} {lo} .. {hi}" for c, (lo, hi, _) in LEVELS.items())
_JAAS_ONLY = "Java passes it inside sasl.jaas.config"
_INTERCEPTOR_CLASSES = "Java names classes in interceptor.classes; these are Python objects"
_OTEL_OUTSIDE = "OpenTelemetry instruments Java's client from outside its settings"
_METRICS_ALWAYS = "Java's producer always records its metrics"

SETTINGS: tuple[Setting, ...] = (
    Setting("bootstrap_servers", "bootstrap.servers", _Servers(), "127.0.0.1:9092",
            "Brokers to bootstrap from; a comma-separated string is split; stored as a tuple"),
    Setting("client_id", "client.id", _Str(), "aioaccum",
            "Names this client in broker logs and quotas"),
    Setting("acks", "acks", _Acks(), -1,
            "Acknowledgements a write needs; stored as the int -1 ('all'), 0 or 1"),
    Setting("enable_idempotence", "enable.idempotence", _BOOL, True,
            "Exactly-once, in-order writes per partition (needs acks='all')"),
    Setting("transactional_id", "transactional.id", _Str(optional=True), None,
            "Makes the producer transactional; one live producer per id (needs idempotence)"),
    Setting("transaction_timeout_ms", "transaction.timeout.ms", _Int(1, INT_MAX), 60000,
            "How long a transaction may stay open before the broker aborts it"),
    Setting("retries", "retries", _INT, INT_MAX,
            "Retries of a failed batch; delivery_timeout_ms usually bounds them first"),
    Setting("batch_size", "batch.size", _INT, 16384,
            "Bytes per batch, and the size of pooled buffers"),
    Setting("linger_ms", "linger.ms", _LONG, 5,
            "How long a batch waits for more records before it is sent"),
    Setting("buffer_memory", "buffer.memory", _Int(1), 33554432,
            "Total bytes of records waiting to be sent"),
    Setting("max_block_ms", "max.block.ms", _LONG, 60000,
            "How long send() may wait for buffer memory or metadata"),
    Setting("max_request_size", "max.request.size", _Int(1, INT_MAX), 1048576,
            "Largest produce request (and record) in bytes"),
    Setting("compression_type", "compression.type", _Choice(COMPRESSION_TYPES, upper=False),
            "none", "Codec of the record batches"),
    Setting("compression_level",
            NoJavaName("Java has compression.gzip.level, compression.lz4.level and "
                       "compression.zstd.level", read_from=tuple(LEVEL_PROPERTIES)),
            _Int(-_LONG_MAX, optional=True, limits=_LEVEL_LIMITS), None,
            "Level of the chosen codec; None for the codec's default"),
    Setting("retry_backoff_ms", "retry.backoff.ms", _LONG, 100,
            "First wait before a retry; it grows exponentially per attempt"),
    Setting("retry_backoff_max_ms", "retry.backoff.max.ms", _LONG, 1000,
            "Cap of that wait (raised to retry_backoff_ms if lower, as Java does)"),
    Setting("request_timeout_ms", "request.timeout.ms", _INT, 30000,
            "How long to wait for a broker's response"),
    Setting("delivery_timeout_ms", "delivery.timeout.ms", _INT, 120000,
            "Bound on the time from send() to success or failure (>= linger + request timeout)"),
    Setting("max_in_flight_requests_per_connection", "max.in.flight.requests.per.connection",
            _Int(1, INT_MAX), 5, "Unanswered produce requests per broker (idempotence: <= 5)"),
    Setting("metadata_max_age_ms", "metadata.max.age.ms", _LONG, 300000,
            "Refresh metadata at least this often"),
    Setting("metadata_max_idle_ms", "metadata.max.idle.ms", _Int(5000), 300000,
            "Forget a topic not produced to for this long"),
    Setting("connections_max_idle_ms", "connections.max.idle.ms", _LONG, 540000,
            "Close connections idle for this long"),
    Setting("metrics_sample_window_ms", "metrics.sample.window.ms", _Int(1), 30000,
            "Time one sample of a windowed metric (a rate, average or max) covers"),
    Setting("metrics_num_samples", "metrics.num.samples", _Int(1, INT_MAX), 2,
            "Samples a windowed metric is measured over"),
    Setting("metrics_enabled", NoJavaName(_METRICS_ALWAYS), _BOOL, True,
            "False keeps only the lifetime totals and live gauges: no rates, averages, maxima "
            "or per-topic metrics"),
    Setting("send_buffer_bytes", "send.buffer.bytes", _Int(1, INT_MAX, os_default=True),
            None, "Socket send buffer (SO_SNDBUF) of each broker connection"),
    Setting("receive_buffer_bytes", "receive.buffer.bytes", _Int(1, INT_MAX, os_default=True),
            None, "Socket receive buffer (SO_RCVBUF) of each broker connection"),
    Setting("partitioner", "partitioner.class", _Callable("Partitioner | None"), None,
            "A custom partitioner (see Partitioner); None for Kafka's"),
    Setting("partitioner_ignore_keys", "partitioner.ignore.keys", _BOOL, False,
            "Spread keyed records like keyless ones, ignoring the key"),
    Setting("partitioner_adaptive_partitioning_enable",
            "partitioner.adaptive.partitioning.enable", _BOOL, True,
            "Send more to partitions that drain faster"),
    Setting("partitioner_availability_timeout_ms", "partitioner.availability.timeout.ms", _LONG,
            0, "Avoid partitions whose leader has not accepted a request for this long (0: never)"),
    Setting("key_serializer", "key.serializer", _Callable("Serializer | None"), None,
            "Turns keys into bytes; None means keys are bytes already"),
    Setting("value_serializer", "value.serializer", _Callable("Serializer | None"), None,
            "Turns values into bytes; None means values are bytes already"),
    Setting("interceptors", NoJavaName(_INTERCEPTOR_CLASSES), _Interceptors(), (),
            "ProducerInterceptor objects: on_send may replace a record, on_acknowledgement sees "
            "each outcome (see docs/tracing-and-interceptors.md)"),
    Setting("tracing", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "An OpenTelemetry span per record sent, ending with its outcome (extra "
            "aioaccum[otel])"),
    Setting("tracer_provider", NoJavaName(_OTEL_OUTSIDE), _Provider("TracerProvider",
            "get_tracer"), None, "Where the spans go; setting it turns tracing on"),
    Setting("trace_context_headers", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "Put each span's W3C trace context (traceparent) in its record's headers"),
    Setting("otel_metrics", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "Report metrics() as OpenTelemetry instruments (extra aioaccum[otel])"),
    Setting("meter_provider", NoJavaName(_OTEL_OUTSIDE), _Provider("MeterProvider",
            "get_meter"), None, "Where the metrics go; setting it turns otel_metrics on"),
    Setting("security_protocol", "security.protocol", _Choice(SECURITY_PROTOCOLS, upper=True),
            "PLAINTEXT", "How connections are secured"),
    Setting("ssl_context", NoJavaName("Java configures TLS with ssl.* keystore properties"),
            _SslContext(), None, "TLS for SSL and SASL_SSL; None: system CAs, host names checked"),
    Setting("sasl_mechanism", "sasl.mechanism", _Choice(SASL_MECHANISMS, upper=True, optional=True),
            None, "How to authenticate; SASL protocols only"),
    Setting("sasl_plain_username", NoJavaName(_JAAS_ONLY, read_from=("sasl.jaas.config",)),
            _Str(optional=True), None, "The SASL user name"),
    Setting("sasl_plain_password", NoJavaName(_JAAS_ONLY), _Str(optional=True), None,
            "The SASL password; never shown by repr() nor in errors", secret=True),
    Setting("sasl_oauth_token_provider",
            NoJavaName("Java fetches tokens with a sasl.login.callback.handler.class"),
            _TokenProvider("TokenProvider | None"), None,
            "OAUTHBEARER: an async callable returning OAuthToken(token, expires_at_ms) or "
            "(token, expires_at_ms); not shown by repr()", secret=True),
)  # fmt: skip  (a table: one row per setting)
ROWS: Mapping[str, Setting] = {row.name: row for row in SETTINGS}
FIELDS: tuple[str, ...] = tuple(ROWS)

PYTHON_TO_JAVA: Mapping[str, str] = {
    row.name: row.java for row in SETTINGS if isinstance(row.java, str)
}
"""Field → Java property, for every field that has exactly one."""

JAVA_TO_PYTHON: Mapping[str, str] = {java: py for py, java in PYTHON_TO_JAVA.items()} | {
    java: row.name
    for row in SETTINGS
    if isinstance(row.java, NoJavaName)
    for java in row.java.read_from
}
"""Java property → field (``sasl.jaas.config`` sets the password as well)."""
