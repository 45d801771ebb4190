"""How scripts/bench_serve.py starts each gateway.

Both servers bind 127.0.0.1 on a port the caller chose, and produce with the settings of
:class:`Settings`, each in its own names: aioaccum through a ``--producer.config`` file,
Karapace through its ``KARAPACE_*`` variables. Karapace runs from a venv where the person
running the benchmark installed it by Karapace's own instructions.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

AIOACCUM = Path(sys.executable).with_name("aioaccum")
KARAPACE_INSTALL = "https://github.com/Aiven-Open/karapace#readme"


@dataclass(frozen=True, slots=True)
class Settings:
    """What every contender's producer is told, each in its own names."""

    acks: str
    linger_ms: int


@dataclass(frozen=True, slots=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    ready_path: str  # answers 200 once the server can produce


def aioaccum_launch(bootstrap: str, port: int, workers: int, props: Path) -> Launch:
    argv = [
        str(AIOACCUM), "serve", "--bootstrap-server", bootstrap,
        "--listen", f"127.0.0.1:{port}", "--workers", str(workers),
        "--producer.config", str(props),
    ]
    return Launch(argv, {}, "/readyz")


def karapace_launch(bootstrap: str, port: int, venv: Path, settings: Settings) -> Launch:
    # Karapace reads its settings from KARAPACE_<FIELD> variables; the schema registry stays
    # off, since the binary format needs none.
    env = {
        "KARAPACE_HOST": "127.0.0.1",
        "KARAPACE_PORT": str(port),
        "KARAPACE_ADVERTISED_HOSTNAME": "127.0.0.1",
        "KARAPACE_BOOTSTRAP_URI": bootstrap,
        "KARAPACE_KARAPACE_REST": "true",
        "KARAPACE_KARAPACE_REGISTRY": "false",
        "KARAPACE_LOG_LEVEL": "WARNING",
        "KARAPACE_PRODUCER_ACKS": settings.acks,
        "KARAPACE_PRODUCER_LINGER_MS": str(settings.linger_ms),
    }
    return Launch([str(venv / "bin" / "karapace_rest_proxy")], env, "/topics")


def karapace_version(venv: Path) -> str | None:
    """Karapace's version in ``venv``, or None when it is not installed there."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "karapace_rest_proxy").exists():
        return None
    out = subprocess.run(
        [str(python), "-c", "import karapace.version as v, sys; print(v.__version__, sys.version)"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    if out.returncode != 0:
        return None
    version, _, python_version = out.stdout.strip().partition(" ")
    return f"{version} (Python {python_version.split()[0]})"
