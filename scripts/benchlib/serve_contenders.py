"""How scripts/bench_serve.py starts each gateway, and builds Karapace's venv.

Both servers bind 127.0.0.1 on a port the caller chose, and produce with the settings of
:class:`Settings`, each in its own names: aioaccum through a ``--producer.config`` file,
Karapace through its ``KARAPACE_*`` variables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

AIOACCUM = Path(sys.executable).with_name("aioaccum")
DEFAULT_KARAPACE_VENV = Path("/tmp/karapace-venv")


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


def _accepted(python: str) -> bool:
    """Whether ``python`` runs and is 3.12 to 3.14 (a pyenv shim can exist and not run)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[:2] >= (3, 12) and "
             "sys.version_info[:2] < (3, 15))"],
            capture_output=True, text=True, check=False, timeout=30,
        )
    except OSError:
        return False
    return out.stdout.strip() == "True"


def karapace_python() -> str | None:
    """A Python that Karapace accepts (3.12 to 3.14): on PATH, else one of pyenv's."""
    on_path = [shutil.which(name) for name in ("python3.14", "python3.13", "python3.12")]
    pyenv = Path.home() / ".pyenv" / "versions"
    installed = sorted(pyenv.glob("3.1[234].*/bin/python3"), reverse=True)
    for candidate in [*(p for p in on_path if p), *map(str, installed)]:
        if _accepted(candidate):
            return candidate
    return None


def install_karapace(args: argparse.Namespace) -> int:
    """Builds ``--karapace-venv`` from a Karapace source tree.

    Karapace is not published on PyPI: it installs from its repository. Its pinned
    requirements name the Avro library by a tarball of a fork; the binary format never touches
    Avro, so PyPI's ``avro`` stands in. Its protobuf helper (a Go library that every entry point
    imports) pins a fork of ``github.com/bufbuild/buf`` through a ``replace`` line;
    ``--karapace-buf DIR`` points that line at a checkout of the fork when the module proxy
    cannot serve it.
    """
    source = Path(args.install_karapace).resolve()
    if not (source / "pyproject.toml").is_file():
        raise SystemExit(f"{source}: no pyproject.toml; give a Karapace source checkout")
    python = args.karapace_python or karapace_python()
    if python is None:
        raise SystemExit("Karapace needs Python 3.12 to 3.14; none found (--karapace-python)")
    if shutil.which("go") is None:
        raise SystemExit("Karapace's build needs Go (its protobuf helper is a Go library)")
    venv = args.karapace_venv
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "karapace"
        shutil.copytree(source, build, ignore=shutil.ignore_patterns("*.egg-info", "build"))
        requirements = build / "requirements" / "requirements.txt"
        pins = [
            line for line in requirements.read_text().splitlines()
            if not line.startswith("avro @")
        ]
        requirements.write_text("\n".join([*pins, "avro"]) + "\n")
        if args.karapace_buf is not None:
            go_mod = build / "go" / "protopace" / "go.mod"
            fork = Path(args.karapace_buf).resolve()
            go_mod.write_text("\n".join(
                f"replace github.com/bufbuild/buf => {fork}"
                if line.startswith("replace github.com/bufbuild/buf") else line
                for line in go_mod.read_text().splitlines()
            ) + "\n")
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        if not (source / ".git").exists():
            env["SETUPTOOLS_SCM_PRETEND_VERSION"] = args.karapace_version
        steps = [
            [python, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "-r", str(requirements)],
            [str(venv / "bin" / "pip"), "install", "--no-deps", str(build)],
        ]
        for step in steps:
            print("+", " ".join(step), flush=True)
            if subprocess.run(step, env=env, check=False).returncode != 0:
                raise SystemExit(f"failed: {' '.join(step)}")
    print(f"Karapace {karapace_version(venv)} in {venv}")
    return 0
