"""The producer's metrics for Prometheus, through ``prometheus_client`` (``aioaccum[prometheus]``).

::

    from prometheus_client import REGISTRY, start_http_server
    from aioaccum.prometheus import ProducerCollector

    REGISTRY.register(ProducerCollector(producer))
    start_http_server(9100)

Each Java metric becomes ``kafka_producer_`` + its name with ``-`` as ``_``, labelled
``client_id``: ``record-send-total`` is the counter ``kafka_producer_record_send_total``. The
cumulative ``*-total`` metrics are counters and every other one is a gauge. Per-topic metrics
(Java's group ``producer-topic-metrics``) are ``kafka_producer_topic_`` + the name, labelled
``client_id`` and ``topic``, as Micrometer names them: kept apart from the producer's own
series, a ``sum()`` over either never counts a record twice.

Values are read when Prometheus scrapes, from the producer's loop thread or any other (reading
takes no lock and changes nothing but the metrics' own windows).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aioaccum._core.metrics import TOPIC_GROUP, MetricValue
from aioaccum.errors import ConfigError

__all__ = ["ProducerCollector", "prometheus_name"]

PREFIX = "kafka_producer_"
TOPIC_PREFIX = "kafka_producer_topic_"


class SupportsMetricValues(Protocol):
    """A :class:`~aioaccum.Producer` or :class:`~aioaccum.SyncProducer`."""

    def metric_values(self) -> list[MetricValue]: ...


def prometheus_name(metric: MetricValue) -> str:
    """The Prometheus name of a metric: ``kafka_producer_record_send_total``, or
    ``kafka_producer_topic_record_send_total`` for a per-topic one."""
    prefix = TOPIC_PREFIX if metric.group == TOPIC_GROUP else PREFIX
    return prefix + metric.name.replace("-", "_")


class ProducerCollector(Collector):
    """A ``prometheus_client`` collector of one or more producers' metrics.

    Register it once in a registry (``REGISTRY.register(ProducerCollector(producer))``). For
    several producers in one process, give them distinct ``client_id`` settings and pass them
    all to one collector, so that each metric family is written once.

    Args:
        *producers: Producers (asyncio or sync); one that is not started yet shows nothing.
    """

    def __init__(self, *producers: SupportsMetricValues) -> None:
        if not producers:
            raise TypeError("ProducerCollector needs at least one producer")
        seen: set[str] = set()
        for producer in producers:
            config = getattr(producer, "config", None)
            client_id = getattr(config, "client_id", None)
            if client_id is None:
                continue
            if client_id in seen:
                # Prometheus would keep one of the two samples of each series, silently.
                raise ConfigError(
                    f"two producers given to ProducerCollector share client_id={client_id!r}, "
                    "so their series would collide; give each producer its own client_id"
                )
            seen.add(client_id)
        self._producers = producers

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for producer in self._producers:
            for metric in producer.metric_values():
                name = prometheus_name(metric)
                family = families.get(name)
                if family is None:
                    labels = [key.replace("-", "_") for key in metric.tags]
                    if metric.kind == "counter":
                        family = CounterMetricFamily(name, metric.description, labels=labels)
                    else:
                        family = GaugeMetricFamily(name, metric.description, labels=labels)
                    families[name] = family
                family.add_metric(list(metric.tags.values()), metric.value)
        yield from families.values()
