"""OpenTelemetry for the producer: a span per record sent, and its metrics as instruments.

Needs the extra ``aioaccum[otel]`` (OpenTelemetry's API); nothing imports this module, nor
OpenTelemetry, unless ``tracing`` or ``otel_metrics`` is set. This is the public path; the
code lives beneath the facade, in :mod:`aioaccum._runtime.tracing`, where the producer's hooks
and ``Producer.start()`` use it.

Spans follow OpenTelemetry's semantic conventions for messaging, as they stand for Kafka
producers: one ``send {topic}`` span of kind ``PRODUCER`` per record, started when ``send()`` is
called (a child of the caller's current span) and ended when the record's outcome is known, with

* ``messaging.system`` = ``kafka``, ``messaging.operation.type`` and ``messaging.operation.name``
  = ``send``, ``messaging.destination.name`` = the topic, ``messaging.client.id`` = ``client_id``;
* ``messaging.destination.partition.id`` (a string) once the partition is chosen, and
  ``messaging.kafka.offset`` once the broker acknowledged the record (not with ``acks=0``);
* ``messaging.kafka.message.key`` when the key has a text form (a ``str``, an ``int``, or bytes
  that are UTF-8), and ``messaging.kafka.message.tombstone`` = true for a record without value;
* on failure: status ``ERROR``, ``error.type`` (Kafka's error name for a broker error, else the
  exception's class) and the exception as a span event. A success leaves the status unset, as
  the specification asks of instrumentation libraries.

With ``trace_context_headers=True`` the span's context is also written into the record's headers
by the global propagator (W3C ``traceparent``, and ``tracestate``/``baggage`` when there are any),
replacing headers of those names, so a consumer can continue the trace.

Metrics: ``otel_metrics=True`` (or a ``meter_provider``) makes one observable instrument per Java
metric, named as OpenTelemetry's Java Kafka metrics bridge names them: ``kafka.producer.`` + the
Java name with ``_`` for ``-`` (``kafka.producer.record_send_total``), a counter for the
cumulative ``*-total`` ones and a gauge for the rest, with the attribute ``client-id`` and, for
the per-topic ones, ``topic``. As in that bridge, a metric Java keeps both per producer and per
topic is reported per topic only, so that summing over attributes does not count twice. Values
are read from :meth:`Producer.metric_values` when the reader collects, never on the send path.
"""

from aioaccum._runtime.tracing import (
    MetricsSource,
    RecordTracer,
    check_metrics_target,
    observe_metrics,
)

__all__ = ["MetricsSource", "RecordTracer", "check_metrics_target", "observe_metrics"]
