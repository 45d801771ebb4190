"""Which modules of the package are compiled: derived from the files, in one place.

Two kinds of source become extension modules beside them:

* every ``.pyx`` (hand-typed Cython with a pure-Python twin, which picks one at import);
* every ``.py`` with a ``.pxd`` beside it (the Python module compiled as it is; the ``.pxd``
  gives its classes C fields).

The build (``setup.py``), ``scripts/setup-venv`` (to know when to rebuild) and
:mod:`aioaccum._speedups` (to load the ``.py`` files instead under ``AIOACCUM_NO_EXTENSIONS=1``)
all read this module, so adding a ``.pxd`` is the whole of making a module compiled. It uses the
standard library only, since the build loads it by path before anything is installed.

Run as a script, it prints the compiled ``.pyx`` and ``.py`` files, one per line, relative to the
repository: ``python3 aioaccum/_compiled.py``. With ``--stale`` it prints instead the extension
modules in the tree that the list no longer names (left behind by a module that moved or stopped
being compiled): Python would load such a file in preference to a ``.py`` of the same name.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = [
    "PACKAGE_DIR",
    "compiled_files",
    "hand_typed_modules",
    "module_name",
    "source_modules",
    "stale_extensions",
]

PACKAGE_DIR = Path(__file__).resolve().parent


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """``<package_dir>/_core/batch.py`` -> ``aioaccum._core.batch``."""
    relative = path.relative_to(package_dir.parent).with_suffix("")
    return ".".join(relative.parts)


def _hand_typed(package_dir: Path) -> list[Path]:
    return sorted(package_dir.rglob("*.pyx"))


def _sources(package_dir: Path) -> list[Path]:
    return sorted(
        pxd.with_suffix(".py")
        for pxd in package_dir.rglob("*.pxd")
        if pxd.with_suffix(".py").exists()
    )


def hand_typed_modules(package_dir: Path = PACKAGE_DIR) -> tuple[str, ...]:
    """The extension modules built from ``.pyx`` files."""
    return tuple(module_name(p, package_dir) for p in _hand_typed(package_dir))


def source_modules(package_dir: Path = PACKAGE_DIR) -> tuple[str, ...]:
    """The Python modules compiled as they are (a ``.pxd`` beside the ``.py``)."""
    return tuple(module_name(p, package_dir) for p in _sources(package_dir))


def compiled_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every file the build compiles: the ``.pyx`` files, then the ``.py`` files with a ``.pxd``."""
    return [*_hand_typed(package_dir), *_sources(package_dir)]


def stale_extensions(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Extension modules in the tree whose module is not compiled by the build any more."""
    wanted = {p.with_suffix("") for p in compiled_files(package_dir)}
    found = [*package_dir.rglob("*.so"), *package_dir.rglob("*.pyd")]
    # x.cpython-311-x86_64-linux-gnu.so is module x: the part before the first dot.
    return sorted(p for p in found if p.with_name(p.name.split(".", 1)[0]) not in wanted)


if __name__ == "__main__":
    root = PACKAGE_DIR.parent
    listing = stale_extensions() if sys.argv[1:] == ["--stale"] else compiled_files()
    for path in listing:
        sys.stdout.write(f"{path.relative_to(root).as_posix()}\n")
