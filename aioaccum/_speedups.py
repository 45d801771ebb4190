"""Which implementation of the hot path runs: compiled (Cython) or the pure-Python reference.

Decided once, when this module is first imported, from the environment:

* ``AIOACCUM_NO_EXTENSIONS`` unset, empty or ``"0"``: the compiled modules are used. If they
  cannot be imported, that is an :class:`ImportError` naming the fix. A silent fallback would
  hide a broken build behind a slower producer, so there is none.
* any other value: the pure-Python code is used and the compiled modules are not imported.

Two kinds of compiled code take part:

* a hand-typed twin (``_core/_crecords.pyx`` for ``_core/records.py``): the Python module reads
  :data:`EXTENSIONS` when imported and binds its public names to one implementation;
* Python modules compiled as they are (:data:`COMPILED_SOURCES`, each with a ``.pxd`` beside it
  that gives its classes C fields): the extension module sits next to the ``.py`` and Python's
  importer prefers it. For a pure-Python run, :func:`_prefer_sources` puts a finder first that
  loads those names from their ``.py`` files instead. ``aioaccum/__init__.py`` imports this
  module before anything else, so the choice holds for every module of the package.

Either way the choice costs nothing per call. ``aioaccum perf`` and the benchmarks print
:func:`describe`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from aioaccum._compiled import hand_typed_modules, source_modules

__all__ = [
    "COMPILED_MODULES",
    "COMPILED_SOURCES",
    "ENV_VAR",
    "EXTENSIONS",
    "check_compiled_sources",
    "describe",
]

ENV_VAR = "AIOACCUM_NO_EXTENSIONS"
COMPILED_MODULES = hand_typed_modules()
"""The extension modules built from the ``.pyx`` files (:mod:`aioaccum._compiled`)."""
COMPILED_SOURCES = frozenset(source_modules())
"""Python modules that the build also compiles, from the same source (each has a ``.pxd``)."""

_setting = os.environ.get(ENV_VAR, "")

EXTENSIONS: bool = _setting in ("", "0")
"""True when the compiled modules are in use."""



class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds :data:`COMPILED_SOURCES` as their ``.py`` files, passing over the extensions."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_SOURCES or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.exists(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def _prefer_sources() -> None:
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def check_compiled_sources() -> None:
    """With extensions on, fail if a compiled source module was loaded from its ``.py``.

    That happens when the package was not built (a checkout without ``pip install -e .``), and
    would quietly run the slow path.
    """
    if not EXTENSIONS:
        return
    for name in COMPILED_SOURCES:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        if module is not None and origin.endswith(".py"):
            raise ImportError(
                f"aioaccum's module {name} was loaded from its source ({origin}), not compiled: "
                "build the extensions (`pip install -e .` in a checkout, or scripts/setup-venv), "
                f"or set {ENV_VAR}=1 to run the pure-Python implementation on purpose."
            )


if not EXTENSIONS:
    _prefer_sources()
else:
    for _name in COMPILED_MODULES:
        try:
            importlib.import_module(_name)
        except ImportError as exc:
            raise ImportError(
                f"aioaccum's compiled module {_name} cannot be imported ({exc}). Rebuild it by "
                "reinstalling aioaccum (`pip install -e .` in a checkout, `pip install "
                "--force-reinstall aioaccum` otherwise; building needs gcc and the Python "
                f"headers), or set {ENV_VAR}=1 to run the pure-Python implementation."
            ) from exc


def describe() -> str:
    """Say which implementation runs, e.g. ``"compiled (Cython)"``."""
    if EXTENSIONS:
        return "compiled (Cython)"
    return f"pure Python ({ENV_VAR}={_setting})"
