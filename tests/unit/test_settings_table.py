"""One row type for every settings table: the HTTP service's settings resolve through their rows
from a ``--config`` file, the flags and Python alike, with the producer's suggestions."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from aioaccum.cli import build_parser
from aioaccum.config.aiokafka_config import AIOKAFKA_DEFAULTS, ARGUMENTS, RENAMED
from aioaccum.config.serve_settings import SERVE, SETTINGS, ServeSettings
from aioaccum.config.settings import PRODUCER
from aioaccum.config.table import NoJavaName
from aioaccum.errors import ConfigError
from aioaccum.serve import add_arguments

PRODUCER_PROPS = {"bootstrap.servers": "b:9092"}


def from_command_line(tmp_path: Path, config: str | None, *flags: str) -> ServeSettings:
    argv = ["serve", "--bootstrap-server", "b:9092"]
    if config is not None:
        path = tmp_path / "serve.properties"
        path.write_text(config)
        argv += ["--config", str(path)]
    return ServeSettings.from_arguments(build_parser().parse_args([*argv, *flags]))


def config_error(tmp_path: Path, config: str | None, *flags: str) -> str:
    with pytest.raises(ConfigError) as caught:
        from_command_line(tmp_path, config, *flags)
    return str(caught.value)


def test_a_setting_resolves_through_its_row_from_the_file_then_the_flag(tmp_path: Path) -> None:
    config = (
        "# the server's own settings\n"
        "workers=2\n"
        "max.body.bytes : 1000\n"
        "body_budget_bytes=2000\n"  # the Python name is read as the key is
        "access.log=yes\n"
    )
    settings = from_command_line(tmp_path, config, "--workers", "3")
    assert settings.workers == 3  # the flag wins over the file
    assert (settings.max_body_bytes, settings.body_budget_bytes) == (1000, 2000)
    assert settings.access_log is True
    assert settings.listen == "127.0.0.1:8082"  # the row's default
    assert settings == ServeSettings.create(
        PRODUCER_PROPS, workers=3, max_body_bytes=1000, body_budget_bytes=2000, access_log=True
    )


def test_a_bad_value_is_named_where_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "serve.properties"
    assert config_error(tmp_path, "workers=0\n") == (
        f"--config {path}: workers must be >= 1, got 0"
    )
    assert config_error(tmp_path, None, "--workers", "many") == (
        "--workers must be an integer, got 'many'"
    )
    assert "--listen must be HOST:PORT" in config_error(tmp_path, None, "--listen", "8082")
    assert "--access-log must be true or false" in config_error(
        tmp_path, None, "--access-log", "maybe"
    )
    missing = str(tmp_path / "missing.pem")
    assert config_error(tmp_path, f"tls.cert={missing}\n").startswith(
        f"--config {path}: tls.cert must be the path of a readable file"
    )


def test_an_unknown_key_gets_the_closest_one_in_its_own_spelling(tmp_path: Path) -> None:
    path = tmp_path / "serve.properties"
    assert config_error(tmp_path, "max.body.byte=5\n") == (
        f"--config {path}: unknown setting 'max.body.byte'; did you mean 'max.body.bytes'?"
    )
    assert config_error(tmp_path, "wrokers=2\n").endswith("did you mean 'workers'?")
    assert config_error(tmp_path, "readinessTimeoutMs=5\n").endswith(
        "did you mean 'readiness_timeout_ms'?"
    )
    assert config_error(tmp_path, "frobnicate=1\n").startswith(
        f"--config {path}: unknown setting 'frobnicate'; valid settings are listen, workers,"
    )


def test_a_producer_setting_in_the_servers_file_is_sent_to_the_producers(tmp_path: Path) -> None:
    path = tmp_path / "serve.properties"
    assert config_error(tmp_path, "linger.ms=5\n") == (
        f"--config {path}: 'linger.ms' is a producer setting; put it in --producer.config"
    )


def test_python_values_are_checked_by_the_same_rows() -> None:
    with pytest.raises(ConfigError, match=r"^unknown setting 'worker'; did you mean 'workers'\?$"):
        ServeSettings.create(PRODUCER_PROPS, worker=2)
    with pytest.raises(ConfigError, match=r"^workers must be >= 1, got 0$"):
        ServeSettings.create(PRODUCER_PROPS, workers=0)
    with pytest.raises(ConfigError, match=r"^access_log must be True or False, got 'yes'$"):
        ServeSettings.create(PRODUCER_PROPS, access_log="yes")


def test_the_help_has_a_flag_per_row_with_its_key_and_default() -> None:
    serve = argparse.ArgumentParser()
    add_arguments(serve)
    helps = {action.option_strings[0]: action for action in serve._actions if action.help}
    for row in SETTINGS:
        action = helps[row.flag]
        assert action.metavar == row.kind.metavar
        assert action.help is not None
        assert action.help.startswith(row.doc)
        assert f"[{row.key}" in action.help
        assert (row.default is None) != (f"; default {row.default}]" in action.help)


def test_aiokafkas_arguments_are_rows_that_name_the_setting_they_set() -> None:
    assert list(AIOKAFKA_DEFAULTS) == [row.name for row in ARGUMENTS]
    for row in ARGUMENTS:
        assert isinstance(row.key, NoJavaName) or row.key in PRODUCER.by_name, row.name
    assert RENAMED == {"max_batch_size": "batch_size"}
    # The producer suggests the setting an aiokafka name stands for.
    assert PRODUCER.suggest("max_batch_size") == "batch_size"


def test_every_table_suggests_by_key_for_a_dotted_name_and_by_name_otherwise() -> None:
    assert SERVE.suggest("tls.crt") == "tls.cert"
    assert SERVE.suggest("tls_crt") == "tls_cert"
    assert PRODUCER.suggest("linger.msec") == "linger.ms"
    assert PRODUCER.suggest("LINGER_MS_CONFIG") == "linger_ms"
