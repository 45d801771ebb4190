"""The producer's settings: one row per setting, as Kafka's ``ProducerConfig`` defines them.

Each :class:`~aioaccum.config.table.Setting` holds everything known about one setting: its Python
name, its Java property (or why there is none), its kind (type, limits, how a ``.properties``
string is read, how it is shown in the docs), its default and a one-line doc.
:mod:`aioaccum.config.producer_config` builds :class:`~aioaccum.config.ProducerConfig` and its
checks from these rows, :data:`PRODUCER` derives the name tables and the suggestions for
misspelt names, and ``scripts/gen_config_docs.py`` writes ``docs/configuration.md`` from them.
"""

from __future__ import annotations

from collections.abc import Mapping

from aioaccum.config.kinds import (
    LONG_MAX,
    Acks,
    Bool,
    Choice,
    Folder,
    Function,
    Int,
    Interceptors,
    Provider,
    Servers,
    SslContext,
    Str,
    TokenProvider,
)
from aioaccum.config.table import NoJavaName, Setting, Table

__all__ = [
    "FIELDS",
    "INT_MAX",
    "JAVA_TO_PYTHON",
    "PRODUCER",
    "PYTHON_TO_JAVA",
    "ROWS",
    "SETTINGS",
    "NoJavaName",
    "Setting",
]

INT_MAX = 2**31 - 1
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
ALLOCATION_STRATEGIES = ("full", "incremental")
# Java's bounds per codec, and the extra value each accepts as "the codec's own default".
LEVELS: dict[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}
LEVEL_PROPERTIES = {f"compression.{codec}.level": codec for codec in LEVELS}

_BOOL = Bool()
_INT = Int(0, INT_MAX)
_LONG = Int(0)
_LEVEL_LIMITS = ", ".join(f"{c} {lo} .. {hi}" for c, (lo, hi, _) in LEVELS.items())
_JAAS_ONLY = "Java passes it inside sasl.jaas.config"
_INTERCEPTOR_CLASSES = "Java names classes in interceptor.classes; these are Python objects"
_OTEL_OUTSIDE = "OpenTelemetry instruments Java's client from outside its settings"
_METRICS_ALWAYS = "Java's producer always records its metrics"
_JOURNAL = "Java's producer keeps accepted records in memory only"
JOURNAL_SYNCS = ("none", "interval", "always")
# A segment holds at least one record of max_request_size: its entry framing, the topic's
# definition and the segment header fit in this much more.
JOURNAL_SEGMENT_OVERHEAD = 64 * 1024

SETTINGS: tuple[Setting, ...] = (
    Setting("bootstrap_servers", "bootstrap.servers", Servers(), "127.0.0.1:9092",
            "Brokers to bootstrap from; a comma-separated string is split; stored as a tuple"),
    Setting("client_id", "client.id", Str(), "aioaccum",
            "Names this client in broker logs and quotas"),
    Setting("client_rack", "client.rack", Str(), "",
            "Where this client runs, as the brokers' broker.rack names it (see "
            "partitioner_rack_aware)"),
    Setting("acks", "acks", Acks(), -1,
            "Acknowledgements a write needs; stored as the int -1 ('all'), 0 or 1"),
    Setting("enable_idempotence", "enable.idempotence", _BOOL, True,
            "Exactly-once, in-order writes per partition (needs acks='all')"),
    Setting("transactional_id", "transactional.id", Str(optional=True), None,
            "Makes the producer transactional; one live producer per id (needs idempotence)"),
    Setting("transaction_timeout_ms", "transaction.timeout.ms", Int(1, INT_MAX), 60000,
            "How long a transaction may stay open before the broker aborts it"),
    Setting("retries", "retries", _INT, INT_MAX,
            "Retries of a failed batch; delivery_timeout_ms usually bounds them first"),
    Setting("batch_size", "batch.size", _INT, 1048576,
            "Most bytes per batch (with 'full' allocation, the size of pooled buffers too)",
            java_default=16384,
            why_not_java="with incremental allocation a batch holds only the chunks its records "
            "fill, so a large limit costs nothing per idle partition and lets a busy one send "
            "1 MiB per batch (librdkafka's default is 1,000,000 for the same reason)"),
    Setting("linger_ms", "linger.ms", _LONG, 5,
            "How long a batch waits for more records before it is sent"),
    Setting("buffer_memory", "buffer.memory", Int(1), 33554432,
            "Total bytes of records waiting to be sent"),
    Setting("buffer_memory_allocation_strategy", "buffer.memory.allocation.strategy",
            Choice(ALLOCATION_STRATEGIES, upper=False), "incremental",
            "How batches take buffer_memory: 'full' holds batch_size per open batch; "
            "'incremental' (KIP-1332) holds chunks that grow with the records (2 KiB, then "
            "doubling up to 64 KiB), up to "
            "batch_size, compressed batches included",
            java_default="full",
            why_not_java="'full' would pin a 1 MiB batch_size per open batch; chunks let memory "
            "follow the bytes buffered, not the number of partitions with data"),
    Setting("max_block_ms", "max.block.ms", _LONG, 60000,
            "How long send() may wait for buffer memory or metadata"),
    Setting("max_request_size", "max.request.size", Int(1, INT_MAX), 1048576,
            "Largest produce request (and record) in bytes"),
    Setting("compression_type", "compression.type", Choice(COMPRESSION_TYPES, upper=False),
            "none", "Codec of the record batches"),
    Setting("compression_level",
            NoJavaName("Java has compression.gzip.level, compression.lz4.level and "
                       "compression.zstd.level", read_from=tuple(LEVEL_PROPERTIES)),
            Int(-LONG_MAX, optional=True, limits=_LEVEL_LIMITS), None,
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
            Int(1, INT_MAX), 5, "Unanswered produce requests per broker (idempotence: <= 5)"),
    Setting("metadata_max_age_ms", "metadata.max.age.ms", _LONG, 300000,
            "Refresh metadata at least this often"),
    Setting("metadata_max_idle_ms", "metadata.max.idle.ms", Int(5000), 300000,
            "Forget a topic not produced to for this long"),
    Setting("metadata_cluster_check_enable", "metadata.cluster.check.enable", _BOOL, True,
            "Accepted and ignored: Java ignores it without re-bootstrapping, which aioaccum "
            "never does"),
    Setting("connections_max_idle_ms", "connections.max.idle.ms", _LONG, 540000,
            "Close connections idle for this long"),
    Setting("metrics_sample_window_ms", "metrics.sample.window.ms", Int(1), 30000,
            "Time one sample of a windowed metric (a rate, average or max) covers"),
    Setting("metrics_num_samples", "metrics.num.samples", Int(1, INT_MAX), 2,
            "Samples a windowed metric is measured over"),
    Setting("metrics_enabled", NoJavaName(_METRICS_ALWAYS), _BOOL, True,
            "False keeps only the lifetime totals and live gauges: no rates, averages, maxima "
            "or per-topic metrics"),
    Setting("send_buffer_bytes", "send.buffer.bytes", Int(1, INT_MAX, os_default=True),
            None, "Socket send buffer (SO_SNDBUF) of each broker connection"),
    Setting("receive_buffer_bytes", "receive.buffer.bytes", Int(1, INT_MAX, os_default=True),
            None, "Socket receive buffer (SO_RCVBUF) of each broker connection"),
    Setting("partitioner", "partitioner.class", Function("Partitioner | None"), None,
            "A custom partitioner (see Partitioner); None for Kafka's"),
    Setting("partitioner_ignore_keys", "partitioner.ignore.keys", _BOOL, False,
            "Spread keyed records like keyless ones, ignoring the key"),
    Setting("partitioner_adaptive_partitioning_enable",
            "partitioner.adaptive.partitioning.enable", _BOOL, True,
            "Send more to partitions that drain faster"),
    Setting("partitioner_availability_timeout_ms", "partitioner.availability.timeout.ms", _LONG,
            0, "Avoid partitions whose leader has not accepted a request for this long (0: never)"),
    Setting("partitioner_rack_aware", "partitioner.rack.aware", _BOOL, False,
            "Keyless records prefer partitions led in client_rack (KIP-1123); needs client_rack"),
    Setting("key_serializer", "key.serializer", Function("Serializer | None"), None,
            "Turns keys into bytes; None means keys are bytes already"),
    Setting("value_serializer", "value.serializer", Function("Serializer | None"), None,
            "Turns values into bytes; None means values are bytes already"),
    Setting("interceptors", NoJavaName(_INTERCEPTOR_CLASSES), Interceptors(), (),
            "ProducerInterceptor objects: on_send may replace a record, on_acknowledgement sees "
            "each outcome (see docs/tracing-and-interceptors.md)"),
    Setting("tracing", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "An OpenTelemetry span per record sent, ending with its outcome (extra "
            "aioaccum[otel])"),
    Setting("tracer_provider", NoJavaName(_OTEL_OUTSIDE), Provider("TracerProvider",
            "get_tracer"), None, "Where the spans go; setting it turns tracing on"),
    Setting("trace_context_headers", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "Put each span's W3C trace context (traceparent) in its record's headers"),
    Setting("otel_metrics", NoJavaName(_OTEL_OUTSIDE), _BOOL, False,
            "Report metrics() as OpenTelemetry instruments (extra aioaccum[otel])"),
    Setting("meter_provider", NoJavaName(_OTEL_OUTSIDE), Provider("MeterProvider",
            "get_meter"), None, "Where the metrics go; setting it turns otel_metrics on"),
    Setting("security_protocol", "security.protocol", Choice(SECURITY_PROTOCOLS, upper=True),
            "PLAINTEXT", "How connections are secured"),
    Setting("ssl_context", NoJavaName("Java configures TLS with ssl.* keystore properties"),
            SslContext(), None, "TLS for SSL and SASL_SSL; None: system CAs, host names checked"),
    Setting("sasl_mechanism", "sasl.mechanism", Choice(SASL_MECHANISMS, upper=True, optional=True),
            None, "How to authenticate; SASL protocols only"),
    Setting("sasl_plain_username", NoJavaName(_JAAS_ONLY, read_from=("sasl.jaas.config",)),
            Str(optional=True), None, "The SASL user name"),
    Setting("sasl_plain_password", NoJavaName(_JAAS_ONLY), Str(optional=True), None,
            "The SASL password; never shown by repr() nor in errors", secret=True),
    Setting("sasl_oauth_token_provider",
            NoJavaName("Java fetches tokens with a sasl.login.callback.handler.class"),
            TokenProvider("TokenProvider | None"), None,
            "OAUTHBEARER: an async callable returning OAuthToken(token, expires_at_ms) or "
            "(token, expires_at_ms); not shown by repr()", secret=True),
    Setting("journal_dir", NoJavaName(_JOURNAL), Folder(), None,
            "Write-ahead journal folder: send() returns once the record is in it, and a "
            "restart sends what was not acknowledged (needs enable_idempotence); None: off"),
    Setting("journal_sync", NoJavaName(_JOURNAL), Choice(JOURNAL_SYNCS, upper=False), "none",
            "What a journaled record survives: none (process crash), interval (power loss, "
            "but the last journal_sync_ms), always (power loss: send() waits for an fsync)"),
    Setting("journal_sync_ms", NoJavaName(_JOURNAL), Int(1, INT_MAX), 100,
            "With journal_sync='interval': fsync the journal at most this often"),
    Setting("journal_spill_after_ms", NoJavaName(_JOURNAL), Int(0, INT_MAX), 1000,
            "With journal_dir: how long send() waits for buffer memory before its record "
            "waits on disk alone instead (spills); 0: at once"),
    Setting("journal_max_bytes", NoJavaName(_JOURNAL), Int(1, LONG_MAX), 1 << 30,
            "Bound of the journal on disk; when full, send() waits up to max_block_ms for "
            "acknowledgements to free a segment"),
    Setting("journal_segment_bytes", NoJavaName(_JOURNAL), Int(1, INT_MAX), 16 << 20,
            "Size of one journal segment file; must exceed max_request_size + 64 KiB"),
)  # fmt: skip  (a table: one row per setting)


# --- names that are known but not supported, and other clients' names

_TWO_PHASE = (
    "KIP-939's broker-side two-phase commit is not used; aioaccum.transactions.commit_prepared "
    "commits a prepared transaction from another process"
)
_CONNECTIONS = "connection set-up is left to the connection layer and not configurable"
_BROKER_VALIDATION = (
    "it relaxes how a broker validates OAUTHBEARER tokens, and a producer validates none; "
    "remove it (aioaccum's OAUTHBEARER takes tokens from sasl_oauth_token_provider)"
)
_UNSUPPORTED = {
    "transaction.two.phase.commit.enable": _TWO_PHASE,
    "interceptor.classes": (
        "Java class names can't be loaded; pass interceptor objects as interceptors=[...] "
        "(see aioaccum.interceptors.ProducerInterceptor)"
    ),
    "client.dns.lookup": "host names are resolved by asyncio",
    "bootstrap.resolve.timeout.ms": (
        "bootstrap host names are resolved by asyncio when the producer starts, and a name "
        "that does not resolve fails start(); remove it"
    ),
    "sasl.oauthbearer.allow.unverified.audience": _BROKER_VALIDATION,
    "sasl.oauthbearer.allow.unverified.issuer": _BROKER_VALIDATION,
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
# Names other Python clients use for the same thing (aiokafka's and kafka-python's).
ALIASES: Mapping[str, str] = {"max_batch_size": "batch_size"}

PRODUCER = Table(
    SETTINGS,
    aliases=ALIASES,
    refused=_UNSUPPORTED,
    refused_prefixes=_UNSUPPORTED_PREFIXES,
    keys_go_to="Java's dotted names go to ProducerConfig.from_properties",
)
"""The producer's table: lookups, name checks and suggestions derived from :data:`SETTINGS`."""

ROWS: Mapping[str, Setting] = PRODUCER.by_name
FIELDS: tuple[str, ...] = PRODUCER.names

PYTHON_TO_JAVA: Mapping[str, str] = PRODUCER.name_to_key
"""Field → Java property, for every field that has exactly one."""

JAVA_TO_PYTHON: Mapping[str, str] = PRODUCER.key_to_name
"""Java property → field (``sasl.jaas.config`` sets the password as well)."""
