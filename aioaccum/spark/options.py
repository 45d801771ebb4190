"""The options and columns of ``format("aioaccum")``, checked on the driver before any task.

Spark's own Kafka sink (``format("kafka")``) sets the conventions, so that switching is one
word: columns ``value`` (required), ``key``, ``headers``, ``topic`` and ``partition``; options
``kafka.bootstrap.servers`` (required), ``topic`` and any ``kafka.<producer property>`` under
its Java name. aioaccum adds ``delivery.guarantee``, ``transactional.id.prefix`` and
``marker.topic``. Unlike Spark's sink, an option nobody reads is refused rather than ignored,
so a typo cannot pass for a setting.

Nothing here imports pyspark at module level.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aioaccum.config.producer_config import ProducerConfig
from aioaccum.config.properties import producer_values
from aioaccum.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = ["DEFAULT_TRANSACTION_TIMEOUT_MS", "Guarantee", "SinkOptions", "check_columns"]

Guarantee = Literal["at_least_once", "exactly_once"]

# A transaction stays open from a task's first row until the driver commits after the job (or
# the micro-batch): Kafka's default ceiling (transaction.max.timeout.ms), not the producer's 60 s.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000

_KAFKA = "kafka."
_OWN = ("topic", "delivery.guarantee", "transactional.id.prefix", "marker.topic")
# Options Spark itself hands to every sink of a streaming query.
_SPARKS = ("checkpointlocation", "path")
# Producer properties the sink sets itself, and why (Spark's Kafka sink refuses the first two
# for the same reason).
_FIXED = {
    "key.serializer": "keys are sent as the bytes of the key column (strings as UTF-8)",
    "value.serializer": "values are sent as the bytes of the value column (strings as UTF-8)",
    "transactional.id": "with delivery.guarantee=exactly_once the sink names one transactional "
    "id per Spark partition: pass transactional.id.prefix instead",
}


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What the options of one ``df.write`` / ``df.writeStream`` asked for.

    Attributes:
        properties: The producer's Java properties (``kafka.`` taken off), as given.
        topic: The ``topic`` option: every row's topic, over any ``topic`` column.
        guarantee: ``delivery.guarantee``.
        prefix: ``transactional.id.prefix`` (exactly-once only): Spark partition ``i`` writes
            as transactional id ``f"{prefix}-{i}"``.
        marker_topic: Exactly-once streaming: the topic on whose partition 0 each Spark
            partition's consumer group records its last committed micro-batch.
    """

    properties: dict[str, str]
    topic: str | None
    guarantee: Guarantee
    prefix: str | None
    marker_topic: str | None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SinkOptions:
        """Check ``options`` (keys compared without case, as Spark does).

        Raises:
            ConfigError: An unknown option or producer property, a bad value, or a missing
                ``kafka.bootstrap.servers``; the message names the option and what it takes.
        """
        properties: dict[str, str] = {}
        own: dict[str, str] = {}
        for raw, value in options.items():
            name = str(raw).lower()
            if name.startswith(_KAFKA):
                prop = name[len(_KAFKA) :]
                if prop in _FIXED:
                    raise ConfigError(f"option 'kafka.{prop}' is not supported: {_FIXED[prop]}")
                properties[prop] = str(value)
            elif name in _OWN:
                own[name] = str(value)
            elif name not in _SPARKS:
                raise ConfigError(_unknown(name))
        if "bootstrap.servers" not in properties:
            raise ConfigError(
                "option 'kafka.bootstrap.servers' is required: the brokers to write to, "
                "e.g. .option('kafka.bootstrap.servers', 'host1:9092,host2:9092')"
            )
        guarantee = own.get("delivery.guarantee", "at_least_once").strip().lower()
        if guarantee not in ("at_least_once", "exactly_once"):
            raise ConfigError(
                f"option 'delivery.guarantee' takes 'at_least_once' (the default) or "
                f"'exactly_once', got {own['delivery.guarantee']!r}"
            )
        prefix = own.get("transactional.id.prefix")
        if guarantee == "exactly_once":
            if not prefix:
                raise ConfigError(
                    "delivery.guarantee=exactly_once needs option 'transactional.id.prefix': "
                    "Spark partition i writes as transactional id '<prefix>-i'. Give each "
                    "query (each checkpoint) its own prefix, and keep it across restarts"
                )
            properties.setdefault("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
        elif prefix is not None:
            raise ConfigError(
                "option 'transactional.id.prefix' applies to delivery.guarantee=exactly_once "
                "only; add .option('delivery.guarantee', 'exactly_once') or drop the prefix"
            )
        elif "marker.topic" in own:
            raise ConfigError(
                "option 'marker.topic' applies to delivery.guarantee=exactly_once only"
            )
        topic = own.get("topic")
        if topic is not None and not topic:
            raise ConfigError("option 'topic' must name a topic, got ''")
        parsed = cls(
            properties=properties,
            topic=topic,
            guarantee=guarantee,  # type: ignore[arg-type]
            prefix=prefix,
            marker_topic=own.get("marker.topic") or topic,
        )
        parsed.config()  # every producer property checked here, not in each task
        return parsed

    def config(self, transactional_id: str | None = None) -> ProducerConfig:
        """The producer's config (with ``transactional_id`` when given)."""
        props: dict[str, Any] = dict(self.properties)
        if transactional_id is not None:
            props["transactional.id"] = transactional_id
        elif self.prefix is not None:
            props["transactional.id"] = f"{self.prefix}-0"  # checks the prefix as an id
        # Our defaults, not Java's, for what the options leave out: Java's 16 KiB batch.size
        # would cut a task's rows into hundreds of requests, and only tuning differs.
        return ProducerConfig.from_properties(props, java_defaults=False)

    def settings(self) -> dict[str, Any]:
        """The producer's settings by their Python names, for the driver's commits."""
        values, _ = producer_values(self.properties)
        return values

    @property
    def transaction_timeout_ms(self) -> int:
        return self.config().transaction_timeout_ms

    def transactional_id(self, partition: int) -> str:
        assert self.prefix is not None
        return f"{self.prefix}-{partition}"


def _unknown(name: str) -> str:
    known = [*_OWN, "kafka.<producer property>"]
    close = difflib.get_close_matches(name, list(_OWN), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"option {name!r} is not one the aioaccum sink reads{hint} It takes {', '.join(known)} "
        "(Java producer properties prefixed with 'kafka.', e.g. 'kafka.linger.ms')"
    )


# --- columns -------------------------------------------------------------------------------


def check_columns(schema: StructType, options: SinkOptions, *, streaming: bool) -> None:
    """Check the DataFrame's columns against Spark's Kafka sink's conventions.

    Other columns are ignored, as Spark's sink does.

    Raises:
        ConfigError: A missing ``value`` column, a known column of a type it cannot take, or
            no topic for the rows; the message names the column and what it accepts.
    """
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    fields = {field.name.lower(): field for field in schema.fields}
    if "value" not in fields:
        raise ConfigError(
            f"the DataFrame has no 'value' column (its columns: {schema.fieldNames()}); the "
            "sink needs one, of type string or binary: each row's record value"
        )

    def bytes_like(name: str) -> None:
        field = fields.get(name)
        if field is not None and not isinstance(field.dataType, StringType | BinaryType):
            raise ConfigError(
                f"column {field.name!r} has type {_type(field.dataType)}; the sink takes "
                "string or binary there (cast it, e.g. F.col(...).cast('string'), or "
                "F.to_json(...) for a struct)"
            )

    bytes_like("value")
    bytes_like("key")
    topic = fields.get("topic")
    if topic is not None and not isinstance(topic.dataType, StringType):
        raise ConfigError(
            f"column 'topic' has type {_type(topic.dataType)}; the sink takes string there"
        )
    if topic is None and options.topic is None:
        raise ConfigError(
            "no topic for the rows: pass .option('topic', ...), or give the DataFrame a "
            "string column 'topic'"
        )
    partition = fields.get("partition")
    if partition is not None and not isinstance(partition.dataType, IntegerType):
        raise ConfigError(
            f"column 'partition' has type {_type(partition.dataType)}; the sink takes int "
            "there (null lets the partitioner choose)"
        )
    headers = fields.get("headers")
    if headers is not None:
        data_type = headers.dataType
        element = data_type.elementType if isinstance(data_type, ArrayType) else None
        ok = isinstance(element, StructType)
        if isinstance(element, StructType):
            inner = {f.name: f.dataType for f in element.fields}
            ok = (
                set(inner) == {"key", "value"}
                and isinstance(inner["key"], StringType)
                and isinstance(inner["value"], BinaryType | StringType)
            )
        if not ok:
            raise ConfigError(
                f"column 'headers' has type {_type(data_type)}; the sink takes "
                "array<struct<key: string, value: binary>> there"
            )
    exactly_once = options.guarantee == "exactly_once"
    if streaming and exactly_once and options.marker_topic is None:
        raise ConfigError(
            "delivery.guarantee=exactly_once with a 'topic' column and no 'topic' option needs "
            "option 'marker.topic': an existing topic on whose partition 0 the sink records, "
            "per Spark partition, the last micro-batch it committed"
        )


def _type(data_type: DataType) -> str:
    return str(data_type.simpleString())
