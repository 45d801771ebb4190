"""Public home of the metric names and readings (Java's producer metrics)."""

from aioaccum._core.metrics import (
    PRODUCER_GROUP,
    TOPIC_GROUP,
    MetricValue,
    ProducerMetrics,
    Sensor,
)

__all__ = [
    "PRODUCER_GROUP",
    "TOPIC_GROUP",
    "MetricValue",
    "ProducerMetrics",
    "Sensor",
]
