"""The event loop aioaccum makes for itself: uvloop by default, asyncio's on request."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib.metadata import version

import pytest
import uvloop

from aioaccum import Producer
from aioaccum._core.cluster import StaticCluster
from aioaccum._runtime.loops import LoopFactory, default_loop_factory, describe_loop
from aioaccum.cli import build_parser
from aioaccum.sync import SyncProducer

from .fake_kafka import FakeKafka, Request


def loop_of_sync_producer(loop_factory: LoopFactory | None) -> asyncio.AbstractEventLoop:
    """The loop a SyncProducer's background thread ran, seen from the broker adapter."""
    seen: list[asyncio.AbstractEventLoop] = []

    def gate(_: Request) -> None:
        seen.append(asyncio.get_running_loop())

    kafka = FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1), gate=gate)
    with SyncProducer("fake:9092", kafka=kafka, loop_factory=loop_factory) as producer:
        producer.send("t", b"v").result(timeout=30)
    assert seen
    return seen[0]


def test_sync_producer_runs_on_uvloop_by_default() -> None:
    loop = loop_of_sync_producer(None)
    assert isinstance(loop, uvloop.Loop)
    assert describe_loop(loop) == f"uvloop {version('uvloop')}"


def test_sync_producer_runs_on_the_loop_its_factory_makes() -> None:
    loop = loop_of_sync_producer(asyncio.new_event_loop)
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop)
    assert describe_loop(loop).startswith("asyncio (")


def test_the_default_factory_makes_uvloop_loops_when_uvloop_imports() -> None:
    loop = default_loop_factory()()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_default_factory_falls_back_to_asyncio_without_uvloop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert default_loop_factory() is asyncio.new_event_loop


async def test_a_producer_on_the_callers_loop_runs_there_and_sets_no_policy() -> None:
    # pytest-asyncio runs this test on asyncio's own loop, which is the caller's choice here.
    mine = asyncio.get_running_loop()
    policy = asyncio.get_event_loop_policy()
    seen: list[asyncio.AbstractEventLoop] = []

    def gate(_: Request) -> None:
        seen.append(asyncio.get_running_loop())

    kafka = FakeKafka(StaticCluster.uniform({"t": 1}, nodes=1), gate=gate)
    async with Producer("fake:9092", kafka=kafka) as producer:
        await (await producer.send("t", b"v"))
    assert seen == [mine]
    assert not isinstance(mine, uvloop.Loop)
    assert asyncio.get_event_loop_policy() is policy


@pytest.mark.parametrize("command", ["perf", "produce"])
def test_cli_loop_options(command: str) -> None:
    required = {
        "perf": ["--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"],
        "produce": ["--topic", "t", "--bootstrap-server", "b:9092"],
    }[command]
    parser = build_parser()
    assert parser.parse_args([command, *required]).asyncio is False
    assert parser.parse_args([command, *required, "--asyncio"]).asyncio is True


def test_cli_keeps_uvloop_as_a_no_op_alias_and_refuses_both() -> None:
    required = ["--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"]
    parser = build_parser()
    args = parser.parse_args(["perf", *required, "--uvloop"])
    assert args.asyncio is False
    with pytest.raises(SystemExit):
        parser.parse_args(["perf", *required, "--uvloop", "--asyncio"])


def test_perf_help_documents_asyncio_and_the_uvloop_alias() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aioaccum.cli", "perf", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--asyncio" in text
    assert "asyncio's standard event loop" in text
    assert "--uvloop" in text
    assert "no-op" in text
