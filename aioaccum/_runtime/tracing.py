"""OpenTelemetry beneath the facade: the span per record, and the metrics bridge.

What the producer itself runs when ``tracing`` or ``otel_metrics`` is set; the public path and
the description of the spans and instruments is :mod:`aioaccum.otel`. It takes the producer it
reports through the small :class:`MetricsSource` protocol and never imports the facade.
Nothing imports this module, nor OpenTelemetry, unless one of those settings is set.
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
import time
import weakref
from collections.abc import Iterable, MutableSequence
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from aioaccum._core.futures import RecordMetadata
from aioaccum._core.interceptor_api import ProducerRecord
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.lifecycle import ProducerState
from aioaccum._core.metrics import PRODUCER_METRICS, TOPIC_GROUP, TOPIC_METRICS, MetricValue
from aioaccum.errors import BrokerError, ConfigError

if TYPE_CHECKING:
    from aioaccum.config.producer_config import ProducerConfig

__all__ = ["MetricsSource", "RecordTracer", "check_metrics_target", "observe_metrics"]

_SCOPE = "aioaccum"
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"


@functools.cache
def _version() -> str:
    """The installed distribution's version (read from its metadata, not from the package,
    which would import the whole facade from beneath it)."""
    try:
        return importlib.metadata.version("aioaccum")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
        return "0+unknown"


class MetricsSource(Protocol):
    """What the metrics bridge reads of a producer (:class:`aioaccum.Producer` is one)."""

    @property
    def config(self) -> ProducerConfig: ...

    @property
    def state(self) -> ProducerState: ...

    def metric_values(self) -> list[MetricValue]: ...


# --- spans


def _key_text(key: object) -> str | None:
    """The key as the conventions want it: its text form, or nothing if it has none."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    return None


def _error_type(error: BaseException) -> str:
    if isinstance(error, BrokerError) and error.errno in Errors._value2member_map_:
        return Errors(error.errno).name
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}"
    )


class RecordTracer:
    """Starts and ends one producer span per record (used by
    :class:`~aioaccum._runtime.hooks.SendHooks`)."""

    __slots__ = ("_client_id", "_inject", "_tracer")

    def __init__(
        self, tracer_provider: TracerProvider | None, client_id: str, inject_headers: bool
    ) -> None:
        self._tracer = trace.get_tracer(
            _SCOPE, _version(), tracer_provider=tracer_provider, schema_url=_SCHEMA_URL
        )
        self._client_id = client_id
        self._inject = inject_headers

    @classmethod
    def from_config(cls, config: ProducerConfig) -> RecordTracer:
        return cls(config.tracer_provider, config.client_id, config.trace_context_headers)

    def start(self, record: ProducerRecord) -> Span:
        """The record's span, started now."""
        attributes: dict[str, str | bool | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": record.topic,
            "messaging.client.id": self._client_id,
        }
        if record.partition is not None:
            attributes["messaging.destination.partition.id"] = str(record.partition)
        key = None if record.key is None else _key_text(record.key)
        if key is not None:
            attributes["messaging.kafka.message.key"] = key
        if record.value is None:
            attributes["messaging.kafka.message.tombstone"] = True
        return self._tracer.start_span(
            f"send {record.topic}", kind=SpanKind.PRODUCER, attributes=attributes
        )

    def inject(self, span: Span, headers: MutableSequence[tuple[str, bytes | None]]) -> None:
        """With ``trace_context_headers``, put ``span``'s context in ``headers`` (the list the
        record will be sent with), replacing headers of the same names."""
        if not self._inject:
            return
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        if carrier:
            names = {name.lower() for name in carrier}
            headers[:] = [h for h in headers if h[0].lower() not in names]
            headers.extend((name, text.encode()) for name, text in carrier.items())

    def end(self, span: Span, metadata: RecordMetadata, error: BaseException | None) -> None:
        """End the record's span with its outcome."""
        if metadata.partition >= 0:
            span.set_attribute("messaging.destination.partition.id", str(metadata.partition))
        if error is None:
            if metadata.offset >= 0:
                span.set_attribute("messaging.kafka.offset", metadata.offset)
        else:
            span.set_attribute("error.type", _error_type(error))
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()


# --- metrics


class _Instruments:
    """The instruments of one meter provider, and the producers they report."""

    def __init__(self, meter: Meter) -> None:
        self._producers: weakref.WeakSet[MetricsSource] = weakref.WeakSet()
        # One collection calls every instrument's callback in turn: they share one reading per
        # producer, taken on its loop, rather than a hop to the loop each.
        self._readings: dict[int, tuple[float, list[MetricValue]]] = {}
        # A metric kept both per producer and per topic is reported per topic only.
        names = {**PRODUCER_METRICS, **TOPIC_METRICS}
        for name, description in names.items():
            callback = functools.partial(self._observe, name, name in TOPIC_METRICS)
            instrument = "kafka.producer." + name.replace("-", "_")
            if name.endswith("-total"):
                meter.create_observable_counter(instrument, [callback], description=description)
            else:
                meter.create_observable_gauge(instrument, [callback], description=description)

    def check(self, producer: MetricsSource) -> None:
        """Raise ``ConfigError`` if a running producer with ``producer``'s ``client_id``
        reports here already: their series would be one."""
        client_id = producer.config.client_id
        for other in list(self._producers):
            if other is not producer and other.state is ProducerState.RUNNING and (
                other.config.client_id == client_id
            ):
                raise ConfigError(
                    f"two running producers with client_id={client_id!r} report to one "
                    "meter provider, so their series would collide; give each producer its "
                    "own client_id"
                )

    def add(self, producer: MetricsSource) -> None:
        self.check(producer)
        self._producers.add(producer)

    def _observe(self, name: str, per_topic: bool, options: CallbackOptions) -> Iterable[
        Observation
    ]:
        observations = []
        for producer in list(self._producers):
            if producer.state is not ProducerState.RUNNING:
                continue  # a closed producer's series end with it
            for metric in self._reading(producer):
                if metric.name == name and (metric.group == TOPIC_GROUP) == per_topic:
                    observations.append(Observation(metric.value, dict(metric.tags)))
        return observations


    def _reading(self, producer: MetricsSource) -> list[MetricValue]:
        now = time.monotonic()
        key = id(producer)
        found = self._readings.get(key)
        if found is not None and now - found[0] < _READING_FRESH_S:
            return found[1]
        values = list(producer.metric_values())
        self._readings[key] = (now, values)
        return values


# Callbacks of one collection run within this of each other.
_READING_FRESH_S = 0.5

_REGISTRY: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def observe_metrics(producer: MetricsSource, meter_provider: MeterProvider | None = None) -> None:
    """Report ``producer``'s metrics through OpenTelemetry's ``meter_provider`` (the global one
    when ``None``) from now until it closes.

    ``Producer(otel_metrics=True)`` or ``Producer(meter_provider=...)`` calls this at start.
    Producers sharing a meter provider share its instruments, told apart by ``client-id``.
    """
    with _REGISTRY_LOCK:
        _instruments(meter_provider).add(producer)


def check_metrics_target(producer: MetricsSource, meter_provider: MeterProvider | None) -> None:
    """Raise ``ConfigError`` now if :func:`observe_metrics` would refuse ``producer``: a
    running producer with the same ``client_id`` reports to that meter provider already."""
    with _REGISTRY_LOCK:
        _instruments(meter_provider).check(producer)


def _instruments(meter_provider: MeterProvider | None) -> _Instruments:
    provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
    instruments = _REGISTRY.get(provider)
    if instruments is None:
        meter = provider.get_meter(_SCOPE, _version(), schema_url=_SCHEMA_URL)
        instruments = _REGISTRY[provider] = _Instruments(meter)
    return instruments
