"""Build the compiled hot path; all other metadata lives in pyproject.toml.

Two kinds of source become extension modules beside them:

* every ``.pyx`` under ``aioaccum/`` (hand-typed Cython, with a pure-Python twin);
* every ``.py`` under ``aioaccum/`` that has a ``.pxd`` beside it: the Python module compiled as
  it is, its classes given C fields by the ``.pxd`` (Cython's "augmenting .pxd"). The ``.py``
  stays the pure-Python reference.

``pip install .`` and ``pip install -e .`` both compile them: Cython comes from
``[build-system] requires``, and gcc with the Python headers does the rest.
``AIOACCUM_NO_EXTENSIONS=1`` chooses the pure-Python code at run time, not at build time, so one
install can run both (as CI does).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from Cython.Build import cythonize
from setuptools import Extension, setup

# MSVC spells the optimisation flag differently; everything else here is gcc or clang. No
# debug information (-g0): it took a third of the build's time (a forced rebuild of every module
# on 2 cores: 147 s with it, 97 s without), and profilers still find every function by its
# symbol.
OPTIMIZE = ["/O2"] if sys.platform == "win32" else ["-O2", "-g0"]

# Every index in the .pyx files is checked by hand or a non-negative slice bound, so Cython's
# per-index checks are switched off for all of them.
DIRECTIVES = {"language_level": 3, "boundscheck": False, "wraparound": False}
# Compiled Python keeps Python's semantics: negative indexes and bounds checks stay on, and type
# annotations stay documentation (Cython would otherwise turn `x: float` into a C double and
# `x: int` into a checked exact int); the .pxd files alone give C types.
SOURCE_DIRECTIVES = {"language_level": 3, "annotation_typing": False}


def _extension(root: Path, source: Path, depends: list[str]) -> Extension:
    relative = source.relative_to(root)
    return Extension(
        ".".join(relative.with_suffix("").parts),
        [relative.as_posix()],
        # cythonize swaps the source for the C it writes; as dependencies, sdists keep them.
        depends=[relative.as_posix(), *depends],
        extra_compile_args=OPTIMIZE,
    )


def _compiled_list() -> ModuleType:
    """aioaccum/_compiled.py, loaded by path: the one list of compiled modules, read before
    the package is installed (it uses the standard library only)."""
    path = Path(__file__).parent / "aioaccum" / "_compiled.py"
    spec = importlib.util.spec_from_file_location("_aioaccum_compiled", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPILED = _compiled_list()


def extensions() -> list[Extension]:
    """One extension per .pyx file, named by its path: aioaccum/_core/x.pyx is aioaccum._core.x."""
    root = Path(__file__).parent
    return [
        _extension(root, source, [])
        for source in COMPILED.compiled_files()
        if source.suffix == ".pyx"
    ]


def compiled_sources() -> list[Extension]:
    """One extension per .py file with a .pxd beside it."""
    root = Path(__file__).parent
    return [
        _extension(root, source, [source.with_suffix(".pxd").relative_to(root).as_posix()])
        for source in COMPILED.compiled_files()
        if source.suffix == ".py"
    ]


# Both steps run on every core: translating to C and compiling the C.
JOBS = os.cpu_count() or 1

setup(
    ext_modules=[
        *cythonize(extensions(), compiler_directives=DIRECTIVES, nthreads=JOBS),
        *cythonize(compiled_sources(), compiler_directives=SOURCE_DIRECTIVES, nthreads=JOBS),
    ],
    options={"build_ext": {"parallel": JOBS}},
    # The generated C is rebuilt from the .pyx by every build: wheels need not carry it.
    exclude_package_data={"": ["*.c"]},
)
