"""``--producer.config FILE``: Java's .properties format, overridden by ``--producer-props``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aioaccum.cli import build_parser
from aioaccum.config.producer_config import ProducerConfig
from aioaccum.config.properties import producer_properties, read_properties_file
from aioaccum.errors import ConfigError

SECRET = "s3cr3t-Pa55"
JAAS_LINES = (
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
    '    username="alice" \\\n'
    f'    password="{SECRET}";\n'
)


def write(tmp_path: Path, text: str, name: str = "client.properties") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return str(path)


def config_error(call: object, *args: object) -> str:
    assert callable(call)
    with pytest.raises(ConfigError) as info:
        call(*args)
    return str(info.value)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioaccum.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- the file format ---------------------------------------------------------------------------


def test_properties_file_reads_javas_syntax(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a comment\r\n"
        "! another comment, with = and : in it\n"
        "\n"
        "   \t\n"
        "  bootstrap.servers = a:9092, b:9092\n"
        "linger.ms: 7\n"
        "client.id=first\n"
        "client.id=caf\\u00e9  \n"
        "odd\\=name\\:here=tab\\there\n"
        "ssl.endpoint.identification.algorithm=\n"
        "acks =all\r"
        "compression.type = \\\n"
        "        lz4\n"
        "last=line ends in a backslash\\",
    )
    assert read_properties_file(path) == {
        "bootstrap.servers": "a:9092, b:9092",
        "linger.ms": "7",
        "client.id": "café",  # the last one wins, trimmed as Kafka's ConfigDef trims
        "odd=name:here": "tab\there",
        "ssl.endpoint.identification.algorithm": "",
        "acks": "all",
        "compression.type": "lz4",
        "last": "line ends in a backslash",
    }


def test_a_multi_line_jaas_config_reaches_the_producer_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n" + JAAS_LINES,
    )
    props = producer_properties(path, [], "broker:9093")
    cfg = ProducerConfig.from_properties(props)
    assert cfg.bootstrap_servers == ("broker:9093",)
    assert (cfg.security_protocol, cfg.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (cfg.sasl_plain_username, cfg.sasl_plain_password) == ("alice", SECRET)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (f"sasl_plain_password {SECRET}", "no '=' or ':' after the setting's name"),
        (SECRET, "no '=' or ':' after the setting's name"),
        (f"={SECRET}", "the setting's name is empty"),
        (f"sasl_plain_password={SECRET}\\u12G4", "\\u must be followed by four hex digits"),
    ],
)
def test_a_malformed_line_is_named_and_never_quoted(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write(tmp_path, f"# settings\nlinger.ms=5\n{line}\nacks=1\n")
    text = config_error(read_properties_file, path)
    assert text.startswith(f"--producer.config {path}, line 3: {message}")
    assert SECRET not in text


def test_a_malformed_line_after_a_continuation_names_its_own_line(tmp_path: Path) -> None:
    path = write(tmp_path, JAAS_LINES + "oops\n")
    text = config_error(read_properties_file, path)
    assert f"{path}, line 4:" in text
    assert SECRET not in text


def test_an_unreadable_file_is_named_with_the_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.properties")
    text = config_error(read_properties_file, missing)
    assert text.startswith(f"--producer.config {missing}: cannot read it (No such file")
    assert "readable Java .properties file" in text
    directory = config_error(read_properties_file, str(tmp_path))
    assert f"--producer.config {tmp_path}: cannot read it (" in directory


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.properties"
    path.write_bytes(b"linger.ms=5\nclient.id=caf\xe9\n")
    text = config_error(read_properties_file, str(path))
    assert text == f"--producer.config {path}, line 2: not UTF-8 text; save the file as UTF-8"


# -- merging with the command line -------------------------------------------------------------


def test_command_line_settings_override_the_file_in_either_spelling(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bootstrap_servers=file:9092\nlinger.ms=7\nacks=all\nclient.id=from-file\n",
    )
    props = producer_properties(path, ["linger_ms=20", "acks=1"], "cli:9092")
    assert props == {
        "client.id": "from-file",
        "linger_ms": "20",
        "acks": "1",
        "bootstrap.servers": "cli:9092",
    }
    cfg = ProducerConfig.from_properties(props)  # no "both set linger_ms" conflict
    assert (cfg.linger_ms, cfg.acks, cfg.client_id) == (20, 1, "from-file")
    assert cfg.bootstrap_servers == ("cli:9092",)


def test_command_line_credentials_replace_the_files_jaas_config(tmp_path: Path) -> None:
    path = write(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n" + JAAS_LINES)
    props = producer_properties(
        path, ["sasl_plain_username=bob", "sasl_plain_password=other"], "b:9093"
    )
    assert "sasl.jaas.config" not in props
    cfg = ProducerConfig.from_properties(props)
    assert (cfg.sasl_plain_username, cfg.sasl_plain_password) == ("bob", "other")


def test_without_a_file_only_the_command_line_counts() -> None:
    assert producer_properties(None, ["linger.ms=3"], None) == {"linger.ms": "3"}


def test_a_producer_props_pair_without_equals_is_not_quoted() -> None:
    text = config_error(producer_properties, None, ["acks=1", SECRET], None)
    assert text == (
        "--producer-props expects KEY=VALUE pairs, but pair 2 of 2 has no '='; "
        "write it as KEY=VALUE"
    )
    assert "has no key" in config_error(producer_properties, None, ["=x"], None)


@pytest.mark.parametrize(
    ("command", "required"),
    [
        (
            "perf",
            ["--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"],
        ),
        ("produce", ["--topic", "t", "--bootstrap-server", "cli:9092"]),
    ],
)
def test_the_parser_takes_kafkas_producer_config_flag(
    tmp_path: Path, command: str, required: list[str]
) -> None:
    path = write(tmp_path, "bootstrap.servers=file:9092\nlinger.ms=7\nbatch.size=1024\n")
    args = build_parser().parse_args(
        [command, *required, "--producer.config", path, "--producer-props", "linger.ms=9"]
    )
    assert args.producer_config == path
    props = producer_properties(args.producer_config, args.producer_props, args.bootstrap_server)
    expected = {"linger.ms": "9", "batch.size": "1024"}
    expected["bootstrap.servers"] = "cli:9092" if command == "produce" else "file:9092"
    assert props == expected


# -- through the real command ------------------------------------------------------------------


def test_the_command_exits_2_naming_file_and_line_without_the_secret(tmp_path: Path) -> None:
    path = write(tmp_path, "linger.ms=5\n" + JAAS_LINES + f"password {SECRET}\n")
    done = run_cli(
        "produce", "--topic", "t", "--bootstrap-server", "127.0.0.1:1", "--producer.config", path
    )
    assert done.returncode == 2, done.stderr
    assert f"error: --producer.config {path}, line 5: no '=' or ':'" in done.stderr
    assert SECRET not in done.stderr + done.stdout


def test_the_command_exits_2_when_the_file_is_missing(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.properties")
    done = run_cli(
        "perf", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1",
        "--bootstrap-server", "127.0.0.1:1", "--producer.config", missing,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"error: --producer.config {missing}: cannot read it" in done.stderr


def test_the_command_refuses_a_bad_jaas_config_from_the_file_without_the_secret(
    tmp_path: Path,
) -> None:
    # Valid syntax, invalid setting: refused by ProducerConfig before any connection.
    path = write(
        tmp_path,
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'    password="{SECRET}";\n',
    )
    done = run_cli(
        "produce", "--topic", "t", "--bootstrap-server", "127.0.0.1:1", "--producer.config", path
    )
    assert done.returncode == 2, done.stderr
    assert "sasl.jaas.config must set both username and password" in done.stderr
    assert SECRET not in done.stderr + done.stdout
