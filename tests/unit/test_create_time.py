"""A record's create time: the system clock in ms, as ``time.time_ns() // 1_000_000`` reads it,
whether read in C (compiled) or in Python."""

from __future__ import annotations

import time

import pytest

from aioaccum._core.validate import MAX_TIMESTAMP, checked_timestamp, wall_clock_ms
from aioaccum.errors import ConfigError


def test_the_clock_reads_what_time_ns_reads() -> None:
    before = time.time_ns() // 1_000_000
    now = wall_clock_ms()
    after = time.time_ns() // 1_000_000
    assert type(now) is int
    assert before <= now <= after


def test_a_record_without_a_timestamp_is_stamped_now() -> None:
    before = time.time_ns() // 1_000_000
    assert before <= checked_timestamp(None) <= time.time_ns() // 1_000_000


@pytest.mark.parametrize("given", [0, 1_700_000_000_000, MAX_TIMESTAMP])
def test_a_given_timestamp_is_kept(given: int) -> None:
    assert checked_timestamp(given) == given


@pytest.mark.parametrize("given", [-1, MAX_TIMESTAMP + 1, 1.5, "1"])
def test_a_bad_timestamp_is_refused(given: object) -> None:
    with pytest.raises(ConfigError, match="timestamp_ms must be an int"):
        checked_timestamp(given)
