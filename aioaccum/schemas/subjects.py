"""Subject name strategies: under which subject a serializer registers and looks up its schema.

=================  ======================  ==================================================
name               subject                 Confluent's (Java) class
=================  ======================  ==================================================
``"topic"``        ``{topic}-key|value``   ``TopicNameStrategy`` (the default)
``"record"``       ``{record name}``       ``RecordNameStrategy``
``"topic_record"`` ``{topic}-{record}``    ``TopicRecordNameStrategy``
=================  ======================  ==================================================

The record name is the Avro record's full name (``namespace.name``), the Protobuf message's
full name (``package.Message``), or a JSON Schema's ``title``. A callable
``strategy(topic, field, record_name) -> str`` may stand in for a name (``field`` is ``"key"``
or ``"value"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

from aioaccum.errors import ConfigError

__all__ = ["STRATEGIES", "SubjectNameStrategy", "resolve_strategy", "subject_name"]

SubjectNameStrategy: TypeAlias = (
    Literal["topic", "record", "topic_record"] | Callable[[str | None, str, str | None], str]
)
STRATEGIES = ("topic", "record", "topic_record")
# Confluent's Java class names and the Python clients' type names name the same strategies.
_ALIASES = {
    "topic": "topic",
    "topicnamestrategy": "topic",
    "record": "record",
    "recordnamestrategy": "record",
    "topic_record": "topic_record",
    "topicrecord": "topic_record",
    "topicrecordnamestrategy": "topic_record",
}


def resolve_strategy(strategy: SubjectNameStrategy) -> SubjectNameStrategy:
    """The strategy's canonical name (``"topic"``, ``"record"``, ``"topic_record"``) or the
    callable itself.

    Raises:
        ConfigError: An unknown name.
    """
    if callable(strategy):
        return strategy
    key = str(strategy).rsplit(".", 1)[-1].replace("-", "_").lower()
    found = _ALIASES.get(key) or _ALIASES.get(key.replace("_", ""))
    if found is None:
        raise ConfigError(
            f"unknown subject name strategy {strategy!r}; use one of {', '.join(STRATEGIES)} "
            "or a callable(topic, field, record_name) -> str"
        )
    return found  # type: ignore[return-value]  # one of the literal names


def subject_name(
    strategy: SubjectNameStrategy, topic: str | None, field: str, record_name: str | None
) -> str:
    """The subject for a record of ``topic`` in ``field`` (``"key"`` or ``"value"``).

    Raises:
        ConfigError: The strategy needs a topic or a record name the caller does not have.
    """
    if callable(strategy):
        return strategy(topic, field, record_name)
    if strategy != "topic" and record_name is None:
        raise ConfigError(
            f"the {strategy!r} subject name strategy needs a record name, and this schema has "
            "none (an Avro record's name, a Protobuf message, a JSON Schema's title)"
        )
    if strategy == "record":
        return record_name  # type: ignore[return-value]  # checked above
    if topic is None:
        raise ConfigError(
            f"the {strategy!r} subject name strategy needs the topic: give the serializer "
            "topic=..., or call serialize(value, topic) / prepare(topic)"
        )
    return f"{topic}-{field}" if strategy == "topic" else f"{topic}-{record_name}"
