"""``/metrics`` as one credential may see it: the series of the topics it may write, and the
series that name no topic.

A key allowed ``orders-*`` would otherwise read the names and rates of every topic the gateway
writes, ``payments`` included; ``GET /topics`` already lists only its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ._auth import Principal

__all__ = ["TopicsOf"]


class TopicsOf(Collector):
    """A registry's series without those labelled with a topic ``principal`` may not write;
    give it to ``generate_latest`` in place of the registry."""

    def __init__(self, registry: Collector, principal: Principal) -> None:
        self._registry = registry
        self._principal = principal

    def collect(self) -> Iterable[Metric]:
        may_write = self._principal.may_write
        for metric in self._registry.collect():
            metric.samples = [
                sample
                for sample in metric.samples
                if "topic" not in sample.labels or may_write(sample.labels["topic"])
            ]
            yield metric
