"""ProducerConfig: Java's defaults and names, property strings, and every validation message."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest

from aioaccum.config import producer_config as config_module
from aioaccum.config.producer_config import (
    JAVA_TO_PYTHON,
    PYTHON_TO_JAVA,
    SETTINGS,
    NoJavaName,
    ProducerConfig,
)
from aioaccum.config.settings import PRODUCER
from aioaccum.errors import ConfigError

# Kafka 4.x ProducerConfig defaults, by Java name.
JAVA_DEFAULTS: dict[str, object] = {
    "batch.size": 16384,
    "linger.ms": 5,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "max.request.size": 1048576,
    "acks": -1,
    "enable.idempotence": True,
    "retries": 2147483647,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "request.timeout.ms": 30000,
    "delivery.timeout.ms": 120000,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "metadata.max.age.ms": 300000,
    "metadata.max.idle.ms": 300000,
    "connections.max.idle.ms": 540000,
    "partitioner.ignore.keys": False,
    "partitioner.adaptive.partitioning.enable": True,
    "partitioner.availability.timeout.ms": 0,
    "security.protocol": "PLAINTEXT",
    "client.rack": "",
    "partitioner.rack.aware": False,
    "buffer.memory.allocation.strategy": "full",
    "metadata.cluster.check.enable": True,
}

SECRET = "s3cr3t-Pa55"


def sasl(**extra: Any) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
        **extra,
    }


def error_of(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_kwargs(**kwargs)
    return str(info.value)


def property_error(properties: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_properties(properties)
    return str(info.value)


# -- defaults and names -----------------------------------------------------------------------


# Ours differ from Java's here on purpose (see the rows' why_not_java); a properties file still
# gets Java's.
OURS_NOT_JAVAS = {"batch.size": 1048576, "buffer.memory.allocation.strategy": "incremental"}


@pytest.mark.parametrize(("java", "expected"), JAVA_DEFAULTS.items())
def test_defaults_equal_javas_except_where_documented(java: str, expected: object) -> None:
    ours = getattr(ProducerConfig(), JAVA_TO_PYTHON[java])
    assert ours == OURS_NOT_JAVAS.get(java, expected)
    # From a Java properties file that leaves the setting out, Java's default holds.
    assert getattr(ProducerConfig.from_properties({}), JAVA_TO_PYTHON[java]) == expected


def test_a_default_that_differs_from_javas_is_documented_in_its_row() -> None:
    differing = {str(row.java) for row in SETTINGS if row.differs_from_java}
    assert differing == set(OURS_NOT_JAVAS)
    for row in SETTINGS:
        if row.differs_from_java:
            assert row.why_not_java
            assert row.java_default == JAVA_DEFAULTS[str(row.java)]
    # A file that sets them gets what it says.
    cfg = ProducerConfig.from_properties({"batch.size": "65536",
                                          "buffer.memory.allocation.strategy": "incremental"})
    assert (cfg.batch_size, cfg.buffer_memory_allocation_strategy) == (65536, "incremental")


def test_other_defaults() -> None:
    cfg = ProducerConfig()
    assert cfg.bootstrap_servers == ("127.0.0.1:9092",)
    assert cfg.client_id == "aioaccum"
    assert cfg.compression_level is None
    assert cfg.partitioner is None
    assert cfg.key_serializer is None
    assert cfg.value_serializer is None
    assert cfg.send_buffer_bytes is None
    assert cfg.receive_buffer_bytes is None
    assert cfg.sasl_mechanism is None
    assert cfg.explicit_settings == frozenset()
    assert repr(cfg) == "ProducerConfig()"


def test_java_name_table_round_trips() -> None:
    for py, java in PYTHON_TO_JAVA.items():
        assert ProducerConfig.java_name(py) == java
        assert JAVA_TO_PYTHON[java] == py
    assert ProducerConfig.java_name("linger_ms") == "linger.ms"
    assert ProducerConfig.java_name("max_in_flight_requests_per_connection") == (
        "max.in.flight.requests.per.connection"
    )
    assert ProducerConfig.java_name("partitioner") == "partitioner.class"


def test_java_name_of_fields_without_one() -> None:
    with pytest.raises(ConfigError, match=r"compression_level has no single Java property.*gzip"):
        ProducerConfig.java_name("compression_level")
    with pytest.raises(ConfigError, match="did you mean 'linger_ms'"):
        ProducerConfig.java_name("linger_msec")


def test_config_is_frozen_hashable_and_compared_by_value() -> None:
    cfg = ProducerConfig(linger_ms=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.linger_ms = 0  # type: ignore[misc]
    assert cfg == ProducerConfig(linger_ms=10, enable_idempotence=True)
    assert hash(cfg) == hash(ProducerConfig(linger_ms=10))
    assert cfg != ProducerConfig()


# -- the rows ---------------------------------------------------------------------------------


def test_fields_are_the_rows_in_order_with_the_rows_defaults() -> None:
    fields = [f for f in dataclasses.fields(ProducerConfig) if f.init]
    assert [f.name for f in fields] == [row.name for row in SETTINGS]
    signature = inspect.signature(ProducerConfig).parameters
    assert [signature[row.name].default.value for row in SETTINGS] == [
        row.default for row in SETTINGS
    ]


def test_a_class_body_that_disagrees_with_the_rows_fails_at_import() -> None:
    class Missing:
        linger_ms: int = config_module._ROW_DEFAULT

    with pytest.raises(TypeError, match=r"fields and SETTINGS disagree: .*bootstrap_servers"):
        config_module._defaults_from_rows(Missing)

    # Every field, but one with another type.
    annotations = {row.name: row.kind.annotation for row in SETTINGS} | {"linger_ms": "float"}
    namespace = dict.fromkeys(annotations, config_module._ROW_DEFAULT)
    wrong_type = type("WrongType", (), {**namespace, "__annotations__": annotations})
    with pytest.raises(TypeError, match=r"\('linger_ms', 'float'\)"):
        config_module._defaults_from_rows(wrong_type)


def test_java_names_are_the_python_names_with_dots() -> None:
    for row in SETTINGS:
        if isinstance(row.java, str) and row.name != "partitioner":
            assert row.java == row.name.replace("_", ".")


def test_every_row_says_why_it_has_no_java_name() -> None:
    for row in SETTINGS:
        if isinstance(row.java, NoJavaName):
            with pytest.raises(ConfigError, match=f"^{row.name} has no single Java property: "):
                ProducerConfig.java_name(row.name)
            assert row.name not in PYTHON_TO_JAVA
    assert JAVA_TO_PYTHON["sasl.jaas.config"] == "sasl_plain_username"
    assert JAVA_TO_PYTHON["compression.zstd.level"] == "compression_level"


def test_the_docstring_lists_every_setting_with_its_doc() -> None:
    doc = ProducerConfig.__doc__ or ""
    for row in SETTINGS:
        assert f"        {row.name}: {row.doc}." in doc


def test_labels_belong_to_one_call() -> None:
    # from_properties names settings as written; nothing of that outlives the call.
    assert property_error({"batch.size": "-5"}) == "batch.size must be >= 0, got -5"
    assert error_of(batch_size=-5) == "batch_size must be >= 0, got -5"
    with pytest.raises(ConfigError, match=r"^batch_size must be >= 0"):
        ProducerConfig(batch_size=-5)


# -- from_properties --------------------------------------------------------------------------


def test_from_properties_converts_property_file_strings() -> None:
    cfg = ProducerConfig.from_properties(
        {
            "bootstrap.servers": "k1:9092, k2:9093",
            "client.id": "billing",
            "acks": "1",
            "enable.idempotence": "false",
            "batch.size": "65536",
            "linger.ms": " 10 ",
            "buffer.memory": "67108864",
            "compression.type": "LZ4",
            "compression.lz4.level": "12",
            "compression.zstd.level": "19",  # not the chosen codec: ignored, as in Java
            "partitioner.ignore.keys": "TRUE",
            "partitioner.adaptive.partitioning.enable": "false",
            "send.buffer.bytes": "-1",
            "receive.buffer.bytes": "65536",
            "delivery.timeout.ms": "60000",
        }
    )
    assert cfg.bootstrap_servers == ("k1:9092", "k2:9093")
    assert cfg.client_id == "billing"
    assert cfg.acks == 1
    assert cfg.enable_idempotence is False
    assert cfg.batch_size == 65536
    assert cfg.linger_ms == 10
    assert cfg.buffer_memory == 67108864
    assert cfg.compression_type == "lz4"
    assert cfg.compression_level == 12
    assert cfg.partitioner_ignore_keys is True
    assert cfg.partitioner_adaptive_partitioning_enable is False
    assert cfg.send_buffer_bytes is None
    assert cfg.receive_buffer_bytes == 65536
    assert cfg.delivery_timeout_ms == 60000


def test_from_properties_takes_python_values_and_pythonic_names() -> None:
    cfg = ProducerConfig.from_properties(
        {"batch.size": 1024, "linger_ms": 0, "acks": "all", "bootstrap_servers": ["a:1", "b:2"]}
    )
    assert (cfg.batch_size, cfg.linger_ms, cfg.acks) == (1024, 0, -1)
    assert cfg.bootstrap_servers == ("a:1", "b:2")


def test_from_properties_reads_credentials_from_jaas_config() -> None:
    cfg = ProducerConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="bob" password="{SECRET}";',
        }
    )
    assert cfg.sasl_plain_username == "bob"
    assert cfg.sasl_plain_password == SECRET
    assert SECRET not in repr(cfg)


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
            "uses Krb5LoginModule; only PlainLoginModule and ScramLoginModule",
        ),
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'password="{SECRET}";',
            "must set both username and password",
        ),
        (f"password={SECRET}", "must look like"),
    ],
)
def test_bad_jaas_config_never_echoes_the_password(jaas: str, message: str) -> None:
    text = property_error({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas})
    assert message in text
    assert "sasl.jaas.config" in text
    assert SECRET not in text


def test_from_properties_names_the_setting_as_written() -> None:
    assert property_error({"batch.size": "-5"}) == "batch.size must be >= 0, got -5"
    assert property_error({"linger.ms": "ten"}) == "linger.ms must be an integer, got 'ten'"
    assert property_error({"enable.idempotence": "maybe"}) == (
        "enable.idempotence must be true or false, got 'maybe'"
    )
    text = property_error({"delivery.timeout.ms": "100", "linger.ms": "50"})
    assert text.startswith("delivery.timeout.ms=100 must be >= linger.ms + request_timeout_ms")


def test_from_properties_rejects_the_same_setting_twice() -> None:
    text = property_error({"linger.ms": "1", "linger_ms": 2})
    assert text == "'linger.ms' and 'linger_ms' both set linger_ms; keep one"


def test_from_properties_rejects_java_class_names() -> None:
    text = property_error(
        {"key.serializer": "org.apache.kafka.common.serialization.StringSerializer"}
    )
    assert "Java class names can't be loaded; pass a Python callable as key_serializer" in text
    assert "partitioner" in property_error({"partitioner.class": "com.example.MyPartitioner"})


def test_from_properties_rejects_non_mappings_and_non_string_names() -> None:
    with pytest.raises(ConfigError, match="properties must be a mapping, got list"):
        ProducerConfig.from_properties([("linger.ms", 1)])  # type: ignore[arg-type]
    bad: dict[Any, Any] = {5: 1}
    assert property_error(bad) == "property names must be strings, got 5"


# -- names: unknown, misspelt, unsupported ----------------------------------------------------


def test_unknown_setting_suggests_the_close_match() -> None:
    assert error_of(linger_msec=5) == "unknown setting 'linger_msec'; did you mean 'linger_ms'?"
    assert error_of(max_batch_size=5) == (
        "unknown setting 'max_batch_size'; did you mean 'batch_size'?"
    )
    assert property_error({"linger.msec": 5}) == (
        "unknown setting 'linger.msec'; did you mean 'linger.ms'?"
    )


def test_dotted_names_in_kwargs_point_to_from_properties() -> None:
    text = error_of(**{"batch.size": 5})
    assert text.startswith("unknown setting 'batch.size'; did you mean 'batch_size'?")
    assert "from_properties" in text


def test_unknown_setting_without_a_match_lists_the_valid_ones() -> None:
    text = error_of(frobnicate=1)
    assert text.startswith("unknown setting 'frobnicate'; valid settings are bootstrap_servers,")
    assert "sasl_plain_password" in text


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({"transaction.two.phase.commit.enable": "true"}, "two-phase commit is not used"),
        ({"interceptor.classes": "x"}, "pass interceptor objects as interceptors=[...]"),
        ({"ssl.keystore.location": "/x.jks"}, "ssl_context=ssl.create_default_context"),
        ({"sasl.kerberos.service.name": "kafka"}, "only sasl.mechanism PLAIN/SCRAM"),
        ({"metrics.recording.level": "INFO"}, "only metrics.sample.window.ms and"),
        ({"reconnect.backoff.ms": "50"}, "connection set-up"),
    ],
)
def test_unsupported_java_settings_say_so(properties: dict[str, Any], reason: str) -> None:
    (name,) = properties
    text = property_error(properties)
    assert text.startswith(f"setting {name!r} is not supported: ")
    assert reason in text


JAVA_4_4_SETTINGS = [
    line
    for line in (Path(__file__).with_name("java_producer_settings_4_4.txt")).read_text().split("\n")
    if line and not line.startswith("#")
]
# Read by from_properties into ssl_context, not a row each.
SSL_PROPERTIES = {
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.type",
    "ssl.endpoint.identification.algorithm",
}


@pytest.mark.parametrize("java", JAVA_4_4_SETTINGS)
def test_every_java_4_4_setting_is_taken_or_refused_with_a_reason(java: str) -> None:
    if java in JAVA_TO_PYTHON or java in SSL_PROPERTIES:
        return
    reason = PRODUCER.refusal(java)
    assert reason is not None, f"{java} is neither a setting nor refused with a reason"
    assert property_error({java: "x"}) == f"setting {java!r} is not supported: {reason}"


def test_the_list_of_java_settings_is_kafka_4_4s() -> None:
    assert len(JAVA_4_4_SETTINGS) == 120
    assert {"client.rack", "partitioner.rack.aware", "buffer.memory.allocation.strategy"} <= set(
        JAVA_4_4_SETTINGS
    )


def test_rack_aware_partitioning_needs_a_rack() -> None:
    assert property_error({"partitioner.rack.aware": "true"}).startswith(
        "partitioner.rack.aware needs client_rack: set client_rack to the rack (broker.rack)"
    )
    assert error_of(partitioner_rack_aware=True, client_rack="  ").startswith(
        "partitioner_rack_aware needs client_rack"
    )
    config = ProducerConfig.from_properties(
        {"partitioner.rack.aware": "true", "client.rack": "use1-az1"}
    )
    assert (config.partitioner_rack_aware, config.client_rack) == (True, "use1-az1")
    # Java takes a rack without rack awareness too (consumers read it; producers keep it).
    assert ProducerConfig(client_rack="use1-az1").partitioner_rack_aware is False


def test_incremental_allocation_is_taken_from_properties_in_any_case() -> None:
    assert ProducerConfig.from_properties(
        {"buffer.memory.allocation.strategy": "Incremental"}
    ).buffer_memory_allocation_strategy == "incremental"
    assert ProducerConfig.from_properties(
        {"buffer.memory.allocation.strategy": "FULL"}
    ).buffer_memory_allocation_strategy == "full"
    assert error_of(buffer_memory_allocation_strategy="chunked").startswith(
        "buffer_memory_allocation_strategy must be one of full, incremental; got 'chunked'"
    )


def test_metadata_cluster_check_is_accepted_and_changes_nothing() -> None:
    config = ProducerConfig.from_properties({"metadata.cluster.check.enable": "false"})
    assert config.metadata_cluster_check_enable is False
    assert config.explicit_settings == {"metadata_cluster_check_enable"}


def test_unsupported_settings_are_recognised_by_pythonic_name_too() -> None:
    assert error_of(interceptor_classes="x").startswith(
        "setting 'interceptor_classes' is not supported: Java class names can't be loaded; "
        "pass interceptor objects as interceptors=[...]"
    )


# -- value validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": "big"}, "batch_size must be an int, got 'big' (str)"),
        ({"linger_ms": True}, "linger_ms must be an int, got True (bool)"),
        ({"linger_ms": 2.5}, "linger_ms must be an int, got 2.5 (float)"),
        ({"batch_size": -1}, "batch_size must be >= 0, got -1"),
        ({"buffer_memory": 0}, "buffer_memory must be >= 1, got 0"),
        ({"max_block_ms": -1}, "max_block_ms must be >= 0, got -1"),
        ({"max_request_size": 0}, "max_request_size must be >= 1, got 0"),
        ({"retries": 2**31}, "retries must be <= 2147483647, got 2147483648"),
        ({"metadata_max_idle_ms": 10}, "metadata_max_idle_ms must be >= 5000, got 10"),
        ({"max_in_flight_requests_per_connection": 0}, "must be >= 1, got 0"),
        ({"send_buffer_bytes": 0}, "send_buffer_bytes must be >= 1"),
        ({"enable_idempotence": "yes"}, "enable_idempotence must be True or False, got 'yes'"),
        ({"client_id": 7}, "client_id must be a str, got 7"),
        ({"acks": 2}, "acks must be one of 'all', -1, 0, 1 (or those as strings), got 2"),
        ({"acks": "most"}, "acks must be one of 'all', -1, 0, 1"),
        ({"partitioner": 3}, "partitioner must be a callable or None, got 3"),
        ({"value_serializer": "json"}, "value_serializer must be a callable or None"),
        ({"bootstrap_servers": ""}, "bootstrap_servers must be 'host:port' strings"),
        ({"bootstrap_servers": ["a:1", 2]}, "bootstrap_servers must be 'host:port' strings"),
        ({"bootstrap_servers": 9092}, "bootstrap_servers must be 'host:port' strings"),
    ],
)
def test_invalid_values_name_the_setting_and_the_range(
    kwargs: dict[str, Any], message: str
) -> None:
    assert message in error_of(**kwargs)


@pytest.mark.parametrize(
    ("given", "stored"),
    [("all", -1), ("ALL", -1), (-1, -1), ("-1", -1), (0, 0), ("0", 0), (1, 1), ("1", 1)],
)
def test_acks_are_normalised(given: object, stored: int) -> None:
    cfg = ProducerConfig.from_kwargs(acks=given, enable_idempotence=stored == -1)
    assert cfg.acks == stored


def test_bootstrap_servers_are_normalised_to_a_tuple() -> None:
    assert ProducerConfig(bootstrap_servers="a:1,b:2").bootstrap_servers == ("a:1", "b:2")
    assert ProducerConfig(bootstrap_servers=["a:1"]).bootstrap_servers == ("a:1",)


def test_compression_type_choices_and_levels() -> None:
    assert ProducerConfig(compression_type="ZSTD", compression_level=-5).compression_type == "zstd"
    assert ProducerConfig(compression_type="gzip", compression_level=-1).compression_level == -1
    assert error_of(compression_type="brotli") == (
        "compression_type must be one of none, gzip, snappy, lz4, zstd; got 'brotli'"
    )
    assert error_of(compression_type="gzip", compression_level=10) == (
        "compression_level for gzip must be between 1 and 9, got 10"
    )
    assert "between 1 and 17, got 18" in error_of(compression_type="lz4", compression_level=18)
    assert error_of(compression_type="snappy", compression_level=3) == (
        "compression_level=3 has no effect with compression_type='snappy'; remove it, or use "
        "gzip, lz4 or zstd"
    )


# -- rules between settings -------------------------------------------------------------------


def test_a_new_batch_must_fit_in_buffer_memory() -> None:
    # 'full' takes batch_size at once.
    assert error_of(batch_size=2048, buffer_memory=1024,
                    buffer_memory_allocation_strategy="full") == (
        "batch_size=2048 needs 2048 bytes per new batch, more than buffer_memory=1024, so no "
        "batch could ever be allocated; lower batch_size or raise buffer_memory"
    )
    # 'incremental' takes one chunk: batches larger than the whole pool are fine ...
    cfg = ProducerConfig(batch_size=1 << 20, buffer_memory=256 * 1024)
    assert cfg.buffer_memory_allocation_strategy == "incremental"
    # ... but not a pool smaller than one chunk.
    assert error_of(batch_size=1 << 20, buffer_memory=1024) == (
        "batch_size=1048576 needs 2048 bytes per new batch, more than buffer_memory=1024, so "
        "no batch could ever be allocated; lower batch_size or raise buffer_memory"
    )


def test_explicit_delivery_timeout_below_linger_plus_request_timeout_is_an_error() -> None:
    assert error_of(delivery_timeout_ms=20000, linger_ms=100, request_timeout_ms=25000) == (
        "delivery_timeout_ms=20000 must be >= linger_ms + request_timeout_ms = 100 + 25000 = "
        "25100; set delivery_timeout_ms to at least 25100, or lower linger_ms or "
        "request_timeout_ms"
    )
    assert ProducerConfig(delivery_timeout_ms=25100, linger_ms=100, request_timeout_ms=25000)


def test_default_delivery_timeout_is_raised_to_linger_plus_request_timeout() -> None:
    cfg = ProducerConfig(linger_ms=1000, request_timeout_ms=150000)
    assert cfg.delivery_timeout_ms == 151000
    assert "delivery_timeout_ms" not in cfg.explicit_settings


def test_retry_backoff_max_is_raised_to_retry_backoff() -> None:
    assert ProducerConfig(retry_backoff_ms=5000).retry_backoff_max_ms == 5000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"acks": 1},
            "enable_idempotence=True requires acks='all' (got 1); fix that, or set "
            "enable_idempotence=False",
        ),
        (
            {"retries": 0},
            "enable_idempotence=True requires retries > 0 (got 0); fix that, or set "
            "enable_idempotence=False",
        ),
        (
            {"acks": "0", "retries": 0},
            "enable_idempotence=True requires acks='all' (got 0) and retries > 0 (got 0)",
        ),
    ],
)
def test_explicit_idempotence_conflicts_are_errors(kwargs: dict[str, Any], message: str) -> None:
    assert message in error_of(enable_idempotence=True, **kwargs)


@pytest.mark.parametrize("kwargs", [{"acks": 1}, {"acks": 0}, {"retries": 0}])
def test_default_idempotence_quietly_yields(
    kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="aioaccum.config.producer_config"):
        cfg = ProducerConfig.from_kwargs(**kwargs)
    assert cfg.enable_idempotence is False
    assert "idempotence disabled" in caplog.text


def test_idempotence_limits_in_flight_requests() -> None:
    expected = (
        "max_in_flight_requests_per_connection=6 is more than 5, the most the idempotent "
        "producer keeps in order; set it to 5 or less, or set enable_idempotence=False"
    )
    assert error_of(max_in_flight_requests_per_connection=6) == expected
    assert error_of(max_in_flight_requests_per_connection=6, enable_idempotence=True) == expected
    relaxed = ProducerConfig(max_in_flight_requests_per_connection=6, enable_idempotence=False)
    assert relaxed.max_in_flight_requests_per_connection == 6
    # acks=1 already switched the default idempotence off, so many in flight is fine.
    assert not ProducerConfig(acks=1, max_in_flight_requests_per_connection=10).enable_idempotence


def test_replace_keeps_defaults_defaulted() -> None:
    cfg = ProducerConfig(linger_ms=20)
    relaxed = cfg.replace(acks=1)
    assert (relaxed.acks, relaxed.enable_idempotence, relaxed.linger_ms) == (1, False, 20)
    assert cfg.replace(request_timeout_ms=200000).delivery_timeout_ms == 200020
    with pytest.raises(ConfigError, match="did you mean 'acks'"):
        cfg.replace(ack=1)


# -- security ---------------------------------------------------------------------------------


def test_sasl_settings_are_accepted_and_normalised() -> None:
    cfg = ProducerConfig.from_kwargs(**sasl(security_protocol="sasl_ssl", sasl_mechanism="plain"))
    assert (cfg.security_protocol, cfg.sasl_mechanism) == ("SASL_SSL", "PLAIN")


def test_tls_context_is_kept() -> None:
    ctx = ssl.create_default_context()
    cfg = ProducerConfig(security_protocol="SSL", ssl_context=ctx)
    assert cfg.ssl_context is ctx


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"security_protocol": "TLS"}, "security_protocol must be one of PLAINTEXT, SSL,"),
        (
            sasl(sasl_mechanism=None),
            "security_protocol='SASL_SSL' needs sasl_mechanism: one of PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512",
        ),
        (sasl(sasl_mechanism="GSSAPI"), "sasl_mechanism must be one of PLAIN, SCRAM-SHA-256"),
        (
            sasl(sasl_plain_password=None),
            "sasl_mechanism='SCRAM-SHA-512' needs sasl_plain_password",
        ),
        (
            sasl(security_protocol="PLAINTEXT"),
            "SASL settings need security_protocol SASL_PLAINTEXT or SASL_SSL, but "
            "security_protocol is 'PLAINTEXT'",
        ),
        ({"ssl_context": "ctx"}, "ssl_context must be an ssl.SSLContext, got 'ctx'"),
        (
            {"ssl_context": ssl.create_default_context()},
            "ssl_context is only used with security_protocol SSL or SASL_SSL, not PLAINTEXT",
        ),
    ],
)
def test_security_errors(kwargs: dict[str, Any], message: str) -> None:
    text = error_of(**kwargs)
    assert message in text
    assert SECRET not in text


def test_repr_and_errors_never_show_the_password() -> None:
    cfg = ProducerConfig.from_kwargs(**sasl(linger_ms=7))
    text = repr(cfg)
    assert SECRET not in text
    assert SECRET not in str(cfg)
    assert "sasl_plain_password='***'" in text
    assert "sasl_plain_username='alice'" in text
    assert "linger_ms=7" in text
    bad_type = error_of(**sasl(sasl_plain_password=12345))
    assert "sasl_plain_password must be a str or None" in bad_type
    assert "12345" not in bad_type


# -- construction paths -----------------------------------------------------------------------


def test_direct_construction_validates_like_from_kwargs() -> None:
    with pytest.raises(ConfigError, match="requires acks='all'"):
        ProducerConfig(enable_idempotence=True, acks=1)
    with pytest.raises(ConfigError, match="compression_type must be one of none,"):
        ProducerConfig(compression_type=5)  # type: ignore[arg-type]


def test_explicit_settings_are_what_the_user_passed() -> None:
    cfg = ProducerConfig.from_kwargs(linger_ms=5, acks="all")
    assert cfg.explicit_settings == {"linger_ms", "acks"}
    assert cfg == ProducerConfig()  # same values, whoever chose them
    loaded = ProducerConfig.from_properties({"batch.size": "1024"})
    assert loaded.explicit_settings == {"batch_size"}


def test_signature_shows_plain_defaults() -> None:
    shown = str(inspect.signature(ProducerConfig))
    assert "linger_ms: 'int' = 5" in shown
    assert "enable_idempotence: 'bool' = True" in shown
    assert "partitioner: 'Partitioner | None' = None" in shown


def test_ssl_context_cannot_come_from_a_property_string() -> None:
    assert property_error({"ssl_context": "default"}) == (
        "ssl_context must be an ssl.SSLContext, not a string"
    )


@pytest.mark.parametrize(
    ("codec", "module", "extra"),
    [("zstd", "zstandard", "zstd"), ("snappy", "cramjam", "snappy"), ("lz4", "lz4.frame", None)],
)
def test_a_codec_whose_library_is_missing_is_refused_at_construction(
    monkeypatch: pytest.MonkeyPatch, codec: str, module: str, extra: str | None
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    with pytest.raises(ConfigError, match=f"compression_type {codec!r} needs the") as info:
        ProducerConfig(compression_type=codec)
    hint = f"pip install 'aioaccum[{extra}]'" if extra else "pip install lz4"
    assert hint in str(info.value)
    ProducerConfig(compression_type="gzip")  # zlib is always there


# -- SASL PLAIN over a plaintext connection ---------------------------------------------------


def plaintext_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "aioaccum.config.producer_config"
        and record.levelno == logging.WARNING
        and "unencrypted" in record.getMessage()
    ]


@pytest.fixture
def fresh_plaintext_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warning is once per process per bootstrap: forget the bootstraps other tests used.
    monkeypatch.setattr(config_module, "_PLAIN_IN_CLEAR_WARNED", set())


@pytest.mark.usefixtures("fresh_plaintext_warnings")
def test_sasl_plain_over_plaintext_warns_once_per_bootstrap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plain = sasl(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    with caplog.at_level(logging.WARNING, logger="aioaccum.config.producer_config"):
        for _ in range(5):  # producers made in a loop
            ProducerConfig.from_kwargs(**plain, bootstrap_servers="a:9092,b:9092")
        ProducerConfig.from_kwargs(**plain, bootstrap_servers=["b:9092", "a:9092"])
    [first] = plaintext_warnings(caplog)
    assert first.startswith(
        "security_protocol='SASL_PLAINTEXT' with sasl_mechanism='PLAIN': the password crosses "
        "the network to a:9092,b:9092 unencrypted"
    )
    assert "set security_protocol='SASL_SSL'" in first
    assert SECRET not in caplog.text
    assert "alice" not in first

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aioaccum.config.producer_config"):
        ProducerConfig.from_kwargs(**plain, bootstrap_servers="c:9092")
    [other_cluster] = plaintext_warnings(caplog)
    assert "to c:9092 unencrypted" in other_cluster


@pytest.mark.usefixtures("fresh_plaintext_warnings")
def test_sasl_plain_plaintext_warning_names_the_properties_as_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    properties = {
        "bootstrap.servers": "p:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{SECRET}";',
    }
    with caplog.at_level(logging.WARNING, logger="aioaccum.config.producer_config"):
        ProducerConfig.from_properties(properties)
    [warning] = plaintext_warnings(caplog)
    assert warning.startswith("security.protocol='SASL_PLAINTEXT' with sasl.mechanism='PLAIN'")
    assert "set security.protocol='SASL_SSL'" in warning
    assert SECRET not in caplog.text


@pytest.mark.usefixtures("fresh_plaintext_warnings")
@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SASL_SSL", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ],
)
def test_no_plaintext_warning_when_the_password_is_not_sent_in_clear(
    caplog: pytest.LogCaptureFixture, protocol: str, mechanism: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="aioaccum.config.producer_config"):
        ProducerConfig.from_kwargs(**sasl(security_protocol=protocol, sasl_mechanism=mechanism))
    assert plaintext_warnings(caplog) == []


def test_keyless_records_switch_partitions_as_javas_default_batch_size_does() -> None:
    # Java's rule: batch_size. Left at our 1 MiB default, Java's default size instead, so that a
    # slow stream still spreads over partitions.
    java_default = next(r.java_default for r in SETTINGS if r.name == "batch_size")
    assert ProducerConfig().sticky_partition_bytes == java_default == 16384
    assert ProducerConfig(batch_size=1 << 20).sticky_partition_bytes == 1 << 20
    assert ProducerConfig(batch_size=4096).sticky_partition_bytes == 4096
    assert ProducerConfig.from_properties({"batch.size": "65536"}).sticky_partition_bytes == 65536
    assert ProducerConfig.from_properties({}).sticky_partition_bytes == 16384
