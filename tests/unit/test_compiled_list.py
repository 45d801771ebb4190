"""One list of compiled modules, derived from the files, and both paths loading what they say.

``aioaccum/_compiled.py`` derives the list (a ``.pyx``, or a ``.py`` with a ``.pxd`` beside it);
the build, ``scripts/setup-venv`` and :mod:`aioaccum._speedups` all read it. These tests import
every module of the package in a fresh interpreter and look at where each one came from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aioaccum import _compiled, _speedups

REPO = Path(__file__).resolve().parents[2]

# Imports every module of the package (the optional edges too: the dev install has their
# dependencies) but the hand-typed twins themselves, which only their Python twin may import, and
# prints where each aioaccum module was loaded from.
_PROBE = """
import importlib, json, pkgutil, sys
import aioaccum
from aioaccum import _speedups
for info in pkgutil.walk_packages(aioaccum.__path__, "aioaccum."):
    if info.name not in _speedups.COMPILED_MODULES:
        importlib.import_module(info.name)
print(json.dumps({
    name: getattr(module, "__file__", None) or ""
    for name, module in sys.modules.items()
    if name == "aioaccum" or name.startswith("aioaccum.")
}))
"""


def _loaded(no_extensions: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != _speedups.ENV_VAR}
    if no_extensions is not None:
        env[_speedups.ENV_VAR] = no_extensions
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_the_list_is_the_files() -> None:
    package = Path(_compiled.__file__).parent
    pyx = {_compiled.module_name(p) for p in package.rglob("*.pyx")}
    with_pxd = {
        _compiled.module_name(p.with_suffix(".py"))
        for p in package.rglob("*.pxd")
        if p.with_suffix(".py").exists()
    }
    assert set(_speedups.COMPILED_MODULES) == pyx
    assert set(_speedups.COMPILED_SOURCES) == with_pxd
    assert "aioaccum.producer" in with_pxd  # the facade's hot path is compiled
    assert "aioaccum._core._crecords" in pyx


def test_the_script_form_lists_the_same_files() -> None:
    done = subprocess.run(
        [sys.executable, "aioaccum/_compiled.py"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )
    listed = done.stdout.split()
    assert listed == [p.relative_to(REPO).as_posix() for p in _compiled.compiled_files()]
    assert len(listed) == len(_speedups.COMPILED_MODULES) + len(_speedups.COMPILED_SOURCES)


def test_no_compiled_module_loads_under_no_extensions() -> None:
    loaded = _loaded("1")
    compiled = {name: path for name, path in loaded.items() if not path.endswith(".py")}
    assert not compiled, f"compiled code loaded with {_speedups.ENV_VAR}=1: {compiled}"
    # Every compiled source module was imported by the walk, from its .py.
    assert set(_speedups.COMPILED_SOURCES) <= set(loaded)


def test_every_compiled_module_loads_compiled_by_default() -> None:
    loaded = _loaded(None)
    listed = set(_speedups.COMPILED_SOURCES) | set(_speedups.COMPILED_MODULES)
    assert set(_speedups.COMPILED_MODULES) <= set(loaded)  # imported by their twins
    from_source = {name: loaded[name] for name in listed if loaded[name].endswith(".py")}
    assert not from_source, f"listed as compiled, loaded from source: {from_source}"
    # And nothing is compiled that the list does not name (a stray extension of a moved module).
    unlisted = {
        name for name, path in loaded.items() if not path.endswith(".py") and name not in listed
    }
    assert not unlisted, f"extension modules the list does not name: {unlisted}"


def test_leftover_extensions_are_found(tmp_path: Path) -> None:
    """An extension whose module moved would shadow the ``.py`` now at its path."""
    package = tmp_path / "aioaccum"
    (package / "_core").mkdir(parents=True)
    for name in ("_core/batch.py", "_core/batch.pxd", "_core/_crecords.pyx", "metrics.py"):
        (package / name).write_text("")
    kept = [package / "_core/batch.cpython-311-x86_64-linux-gnu.so", package / "_core/_crecords.so"]
    left = [package / "metrics.cpython-311-x86_64-linux-gnu.so", package / "pool.abi3.so"]
    for path in kept + left:
        path.write_bytes(b"")
    assert _compiled.stale_extensions(package) == sorted(left)
    assert _compiled.source_modules(package) == ("aioaccum._core.batch",)
    assert _compiled.hand_typed_modules(package) == ("aioaccum._core._crecords",)
