"""Producer metrics, named and windowed as the Java producer's.

Theory of operation
-------------------
A port of the part of Kafka's metrics library the producer uses: ``Sensor`` with the stats
``Rate`` (over a ``WindowedSum``), ``Avg``, ``Max`` and ``Meter``'s ``CumulativeSum``, all from
``org.apache.kafka.common.metrics.stats``. Java gives each stat its own samples; here one
:class:`Sensor` keeps one set of samples from which the rate, the average and the maximum are
all read. That comes to Java's numbers, for Java decides where a sample starts and when it is
cleared by time alone; the one difference is that a rate read before the first value starts a
sample for the average and maximum too.

How a :class:`Sensor` measures, with ``window`` (``metrics_sample_window_ms``) and ``samples``
(``metrics_num_samples``):

* A value goes into the current sample. Once the current sample is ``window`` old, the next one
  of ``samples + 1`` slots is cleared and becomes current: the extra slot holds a sample that
  began before the window being measured and still overlaps it.
* Before any reading, a sample whose last value came ``samples * window`` ago or more is cleared.
* The rate is the sum of the samples over the time since the oldest one began, counting at least
  ``samples - 1`` whole windows, so that a rate read just after the first value is not inflated
  (and never less than 1 ms).
* The average and the maximum are over the values in the samples kept. With none, Java reads
  NaN; aioaccum reads 0, so that every value stays a plain JSON number.
* A total (``*-total``) is cumulative since the producer was made, never windowed.

Recording happens per batch or per request (queue time, latency, sizes), never per record, and
reading costs nothing on the send path. Per-topic sensors are made on a topic's first batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from aioaccum._core.batch import ProducerBatch

__all__ = ["PRODUCER_GROUP", "TOPIC_GROUP", "MetricValue", "ProducerMetrics", "Sensor"]

class PoolReading(Protocol):
    """What the metrics read of a pool snapshot (``PoolGauges.statistics()``)."""

    @property
    def total(self) -> int: ...
    @property
    def available(self) -> int: ...
    @property
    def wait_time_total_s(self) -> float: ...
    @property
    def exhausted_count(self) -> int: ...
    @property
    def waiters(self) -> int: ...


class PoolGauges(Protocol):
    """What the metrics read of the buffer pool (the runtime's ``BufferPool``), named here so
    that the core depends on no layer above it."""

    @property
    def wait_time_total_s(self) -> float: ...
    @property
    def exhausted_count(self) -> int: ...
    def statistics(self) -> PoolReading: ...


PRODUCER_GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"
_NEG_INF = float("-inf")
_MIN_ELAPSED = 0.001  # Java's 1 ms: a rate over no time at all is undefined

MetricKind = Literal["counter", "gauge"]


class MetricValue(NamedTuple):
    """One metric as an exporter sees it (Java's ``MetricName`` with its value)."""

    name: str
    """Java's name, e.g. ``record-send-total``."""
    group: str
    """``producer-metrics``, or ``producer-topic-metrics`` for a per-topic metric."""
    tags: Mapping[str, str]
    """``client-id``, and ``topic`` for a per-topic metric."""
    value: float
    kind: MetricKind
    """``counter`` for the cumulative ``*-total`` ones, ``gauge`` for the rest."""
    description: str


class _Sample:
    """One window's values (Java's ``SampledStat.Sample``)."""

    def __init__(self, now: float) -> None:
        self.start = now
        self.last = now
        self.total = 0.0
        self.count = 0
        self.peak = _NEG_INF

    def reset(self, now: float) -> None:
        self.start = now
        self.last = now
        self.total = 0.0
        self.count = 0
        self.peak = _NEG_INF


class Sensor:
    """Values of one quantity over a sliding window, plus their lifetime total.

    Args:
        window: Seconds one sample covers (Java ``metrics.sample.window.ms`` / 1000).
        samples: Samples measured together (Java ``metrics.num.samples``).

    Times are the caller's clock, in seconds; see the module's theory of operation.
    """

    def __init__(self, window: float, samples: int) -> None:
        if window <= 0 or samples < 1:
            raise ValueError(f"need window > 0 and samples >= 1, got {window}, {samples}")
        self._window = window
        self._num = samples
        self._ring: list[_Sample] = []
        self._current = 0
        self.total = 0.0
        """Sum of every value recorded (Java ``CumulativeSum``)."""
        self.count = 0
        """Values recorded."""

    def record(self, value: float, now: float) -> None:
        ring = self._ring
        if not ring:
            sample = _Sample(now)
            ring.append(sample)
        else:
            sample = ring[self._current]
            if now - sample.start >= self._window:
                sample = self._advance(now)
        sample.total += value
        sample.count += 1
        if value > sample.peak:
            sample.peak = value
        sample.last = now
        self.total += value
        self.count += 1

    def add(self, value: float) -> None:
        """Count ``value`` in the lifetime total only (metrics_enabled=False)."""
        self.total += value
        self.count += 1

    def _advance(self, now: float) -> _Sample:
        current = self._current = (self._current + 1) % (self._num + 1)
        ring = self._ring
        if current < len(ring):
            sample = ring[current]
            sample.reset(now)
        else:
            sample = _Sample(now)
            ring.append(sample)
        return sample

    def _purge(self, now: float) -> None:
        expiry = self._num * self._window
        for sample in self._ring:
            if now - sample.last >= expiry:
                sample.reset(now)

    def rate(self, now: float) -> float:
        """Sum of the values in the window, per second (Java ``Rate``)."""
        ring = self._ring
        if not ring:
            # As Java's oldest(): a rate read before any value starts the first sample.
            ring.append(_Sample(now))
        self._purge(now)
        total = 0.0
        oldest = now
        for sample in ring:
            total += sample.total
            if sample.start < oldest:
                oldest = sample.start
        elapsed = now - oldest
        full = int(elapsed // self._window)
        if full < self._num - 1:
            elapsed += (self._num - 1 - full) * self._window
        if elapsed < _MIN_ELAPSED:
            elapsed = _MIN_ELAPSED
        return total / elapsed

    def avg(self, now: float) -> float:
        """Mean of the values in the window; 0 with none (Java ``Avg``, which reads NaN)."""
        self._purge(now)
        total = 0.0
        count = 0
        for sample in self._ring:
            total += sample.total
            count += sample.count
        return total / count if count else 0.0

    def max(self, now: float) -> float:
        """Largest value in the window; 0 with none (Java ``Max``, which reads NaN)."""
        self._purge(now)
        peak = _NEG_INF
        for sample in self._ring:
            if sample.count and sample.peak > peak:
                peak = sample.peak
        return peak if peak != _NEG_INF else 0.0


class TopicMetrics:
    """The sensors of one topic (Java's ``topic.<name>.*`` sensors)."""

    def __init__(self, window: float, samples: int) -> None:
        self.sent = Sensor(window, samples)
        self.bytes = Sensor(window, samples)
        self.compression = Sensor(window, samples)
        self.retries = Sensor(window, samples)
        self.errors = Sensor(window, samples)

    def values(self, now: float) -> dict[str, float]:
        return {
            "record-send-total": self.sent.total,
            "record-send-rate": self.sent.rate(now),
            "byte-total": self.bytes.total,
            "byte-rate": self.bytes.rate(now),
            "compression-rate": self.compression.avg(now),
            "record-retry-total": self.retries.total,
            "record-retry-rate": self.retries.rate(now),
            "record-error-total": self.errors.total,
            "record-error-rate": self.errors.rate(now),
        }


# Name -> description, in the order metrics() lists them. Counters are the names ending in
# -total; every other metric is a gauge.
PRODUCER_METRICS: Mapping[str, str] = {
    "record-send-total": "Records acknowledged by the brokers",
    "record-send-rate": "Records acknowledged per second",
    "byte-total": "Bytes of record batches acknowledged",
    "byte-rate": "Bytes of record batches acknowledged per second",
    "record-error-total": "Records that failed",
    "record-error-rate": "Records that failed, per second",
    "record-retry-total": "Records sent again after a retriable error",
    "record-retry-rate": "Records sent again after a retriable error, per second",
    "record-queue-time-avg": "Average ms a batch waited in the accumulator before its first send",
    "record-queue-time-max": "Longest ms a batch waited in the accumulator before its first send",
    "request-latency-avg": "Average ms from a produce request's start to its response",
    "request-latency-max": "Longest ms from a produce request's start to its response",
    "produce-throttle-time-avg": "Average ms a broker throttled a produce request (quotas)",
    "produce-throttle-time-max": "Longest ms a broker throttled a produce request (quotas)",
    "batch-size-avg": "Average bytes of an acknowledged batch",
    "batch-size-max": "Largest bytes of an acknowledged batch",
    "batch-split-total": "Batches split after MESSAGE_TOO_LARGE",
    "batch-split-rate": "Batches split after MESSAGE_TOO_LARGE, per second",
    "records-per-request-avg": "Average records per produce request",
    "compression-rate-avg": "Average compressed size over uncompressed size of a batch",
    "request-total": "Produce requests sent",
    "request-rate": "Produce requests sent per second",
    "requests-in-flight": "Produce requests awaiting a response",
    "buffer-total-bytes": "The buffer pool's size (buffer_memory)",
    "buffer-available-bytes": "Bytes of the buffer pool not in use",
    "bufferpool-wait-time-ns-total": "Nanoseconds sends spent waiting for buffer memory",
    "bufferpool-wait-ratio": "Fraction of time sends spent waiting for buffer memory",
    "buffer-exhausted-total": "Sends that timed out waiting for buffer memory",
    "buffer-exhausted-rate": "Sends that timed out waiting for buffer memory, per second",
    "waiting-threads": "Sends waiting for buffer memory now",
}
TOPIC_METRICS: Mapping[str, str] = {
    "record-send-total": "Records of the topic acknowledged",
    "record-send-rate": "Records of the topic acknowledged per second",
    "byte-total": "Bytes of the topic's batches acknowledged",
    "byte-rate": "Bytes of the topic's batches acknowledged per second",
    "compression-rate": "Average compressed size over uncompressed size of the topic's batches",
    "record-retry-total": "Records of the topic sent again after a retriable error",
    "record-retry-rate": "Records of the topic sent again after a retriable error, per second",
    "record-error-total": "Records of the topic that failed",
    "record-error-rate": "Records of the topic that failed, per second",
}


# What metrics_enabled=False still reads: the lifetime totals, and the gauges read live.
_UNWINDOWED = frozenset(
    [name for name in PRODUCER_METRICS if name.endswith("-total")]
    + ["requests-in-flight", "buffer-total-bytes", "buffer-available-bytes", "waiting-threads"]
)


def _kind(name: str) -> MetricKind:
    return "counter" if name.endswith("-total") else "gauge"


class ProducerMetrics:
    """The sensors the sender records into; read by ``Producer.metrics()`` and
    ``Producer.metric_values()``.

    Args:
        clock: Monotonic seconds, for readings and for the values recorded without a time
            (errors, retries, splits); :meth:`bind` replaces it with the loop's.
        window: Seconds per sample (``metrics_sample_window_ms`` / 1000).
        samples: Samples per window (``metrics_num_samples``).
        client_id: The ``client-id`` tag.
        windowed: ``False`` (``metrics_enabled=False``) keeps the lifetime totals only: no
            samples, no per-topic sensors, and the readings list the totals and the gauges that
            are read live.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        window: float = 30.0,
        samples: int = 2,
        client_id: str = "aioaccum",
        windowed: bool = True,
    ) -> None:
        self._clock = clock
        self._windowed = windowed
        self._window = window
        self._num = samples
        self.client_id = client_id
        self._sent = Sensor(window, samples)
        # One sensor for byte-* and batch-size-*: the same values at the same times.
        self._bytes = Sensor(window, samples)
        self._errors = Sensor(window, samples)
        self._retries = Sensor(window, samples)
        self._splits = Sensor(window, samples)
        self._requests = Sensor(window, samples)
        self._queue_time = Sensor(window, samples)
        self._latency = Sensor(window, samples)
        self._throttle = Sensor(window, samples)
        self._records_per_request = Sensor(window, samples)
        self._compression = Sensor(window, samples)
        self._pool_wait = Sensor(window, samples)
        self._exhausted = Sensor(window, samples)
        self._topics: dict[str, TopicMetrics] = {}
        self._pool: PoolGauges | None = None
        self._waited_seen = 0.0
        self._exhausted_seen = 0

    def bind(self, pool: PoolGauges, clock: Callable[[], float]) -> None:
        """Follow ``pool``'s waits, and read ``clock`` (the clock the sender's ``now`` comes
        from) from now on."""
        self._pool = pool
        self._clock = clock
        self._waited_seen = pool.wait_time_total_s
        self._exhausted_seen = pool.exhausted_count

    # --- lifetime counts, for tests and callers of old

    @property
    def records_sent(self) -> int:
        return int(self._sent.total)

    @property
    def record_errors_total(self) -> int:
        return int(self._errors.total)

    @property
    def record_retries_total(self) -> int:
        return int(self._retries.total)

    @property
    def splits_total(self) -> int:
        return int(self._splits.total)

    @property
    def requests_total(self) -> int:
        return int(self._requests.total)

    # --- recording: once per request or per batch

    def _topic(self, topic: str) -> TopicMetrics:
        metrics = self._topics.get(topic)
        if metrics is None:
            metrics = self._topics[topic] = TopicMetrics(self._window, self._num)
        return metrics

    def record_drained(self, batches: Iterable[ProducerBatch], now: float) -> None:
        """A produce request starts with ``batches``."""
        if not self._windowed:
            self._requests.add(1.0)
            return
        self._requests.record(1.0, now)
        records = 0
        for batch in batches:
            records += batch.record_count
            if batch.attempts:
                continue  # queue time is the wait before the first send only
            self._queue_time.record((now - batch.created) * 1000.0, now)
        self._records_per_request.record(records, now)
        if self._pool is not None:
            self._fold_pool(now)

    def record_success(self, batch: ProducerBatch, now: float) -> None:
        """The broker acknowledged ``batch``."""
        size = batch.estimated_size_in_bytes  # exact once closed: no join of a chunked batch
        count = batch.record_count
        if not self._windowed:
            self._sent.add(count)
            self._bytes.add(size)
            return
        topic = self._topic(batch.tp.topic)
        self._sent.record(count, now)
        topic.sent.record(count, now)
        self._bytes.record(size, now)
        topic.bytes.record(size, now)
        ratio = batch.builder.compression_ratio
        if ratio > 0:
            self._compression.record(ratio, now)
            topic.compression.record(ratio, now)

    def record_errors(self, topic: str, count: int) -> None:
        """``count`` records of ``topic`` failed."""
        if not self._windowed:
            self._errors.add(count)
            return
        now = self._clock()
        self._errors.record(count, now)
        self._topic(topic).errors.record(count, now)

    def record_retries(self, topic: str, count: int) -> None:
        """``count`` records of ``topic`` go back to the queue to be sent again."""
        if not self._windowed:
            self._retries.add(count)
            return
        now = self._clock()
        self._retries.record(count, now)
        self._topic(topic).retries.record(count, now)

    def record_split(self) -> None:
        if not self._windowed:
            self._splits.add(1.0)
            return
        self._splits.record(1.0, self._clock())

    def record_response(self, latency: float, throttle_time_ms: float, now: float) -> None:
        """A produce response came ``latency`` seconds after its request started."""
        if not self._windowed:
            return
        self._latency.record(latency * 1000.0, now)
        self._throttle.record(throttle_time_ms, now)

    def _fold_pool(self, now: float) -> None:
        """Record the pool's waits and timeouts since the last look (the pool counts them;
        the sender looks every request, so they land in the window they happened in)."""
        pool = self._pool
        assert pool is not None
        waited = pool.wait_time_total_s
        if waited > self._waited_seen:
            self._pool_wait.record(waited - self._waited_seen, now)
            self._waited_seen = waited
        exhausted = pool.exhausted_count
        if exhausted > self._exhausted_seen:
            self._exhausted.record(exhausted - self._exhausted_seen, now)
            self._exhausted_seen = exhausted

    # --- reading

    def snapshot(self, pool: PoolGauges, requests_in_flight: int) -> dict[str, float]:
        """The producer-level metrics by Java name (``Producer.metrics()``)."""
        now = self._clock()
        if self._pool is pool and self._windowed:
            self._fold_pool(now)
        stats = pool.statistics()
        values = {
            "record-send-total": self._sent.total,
            "record-send-rate": self._sent.rate(now),
            "byte-total": self._bytes.total,
            "byte-rate": self._bytes.rate(now),
            "record-error-total": self._errors.total,
            "record-error-rate": self._errors.rate(now),
            "record-retry-total": self._retries.total,
            "record-retry-rate": self._retries.rate(now),
            "record-queue-time-avg": self._queue_time.avg(now),
            "record-queue-time-max": self._queue_time.max(now),
            "request-latency-avg": self._latency.avg(now),
            "request-latency-max": self._latency.max(now),
            "produce-throttle-time-avg": self._throttle.avg(now),
            "produce-throttle-time-max": self._throttle.max(now),
            "batch-size-avg": self._bytes.avg(now),
            "batch-size-max": self._bytes.max(now),
            "batch-split-total": self._splits.total,
            "batch-split-rate": self._splits.rate(now),
            "records-per-request-avg": self._records_per_request.avg(now),
            "compression-rate-avg": self._compression.avg(now),
            "request-total": self._requests.total,
            "request-rate": self._requests.rate(now),
            "requests-in-flight": float(requests_in_flight),
            "buffer-total-bytes": float(stats.total),
            "buffer-available-bytes": float(stats.available),
            "bufferpool-wait-time-ns-total": stats.wait_time_total_s * 1e9,
            "bufferpool-wait-ratio": self._pool_wait.rate(now),
            "buffer-exhausted-total": float(stats.exhausted_count),
            "buffer-exhausted-rate": self._exhausted.rate(now),
            "waiting-threads": float(stats.waiters),
        }
        if not self._windowed:
            return {name: value for name, value in values.items() if name in _UNWINDOWED}
        return values

    def topic_snapshot(self) -> dict[str, dict[str, float]]:
        """The per-topic metrics: topic -> Java name -> value."""
        if not self._windowed:
            return {}
        now = self._clock()
        return {topic: metrics.values(now) for topic, metrics in self._topics.items()}

    def values(self, pool: PoolGauges, requests_in_flight: int) -> list[MetricValue]:
        """Every metric with its group, tags, kind and description
        (``Producer.metric_values()``)."""
        client = {"client-id": self.client_id}
        out = [
            MetricValue(name, PRODUCER_GROUP, client, value, _kind(name), PRODUCER_METRICS[name])
            for name, value in self.snapshot(pool, requests_in_flight).items()
        ]
        for topic, values in self.topic_snapshot().items():
            tags = {"client-id": self.client_id, "topic": topic}
            out.extend(
                MetricValue(name, TOPIC_GROUP, tags, value, _kind(name), TOPIC_METRICS[name])
                for name, value in values.items()
            )
        return out
