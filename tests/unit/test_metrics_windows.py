"""Windowed metrics measured as Kafka's ``SampledStat``, ``Rate``, ``Avg`` and ``Max`` measure
them, on a clock the test moves (no sleeps).

The expected numbers follow Java's rules, worked out by hand in each test: samples of
``window`` seconds, ``samples + 1`` slots, a sample cleared ``samples * window`` after its last
value, and a rate's elapsed time of at least ``samples - 1`` whole windows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioaccum._core.metrics import (
    PRODUCER_GROUP,
    PRODUCER_METRICS,
    TOPIC_GROUP,
    TOPIC_METRICS,
    ProducerMetrics,
    Sensor,
)
from aioaccum._runtime.pool import BufferPool, PoolStats


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- Sensor: Java's window rules


def test_a_rate_right_after_the_first_value_counts_the_missing_windows() -> None:
    sensor = Sensor(30.0, 2)
    sensor.record(60, 0.0)
    # Java's Rate: elapsed 0 s, fewer than samples - 1 = 1 full window: 30 s are added.
    assert sensor.rate(0.0) == pytest.approx(60 / 30)
    assert sensor.rate(10.0) == pytest.approx(60 / 40)
    # One full window elapsed: nothing added any more.
    assert sensor.rate(45.0) == pytest.approx(60 / 45)


def test_a_rate_forgets_values_once_their_sample_expires() -> None:
    sensor = Sensor(30.0, 2)
    sensor.record(30, 0.0)
    sensor.record(90, 31.0)  # the first sample is 31 s old: a second one starts
    assert sensor.rate(50.0) == pytest.approx(120 / 50)
    # 60 s (samples * window) after the first sample's last value it is cleared; the oldest
    # sample left began at 31: 29 s, less than one full window, so 30 s are added.
    assert sensor.rate(60.0) == pytest.approx(90 / 59)
    assert sensor.rate(91.0) == 0.0  # both expired
    assert sensor.total == 120  # the lifetime total is never windowed
    assert sensor.count == 2


def test_samples_take_turns_in_samples_plus_one_slots() -> None:
    sensor = Sensor(10.0, 2)
    sensor.record(1, 0.0)
    sensor.record(1, 10.0)  # a second sample
    # At 19 the first sample's value is 19 s old, less than 2 * 10: kept, over 19 s.
    assert sensor.rate(19.0) == pytest.approx(2 / 19)
    sensor.record(1, 20.0)  # the third slot
    # At 25 the first sample's value is 25 s old: cleared; the oldest left began at 10.
    assert sensor.rate(25.0) == pytest.approx(2 / 15)
    sensor.record(1, 30.0)  # wraps round to the first slot, which starts over
    # The sample begun at 10 expires at 30: left are those begun at 20 and 30.
    assert sensor.rate(30.0) == pytest.approx(2 / 10)
    assert sensor.total == 4


def test_a_sample_is_kept_while_it_overlaps_the_window() -> None:
    sensor = Sensor(10.0, 2)
    sensor.record(5, 0.0)
    sensor.record(5, 9.0)  # the same sample: it began at 0
    # At 28 it began 28 s ago, but its last value is only 19 s old: kept (Java's overlap).
    assert sensor.rate(28.0) == pytest.approx(10 / 28)
    assert sensor.rate(29.0) == 0.0


def test_average_and_max_cover_the_window_and_read_zero_without_values() -> None:
    sensor = Sensor(10.0, 2)
    assert (sensor.avg(0.0), sensor.max(0.0), sensor.rate(0.0)) == (0.0, 0.0, 0.0)
    sensor.record(4, 0.0)
    sensor.record(8, 1.0)
    sensor.record(3, 12.0)
    assert sensor.avg(12.0) == pytest.approx(5.0)
    assert sensor.max(12.0) == 8
    # The first sample's last value (at 1) is 20 s old at 21: only the 3 is left.
    assert sensor.avg(21.0) == pytest.approx(3.0)
    assert sensor.max(21.0) == 3
    assert sensor.max(32.0) == 0.0
    assert sensor.avg(32.0) == 0.0


def test_a_single_sample_window() -> None:
    sensor = Sensor(5.0, 1)
    sensor.record(10, 0.0)
    # samples - 1 = 0 windows are added: the rate is over the time actually elapsed.
    assert sensor.rate(2.0) == pytest.approx(10 / 2)
    assert sensor.rate(0.0) == pytest.approx(10 / 0.001)  # Java's 1 ms floor
    assert sensor.rate(5.0) == 0.0


@pytest.mark.parametrize(("window", "samples"), [(0.0, 2), (-1.0, 2), (30.0, 0)])
def test_a_sensor_needs_a_window_and_a_sample(window: float, samples: int) -> None:
    with pytest.raises(ValueError, match="window > 0 and samples >= 1"):
        Sensor(window, samples)


# --- ProducerMetrics


class StubPool:
    """What the metrics read of a BufferPool: its wait and timeout counters and statistics."""

    def __init__(self) -> None:
        self.wait_time_total_s = 0.0
        self.exhausted_count = 0
        self.waiters = 0

    def statistics(self) -> PoolStats:
        return PoolStats(
            total=1000,
            poolable_size=100,
            free_buffers=0,
            unallocated=600,
            available=600,
            reserved=0,
            allocated=400,
            waiters=self.waiters,
            allocations=0,
            queued_allocations=0,
            exhausted_count=self.exhausted_count,
            wait_time_total_s=self.wait_time_total_s,
            closed=False,
        )


def bound(window: float = 30.0, samples: int = 2) -> tuple[ProducerMetrics, FakeClock, StubPool]:
    clock = FakeClock()
    metrics = ProducerMetrics(clock, window=window, samples=samples, client_id="c1")
    pool = StubPool()
    metrics.bind(cast(BufferPool, pool), clock)
    return metrics, clock, pool


def test_errors_and_retries_are_counted_per_topic() -> None:
    metrics, clock, pool = bound()
    metrics.record_errors("a", 3)
    metrics.record_retries("a", 2)
    metrics.record_retries("b", 5)
    flat = metrics.snapshot(cast(BufferPool, pool), 0)
    assert (flat["record-error-total"], flat["record-retry-total"]) == (3, 7)
    assert flat["record-retry-rate"] == pytest.approx(7 / 30)
    topics = metrics.topic_snapshot()
    assert sorted(topics) == ["a", "b"]
    assert (topics["a"]["record-error-total"], topics["a"]["record-retry-total"]) == (3, 2)
    assert (topics["b"]["record-error-total"], topics["b"]["record-retry-total"]) == (0, 5)
    clock.advance(60)
    assert metrics.topic_snapshot()["b"]["record-retry-rate"] == 0.0
    assert metrics.topic_snapshot()["b"]["record-retry-total"] == 5


def test_pool_waits_become_a_windowed_ratio() -> None:
    metrics, clock, pool = bound(window=10.0, samples=2)
    pool.wait_time_total_s = 2.5  # sends waited 2.5 s in all
    pool.exhausted_count = 1
    pool.waiters = 3
    flat = metrics.snapshot(cast(BufferPool, pool), 2)
    # Seen at this reading: 2.5 s of waiting over the (at least) 10 s window.
    assert flat["bufferpool-wait-ratio"] == pytest.approx(0.25)
    assert flat["bufferpool-wait-time-ns-total"] == pytest.approx(2.5e9)
    assert flat["buffer-exhausted-total"] == 1
    assert flat["buffer-exhausted-rate"] == pytest.approx(0.1)
    assert (flat["waiting-threads"], flat["requests-in-flight"]) == (3, 2)
    assert (flat["buffer-total-bytes"], flat["buffer-available-bytes"]) == (1000, 600)
    clock.advance(20)
    flat = metrics.snapshot(cast(BufferPool, pool), 0)
    assert flat["bufferpool-wait-ratio"] == 0.0  # no new waits: the old ones left the window
    assert flat["bufferpool-wait-time-ns-total"] == pytest.approx(2.5e9)


def test_request_latency_and_throttle_time_in_ms() -> None:
    metrics, clock, pool = bound()
    metrics.record_response(0.004, 0, clock())
    metrics.record_response(0.010, 250, clock())
    flat = metrics.snapshot(cast(BufferPool, pool), 0)
    assert flat["request-latency-avg"] == pytest.approx(7.0)
    assert flat["request-latency-max"] == pytest.approx(10.0)
    assert flat["produce-throttle-time-avg"] == pytest.approx(125.0)
    assert flat["produce-throttle-time-max"] == 250


def test_metric_values_name_group_tags_kind_and_description() -> None:
    metrics, _, pool = bound()
    metrics.record_errors("orders", 1)
    values = metrics.values(cast(BufferPool, pool), 0)
    producer = [v for v in values if v.group == PRODUCER_GROUP]
    topic = [v for v in values if v.group == TOPIC_GROUP]
    assert [v.name for v in producer] == list(PRODUCER_METRICS)
    assert [v.name for v in topic] == list(TOPIC_METRICS)
    assert all(v.tags == {"client-id": "c1"} for v in producer)
    assert all(v.tags == {"client-id": "c1", "topic": "orders"} for v in topic)
    for value in values:
        assert value.kind == ("counter" if value.name.endswith("-total") else "gauge")
        assert value.description
    by_name: dict[str, Any] = {v.name: v.value for v in topic}
    assert by_name["record-error-total"] == 1


def test_no_topic_shows_before_its_first_batch() -> None:
    metrics, _, pool = bound()
    assert metrics.topic_snapshot() == {}
    assert {v.group for v in metrics.values(cast(BufferPool, pool), 0)} == {PRODUCER_GROUP}


# --- against a line-by-line port of Java's classes


class _JavaSample:
    def __init__(self, initial: float, now: int) -> None:
        self.initial = initial
        self.reset(now)

    def reset(self, now: int) -> None:
        self.event_count = 0
        self.start_ms = now
        self.last_event_ms = now
        self.value = self.initial


class _JavaSampledStat:
    """SampledStat with WindowedSum, Avg or Max (``kind``), as Kafka writes them."""

    def __init__(self, kind: str, window: int, samples: int) -> None:
        self.kind, self.window, self.n = kind, window, samples
        self.initial = float("-inf") if kind == "max" else 0.0
        self.samples: list[_JavaSample] = []
        self.current = 0

    def current_sample(self, now: int) -> _JavaSample:
        if not self.samples:
            self.samples.append(_JavaSample(self.initial, now))
        return self.samples[self.current]

    def record(self, value: float, now: int) -> None:
        sample = self.current_sample(now)
        if now - sample.start_ms >= self.window:
            self.current = (self.current + 1) % (self.n + 1)
            if self.current >= len(self.samples):
                sample = _JavaSample(self.initial, now)
                self.samples.append(sample)
            else:
                sample = self.current_sample(now)
                sample.reset(now)
        sample.value = max(sample.value, value) if self.kind == "max" else sample.value + value
        sample.event_count += 1
        sample.last_event_ms = now

    def purge(self, now: int) -> None:
        for sample in self.samples:
            if now - sample.last_event_ms >= self.n * self.window:
                sample.reset(now)

    def measure(self, now: int) -> float:
        self.purge(now)
        count = sum(s.event_count for s in self.samples)
        if self.kind == "sum":
            return sum(s.value for s in self.samples)
        if count == 0:
            return float("nan")
        if self.kind == "avg":
            return sum(s.value for s in self.samples) / count
        return max(s.value for s in self.samples)

    def rate(self, now: int) -> float:
        value = self.measure(now)
        self.purge(now)
        if not self.samples:
            self.samples.append(_JavaSample(self.initial, now))
        elapsed: float = now - min(s.start_ms for s in self.samples)
        full = int(elapsed // self.window)
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.window
        return value / max(elapsed, 0.001)  # Java's floor is 1 ms; these times are seconds


@given(
    window=st.sampled_from([1, 5, 10, 30]),
    samples=st.integers(1, 3),
    steps=st.lists(
        st.tuples(st.integers(0, 40), st.booleans(), st.integers(0, 100)), max_size=60
    ),
)
def test_rate_average_and_max_agree_with_java(
    window: int, samples: int, steps: list[tuple[int, bool, int]]
) -> None:
    sensor = Sensor(float(window), samples)
    java = {kind: _JavaSampledStat(kind, window, samples) for kind in ("sum", "avg", "max")}
    now = 0
    sensor.record(1.0, now)  # from the first value on, Java's three stats share boundaries
    for stat in java.values():
        stat.record(1.0, now)
    for dt, is_record, value in steps:
        now += dt
        if is_record:
            sensor.record(value, now)
            for stat in java.values():
                stat.record(value, now)
            continue
        expected_avg = java["avg"].measure(now)
        expected_max = java["max"].measure(now)
        assert sensor.rate(now) == pytest.approx(java["sum"].rate(now))
        assert sensor.avg(now) == pytest.approx(0.0 if math.isnan(expected_avg) else expected_avg)
        assert sensor.max(now) == (0.0 if math.isnan(expected_max) else expected_max)


def test_a_rate_read_before_any_value_starts_the_first_sample_as_java() -> None:
    sensor = Sensor(30.0, 2)
    java = _JavaSampledStat("sum", 30, 2)
    assert sensor.rate(0.0) == java.rate(0) == 0.0
    sensor.record(10, 20.0)
    java.record(10, 20)
    # The sample began at 0, when the rate was first read, not at 20: over 36 s (one full
    # window, so nothing is added), where from 20 it would be 16 + 30 s.
    assert sensor.rate(36.0) == pytest.approx(java.rate(36)) == pytest.approx(10 / 36)


def test_the_docs_list_every_metric() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    for name in [*PRODUCER_METRICS, *TOPIC_METRICS]:
        assert f"`{name}`" in page, name
