"""Producer metrics, named as the Java producer names them.

Counters are cumulative since start; rates are per second over the producer's lifetime so far, and
averages are over every sample so far. Reading them costs nothing on the send path: recording
happens per batch, not per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aioaccum._core.batch import ProducerBatch
    from aioaccum.pool import BufferPool

__all__ = ["ProducerMetrics"]


class ProducerMetrics:
    """Counts kept by the sender and read by ``Producer.metrics()``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self.records_sent = 0
        self.bytes_sent = 0
        self.batches_sent = 0
        self.record_errors_total = 0
        self.record_retries_total = 0
        self.splits_total = 0
        self.requests_total = 0
        self._queue_time_total = 0.0
        self._queue_time_max = 0.0
        self._queue_samples = 0
        self._batch_bytes_total = 0
        self._batch_records_total = 0
        self._compression_samples = 0
        self._compression_rate_total = 0.0

    def record_drained(self, batches: Iterable[ProducerBatch], now: float) -> None:
        self.requests_total += 1
        for batch in batches:
            if batch.attempts:
                continue
            queued = now - batch.created
            self._queue_time_total += queued
            self._queue_time_max = max(self._queue_time_max, queued)
            self._queue_samples += 1

    def record_success(self, batch: ProducerBatch, now: float) -> None:
        size = len(batch.records())
        count = batch.record_count
        self.batches_sent += 1
        self.records_sent += count
        self.bytes_sent += size
        self._batch_bytes_total += size
        self._batch_records_total += count
        ratio = batch.builder.compression_ratio
        if ratio > 0:
            self._compression_samples += 1
            self._compression_rate_total += ratio

    def record_errors(self, count: int) -> None:
        self.record_errors_total += count

    def record_retries(self, count: int) -> None:
        self.record_retries_total += count

    def record_split(self) -> None:
        self.splits_total += 1

    def snapshot(self, pool: BufferPool, requests_in_flight: int) -> dict[str, float]:
        elapsed = max(self._clock() - self._started, 1e-9)
        stats = pool.statistics()
        batches = max(self.batches_sent, 1)
        return {
            "record-send-total": float(self.records_sent),
            "record-send-rate": self.records_sent / elapsed,
            "byte-rate": self.bytes_sent / elapsed,
            "record-error-total": float(self.record_errors_total),
            "record-error-rate": self.record_errors_total / elapsed,
            "record-retry-total": float(self.record_retries_total),
            "record-retry-rate": self.record_retries_total / elapsed,
            "record-queue-time-avg": (
                self._queue_time_total / self._queue_samples * 1000 if self._queue_samples else 0.0
            ),
            "record-queue-time-max": self._queue_time_max * 1000,
            "batch-size-avg": self._batch_bytes_total / batches,
            "batch-split-total": float(self.splits_total),
            "records-per-request-avg": self._batch_records_total / max(self.requests_total, 1),
            "compression-rate-avg": (
                self._compression_rate_total / self._compression_samples
                if self._compression_samples
                else 1.0
            ),
            "request-total": float(self.requests_total),
            "requests-in-flight": float(requests_in_flight),
            "buffer-total-bytes": float(stats.total),
            "buffer-available-bytes": float(stats.available),
            "bufferpool-wait-time-ns-total": stats.wait_time_total_s * 1e9,
            "bufferpool-wait-ratio": stats.wait_time_total_s / elapsed,
            "buffer-exhausted-total": float(stats.exhausted_count),
            "waiting-threads": float(stats.waiters),
        }
