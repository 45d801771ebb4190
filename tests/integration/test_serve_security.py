"""``aioaccum serve`` security: HTTPS with a certificate made for the test, and credentials
from an auth file (HTTP basic and API keys, per-credential topics, deny by default).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from ._serve import by_position, read_topic, serving

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

BINARY = "application/vnd.kafka.binary.v2+json"
COMMAND_TIMEOUT_S = 60.0


def v2_body(value: bytes) -> bytes:
    return json.dumps({"records": [{"value": base64.b64encode(value).decode()}]}).encode()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S,
    )  # fmt: skip
    return cert, key


async def test_https_with_the_given_certificate(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=3)
    cert, key = self_signed(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    async with (
        serving(tmp_path, kafka_bootstrap, *tls, ssl_context=trusted) as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as session,
    ):
        assert server.base_url.startswith("https://")
        url = f"{server.base_url}/topics/{topic}"
        headers = {"Content-Type": BINARY}
        async with session.post(url, data=v2_body(b"over-tls"), headers=headers) as response:
            assert response.status == 200
            [entry] = (await response.json(content_type=None))["offsets"]
        curl = await asyncio.to_thread(
            subprocess.run,
            ["curl", "--silent", "--show-error", "--cacert", str(cert), "-X", "POST",
             "-H", f"Content-Type: {BINARY}", "--data", v2_body(b"curl-tls").decode(), url],
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert curl.returncode == 0, curl.stderr
        [curl_entry] = json.loads(curl.stdout)["offsets"]
        # Plain HTTP to the TLS port gets no answer, and so gives nothing away.
        plain = url.replace("https://", "http://")
        async with aiohttp.ClientSession() as plain_session:
            with pytest.raises(aiohttp.ClientError):
                async with plain_session.post(plain, data=v2_body(b"plain")) as response:
                    await response.read()
        await server.stop()
    records = by_position(await read_topic(kafka_bootstrap, topic, 2))
    assert records[(entry["partition"], entry["offset"])].value == b"over-tls"
    assert records[(curl_entry["partition"], curl_entry["offset"])].value == b"curl-tls"
    assert len(records) == 2


def basic(name: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()}


async def test_credentials_from_the_auth_file_allow_their_topics_only(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    mine, theirs = await topic_factory(partitions=3), await topic_factory(partitions=3)
    alice_secret, bot_key = "alice-s3cret-0123456789", "bot-key-9876543210"
    auth_file = tmp_path / "credentials"
    auth_file.write_text(
        "# name:secret:topics\n"
        f"alice:{alice_secret}:{mine}\n"
        # The bot's secret is stored hashed; its topics are a prefix that matches only theirs.
        f"bot:sha256:{hashlib.sha256(bot_key.encode()).hexdigest()}:{theirs[:-3]}*\n"
    )
    async with (
        serving(tmp_path, kafka_bootstrap, "--auth-file", str(auth_file)) as server,
        aiohttp.ClientSession() as session,
    ):
        base = server.base_url

        async def produce(topic: str, value: bytes, headers: dict[str, str]) -> tuple[int, Any]:
            async with session.post(
                f"{base}/topics/{topic}",
                data=v2_body(value),
                headers={"Content-Type": BINARY, **headers},
            ) as response:
                if response.status == 401:
                    assert response.headers["WWW-Authenticate"].startswith("Basic realm=")
                return response.status, await response.json(content_type=None)

        status, answer = await produce(mine, b"anonymous", {})
        assert (status, answer["error_code"]) == (401, 401)
        assert (await produce(mine, b"wrong", basic("alice", "not-it")))[0] == 401
        assert (await produce(mine, b"unknown", basic("mallory", alice_secret)))[0] == 401
        assert (await produce(mine, b"bad-key", {"X-API-Key": "no-such-key"}))[0] == 401
        status, alice_answer = await produce(mine, b"alice", basic("alice", alice_secret))
        assert status == 200, alice_answer
        status, answer = await produce(theirs, b"alice-theirs", basic("alice", alice_secret))
        assert (status, answer["error_code"]) == (403, 40301)
        assert alice_secret not in answer["message"]
        status, bot_answer = await produce(theirs, b"bot", {"X-API-Key": bot_key})
        assert status == 200, bot_answer
        assert (await produce(mine, b"bot-mine", {"X-API-Key": bot_key}))[0] == 403
        async with session.post(
            f"{base}/v3/clusters/c/topics/{theirs}/records",
            data=b'{"value":{"type":"STRING","data":"bearer"}}',
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {bot_key}"},
        ) as response:
            assert response.status == 200
            bearer_answer = await response.json(content_type=None)
        # The partition route, v3 and describing a topic are guarded the same way.
        partition_url = f"{base}/topics/{mine}/partitions/1"
        async with session.post(
            partition_url, data=v2_body(b"anonymous-partition"), headers={"Content-Type": BINARY}
        ) as response:
            assert response.status == 401
        async with session.post(
            partition_url,
            data=v2_body(b"bot-partition"),
            headers={"Content-Type": BINARY, "X-API-Key": bot_key},
        ) as response:
            assert response.status == 403
            assert (await response.json(content_type=None))["error_code"] == 40301
        async with session.post(
            f"{base}/v3/clusters/c/topics/{mine}/records",
            data=b'{"value":{"type":"STRING","data":"bot-v3-mine"}}',
            headers={"Content-Type": "application/json", "X-API-Key": bot_key},
        ) as response:
            assert response.status == 403
            assert (await response.json(content_type=None))["error_code"] == 40301
        async with session.get(f"{base}/topics/{theirs}", headers=basic("alice", alice_secret)) as (
            response
        ):
            assert response.status == 403
        async with session.get(f"{base}/topics/{mine}", headers=basic("alice", alice_secret)) as (
            response
        ):
            assert response.status == 200
        async with session.get(f"{base}/topics", headers=basic("alice", alice_secret)) as response:
            assert await response.json(content_type=None) == [mine]
        async with session.get(f"{base}/topics") as response:
            assert response.status == 401
        for path in ("/healthz", "/readyz"):
            async with session.get(f"{base}{path}") as response:
                assert response.status == 200, path
        # Readiness without credentials says ready, not which cluster and brokers.
        async with session.get(f"{base}/readyz") as response:
            assert await response.json() == {"status": "ready"}
        async with session.get(f"{base}/readyz", headers={"X-API-Key": bot_key}) as response:
            assert set(await response.json()) == {"status", "cluster_id", "brokers"}
        async with session.get(f"{base}/metrics") as response:
            assert response.status == 401
        async with session.get(f"{base}/metrics", headers={"X-API-Key": bot_key}) as response:
            assert response.status == 200
        await server.stop()
    log = server.log()
    assert alice_secret not in log
    assert bot_key not in log
    mine_records = by_position(await read_topic(kafka_bootstrap, mine, 1))
    theirs_records = by_position(await read_topic(kafka_bootstrap, theirs, 2))
    assert [r.value for r in mine_records.values()] == [b"alice"]
    assert sorted(r.value for r in theirs_records.values()) == [b"bearer", b"bot"]
    [entry] = alice_answer["offsets"]
    assert (entry["partition"], entry["offset"]) in mine_records
    assert (bearer_answer["partition_id"], bearer_answer["offset"]) in theirs_records
