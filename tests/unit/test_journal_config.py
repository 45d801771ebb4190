"""The journal's settings: defaults, and the checks that span settings."""

from __future__ import annotations

import pathlib

import pytest

from aioaccum.config import ProducerConfig
from aioaccum.errors import ConfigError


def test_journal_is_off_by_default() -> None:
    cfg = ProducerConfig()
    assert cfg.journal_dir is None
    assert cfg.journal_sync == "none"


def test_a_path_object_is_kept_as_a_string(tmp_path: pathlib.Path) -> None:
    assert ProducerConfig(journal_dir=tmp_path).journal_dir == str(tmp_path)


def test_journal_needs_idempotence() -> None:
    with pytest.raises(ConfigError, match="journal_dir needs enable_idempotence=True"):
        ProducerConfig(journal_dir="/tmp/j", enable_idempotence=False)


def test_journal_refuses_transactions() -> None:
    with pytest.raises(ConfigError, match="transactional_id"):
        ProducerConfig(journal_dir="/tmp/j", transactional_id="t")


def test_a_segment_must_hold_the_largest_record() -> None:
    with pytest.raises(ConfigError, match=r"must exceed max_request_size \+ 65536 = 1114112"):
        ProducerConfig(journal_dir="/tmp/j", journal_segment_bytes=1_114_112)
    ProducerConfig(journal_dir="/tmp/j", journal_segment_bytes=1_114_113,
                   journal_max_bytes=4_000_000)


def test_the_journal_holds_two_segments_at_least() -> None:
    with pytest.raises(ConfigError, match="at least two segments"):
        ProducerConfig(journal_dir="/tmp/j", journal_segment_bytes=2_000_000,
                       journal_max_bytes=3_000_000)


def test_sync_mode_is_checked() -> None:
    with pytest.raises(ConfigError, match="none, interval, always"):
        ProducerConfig(journal_dir="/tmp/j", journal_sync="sometimes")
    assert ProducerConfig(journal_sync="ALWAYS").journal_sync == "always"


def test_java_properties_leave_the_journal_off() -> None:
    cfg = ProducerConfig.from_properties({"bootstrap.servers": "h:9092"})
    assert cfg.journal_dir is None
