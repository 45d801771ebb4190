"""With logging never configured, trouble is told once, with what to do, not once per retry.

Each case runs a fresh interpreter (so nothing configured logging before), and counts the lines
it printed on stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

pytestmark = [pytest.mark.kafka]

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from aioaccum import AioAccumError, Producer

    async def main(bootstrap, topic):
        try:
            async with Producer(bootstrap, max_block_ms=4000) as producer:
                await producer.send(topic, b"v")
        except AioAccumError as exc:
            print("raised", type(exc).__name__, exc)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def run(bootstrap: str, topic: str) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, bootstrap, topic],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, [line for line in done.stderr.splitlines() if line.strip()]


def test_a_missing_topic_is_told_once_with_what_to_do(kafka_bootstrap: str) -> None:
    topic = f"aioaccum-missing-{uuid.uuid4().hex[:8]}"
    out, err = run(kafka_bootstrap, topic)
    assert "raised ProducerTimeoutError" in out
    assert f"topic {topic!r} not present in metadata after 4000 ms" in out
    # About 40 metadata answers said the topic is missing; the log says so once.
    assert len(err) == 1, err
    assert f"topic {topic!r} is not in the cluster's metadata" in err[0]
    assert "create the topic" in err[0]


def test_a_cluster_that_is_not_there_is_one_error_not_a_flood() -> None:
    out, err = run("127.0.0.1:1", "t")  # port 1: nothing listens
    assert "raised BrokerError" in out
    assert "127.0.0.1:1" in out
    assert not any("Unable connect" in line for line in err), err
    assert len(err) <= 1, err
