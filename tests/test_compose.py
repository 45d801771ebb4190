"""docker-compose.yml must describe the same cluster as scripts/kafka.

Needs neither Docker nor Java: it reads the compose file, the script's constants and the
server.properties the script would write (`scripts/kafka config N`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
NODES = (1, 2, 3)

# Addresses, listener names and paths differ by design: the containers talk to each other
# over the compose network, the script's nodes over loopback.
NETWORK_KEYS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "controller.quorum.voters",
        "log.dirs",
    }
)
# Settings of one listener (listener.name.<name>.*): the compose cluster has no SASL_SSL listener,
# so these are compared for the listeners it has (COMPOSE_LISTENERS) only.
LISTENER_SCOPED_PREFIX = "listener.name."
# Listeners both clusters offer to clients on the host, with the script's constant of its ports.
COMPOSE_LISTENERS = {"PLAINTEXT": "CLIENT_PORTS", "OAUTHBEARER": "OAUTHBEARER_PORTS"}


def script_constant(name: str) -> Any:
    """A top-level literal of scripts/kafka, read without running it."""
    tree = ast.parse(KAFKA_SCRIPT.read_text())
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in statement.targets
        ):
            return ast.literal_eval(statement.value)
    raise AssertionError(f"scripts/kafka defines no {name}")


def script_properties(node: int) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, str(KAFKA_SCRIPT), "config", str(node), "--brokers", "3"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    properties = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        properties[key] = value
    return properties


def env_to_property(name: str) -> str:
    # The apache/kafka image's naming rule for KAFKA_* variables.
    return (
        name.removeprefix("KAFKA_")
        .lower()
        .replace("___", "-")
        .replace("__", "\0")
        .replace("_", ".")
        .replace("\0", "_")
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    found: dict[str, Any] = compose["services"]
    return found


def node_service(services: dict[str, Any], node: int) -> dict[str, Any]:
    (service,) = (
        s for s in services.values() if str(s["environment"]["KAFKA_NODE_ID"]) == str(node)
    )
    found: dict[str, Any] = service
    return found


def test_script_version_line_matches_its_version_command() -> None:
    printed = subprocess.run(
        [sys.executable, str(KAFKA_SCRIPT), "version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert printed == script_constant("KAFKA_VERSION")


def test_compose_has_one_service_per_node(services: dict[str, Any]) -> None:
    ids = sorted(int(s["environment"]["KAFKA_NODE_ID"]) for s in services.values())
    assert ids == list(NODES)


@pytest.mark.parametrize("node", NODES)
def test_image_is_the_pinned_kafka_version(services: dict[str, Any], node: int) -> None:
    version = script_constant("KAFKA_VERSION")
    assert node_service(services, node)["image"] == f"apache/kafka:{version}"


@pytest.mark.parametrize("node", NODES)
def test_client_ports_are_published_on_loopback(services: dict[str, Any], node: int) -> None:
    host = script_constant("HOST")
    service = node_service(services, node)
    advertised = service["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
    published = []
    for listener, ports in COMPOSE_LISTENERS.items():
        port = script_constant(ports)[node - 1]
        published.append(f"{host}:{port}:{port}")
        assert f"{listener}://{host}:{port}" in advertised
    assert service["ports"] == published


@pytest.mark.parametrize("node", NODES)
def test_shared_listeners_match_the_script(services: dict[str, Any], node: int) -> None:
    env = {k: str(v) for k, v in node_service(services, node)["environment"].items()}
    from_compose = {env_to_property(k): v for k, v in env.items() if k.startswith("KAFKA_")}
    from_script = script_properties(node)
    protocols = [dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
                 for props in (from_compose, from_script)]
    for listener in COMPOSE_LISTENERS:
        prefix = f"{LISTENER_SCOPED_PREFIX}{listener.lower()}."
        scoped = [{k: v for k, v in props.items() if k.startswith(prefix)}
                  for props in (from_compose, from_script)]
        assert scoped[0] == scoped[1], listener
        assert protocols[0][listener] == protocols[1][listener]


@pytest.mark.parametrize("node", NODES)
def test_settings_match_the_script(services: dict[str, Any], node: int) -> None:
    env = {k: str(v) for k, v in node_service(services, node)["environment"].items()}
    from_compose = {
        env_to_property(name): value
        for name, value in env.items()
        if name.startswith("KAFKA_") and name != "KAFKA_HEAP_OPTS"
    }
    from_script = script_properties(node)

    def shared(settings: dict[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in settings.items()
            if k not in NETWORK_KEYS and not k.startswith(LISTENER_SCOPED_PREFIX)
        }

    assert shared(from_compose) == shared(from_script)
    assert env["KAFKA_HEAP_OPTS"].split() == list(script_constant("NODE_HEAP"))
    voters = from_compose["controller.quorum.voters"].split(",")
    assert [v.split("@")[0] for v in voters] == [str(n) for n in NODES]
