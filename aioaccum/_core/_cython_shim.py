"""The decorators the compiled modules take from Cython's ``cython`` module, as no-ops.

Cython is a build requirement, not a run-time one: a pure-Python run without it installed takes
these, which leave every class as it is.
"""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound=type)

compiled = False


def cclass(cls: _C) -> _C:
    return cls


def no_gc(cls: _C) -> _C:
    return cls
