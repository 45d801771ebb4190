"""The strict-input parts of ``aioaccum serve``, without a server: strict JSON, the v2 body read
one record at a time inside the budget, one credential per request, capped messages,
``/metrics`` per credential, the connection settings' ranges and TLS pairs refused up front.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aioaccum.errors import ConfigError
from aioaccum.serve import AuthFile, ServeSettings, add_arguments
from aioaccum.serve._errors import MAX_MESSAGE_CHARS, ErrorCode, RestError
from aioaccum.serve._gateway import ByteBudget
from aioaccum.serve._metrics import TopicsOf
from aioaccum.serve._records import decode_json
from aioaccum.serve._run import _check_tls
from aioaccum.serve._v2_body import RECORD_OVERHEAD, parse_body, parse_records

NOT_JSON = ("1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" * 5000)
PROPS = {"bootstrap.servers": "127.0.0.1:9"}


@pytest.mark.parametrize("number", NOT_JSON)
def test_numbers_json_does_not_have_are_400_in_both_parsers(number: str) -> None:
    with pytest.raises(RestError) as v3:
        decode_json(f'{{"data": [{number}]}}'.encode(), "a record")
    assert (v3.value.status, v3.value.code) == (400, ErrorCode.BAD_REQUEST)
    with pytest.raises(RestError) as v2:
        parse_records(f'{{"records": [{{"value": {number}}}]}}'.encode(), "json", 10)
    assert v2.value.status == 400
    assert len(str(v2.value)) <= MAX_MESSAGE_CHARS + 40


def test_the_v2_walk_reads_what_json_reads() -> None:
    body = b' {"value_schema_id": null, "records": [{"value": "AA==", "partition": 1},\n{}]} '
    records = parse_records(body, "binary", 10)
    assert [(r.value, r.partition) for r in records] == [(b"\0", 1), (None, None)]
    json_records = parse_records(b'{"records": [{"key": {"a": [1, 2.5, "\\u00e9"]}}]}', "json", 1)
    assert json_records[0].key == '{"a":[1,2.5,"é"]}'.encode()
    for shape in (b"[]", b'{"records": []}', b'{"records": {}}', b'{"other": 1}', b"3"):
        with pytest.raises(RestError) as wrong:
            parse_records(shape, "binary", 10)
        assert wrong.value.status == 422, shape
    for broken in (b'{"records": [{}', b'{"records": [{}] x', b'{"records" [{}]}', b"{x}", b"{"):
        with pytest.raises(RestError) as invalid:
            parse_records(broken, "binary", 10)
        assert invalid.value.status == 400, broken
    with pytest.raises(RestError) as twice:
        parse_records(b'{"records": [{}], "records": [{}]}', "binary", 10)
    assert twice.value.status == 422


async def test_the_v2_parse_holds_its_text_then_its_records_in_the_budget() -> None:
    count = 20_000
    body = json.dumps({"records": [{"value": "AAAA"}] * count}).encode()
    budget = ByteBudget(64 * 1024 * 1024)
    assert budget.take_nowait(len(body))
    seen: list[int] = []

    async def watch() -> None:
        # Runs between the parse's slices: the loop is not held for the whole body.
        while True:
            seen.append(budget.held)
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch())
    try:
        records, held = await parse_body((body, len(body)), "binary", count, budget)
    finally:
        watcher.cancel()
    assert len(records) == count
    assert held == budget.held == count * (3 + RECORD_OVERHEAD)
    assert len(seen) >= len(body) // (64 * 1024) - 1 > 3
    assert max(seen) > len(body)  # the text and the records so far, both counted

    small = ByteBudget(len(body) + 1000)
    assert small.take_nowait(len(body))
    with pytest.raises(RestError) as full:
        await parse_body((body, len(body)), "binary", count, small)
    assert full.value.status == 429
    assert small.held == 0  # a failed parse holds nothing


def test_one_credential_per_request_trimmed_alike(tmp_path: Path) -> None:
    path = tmp_path / "auth"
    path.write_text("web:plain-secret:clicks\nother:second-secret:*\n")
    auth = AuthFile.load(str(path))
    assert auth.authenticate({"x-api-key": "plain-secret "}).name == "web"
    assert auth.authenticate({"authorization": "Bearer  plain-secret "}).name == "web"
    same = {"x-api-key": "plain-secret", "authorization": "Bearer plain-secret"}
    assert auth.authenticate(same).name == "web"
    with pytest.raises(RestError) as two:
        auth.authenticate({"x-api-key": "plain-secret", "authorization": "Bearer second-secret"})
    assert two.value.status == 400


def test_messages_are_cut_whatever_they_echo() -> None:
    error = RestError(400, ErrorCode.BAD_REQUEST, "type " + "x" * 3_000_000)
    assert len(str(error)) < MAX_MESSAGE_CHARS + 40
    assert str(error).endswith("more characters)")
    assert len(json.dumps(error.body())) < MAX_MESSAGE_CHARS + 100


def test_metrics_show_a_credential_its_own_topics_only(tmp_path: Path) -> None:
    class Topics(Collector):
        def collect(self) -> list[Metric]:
            family = GaugeMetricFamily("records", "per topic", labels=["topic"])
            for topic in ("orders-eu", "payments"):
                family.add_metric([topic], 1.0)
            return [family, GaugeMetricFamily("connections", "no topic", value=3.0)]

    registry = CollectorRegistry()
    registry.register(Topics())
    path = tmp_path / "auth"
    path.write_text("shop:shop-secret:orders-*\n")
    principal = AuthFile.load(str(path)).authenticate({"x-api-key": "shop-secret"})
    text = generate_latest(TopicsOf(registry, principal)).decode()
    assert 'topic="orders-eu"' in text
    assert "payments" not in text
    assert "connections 3.0" in text
    assert "payments" in generate_latest(registry).decode()


def test_connection_settings_have_flags_keys_and_ranges(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = tmp_path / "serve.properties"
    config.write_text("header.timeout.ms=2000\nmax.head.bytes=4096\n")
    args = parser.parse_args(["--config", str(config), "--max-headers", "20"])
    args.bootstrap_server = "127.0.0.1:9"
    settings = ServeSettings.from_arguments(args)
    assert (settings.header_timeout_ms, settings.max_head_bytes) == (2000, 4096)
    assert settings.max_headers == 20
    assert settings.idle_timeout_ms == 30_000
    for flag, value in (("--header-timeout-ms", "0"), ("--max-head-bytes", str(1 << 30))):
        bad = parser.parse_args([flag, value])
        bad.bootstrap_server = "127.0.0.1:9"
        with pytest.raises(ConfigError, match=rf"^{flag} must be [<>]= \d+, got {value}$"):
            ServeSettings.from_arguments(bad)


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_a_certificate_and_a_key_that_do_not_match_are_one_error_line(tmp_path: Path) -> None:
    cert, _ = _certificate(tmp_path, "one")
    _, other_key = _certificate(tmp_path, "two")
    settings = ServeSettings.create(PROPS, tls_cert=str(cert), tls_key=str(other_key))
    with pytest.raises(ConfigError, match="cannot serve HTTPS"):
        _check_tls(settings)
    for workers in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "aioaccum.cli", "serve", "--bootstrap-server", "127.0.0.1:9",
             "--listen", "127.0.0.1:1", "--workers", workers,
             "--tls-cert", str(cert), "--tls-key", str(other_key)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 3, done.stderr  # the start-failure status, no restart loop
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("error: tls.cert"), done.stderr
